//! What the TUI does with a key or a paste: the picker, the approval question, the `/rewind` question, the popups,
//! editing the input (new lines, `$EDITOR`), sending it, interrupting.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use service_ipc::ApprovalDecision;
use service_supervisor::tui::app::TurnState;
use service_supervisor::tui::editing::{Confirm, PopupKind};
use service_supervisor::tui::picker::Purpose;

use super::Ui;

impl Ui {
    /// A key while the picker is open: type to filter, ↑↓ to choose, Enter to pick, Esc (or Ctrl-C) to close; with
    /// no session open yet (`tui --resume`), closing quits.
    async fn picker_key(&mut self, key: KeyEvent) {
        let Some(picker) = self.app.picker.as_mut() else {
            return;
        };
        let purpose = picker.purpose;
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let close = key.code == KeyCode::Esc || (ctrl && key.code == KeyCode::Char('c'));
        match key.code {
            _ if close => {
                self.app.picker = None;
                if self.app.session_id.is_empty() && purpose == Purpose::Resume {
                    self.app.quit = true;
                }
            }
            KeyCode::Up => picker.step(-1),
            KeyCode::Down => picker.step(1),
            KeyCode::Backspace => picker.pop(),
            KeyCode::Enter => {
                let Some(id) = picker.chosen().map(|c| c.id.clone()) else {
                    return;
                };
                self.app.picker = None;
                let done = match purpose {
                    Purpose::Resume => self.resume(&id).await,
                    // A rewind is asked about first: files, conversation or both.
                    Purpose::Rewind => {
                        if let Ok(turn) = id.parse() {
                            self.app.confirm = Some(Confirm::Rewind(turn));
                        }
                        Ok(())
                    }
                };
                if let Err(e) = done {
                    self.app.error(format!("{e:#}"));
                }
            }
            KeyCode::Char(c) if !ctrl => picker.push(c),
            _ => {}
        }
    }

    /// Ctrl-C: the first interrupts a running turn and a second quits; when idle it clears the input, or quits
    /// when there is none.
    pub(super) fn ctrl_c(&mut self) {
        match &self.app.turn {
            TurnState::Running(turn) if self.interrupted.as_ref() != Some(turn) => {
                self.interrupted = Some(turn.clone());
                self.interrupt("interrupting… (Ctrl-C again quits)");
            }
            TurnState::Running(_) => self.app.quit = true,
            TurnState::Idle if !self.app.input.is_empty() => {
                self.app.input.clear();
                self.app.pastes.clear();
                self.app.popup = None;
            }
            TurnState::Idle => self.app.quit = true,
        }
    }

    /// Interrupts the running turn, saying so now: the turn's own "interrupted" comes after this line.
    fn interrupt(&mut self, said: &str) {
        self.app.info(said);
        let (backend, id) = (self.backend.clone(), self.app.session_id.clone());
        self.background(async move { backend.interrupt(&id).await.map(|()| None) });
    }

    /// The answer to the approval question, if `key` is one.
    fn approval_key(&mut self, key: KeyEvent) -> bool {
        let Some(a) = self.app.approval.clone() else {
            return false;
        };
        let decision = match key.code {
            // With `r`, the input line is the reason, until Enter sends it or Esc goes back.
            KeyCode::Enter if self.app.denying => {
                Some((ApprovalDecision::Deny, self.app.take_input()))
            }
            KeyCode::Esc if self.app.denying => {
                self.app.denying = false;
                return true;
            }
            _ if self.app.denying => None,
            KeyCode::Char('o') => Some((ApprovalDecision::AllowOnce, None)),
            KeyCode::Char('a') => Some((ApprovalDecision::AllowAlways, None)),
            KeyCode::Char('p') if a.project_rule.is_some() => {
                Some((ApprovalDecision::AllowProject, None))
            }
            KeyCode::Char('d') => Some((ApprovalDecision::Deny, None)),
            KeyCode::Char('r') => {
                self.app.denying = true;
                return true;
            }
            _ => None,
        };
        let Some((decision, reason)) = decision else {
            return false;
        };
        self.app.denying = false;
        let backend = self.backend.clone();
        self.background(async move {
            backend
                .resolve_with(&a.request_id, decision, reason)
                .await
                .map(|()| None)
        });
        true
    }

    /// The answer to the `/rewind` question: `b` both, `f` files, `c` conversation; any other key cancels.
    async fn confirm_key(&mut self, key: KeyEvent) {
        let Some(Confirm::Rewind(turn)) = self.app.confirm.take() else {
            return;
        };
        let (files, conversation) = match key.code {
            KeyCode::Char('b') | KeyCode::Enter => (true, true),
            KeyCode::Char('f') => (true, false),
            KeyCode::Char('c') => (false, true),
            _ => {
                self.app.info("rewind cancelled");
                return;
            }
        };
        if let Err(e) = self.rewind(turn, files, conversation).await {
            self.app.error(format!("{e:#}"));
        }
    }

    /// A bracketed paste: text into the input, nothing sent.
    pub(super) fn paste(&mut self, text: &str) {
        if self.app.picker.is_some() || self.app.confirm.is_some() {
            return;
        }
        self.app.paste(text);
    }

    pub(super) async fn key(&mut self, key: KeyEvent) {
        if key.kind != KeyEventKind::Press {
            return;
        }
        if self.app.picker.is_some() {
            self.picker_key(key).await;
            return;
        }
        if self.app.confirm.is_some() {
            self.confirm_key(key).await;
            return;
        }
        if self.approval_key(key) {
            return;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let shift = key.modifiers.contains(KeyModifiers::SHIFT);
        if self.app.popup.is_some() {
            match key.code {
                KeyCode::Up => return self.app.popup_step(-1),
                KeyCode::Down => return self.app.popup_step(1),
                KeyCode::Esc => {
                    self.app.popup = None;
                    return;
                }
                KeyCode::Tab => {
                    self.app.popup_accept();
                    return;
                }
                KeyCode::Enter if !alt && !shift => {
                    let kind = self.app.popup.as_ref().map(|p| p.kind);
                    // A command typed out in full is sent as typed (`/rewind` opens its picker).
                    let typed_in_full = self.app.popup.as_ref().is_some_and(|p| {
                        p.items.get(p.selected).is_some_and(|(usage, _)| {
                            usage.split(' ').next() == Some(self.app.input.as_str())
                        })
                    });
                    if kind == Some(PopupKind::Slash) && typed_in_full {
                        self.app.popup = None;
                        self.send().await;
                        return;
                    }
                    let complete = self.app.popup_accept();
                    // A file is inserted; a command without an argument, or a model chosen, is run at once.
                    if matches!(kind, Some(PopupKind::Slash | PopupKind::Model)) && complete {
                        self.send().await;
                    }
                    return;
                }
                _ => {}
            }
        }
        match key.code {
            KeyCode::Char('c') if ctrl => self.ctrl_c(),
            KeyCode::Char('r') if ctrl => self.app.show_reasoning = !self.app.show_reasoning,
            KeyCode::Char('j') if ctrl => self.app.input.push('\n'),
            KeyCode::Char('g') if ctrl => self.edit_in_editor(),
            KeyCode::Enter if alt || shift => self.app.input.push('\n'),
            KeyCode::Enter => self.send().await,
            KeyCode::Esc => {
                if let TurnState::Running(_) = self.app.turn {
                    self.interrupt("interrupting…");
                }
            }
            KeyCode::Backspace => self.app.backspace(),
            KeyCode::Up => self.app.browse_history(true),
            KeyCode::Down => self.app.browse_history(false),
            KeyCode::PageUp => self.app.scroll = self.app.scroll.saturating_add(10),
            KeyCode::PageDown => self.app.scroll = self.app.scroll.saturating_sub(10),
            KeyCode::Char(c) if !ctrl => {
                if c == '@' && self.app.files.is_none() {
                    let root = self.session_workspace.0.clone();
                    self.app.files = Some(service_supervisor::tui::files::FileIndex::scan(&root));
                }
                self.app.type_char(c);
            }
            _ => {}
        }
    }

    /// Sends the input: a prompt (with its `@` files attached), a `/command` or a `!command`.
    async fn send(&mut self) {
        if let Some(line) = self.app.take_input() {
            self.submit(line).await;
        }
    }

    /// Ctrl-G: the input in `$VISUAL` or `$EDITOR` (else `vi`), on the whole terminal; what the editor leaves is
    /// the new input.
    fn edit_in_editor(&mut self) {
        let editor = std::env::var("VISUAL")
            .or_else(|_| std::env::var("EDITOR"))
            .unwrap_or_else(|_| "vi".into());
        let file = match tempfile::Builder::new().suffix(".md").tempfile() {
            Ok(f) => f,
            Err(e) => {
                return self
                    .app
                    .error(format!("cannot make a file for the editor: {e}"))
            }
        };
        let text = service_supervisor::tui::input::expand(&self.app.input, &self.app.pastes);
        if let Err(e) = std::fs::write(file.path(), &text) {
            return self
                .app
                .error(format!("cannot write {}: {e}", file.path().display()));
        }
        super::suspend();
        // The editor names a command and its arguments, as shells split them.
        let mut words = shlex::split(&editor).unwrap_or_else(|| vec![editor.clone()]);
        let program = if words.is_empty() {
            "vi".to_string()
        } else {
            words.remove(0)
        };
        let status = std::process::Command::new(&program)
            .args(&words)
            .arg(file.path())
            .status();
        super::resume_screen();
        match status {
            Ok(s) if s.success() => match std::fs::read_to_string(file.path()) {
                Ok(text) => {
                    self.app.input = text.trim_end_matches('\n').to_string();
                    self.app.pastes.clear();
                }
                Err(e) => self
                    .app
                    .error(format!("cannot read back the editor's file: {e}")),
            },
            Ok(s) => self
                .app
                .error(format!("{editor} ended with {s}; the input is unchanged")),
            Err(e) => self.app.error(format!(
                "cannot start the editor `{editor}` (set VISUAL or EDITOR): {e}"
            )),
        }
        self.redraw = true;
    }
}
