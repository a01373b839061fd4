//! The TUI's pickers, narrowed as the user types: sessions newest first with their title, age and last outcome
//! (`/resume`), and a session's turns (`/rewind`).

use crate::runtime::record::SessionStatus;
use crate::runtime::SessionRecord;

/// One session in the picker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Session id.
    pub id: String,
    /// What the row shows: title, bundle, age, outcome.
    pub label: String,
}

/// The picker's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Picker {
    /// Every session offered, newest first.
    pub choices: Vec<Choice>,
    /// What was typed.
    pub filter: String,
    /// The highlighted row among the matching ones.
    pub selected: usize,
    /// What the list holds (this directory's sessions, or all).
    pub title: String,
    /// What Enter does with the chosen row.
    pub purpose: Purpose,
}

/// What a picker is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Purpose {
    /// Open the chosen session.
    #[default]
    Resume,
    /// Rewind the session on screen to before the chosen turn (its id is the turn number).
    Rewind,
}

/// Widest title shown in the picker.
const TITLE_WIDTH: usize = 48;

impl Picker {
    /// A picker over `records`, those whose workspace is `dir` when there are some (else all), newest first;
    /// `now` dates them.
    pub fn new(
        records: &[SessionRecord],
        dir: Option<&str>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Picker {
        let here: Vec<&SessionRecord> = records
            .iter()
            .filter(|r| dir.is_some_and(|d| r.cwd == d))
            .collect();
        let (mut chosen, title) = match (here.is_empty(), dir) {
            (false, Some(d)) => (here, format!("sessions in {d}")),
            (true, Some(_)) => (
                records.iter().collect(),
                "no session in this directory yet: all sessions".to_string(),
            ),
            (_, None) => (records.iter().collect(), "all sessions".to_string()),
        };
        chosen.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
        // Columns: title, bundle, age, outcome, id; each as wide as its widest cell, so they line up.
        let rows: Vec<(String, [String; 5])> = chosen
            .into_iter()
            .map(|r| {
                let title: String = r
                    .title
                    .as_deref()
                    .unwrap_or("(no prompt yet)")
                    .chars()
                    .take(TITLE_WIDTH)
                    .collect();
                (
                    r.id.clone(),
                    [
                        title,
                        r.bundle.reference.clone(),
                        format!("{} ago", crate::runtime::record::age(&r.updated_at, now)),
                        outcome(r),
                        r.id.chars().take(8).collect(),
                    ],
                )
            })
            .collect();
        let mut widths = [0usize; 5];
        for (_, cells) in &rows {
            for (w, cell) in widths.iter_mut().zip(cells) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let choices = rows
            .into_iter()
            .map(|(id, cells)| {
                let padded: Vec<String> = cells
                    .iter()
                    .zip(widths)
                    .map(|(cell, w)| format!("{cell:<w$}"))
                    .collect();
                Choice {
                    id,
                    label: padded.join("  ").trim_end().to_string(),
                }
            })
            .collect();
        Picker {
            choices,
            filter: String::new(),
            selected: 0,
            title,
            purpose: Purpose::Resume,
        }
    }

    /// A picker over a session's turns, by their prompts in order, the last first.
    pub fn turns(prompts: &[String]) -> Picker {
        let choices = prompts
            .iter()
            .enumerate()
            .rev()
            .map(|(i, prompt)| Choice {
                id: (i + 1).to_string(),
                label: format!(
                    "turn {}: {}",
                    i + 1,
                    crate::runtime::record::title_of(prompt)
                ),
            })
            .collect();
        Picker {
            choices,
            filter: String::new(),
            selected: 0,
            title: "rewind files and conversation to before turn".into(),
            purpose: Purpose::Rewind,
        }
    }

    /// The rows that match what was typed (every word, in any case, anywhere in the row).
    pub fn matching(&self) -> Vec<&Choice> {
        let words: Vec<String> = self
            .filter
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        self.choices
            .iter()
            .filter(|c| {
                let label = c.label.to_lowercase();
                words.iter().all(|w| label.contains(w.as_str()))
            })
            .collect()
    }

    /// The highlighted session, if any row matches.
    pub fn chosen(&self) -> Option<&Choice> {
        self.matching().get(self.selected).copied()
    }

    /// Moves the highlight by `by` rows, within the matching ones.
    pub fn step(&mut self, by: isize) {
        let n = self.matching().len();
        if n == 0 {
            self.selected = 0;
            return;
        }
        self.selected = (self.selected as isize + by).clamp(0, n as isize - 1) as usize;
    }

    /// Types a character into the filter.
    pub fn push(&mut self, c: char) {
        self.filter.push(c);
        self.selected = 0;
    }

    /// Deletes the filter's last character.
    pub fn pop(&mut self) {
        self.filter.pop();
        self.selected = 0;
    }
}

fn outcome(r: &SessionRecord) -> String {
    match (&r.status, &r.last_turn) {
        (SessionStatus::Running, _) => "running".into(),
        (_, Some(last)) => format!("{:?}", last.status).to_lowercase(),
        (_, None) => "new".into(),
    }
}
