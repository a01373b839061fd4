//! Runs one turn with the bundle's executor, react ([`crate::react`]) or codeact ([`crate::codeact`]), and
//! reports its end.
//!
//! Every turn ends with one `TurnFinished` frame carrying how it ended and the messages it added (so the supervisor
//! can persist history even for a failed or interrupted turn); the supervisor emits the matching `turn_completed`
//! or `error` event once it has recorded the end.

use std::path::PathBuf;
use std::sync::Arc;

use service_ipc::{
    ChatMessage, ChatRole, ExecutorKind, FirstReply, Task, ToSupervisor, TurnContext, TurnStatus,
    Usage,
};
use tokio_util::sync::CancellationToken;

use crate::state::Shared;
use crate::turn::{fail_unstarted, Reply, Stop, Turn};

/// Runs one turn to its end and reports it; never panics on model or tool output. With `first_reply` the turn's
/// first model call was made by the supervisor (and its text streamed): the turn goes on from its tool calls.
pub async fn run_turn(
    shared: Arc<Shared>,
    turn_id: String,
    task: Task,
    context: TurnContext,
    first_reply: Option<FirstReply>,
    cancel: CancellationToken,
) {
    let mut history = shared.history.lock().await;
    let out = &shared.outbox;
    // `turn_started` is the supervisor's: it journals it before handing the turn over.
    let turn = Turn {
        shared: &shared,
        turn_id: &turn_id,
        cancel: &cancel,
        cwd: PathBuf::from(&context.cwd),
    };
    let mut start = history.len();
    let mut prompt = task.prompt.clone();
    match turn.prompt_hooks(&history, &task.prompt).await {
        Ok(Some(context)) => prompt = format!("{prompt}\n\n{context}"),
        Ok(None) => {}
        Err(reason) => {
            // A blocked prompt never reaches the model, nor the conversation.
            let why = format!("a UserPromptSubmit hook blocked the prompt: {reason}");
            fail_unstarted(out, turn_id, "hook_blocked", why).await;
            return;
        }
    }
    history.push(ChatMessage::text(ChatRole::User, prompt));
    let mut usage = Usage::default();
    let first = first_reply.map(|r| {
        usage.add(r.usage);
        Reply {
            text: r.text,
            calls: r.tool_calls,
            opaque: r.opaque,
        }
    });
    let outcome = match shared.config.executor {
        ExecutorKind::React => {
            crate::react::steps(&turn, &mut history, &mut start, first, &mut usage).await
        }
        ExecutorKind::Codeact => {
            crate::codeact::steps(&turn, &mut history, &mut start, first, &mut usage).await
        }
    };
    if let Err(Stop::Failed { code, message }) = &outcome {
        turn.stop_failure(code, message, &history[start..]).await;
    }
    let added = history[start..].to_vec();

    let (status, final_message, error) = match outcome {
        Ok(text) => (TurnStatus::Completed, text, None),
        Err(Stop::Interrupted) => (
            TurnStatus::Interrupted,
            String::new(),
            Some((
                "interrupted".to_string(),
                "the turn was interrupted by the operator".to_string(),
            )),
        ),
        Err(Stop::Failed { code, message }) => {
            (TurnStatus::Failed, String::new(), Some((code, message)))
        }
    };
    out.send(ToSupervisor::TurnFinished {
        turn_id,
        status,
        final_message,
        messages: added,
        usage,
        error,
    })
    .await;
}
