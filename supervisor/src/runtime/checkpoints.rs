//! The runtime's side of workspace checkpoints (see [`crate::checkpoint`]) and of going back in a session:
//! - before each turn of a session whose turns can write, the workspace is checkpointed, and again as the turn
//!   ends (which tells the session's own changes from the host's);
//! - `rewind_session` restores the files and/or cuts the conversation to before a turn;
//! - `fork_session` makes a new session with the conversation (and, for a fresh workspace, the files) as they were
//!   before a turn;
//! - `turn_changes` is what a turn changed in the workspace, commands included.
//!
//! Turn numbers count from 1 in journal order, as `sessions show` prints them; "turn N" always means "as it was
//! just before turn N". The conversation is cut at the history mark `turn_started` carries.

use std::sync::Arc;

use service_ipc::{EventPayload, SandboxMode};

use super::error::{Result, RuntimeError};
use super::session::Session;
use super::{Inner, ServiceRuntime};
use crate::checkpoint::tree::RelPath;
use crate::checkpoint::{CheckpointError, Checkpoints, FileChange};

/// What a rewind did.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Rewound {
    /// The turn it went back to before.
    pub to_turn: u32,
    /// Whether the files were restored (false for a bundle that cannot write, whose turns take no checkpoints).
    pub files: bool,
    /// Whether the conversation was cut.
    pub conversation: bool,
    /// Paths the restore changed.
    pub restored: Vec<String>,
    /// Paths it could not restore, with why.
    pub skipped: Vec<String>,
}

/// What a fork made.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Forked {
    /// The new session.
    pub session: super::record::SessionRecord,
    /// The parent's turns it inherited.
    pub turns: u32,
    /// `copied` (its own copy of the workspace) or `shared` (the parent's host directory).
    pub workspace: String,
}

/// One turn as the journal has it.
struct TurnMark {
    seq: u64,
    turn_id: String,
    history_mark: Option<u64>,
}

/// Whether `session`'s turns can write its workspace.
fn writes(inner: &Inner, session: &Session) -> bool {
    session.bundle.manifest.sandbox.mode != SandboxMode::ReadOnly
        || inner.options.dangerous_sandbox_mode
}

/// The checkpoints of `session`, when its turns can write and the operator keeps checkpoints.
pub(super) fn of(inner: &Inner, session: &Session) -> Option<Arc<Checkpoints>> {
    session
        .checkpoints
        .get_or_init(|| {
            let max = inner.options.checkpoint_max_bytes;
            (writes(inner, session) && max > 0).then(|| {
                Arc::new(
                    Checkpoints::new(&session.dir, &inner.home.root().join("checkpoints"), max)
                        .ignoring(inner.options.checkpoint_ignore.clone()),
                )
            })
        })
        .clone()
}

/// Why the conversation cannot be cut before `turn` (its `turn_started` carries no position), and what to do.
fn unmarked(turn: u64, instead: &str) -> RuntimeError {
    RuntimeError::CheckpointMissing(format!(
        "turn {turn} ran before service-rs recorded where each turn starts in the conversation, so the \
         conversation cannot be cut there; {instead}"
    ))
}

fn runtime_error(e: CheckpointError) -> RuntimeError {
    match e {
        CheckpointError::Io {
            action,
            path,
            source,
        } => RuntimeError::Io {
            action,
            path,
            source,
        },
        CheckpointError::Missing(m) => RuntimeError::CheckpointMissing(m),
        e @ CheckpointError::Incomplete(_) => RuntimeError::CheckpointIncomplete(e.to_string()),
        e @ CheckpointError::ChangedOutside(_) => RuntimeError::WorkspaceChanged(e.to_string()),
        e @ CheckpointError::Workspace(_) => RuntimeError::CwdNotFound(e.to_string()),
        CheckpointError::Damaged { path, message } => RuntimeError::Corrupt { path, message },
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, CheckpointError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RuntimeError::WorkerUnavailable(format!("the checkpoint task failed: {e}")))?
        .map_err(runtime_error)
}

/// A start-of-turn checkpoint being taken: `Err((code, message))` when it could not be.
pub(super) type Pending = tokio::task::JoinHandle<std::result::Result<(), (String, String)>>;

/// Starts checkpointing `session`'s workspace before `turn_id` runs anything (None when the session takes no
/// checkpoints); its `checkpoint_created` follows the turn's `turn_started`. The turn's first model call may go
/// on meanwhile: [`settled`] is awaited before any tool runs and before the turn ends.
pub(super) fn start(inner: &Arc<Inner>, session: &Arc<Session>, turn_id: &str) -> Option<Pending> {
    let checkpoints = of(inner, session)?;
    let (inner, session, turn_id) = (inner.clone(), session.clone(), turn_id.to_string());
    Some(tokio::spawn(async move {
        let taken = take_start(&inner, &session, &turn_id, checkpoints).await;
        taken.map_err(|e| match e.storage_fault() {
            Some((code, cause)) => (
                code.to_string(),
                format!("the workspace could not be checkpointed: {cause}"),
            ),
            None => (
                "checkpoint_failed".to_string(),
                format!("the workspace could not be checkpointed: {e}"),
            ),
        })
    }))
}

/// What a start-of-turn checkpoint came to: `Err((code, message))` fails the turn before anything runs.
pub(super) async fn settled(pending: Option<Pending>) -> std::result::Result<(), (String, String)> {
    match pending {
        None => Ok(()),
        Some(task) => task.await.unwrap_or_else(|e| {
            Err((
                "checkpoint_failed".into(),
                format!("the checkpoint task failed: {e}"),
            ))
        }),
    }
}

async fn take_start(
    inner: &Inner,
    session: &Session,
    turn_id: &str,
    checkpoints: Arc<Checkpoints>,
) -> Result<()> {
    let (root, turn) = (session.cwd(), turn_id.to_string());
    let earlier = session.record().turn_count.saturating_sub(1);
    let shared = inner.store.shared();
    let (taken, first_here) = blocking(move || {
        let first_here = checkpoints.is_empty()?;
        Ok((checkpoints.start(&root, &turn)?, first_here))
    })
    .await?;
    let note = (first_here && earlier > 0).then(|| {
        let why = if shared {
            "checkpoints stay on the disk of the node that took them, and this node took the session over"
        } else {
            "a fork's inherited turns, or turns that ran while checkpoints were off"
        };
        format!("the {earlier} earlier turns have no checkpoint here ({why}); rewinding their files is not possible")
    });
    let mut events = vec![EventPayload::CheckpointCreated {
        turn_id: turn_id.to_string(),
        files: taken.files,
        bytes_new: taken.bytes_new,
        dropped: taken.dropped,
        note,
    }];
    if !taken.skipped.is_empty() {
        events.push(skipped_event(
            turn_id,
            taken.skipped,
            inner.options.checkpoint_max_bytes,
        ));
    }
    session.emit_in_turn(turn_id, events);
    Ok(())
}

/// The `checkpoint_skipped` event for the files a checkpoint passed over: the largest, at most 50 of them.
fn skipped_event(turn_id: &str, mut skipped: Vec<(RelPath, u64)>, max_bytes: u64) -> EventPayload {
    const LISTED: usize = 50;
    skipped.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let more = skipped.len().saturating_sub(LISTED) as u64;
    EventPayload::CheckpointSkipped {
        turn_id: turn_id.to_string(),
        files: skipped
            .into_iter()
            .take(LISTED)
            .map(|(path, size)| service_ipc::SkippedFile {
                path: path.display(),
                size,
            })
            .collect(),
        more,
        max_bytes,
    }
}

/// The checkpoints whose end checkpoint of `turn_id` is due, promised (see `Checkpoints::expect_end`) before the
/// turn's end event goes out, so that whoever sees that event and then exits or rewinds waits for it.
pub(crate) fn turn_ending(session: &Session, turn_id: &str) -> Option<Arc<Checkpoints>> {
    let checkpoints = session
        .checkpoints
        .get()
        .cloned()
        .flatten()
        .filter(|c| c.is_open(turn_id))?;
    checkpoints.expect_end();
    Some(checkpoints)
}

/// Takes the promised end checkpoint of `turn_id` on a blocking thread, then runs `then` (which tells the turn's
/// waiter it ended).
pub(crate) fn after_turn(
    session: &Session,
    turn_id: &str,
    checkpoints: Option<Arc<Checkpoints>>,
    then: Box<dyn FnOnce() + Send>,
) {
    let Some(checkpoints) = checkpoints else {
        return then();
    };
    let (root, turn, id) = (session.cwd(), turn_id.to_string(), session.id.clone());
    let end = move || {
        if let Err(e) = checkpoints.end(&root, &turn) {
            tracing::warn!(session = %id, "the checkpoint at the end of turn {turn} was not taken: {e}");
        }
        then();
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(end)),
        Err(_) => end(),
    }
}

impl ServiceRuntime {
    /// The session's turns in journal order: every one the journal holds, or with `in_conversation` those of the
    /// conversation as it is now (the ones `rewind` and `fork` number).
    async fn turns_of(&self, session: &Session, in_conversation: bool) -> Result<Vec<TurnMark>> {
        let events = session
            .journal
            .read_range(0, session.journal.last_seq())
            .await?;
        // The turns of the conversation as it is: a rewind of the conversation cut the ones after it (the journal
        // keeps them, but they are no longer what the model sees).
        let mut turns = Vec::new();
        for p in &events {
            match &p.msg.payload {
                EventPayload::TurnStarted {
                    turn_id,
                    history_mark,
                    ..
                } => turns.push(TurnMark {
                    seq: p.seq,
                    turn_id: turn_id.clone(),
                    history_mark: *history_mark,
                }),
                EventPayload::SessionRewound {
                    to_turn,
                    conversation: true,
                    ..
                } if in_conversation => turns.truncate((*to_turn as usize).saturating_sub(1)),
                _ => {}
            }
        }
        Ok(turns)
    }

    /// The turn numbered `turn` (from 1) of `turns`.
    fn nth<'a>(session: &Session, turns: &'a [TurnMark], turn: u64) -> Result<&'a TurnMark> {
        usize::try_from(turn)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| turns.get(i))
            .ok_or_else(|| RuntimeError::TurnOutOfRange {
                session_id: session.id.clone(),
                turn,
                turns: turns.len() as u32,
            })
    }

    fn idle(session: &Session) -> Result<()> {
        match session.active_turn() {
            Some(turn_id) => Err(RuntimeError::TurnInProgress {
                session_id: session.id.clone(),
                turn_id,
            }),
            None => Ok(()),
        }
    }

    fn missing(&self, what: &str, turn: u64) -> RuntimeError {
        let where_ = if self.inner.store.shared() {
            " Over a shared store, checkpoints stay on the disk of the node that took them, and this node does \
             not have it (the session moved here after that turn)."
        } else {
            " It was dropped to keep the session within checkpoint_max_mb, or the session was forked after it."
        };
        RuntimeError::CheckpointMissing(format!(
            "{what} before turn {turn} is not on this node.{where_}"
        ))
    }

    /// Rewinds session `id` to before turn `turn` (from 1): its workspace's files (`files`), its conversation
    /// (`conversation`), or both; asked for neither, it checks the turn and does nothing. Refused while a turn
    /// runs, and, for the files, when they changed outside the session since its last turn, unless `force`.
    pub async fn rewind_session(
        &self,
        id: &str,
        turn: u64,
        files: bool,
        conversation: bool,
        force: bool,
    ) -> Result<Rewound> {
        let session = self.session(id).await?;
        self.claim(&session).await?;
        Self::idle(&session)?;
        let turns = self.turns_of(&session, true).await?;
        let mark = Self::nth(&session, &turns, turn)?;
        let history = match (conversation, mark.history_mark) {
            (false, _) => None,
            (true, Some(m)) => Some(session.journal.log().history_at(m).await?),
            (true, None) => {
                return Err(unmarked(
                    turn,
                    "rewind the files alone (--files, \"conversation\": false)",
                ))
            }
        };
        let checkpoints = of(&self.inner, &session).filter(|_| files);
        if !files && !conversation {
            return Ok(Rewound {
                to_turn: turn as u32,
                files: false,
                conversation: false,
                restored: Vec::new(),
                skipped: Vec::new(),
            });
        }
        let mut done = Rewound {
            to_turn: turn as u32,
            files: checkpoints.is_some(),
            conversation,
            restored: Vec::new(),
            skipped: Vec::new(),
        };
        if let Some(checkpoints) = checkpoints {
            let (root, target) = (session.cwd(), mark.turn_id.clone());
            let rewind_id = uuid::Uuid::new_v4().to_string();
            let (changed, skipped) =
                blocking(move || checkpoints.rewind(&root, &target, &rewind_id, force))
                    .await
                    .map_err(|e| match e {
                        RuntimeError::CheckpointMissing(_) => {
                            self.missing("the checkpoint of the workspace", turn)
                        }
                        e => e,
                    })?;
            done.restored = changed.iter().map(|(p, _)| p.display()).collect();
            done.skipped = skipped
                .iter()
                .map(|(p, why)| format!("{}: {why}", p.display()))
                .collect();
        }
        if let Some(history) = history {
            session.journal.log().reset_history(&history)?;
        }
        session.emit(EventPayload::SessionRewound {
            to_turn: done.to_turn,
            files: done.files,
            conversation,
            restored: done.restored.len() as u64,
        });
        // Answered once stored: a client told it is done finds it so on any node.
        session.journal.stored().await;
        Ok(done)
    }

    /// Forks session `id` as it was before turn `turn` (None: now) into a new session of the same bundle: the
    /// conversation and the journal up to there, and a copy of the workspace when the session has its own (one
    /// working in a host directory shares it).
    pub async fn fork_session(&self, id: &str, turn: Option<u64>) -> Result<Forked> {
        let parent = self.session(id).await?;
        self.claim(&parent).await?;
        Self::idle(&parent)?;
        let turns = self.turns_of(&parent, true).await?;
        let (upto_seq, mark, at) = match turn {
            Some(n) => {
                let t = Self::nth(&parent, &turns, n)?;
                let mark = t
                    .history_mark
                    .ok_or_else(|| unmarked(n, "fork it as it is now, without a turn"))?;
                (t.seq - 1, mark, Some(t.turn_id.clone()))
            }
            None => (
                parent.journal.last_seq(),
                parent.journal.log().history_mark(),
                None,
            ),
        };
        let inherited = match turn {
            Some(n) => n as u32 - 1,
            None => turns.len() as u32,
        };
        let own_workspace = parent.cwd() == parent.dir.join("workspace");
        if own_workspace && writes(&self.inner, &parent) && of(&self.inner, &parent).is_none() {
            return Err(RuntimeError::InvalidRequest(
                "this session's files are copied from its checkpoints, and checkpoints are off \
                 (checkpoint_max_mb = 0 in config.toml); turn them on to fork it"
                    .into(),
            ));
        }
        let record = parent.record();
        let cwd = (!own_workspace).then(|| parent.cwd());
        let bundle = parent.bundle.clone();
        let child = self
            .create_session_as(
                uuid::Uuid::new_v4().to_string(),
                bundle,
                &record.bundle_ref,
                cwd.as_deref(),
                // A fork of a subagent's session keeps its ceiling.
                record.parent.clone(),
                record.tenant.clone(),
            )
            .await?;
        let made = self
            .fill_fork(
                &parent,
                &child,
                upto_seq,
                mark,
                at.as_deref(),
                own_workspace,
                turn,
            )
            .await;
        if let Err(e) = made {
            if let Err(gone) = self.delete_session(&child.id).await {
                tracing::warn!(session = %child.id, "a fork that failed stays: {gone}");
            }
            return Err(e);
        }
        child.inherit(inherited, record.title.clone());
        let workspace = if own_workspace { "copied" } else { "shared" };
        child.emit(EventPayload::SessionForked {
            from_session: parent.id.clone(),
            turn: turn.map(|n| n as u32).unwrap_or(inherited + 1),
            workspace: workspace.into(),
        });
        child.journal.stored().await;
        Ok(Forked {
            session: child.record(),
            turns: inherited,
            workspace: workspace.into(),
        })
    }

    /// Gives the new session `child` the parent's journal up to `upto_seq`, its history log up to `mark`, and, for
    /// a session with its own workspace, the files as they were before turn `at` (None: now).
    #[allow(clippy::too_many_arguments)]
    async fn fill_fork(
        &self,
        parent: &Session,
        child: &Session,
        upto_seq: u64,
        mark: u64,
        at: Option<&str>,
        own_workspace: bool,
        turn: Option<u64>,
    ) -> Result<()> {
        // The log's lines as they are, resets included, so that the marks the copied `turn_started` events carry
        // mean the same in the child's log.
        let lines = parent.journal.log().history_lines(mark).await?;
        child.journal.log().append_history_lines(lines)?;
        let events = parent.journal.read_range(0, upto_seq).await?;
        for chunk in events.chunks(512) {
            child.emit_all(chunk.iter().map(|p| p.msg.payload.clone()).collect());
        }
        if !own_workspace {
            return Ok(());
        }
        let (Some(theirs), Some(mine)) = (of(&self.inner, parent), of(&self.inner, child)) else {
            // A bundle that cannot write left the workspace as it was made: empty.
            return Ok(());
        };
        let (root, dest, at) = (parent.cwd(), child.cwd(), at.map(str::to_string));
        blocking(move || theirs.copy_to(&root, at.as_deref(), &dest, &mine))
            .await
            .map_err(|e| match e {
                RuntimeError::CheckpointMissing(_) => {
                    self.missing("the checkpoint of the workspace", turn.unwrap_or(0))
                }
                e => e,
            })
            .map(drop)
    }

    /// What turn `turn` (from 1) of session `id` changed in its workspace, commands included, with unified diffs
    /// of text files; None when the session takes no checkpoints or they are not on this node.
    pub async fn turn_changes(&self, id: &str, turn: u64) -> Result<Option<Vec<FileChange>>> {
        let session = self.session(id).await?;
        let turns = self.turns_of(&session, false).await?;
        let mark = Self::nth(&session, &turns, turn)?;
        let Some(checkpoints) = of(&self.inner, &session) else {
            return Ok(None);
        };
        let turn_id = mark.turn_id.clone();
        blocking(move || checkpoints.turn_changes(&turn_id)).await
    }

    /// Drops session `session`'s checkpoints and the content no other session holds.
    pub(super) fn forget_checkpoints(&self, session: &Session) {
        if let Some(checkpoints) = of(&self.inner, session) {
            checkpoints.forget();
        }
    }
}
