//! What a crash leaves of a turn, made whole when the session is next loaded (or, over a shared store, claimed).
//!
//! A turn's writes go in this order: the record says `running` (with the turn), `turn_started` is journaled, the
//! turn runs, then its messages and the record that ends it (`idle`, `last_turn`) are saved together, and last its
//! end event (`turn_completed` or `error`) is journaled. A process killed between any two of these leaves one of
//! three states, each repaired from what the record, the history and the journal hold, so that every
//! `turn_started` ends exactly once and no end is journaled for a turn that never started:
//! - the record says `running` and the journal has the turn's start: it ends as `error` with the given code
//!   (`supervisor_restarted`, or `node_lost` when another node ran it), and the record says `interrupted`;
//! - the record says `running` but the journal never started the turn: the record goes back to `idle`, and
//!   nothing is journaled;
//! - the record says the turn ended but the journal has no end: the end is journaled from the record and the
//!   history, `turn_completed` with the answer when the history holds it, otherwise `error` (and the record says
//!   so): the answer was not saved.

use service_ipc::{ChatRole, EventPayload, TurnStatus};

use super::{lock, Session};
use crate::runtime::error::Result;
use crate::runtime::record::{now, LastTurn, SessionStatus};

/// A turn the journal started and did not end: its id and where the history stood when it started.
struct OpenTurn {
    turn_id: String,
    history_mark: Option<u64>,
}

impl Session {
    /// Repairs what a crash left of the session's last turn (see the module's docs); `code` and `message` end a
    /// turn the record says is still running. What it journals is stored before it returns.
    pub async fn repair_lost_turn(&self, code: &str, message: &str) -> Result<()> {
        let repaired = self.repair(code, message).await;
        self.journal.stored().await;
        repaired
    }

    async fn repair(&self, code: &str, message: &str) -> Result<()> {
        let (running, last) = {
            let r = lock(&self.record);
            let running = (r.status == SessionStatus::Running)
                .then(|| r.active_turn.clone().unwrap_or_default());
            (running, r.last_turn.clone())
        };
        let open = self.open_turn().await?;
        if let Some(turn_id) = running {
            if open.as_ref().is_some_and(|o| o.turn_id == turn_id) {
                self.emit(EventPayload::Error {
                    turn_id: Some(turn_id.clone()),
                    code: code.into(),
                    message: message.into(),
                });
                // The turn did not fail: the process running it died, as if interrupted.
                return self.mark_ended(&turn_id, TurnStatus::Interrupted);
            }
            // Killed before the turn was journaled: it never started.
            return self.update(|r| {
                r.status = SessionStatus::Idle;
                r.active_turn = None;
                r.turn_count = r.turn_count.saturating_sub(1);
            });
        }
        let Some(open) = open else {
            return Ok(());
        };
        let ended_here = last.filter(|l| l.turn_id == open.turn_id);
        let answer = match ended_here.as_ref().map(|l| l.status) {
            Some(TurnStatus::Completed) => self.answer_since(open.history_mark).await?,
            _ => None,
        };
        match (answer, ended_here.map(|l| l.status)) {
            (Some(final_message), _) => {
                self.emit(EventPayload::TurnCompleted {
                    turn_id: open.turn_id,
                    final_message,
                    usage: Default::default(),
                    activity: None,
                });
                Ok(())
            }
            (None, Some(TurnStatus::Interrupted)) => {
                self.emit(EventPayload::Error {
                    turn_id: Some(open.turn_id),
                    code: "interrupted".into(),
                    message: "the turn was interrupted".into(),
                });
                Ok(())
            }
            (None, _) => {
                self.emit(EventPayload::Error {
                    turn_id: Some(open.turn_id.clone()),
                    code: code.into(),
                    message: "the supervisor stopped as this turn ended, before its end was saved; the turn was \
                              abandoned"
                        .into(),
                });
                self.mark_ended(&open.turn_id, TurnStatus::Failed)
            }
        }
    }

    fn mark_ended(&self, turn_id: &str, status: TurnStatus) -> Result<()> {
        self.update(|r| {
            r.status = SessionStatus::Idle;
            r.active_turn = None;
            r.last_turn = Some(LastTurn {
                turn_id: turn_id.to_string(),
                status,
                finished_at: now(),
            });
        })
    }

    /// The journal's last turn when it has a start and no end. Reads back from the journal's end, a window at a
    /// time, until a turn's start or end is found: a turn's events, not the whole journal.
    async fn open_turn(&self) -> Result<Option<OpenTurn>> {
        let last = self.journal.last_seq();
        let mut window = 64u64;
        let mut upto = last;
        while upto > 0 {
            let after = upto.saturating_sub(window);
            let events = self.journal.read_range(after, upto).await?;
            for event in events.iter().rev() {
                match &event.msg.payload {
                    EventPayload::TurnStarted {
                        turn_id,
                        history_mark,
                        ..
                    } => {
                        return Ok(Some(OpenTurn {
                            turn_id: turn_id.clone(),
                            history_mark: *history_mark,
                        }))
                    }
                    payload if payload.ends_turn() => return Ok(None),
                    _ => {}
                }
            }
            upto = after;
            window = window.saturating_mul(2);
        }
        Ok(None)
    }

    /// The text of the assistant's last message when the history holds one after `mark`: the answer the turn
    /// that started there saved.
    async fn answer_since(&self, mark: Option<u64>) -> Result<Option<String>> {
        let log = self.journal.log();
        if mark.is_some_and(|m| log.history_mark() <= m) {
            return Ok(None);
        }
        let history = log.history().await?;
        Ok(history
            .last()
            .filter(|m| m.role == ChatRole::Assistant)
            .map(|m| m.content.clone()))
    }
}
