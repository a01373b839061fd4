//! The react executor: ask the model, run the tools it calls, feed the results back, until it answers without
//! tool calls or `max_steps` model calls have been made.

use service_ipc::{ChatMessage, ChatRole, Usage};

use crate::turn::{system_prompt, Reply, Stop, Turn};

/// Runs the turn's model calls and tools; its messages are `history[*start..]`, and the conversation before
/// them may be replaced by a compacted one meanwhile.
pub(crate) async fn steps(
    turn: &Turn<'_>,
    history: &mut Vec<ChatMessage>,
    start: &mut usize,
    mut first: Option<Reply>,
    usage: &mut Usage,
) -> Result<String, Stop> {
    let config = &turn.shared.config;
    let skills = config
        .skills
        .iter()
        .map(|s| (s.name.as_str(), s.description.as_str()));
    let system = system_prompt(&config.system_prompt, &config.tools, skills);
    let mut stop_hook_active = false;
    for _ in 0..config.max_steps {
        let reply = match first.take() {
            Some(reply) => reply,
            None => {
                let messages = turn.context(&system, history, start);
                // Listed per call: an MCP server may have changed its tools, or died, since the last one.
                let specs = turn.shared.registry.specs().await;
                turn.call_model(messages, specs, usage).await?
            }
        };
        history.push(ChatMessage {
            role: ChatRole::Assistant,
            content: reply.text.clone(),
            tool_calls: reply.calls.clone(),
            tool_call_id: None,
            opaque: reply.opaque.clone(),
        });
        if reply.calls.is_empty() {
            if reply.text.trim().is_empty() {
                return Err(Stop::empty());
            }
            // A Stop hook may keep the turn going, with its reason as the next instruction.
            if turn
                .goes_on(history, &reply.text, &mut stop_hook_active)
                .await
            {
                continue;
            }
            return Ok(reply.text);
        }
        let mut i = 0;
        while i < reply.calls.len() {
            if turn.cancel.is_cancelled() {
                // Every call gets a result, so the history stays valid for the next turn.
                for skipped in &reply.calls[i..] {
                    history.push(ChatMessage::tool_result(
                        &skipped.id,
                        "not run: the turn was interrupted",
                    ));
                }
                return Err(Stop::Interrupted);
            }
            // Agent calls next to each other run at once: each is a child session of its own (the supervisor
            // bounds how many run). Every other call runs alone, in order.
            let end = match reply.calls[i..]
                .iter()
                .position(|c| c.name != crate::subagents::TOOL)
            {
                Some(0) => i + 1,
                Some(n) => i + n,
                None => reply.calls.len(),
            };
            let group = &reply.calls[i..end];
            let results =
                futures::future::join_all(group.iter().map(|c| turn.run_tool(c, None))).await;
            for (call, result) in group.iter().zip(results) {
                history.push(ChatMessage::tool_result(&call.id, result.output));
            }
            i = end;
        }
    }
    Err(Stop::out_of_steps(config.max_steps, "model calls"))
}
