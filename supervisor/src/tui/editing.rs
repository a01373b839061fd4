//! Editing the input: typing, pasting, and the popups that complete what is typed (`/` commands and skills,
//! `@` files). The state lives in [`App`]; the terminal loop turns keys into these calls.

use super::app::App;
use super::commands::HELP;
use super::input;

/// Entries a popup shows at most.
pub const POPUP_ROWS: usize = 8;

pub use super::app::{Confirm, Popup, PopupKind};

impl App {
    /// Types `c` at the end of the input.
    pub fn type_char(&mut self, c: char) {
        self.input.push(c);
        self.refresh_popup();
    }

    /// Takes the last character back (a folded paste goes as a whole).
    pub fn backspace(&mut self) {
        if let Some(n) = self.pastes.len().checked_sub(1) {
            let lines = self.pastes[n].lines().count();
            let folded = input::placeholder(n, lines);
            if self.input.ends_with(&folded) {
                self.input.truncate(self.input.len() - folded.len());
                self.pastes.pop();
                self.refresh_popup();
                return;
            }
        }
        self.input.pop();
        self.refresh_popup();
    }

    /// A paste (bracketed): its text goes into the input, never sent until Enter; more than
    /// [`input::FOLD_LINES`] lines are folded into a placeholder.
    pub fn paste(&mut self, text: &str) {
        let text = input::normalize_paste(text);
        let lines = text.lines().count();
        if lines > input::FOLD_LINES {
            self.input
                .push_str(&input::placeholder(self.pastes.len(), lines));
            self.pastes.push(text);
        } else {
            self.input.push_str(&text);
        }
        self.popup = None;
    }

    /// Opens the model popup over `models`, the current one highlighted.
    pub fn pick_model(&mut self, models: Vec<String>) {
        let selected = models.iter().position(|m| *m == self.model).unwrap_or(0);
        let current = self.model.clone();
        let items = models
            .into_iter()
            .map(|m| {
                let note = if m == current { "current" } else { "" };
                (m, note.to_string())
            })
            .collect();
        self.popup = Some(Popup {
            kind: PopupKind::Model,
            items,
            selected,
        });
    }

    /// Opens, updates or closes the popup for what the input ends with.
    pub fn refresh_popup(&mut self) {
        let (kind, items) = if self.input.starts_with('/') && !self.input.contains('\n') {
            (
                PopupKind::Slash,
                input::slash_matches(&self.input, HELP, &self.skills),
            )
        } else if let (Some(query), Some(files)) = (input::open_mention(&self.input), &self.files) {
            let found = files.find(query, 50);
            (
                PopupKind::File,
                found.into_iter().map(|f| (f, String::new())).collect(),
            )
        } else {
            (PopupKind::Slash, Vec::new())
        };
        if items.is_empty() {
            self.popup = None;
            return;
        }
        let selected = self
            .popup
            .as_ref()
            .filter(|p| p.kind == kind)
            .map_or(0, |p| p.selected.min(items.len() - 1));
        self.popup = Some(Popup {
            kind,
            items,
            selected,
        });
    }

    /// Moves the popup's highlight by `step`, wrapping.
    pub fn popup_step(&mut self, step: isize) {
        if let Some(p) = &mut self.popup {
            let n = p.items.len() as isize;
            p.selected = (p.selected as isize + step).rem_euclid(n) as usize;
        }
    }

    /// Puts the highlighted choice into the input; true when the input is now a complete command to send (a
    /// slash command that takes no argument).
    pub fn popup_accept(&mut self) -> bool {
        let Some(p) = self.popup.take() else {
            return false;
        };
        let Some((choice, _)) = p.items.get(p.selected) else {
            return false;
        };
        match p.kind {
            PopupKind::Slash => {
                self.input = input::slash_completion(choice);
                !self.input.ends_with(' ')
            }
            PopupKind::File => {
                self.input = input::complete_mention(&self.input, choice);
                false
            }
            PopupKind::Model => {
                self.input = format!("/model {choice}");
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_paste_folds_and_a_backspace_takes_it_whole() {
        let mut app = App::new("s", "b", "m", "read_only");
        app.paste("one\r\ntwo\rthree");
        assert_eq!(app.input, "one\ntwo\nthree");
        app.input.clear();
        app.paste("1\n2\n3\n4\n5\n6\n7");
        assert_eq!(app.input, "[Pasted 7 lines]");
        app.backspace();
        assert_eq!(app.input, "");
        assert!(app.pastes.is_empty());
    }

    #[test]
    fn typing_a_slash_opens_the_popup_and_tab_completes() {
        let mut app = App::new("s", "b", "m", "read_only");
        for c in "/he".chars() {
            app.type_char(c);
        }
        let popup = app.popup.clone().expect("a popup");
        assert_eq!(popup.items[0].0, "/help");
        assert!(app.popup_accept(), "/help takes no argument");
        assert_eq!(app.input, "/help");
    }
}
