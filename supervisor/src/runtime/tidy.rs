//! Sessions nobody used: a session that never ran a turn is deleted when the front end that made it closes it
//! (the TUI quits, an ACP connection ends), and `serve` deletes the ones that have waited [`UNUSED_AFTER`] (its
//! `--unused-session-timeout`) for a first turn, so an editor's `session/new`, a console "Create" or a client that
//! gave up do not pile up.

use std::time::Duration;

use super::error::Result;
use super::record::{SessionRecord, SessionStatus};
use super::ServiceRuntime;

/// How long `serve` keeps a session that never ran a turn, by default.
pub const UNUSED_AFTER: Duration = Duration::from_secs(10 * 60);

/// Whether `record` is a session nobody used: no turn ever, none running, and not a subagent's (whose parent
/// ends it).
fn unused(record: &SessionRecord) -> bool {
    record.turn_count == 0
        && record.status == SessionStatus::Idle
        && record.active_turn.is_none()
        && record.parent.is_none()
}

/// How long ago `record` was made; zero when its time cannot be read.
fn age(record: &SessionRecord) -> Duration {
    chrono::DateTime::parse_from_rfc3339(&record.created_at)
        .ok()
        .and_then(|t| {
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                .to_std()
                .ok()
        })
        .unwrap_or_default()
}

impl ServiceRuntime {
    /// Deletes session `id` if nobody used it (see [`unused`]); whether it did.
    pub async fn delete_if_unused(&self, id: &str) -> Result<bool> {
        let record = self.get_session(id).await?;
        if !unused(&record) {
            return Ok(false);
        }
        self.delete_session(id).await?;
        tracing::info!(session = id, "deleted a session that never ran a turn");
        Ok(true)
    }

    /// Deletes the sessions this process made that nobody used: what a front end does as it closes (the TUI, ACP,
    /// which made them for a user who then ran nothing). Sessions it only attached to stay.
    pub async fn delete_unused_made_here(&self) -> usize {
        let made: Vec<String> = self
            .sessions()
            .values()
            .filter(|s| s.made_here.load(std::sync::atomic::Ordering::Relaxed))
            .map(|s| s.id.clone())
            .collect();
        let mut deleted = 0;
        for id in made {
            if self.delete_if_unused(&id).await.unwrap_or(false) {
                deleted += 1;
            }
        }
        deleted
    }

    /// Deletes the sessions this process holds that nobody used for `after`; how many. `serve` calls it on every
    /// idle tick.
    pub async fn delete_unused(&self, after: Duration) -> usize {
        let live: Vec<_> = self.sessions().values().cloned().collect();
        let mut deleted = 0;
        for session in live {
            let record = session.record();
            if unused(&record)
                && age(&record) >= after
                && session.idle_for() >= after
                && self.delete_if_unused(&record.id).await.unwrap_or(false)
            {
                deleted += 1;
            }
        }
        deleted
    }
}
