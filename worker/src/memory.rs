//! Memory `sliding_window`: the system prompt plus the last N messages of the conversation.
//!
//! The window never starts with a tool result: a result whose call fell outside the window is dropped with it, so a
//! provider never sees a tool result without the assistant message that asked for it. Calls at the end of the
//! window always have their results after them, because the window is a suffix.

use service_ipc::{ChatMessage, ChatRole};

/// The last `size` messages of `history`, moved forward past any leading tool results.
pub fn window(history: &[ChatMessage], size: usize) -> &[ChatMessage] {
    let mut start = history.len().saturating_sub(size);
    while history.get(start).is_some_and(|m| m.role == ChatRole::Tool) {
        start += 1;
    }
    &history[start..]
}

/// The prompt for one model call: the system message, then the windowed conversation.
pub fn prompt(system: &str, history: &[ChatMessage], size: usize) -> Vec<ChatMessage> {
    let recent = window(history, size);
    let mut out = Vec::with_capacity(recent.len() + 1);
    out.push(ChatMessage::text(ChatRole::System, system));
    out.extend_from_slice(recent);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use service_ipc::ToolCall;

    fn user(t: &str) -> ChatMessage {
        ChatMessage::text(ChatRole::User, t)
    }
    fn call(id: &str) -> ChatMessage {
        ChatMessage {
            role: ChatRole::Assistant,
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "Bash".into(),
                arguments: "{}".into(),
            }],
            tool_call_id: None,
            opaque: Vec::new(),
        }
    }

    #[test]
    fn window_keeps_the_last_messages() {
        let h: Vec<_> = (0..10).map(|i| user(&i.to_string())).collect();
        let w = window(&h, 3);
        assert_eq!(
            w.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
            ["7", "8", "9"]
        );
        assert_eq!(window(&h, 50).len(), 10);
    }

    #[test]
    fn window_never_starts_with_an_orphaned_tool_result() {
        let h = vec![
            user("a"),
            call("c1"),
            ChatMessage::tool_result("c1", "r1"),
            ChatMessage::tool_result("c1b", "r1b"),
            user("b"),
        ];
        // A window of 3 would start at r1; it moves past both results.
        let w = window(&h, 3);
        assert_eq!(w, &h[4..]);
        // A window of 4 starts at the call and keeps its results.
        assert_eq!(window(&h, 4), &h[1..]);
    }

    #[test]
    fn prompt_puts_the_system_message_first() {
        let h = vec![user("x")];
        let p = prompt("sys", &h, 5);
        assert_eq!(p[0], ChatMessage::text(ChatRole::System, "sys"));
        assert_eq!(&p[1..], &h[..]);
    }
}
