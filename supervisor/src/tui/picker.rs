//! The resume picker: sessions newest first with their title, age and last outcome, narrowed as the user types.

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
}

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
        let choices = chosen
            .into_iter()
            .map(|r| Choice {
                id: r.id.clone(),
                label: format!(
                    "{}  {}  {} ago  {}  {}",
                    r.title.as_deref().unwrap_or("(no prompt yet)"),
                    r.bundle.reference,
                    crate::runtime::record::age(&r.updated_at, now),
                    outcome(r),
                    r.id.chars().take(8).collect::<String>()
                ),
            })
            .collect();
        Picker {
            choices,
            filter: String::new(),
            selected: 0,
            title,
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
