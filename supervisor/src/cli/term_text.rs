//! Text from a sandbox made safe for the operator's terminal.
//!
//! Answers, command output, tool arguments and approval questions all come from a model or a sandboxed process. A
//! terminal acts on the control characters in them: OSC 2 retitles the window, OSC 52 writes the clipboard, CSI
//! moves the cursor (and so can hide or forge the lines around an approval question), a carriage return overwrites
//! a line. Every such character is shown as a visible escape instead (`^[` for ESC, `^M` for a carriage return,
//! `<9b>` for a C1 control), so the text reads as what it is. Newline and tab pass. `--raw` writes the bytes as they
//! came, and only when stdout is not a terminal, for scripts that want them.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` would be acted on by a terminal rather than shown.
fn is_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || c == '\u{2028}' || c == '\u{2029}'
}

/// `text` with every control character but newline and tab replaced by a visible escape.
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !is_control(c) => out.push(c),
            '\u{7f}' => out.push_str("^?"),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c => {
                let _ = write!(out, "<{:x}>", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// How `run` and `sessions show` write text from a sandbox to stdout.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    raw: bool,
}

impl Output {
    /// Escaped, unless `raw` was asked for and stdout is not a terminal.
    pub fn new(raw: bool) -> Output {
        use std::io::IsTerminal;
        Output {
            raw: raw && !std::io::stdout().is_terminal(),
        }
    }

    /// `text` as this output writes it to stdout.
    pub fn stdout<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.raw {
            Cow::Borrowed(text)
        } else {
            safe(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_become_visible_and_text_stays() {
        assert_eq!(
            safe("\x1b]2;pwned\x07title"),
            "^[]2;pwned^Gtitle",
            "OSC 2 retitles the window"
        );
        assert_eq!(
            safe("\x1b]52;c;aGk=\x1b\\"),
            "^[]52;c;aGk=^[\\",
            "OSC 52 writes the clipboard"
        );
        assert_eq!(safe("a\x1b[2A\x1b[2Kb"), "a^[[2A^[[2Kb");
        assert_eq!(safe("fake\rreal"), "fake^Mreal");
        assert_eq!(safe("\u{9b}31m"), "<9b>31m", "an 8-bit CSI");
        assert_eq!(safe("del\u{7f}"), "del^?");
        assert_eq!(safe("line\n\tindent é 日本"), "line\n\tindent é 日本");
        assert!(matches!(safe("plain"), Cow::Borrowed(_)));
    }
}
