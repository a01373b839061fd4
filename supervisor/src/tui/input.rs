//! What the input box does beyond typing: pastes (kept as text, long ones folded), `@file` mentions and the
//! `/` popup. Pure functions over strings, so they are tested without a terminal.

use std::path::Path;

/// A paste of more lines than this is folded in the input box as `[Pasted N lines]`, and expanded when sent.
pub const FOLD_LINES: usize = 5;
/// Largest file a mention attaches; a larger one is named, not sent.
pub const MAX_ATTACHED: u64 = 256 * 1024;

/// Pasted text as the input takes it: terminals and tmux send line breaks inside a paste as carriage returns.
pub fn normalize_paste(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// The placeholder of the `n`-th folded paste (0-based) of `lines` lines.
pub fn placeholder(n: usize, lines: usize) -> String {
    if n == 0 {
        format!("[Pasted {lines} lines]")
    } else {
        format!("[Pasted {lines} lines #{}]", n + 1)
    }
}

/// `input` with each folded paste's placeholder replaced by its text.
pub fn expand(input: &str, pastes: &[String]) -> String {
    let mut out = input.to_string();
    for (n, text) in pastes.iter().enumerate() {
        let lines = text.lines().count();
        out = out.replacen(&placeholder(n, lines), text, 1);
    }
    out
}

/// The `@` mention being typed at the end of `input`: the text after the last `@` that starts a word, when no
/// space follows it yet.
pub fn open_mention(input: &str) -> Option<&str> {
    let at = input.rfind('@')?;
    let starts_word = input[..at]
        .chars()
        .next_back()
        .is_none_or(char::is_whitespace);
    let query = &input[at + 1..];
    (starts_word && !query.contains(char::is_whitespace)).then_some(query)
}

/// `input` with the mention being typed replaced by `@path ` (a chosen file).
pub fn complete_mention(input: &str, path: &str) -> String {
    match input.rfind('@') {
        Some(at) => format!("{}@{path} ", &input[..at]),
        None => format!("{input}@{path} "),
    }
}

/// The prompt as the model reads it: each `@path` naming a text file inside `root` is attached after the text, as
/// an editor's attached file is; what could not be attached is said in the returned notes.
pub fn attach_mentions(prompt: &str, root: &Path) -> (String, Vec<String>) {
    let mut attached = String::new();
    let mut notes = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let root = match root.canonicalize() {
        Ok(r) => r,
        Err(_) => return (prompt.to_string(), notes),
    };
    for word in prompt.split_whitespace() {
        let Some(rel) = word.strip_prefix('@') else {
            continue;
        };
        let rel = rel.trim_end_matches([',', '.', ';', ':', ')', '!', '?']);
        if rel.is_empty() || !seen.insert(rel.to_string()) {
            continue;
        }
        let Ok(path) = root.join(rel).canonicalize() else {
            continue;
        };
        // Only the project's own files: a mention cannot reach outside it.
        if !path.starts_with(&root) || !path.is_file() {
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.len() > MAX_ATTACHED => {
                notes.push(format!(
                    "@{rel} is larger than {} KB: named, not attached",
                    MAX_ATTACHED / 1024
                ));
                continue;
            }
            Err(_) => continue,
            Ok(_) => {}
        }
        match std::fs::read(&path).map(String::from_utf8) {
            Ok(Ok(text)) => attached.push_str(&format!(
                "\n\n<attached uri=\"{rel}\">\n{text}\n</attached>\n"
            )),
            _ => notes.push(format!("@{rel} is not a text file: named, not attached")),
        }
    }
    (format!("{prompt}{attached}"), notes)
}

/// The slash commands (and skills, as `/name`) that complete what is typed: `input` is `/` followed by the start
/// of a name, with no space yet. Each is the command as typed and its help line.
pub fn slash_matches(
    input: &str,
    commands: &[(&str, &str)],
    skills: &[String],
) -> Vec<(String, String)> {
    let Some(typed) = input.strip_prefix('/') else {
        return Vec::new();
    };
    if typed.contains(char::is_whitespace) {
        return Vec::new();
    }
    let mut out: Vec<(String, String)> = commands
        .iter()
        .filter(|(usage, _)| usage[1..].starts_with(typed))
        .map(|(usage, help)| (usage.to_string(), help.to_string()))
        .collect();
    out.extend(
        skills
            .iter()
            .filter(|s| s.starts_with(typed))
            .map(|s| (format!("/{s}"), "a skill of this bundle".to_string())),
    );
    out
}

/// The text a chosen slash command puts in the input: its name, then a space when it takes an argument.
pub fn slash_completion(usage: &str) -> String {
    match usage.split_once(' ') {
        Some((name, _)) => format!("{name} "),
        None => usage.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_paste_keeps_its_lines_and_a_long_one_folds_and_expands() {
        assert_eq!(normalize_paste("a\rb\r\nc"), "a\nb\nc");
        let text = "1\n2\n3\n4\n5\n6".to_string();
        let input = format!("look: {}", placeholder(0, 6));
        assert_eq!(
            expand(&input, std::slice::from_ref(&text)),
            format!("look: {text}")
        );
    }

    #[test]
    fn a_mention_is_open_until_a_space_and_completes_to_the_path() {
        assert_eq!(open_mention("see @src/ma"), Some("src/ma"));
        assert_eq!(open_mention("mail me@host"), None);
        assert_eq!(open_mention("see @a.rs now"), None);
        assert_eq!(
            complete_mention("see @src/ma", "src/main.rs"),
            "see @src/main.rs "
        );
    }

    #[test]
    fn a_mentioned_file_is_attached_and_one_outside_the_project_is_not() {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha").unwrap();
        let (text, notes) = attach_mentions("read @a.txt and @../etc/passwd", dir.path());
        assert!(
            text.contains("<attached uri=\"a.txt\">\nalpha\n</attached>"),
            "{text}"
        );
        assert!(!text.contains("root:"), "{text}");
        assert!(notes.is_empty());
    }

    #[test]
    fn slash_completion_offers_commands_and_skills_by_prefix() {
        let commands = [
            ("/model [provider/name]", "pick"),
            ("/mcp", "servers"),
            ("/new", "new"),
        ];
        let m = slash_matches("/m", &commands, &["memo".into()]);
        let names: Vec<&str> = m.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["/model [provider/name]", "/mcp", "/memo"]);
        assert_eq!(slash_completion("/model [provider/name]"), "/model ");
        assert!(slash_matches("/model x", &commands, &[]).is_empty());
    }
}
