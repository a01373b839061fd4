//! The end of a session's `history.jsonl` as this process last read or wrote it, so that a warm turn takes its
//! memory window from memory instead of reading and parsing the file's tail again (a fifth of a warm turn's CPU).
//!
//! What is kept is tied to the file's length at the time: the history only grows (a compaction appends a reset
//! line), so a length that differs means someone else wrote it, and the file is read again. Every write made
//! through this process's log says where it began (the file's length before it) and how long it was; a write that
//! did not begin where the kept end did, which only a second writer could cause, drops what was kept.

use std::collections::VecDeque;

use service_ipc::ChatMessage;

/// About how much of a history's end one session keeps in memory: a window of long messages (tool output) is read
/// from the file instead, so that many sessions loaded in `serve` hold little each.
const KEEP_BYTES: usize = 64 * 1024;

/// The kept end of one history, if any.
#[derive(Default)]
pub(super) struct Recent {
    tail: Option<Tail>,
    /// The most messages a read has asked for: as many are kept, within [`KEEP_BYTES`].
    keep: usize,
}

struct Tail {
    /// The file's length when these were its last messages.
    len: u64,
    /// Its last messages after its last reset line, oldest first, each with its rough size.
    messages: VecDeque<(ChatMessage, usize)>,
    /// The sum of those sizes.
    bytes: usize,
    /// True when they are all the messages after that reset line (or the file's start).
    whole: bool,
}

impl Tail {
    fn new(len: u64) -> Tail {
        Tail {
            len,
            messages: VecDeque::new(),
            bytes: 0,
            whole: true,
        }
    }

    /// Adds `messages` at the end, then lets go of the oldest beyond `keep` messages or [`KEEP_BYTES`].
    fn extend(&mut self, messages: &[ChatMessage], keep: usize) {
        for m in messages {
            let size = weight(m);
            self.bytes += size;
            self.messages.push_back((m.clone(), size));
        }
        while self.messages.len() > keep || self.bytes > KEEP_BYTES {
            let Some((_, size)) = self.messages.pop_front() else {
                break;
            };
            self.bytes -= size;
            self.whole = false;
        }
    }
}

/// About what `m` takes in memory.
fn weight(m: &ChatMessage) -> usize {
    let calls: usize = (m.tool_calls.iter())
        .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 64)
        .sum();
    m.content.len() + calls + 256 * m.opaque.len() + 64
}

impl Recent {
    /// The last `n` messages of the history when its file is `len` bytes long, if they are kept.
    pub(super) fn get(&self, len: u64, n: usize) -> Option<Vec<ChatMessage>> {
        let tail = self.tail.as_ref().filter(|t| t.len == len)?;
        if tail.messages.len() < n && !tail.whole {
            return None;
        }
        let skip = tail.messages.len().saturating_sub(n);
        Some(
            tail.messages
                .iter()
                .skip(skip)
                .map(|(m, _)| m.clone())
                .collect(),
        )
    }

    /// Keeps `messages`, the last of the history as read from a file of `len` bytes when `n` were asked for.
    pub(super) fn read(&mut self, len: u64, messages: &[ChatMessage], n: usize) {
        self.keep = self.keep.max(n);
        let mut tail = Tail::new(len);
        tail.whole = messages.len() < n;
        tail.extend(messages, self.keep);
        self.tail = Some(tail);
    }

    /// Follows a write of `written` bytes, appended to a file of `at` bytes, that held `messages`, after a reset
    /// line when `reset`.
    pub(super) fn appended(
        &mut self,
        at: u64,
        written: u64,
        messages: &[ChatMessage],
        reset: bool,
    ) {
        let len = at + written;
        let tail = match self.tail.as_mut() {
            _ if reset => self.tail.insert(Tail::new(len)),
            Some(tail) if tail.len == at => tail,
            _ => return self.forget(),
        };
        tail.len = len;
        tail.extend(messages, self.keep);
    }

    /// Drops what is kept: the next read goes to the file.
    pub(super) fn forget(&mut self) {
        self.tail = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_ipc::ChatRole;

    fn said(texts: &[&str]) -> Vec<ChatMessage> {
        texts
            .iter()
            .map(|t| ChatMessage::text(ChatRole::User, *t))
            .collect()
    }

    fn contents(messages: Option<Vec<ChatMessage>>) -> Option<Vec<String>> {
        messages.map(|m| m.into_iter().map(|m| m.content).collect())
    }

    #[test]
    fn kept_messages_answer_only_for_the_length_they_were_kept_at() {
        let mut recent = Recent::default();
        assert!(recent.get(0, 2).is_none(), "nothing read yet");
        recent.read(10, &said(&["a", "b", "c"]), 3);
        assert_eq!(
            contents(recent.get(10, 2)),
            Some(vec!["b".into(), "c".into()])
        );
        // Another writer made the file longer: read it again.
        assert!(recent.get(11, 2).is_none());
        // More than was kept, and there may be more in the file.
        assert!(recent.get(10, 4).is_none());
    }

    #[test]
    fn a_short_history_read_whole_answers_any_window() {
        let mut recent = Recent::default();
        recent.read(10, &said(&["a"]), 8);
        assert_eq!(contents(recent.get(10, 50)), Some(vec!["a".into()]));
    }

    #[test]
    fn appends_extend_the_kept_end_and_a_write_elsewhere_drops_it() {
        let mut recent = Recent::default();
        recent.read(10, &said(&["a", "b"]), 2);
        recent.appended(10, 5, &said(&["c"]), false);
        assert_eq!(
            contents(recent.get(15, 2)),
            Some(vec!["b".into(), "c".into()])
        );
        // Only as many as were asked for are kept, so a longer window reads the file.
        assert!(recent.get(15, 3).is_none());
        // A write that did not start at the kept end: someone else wrote between.
        recent.appended(20, 5, &said(&["e"]), false);
        assert!(recent.get(25, 1).is_none());
        assert!(recent.get(15, 1).is_none());
    }

    #[test]
    fn long_messages_are_kept_only_up_to_a_bound_and_the_rest_is_read_again() {
        let mut recent = Recent::default();
        let long = "x".repeat(KEEP_BYTES / 3);
        recent.read(10, &said(&["a"]), 40);
        recent.appended(10, 5, &said(&[&long, &long, &long, "b"]), false);
        let tail = recent.tail.as_ref().unwrap();
        assert!(tail.bytes <= KEEP_BYTES, "{} bytes kept", tail.bytes);
        // The last two fit; a window of three is not kept whole, so it is read from the file.
        assert_eq!(contents(recent.get(15, 2)).map(|c| c.len()), Some(2));
        assert!(recent.get(15, 40).is_none());
    }

    #[test]
    fn a_reset_starts_the_kept_end_over_whatever_was_kept() {
        let mut recent = Recent::default();
        recent.read(10, &said(&["a", "b", "c"]), 3);
        recent.appended(99, 7, &said(&["summary", "d"]), true);
        assert_eq!(
            contents(recent.get(106, 3)),
            Some(vec!["summary".into(), "d".into()])
        );
    }
}
