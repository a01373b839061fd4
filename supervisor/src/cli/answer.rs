//! How `run` answers permission requests: by its flags, by the `approvals` default, or by asking on the terminal.

use service_ipc::ApprovalDecision;
use service_supervisor::config_file::Approvals;
use service_supervisor::runtime::approvals;

use service_supervisor::facade::tool_text::ToolText;

use super::run_args::RunArgs;
use super::term_text::safe;

/// How this run answers permission requests.
#[derive(Debug, Clone, Copy)]
pub(super) enum Answer {
    Approve,
    Deny,
    AskTerminal,
    DenyNoTerminal,
}

impl Answer {
    pub(super) fn from_args(args: &RunArgs) -> Answer {
        use std::io::IsTerminal;
        match (args.approve, args.deny) {
            (true, _) => Answer::Approve,
            (_, true) => Answer::Deny,
            _ if args.approvals == Approvals::Deny => Answer::Deny,
            _ if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() => {
                Answer::AskTerminal
            }
            _ => Answer::DenyNoTerminal,
        }
    }

    /// This run's answer to a request for `tool` (or "network"), asking on the terminal when it may, with the
    /// reason a denial gives the model; `workspace` says what the session can see (see
    /// [`super::workspace::describe`]), `paths` how the turn's paths read. None when Ctrl-C was pressed at the
    /// question.
    pub(super) async fn decide(
        self,
        asked: &approvals::Asked,
        workspace: &str,
        paths: &ToolText,
    ) -> Option<(ApprovalDecision, Option<String>)> {
        let summary = paths.text(&asked.summary);
        let (tool, scope) = match asked.tool.as_str() {
            "network" => ("network access to", String::new()),
            tool => (tool, format!(" in {workspace}")),
        };
        match self {
            Answer::Approve => Some((ApprovalDecision::AllowOnce, None)),
            Answer::Deny => Some((ApprovalDecision::Deny, None)),
            Answer::DenyNoTerminal => {
                eprintln!(
                    "denied {} `{}`: agent.yaml asks for approval and there is no terminal to ask on; pass \
                     --approve to allow every request of this run, or --deny to deny them without this message",
                    safe(tool),
                    safe(&summary)
                );
                Some((ApprovalDecision::Deny, None))
            }
            Answer::AskTerminal => {
                // The tool's name, summary and diff come from the sandbox: escaped, they cannot redraw the question.
                if let Some(diff) = &asked.diff {
                    eprint!("{}", diff_for_terminal(&paths.diff(diff)));
                }
                if let Some(warning) = &asked.warning {
                    eprintln!("warning: {}", safe(&paths.text(warning)));
                }
                let project = asked
                    .project_rule
                    .as_deref()
                    .map(|rule| {
                        format!(", [p] always `{}` in this project", safe(&paths.text(rule)))
                    })
                    .unwrap_or_default();
                let question = format!(
                    "Allow {} `{}`{scope}? [o]nce, [a]lways in this session{project}, [d]eny, [r] deny and say why \
                     (one key): ",
                    safe(tool),
                    safe(&summary)
                );
                let offered = asked.project_rule.is_some();
                tokio::task::spawn_blocking(move || ask(&question, offered))
                    .await
                    .unwrap_or(Some((ApprovalDecision::Deny, None)))
            }
        }
    }
}

/// Whether stderr may be coloured: not when `NO_COLOR` is set (https://no-color.org).
pub(super) fn colour() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A unified diff for stderr: escaped, `-` lines red and `+` lines green unless `NO_COLOR` is set.
pub(super) fn diff_for_terminal(diff: &str) -> String {
    let colour = colour();
    let mut out = String::new();
    for line in diff.lines() {
        let line = safe(line);
        let code = match line.chars().next() {
            _ if !colour || line.starts_with("---") || line.starts_with("+++") => None,
            Some('-') => Some("31"),
            Some('+') => Some("32"),
            Some('@') => Some("36"),
            _ => None,
        };
        match code {
            Some(code) => out.push_str(&format!("\x1b[{code}m{line}\x1b[0m\n")),
            None => out.push_str(&format!("{line}\n")),
        }
    }
    out
}

/// Asks on the terminal until a key offered is pressed (`p` when a project rule is; `r` then asks for the reason,
/// a line); end of input denies, Ctrl-C gives None. Where the terminal cannot take single keys, a line is read.
fn ask(question: &str, project: bool) -> Option<(ApprovalDecision, Option<String>)> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    use ratatui::crossterm::terminal;
    use std::io::Write;
    let read_line = |prompt: &str| {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    };
    let reason = || {
        let why = read_line("Why (the model reads this; Enter sends): ").unwrap_or_default();
        let why = why.trim();
        Some((
            ApprovalDecision::Deny,
            (!why.is_empty()).then(|| why.to_string()),
        ))
    };
    loop {
        eprint!("{question}");
        let _ = std::io::stderr().flush();
        let key = if terminal::enable_raw_mode().is_ok() {
            let key = loop {
                match event::read() {
                    Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => break Some(k),
                    Ok(_) => continue,
                    Err(_) => break None,
                }
            };
            let _ = terminal::disable_raw_mode();
            match key {
                Some(k)
                    if k.code == KeyCode::Char('c')
                        && k.modifiers.contains(KeyModifiers::CONTROL) =>
                {
                    eprintln!("^C");
                    return None;
                }
                Some(k)
                    if k.code == KeyCode::Char('d')
                        && k.modifiers.contains(KeyModifiers::CONTROL) =>
                {
                    eprintln!();
                    return Some((ApprovalDecision::Deny, None));
                }
                Some(k) => match k.code {
                    KeyCode::Char(c) => {
                        eprintln!("{c}");
                        c.to_ascii_lowercase().to_string()
                    }
                    _ => {
                        eprintln!();
                        String::new()
                    }
                },
                None => return Some((ApprovalDecision::Deny, None)),
            }
        } else {
            match read_line("") {
                Some(line) => line.trim().to_lowercase(),
                None => return Some((ApprovalDecision::Deny, None)),
            }
        };
        match key.as_str() {
            "o" | "once" | "y" | "yes" => return Some((ApprovalDecision::AllowOnce, None)),
            "a" | "always" => return Some((ApprovalDecision::AllowAlways, None)),
            "p" | "project" if project => return Some((ApprovalDecision::AllowProject, None)),
            "d" | "deny" | "n" | "no" => return Some((ApprovalDecision::Deny, None)),
            "r" | "reason" => return reason(),
            _ if project => eprintln!("please press o, a, p, d or r"),
            _ => eprintln!("please press o, a, d or r"),
        }
    }
}
