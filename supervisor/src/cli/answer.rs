//! How `run` answers permission requests: by its flags, by the `approvals` default, or by asking on the terminal.

use service_ipc::ApprovalDecision;
use service_supervisor::config_file::Approvals;
use service_supervisor::runtime::approvals;

use super::run::RunArgs;
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
    /// [`super::workspace::describe`]).
    pub(super) async fn decide(
        self,
        asked: &approvals::Asked,
        workspace: &str,
    ) -> (ApprovalDecision, Option<String>) {
        let (tool, summary) = (asked.tool.as_str(), asked.summary.as_str());
        let (tool, scope) = match tool {
            "network" => ("network access to", String::new()),
            tool => (tool, format!(" in {workspace}")),
        };
        match self {
            Answer::Approve => (ApprovalDecision::AllowOnce, None),
            Answer::Deny => (ApprovalDecision::Deny, None),
            Answer::DenyNoTerminal => {
                eprintln!(
                    "denied {} `{}`: agent.yaml asks for approval and there is no terminal to ask on; pass \
                     --approve to allow every request of this run, or --deny to deny them without this message",
                    safe(tool),
                    safe(summary)
                );
                (ApprovalDecision::Deny, None)
            }
            Answer::AskTerminal => {
                // The tool's name, summary and diff come from the sandbox: escaped, they cannot redraw the question.
                if let Some(diff) = &asked.diff {
                    eprint!("{}", diff_for_terminal(diff));
                }
                if let Some(warning) = &asked.warning {
                    eprintln!("warning: {}", safe(warning));
                }
                let project = asked
                    .project_rule
                    .as_deref()
                    .map(|rule| format!(", [p] always `{}` in this project", safe(rule)))
                    .unwrap_or_default();
                let question = format!(
                    "Allow {} `{}`{scope}? [o]nce, [a]lways in this session{project}, [d]eny, [r] deny and say why: ",
                    safe(tool),
                    safe(summary)
                );
                let offered = asked.project_rule.is_some();
                tokio::task::spawn_blocking(move || ask(&question, offered))
                    .await
                    .unwrap_or((ApprovalDecision::Deny, None))
            }
        }
    }
}

/// A unified diff for stderr: escaped, `-` lines red and `+` lines green unless `NO_COLOR` is set.
pub(super) fn diff_for_terminal(diff: &str) -> String {
    let colour = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
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

/// Asks on the terminal until the answer is one of those offered (`p` when a project rule is; `r` then asks for the
/// reason); end of input denies.
fn ask(question: &str, project: bool) -> (ApprovalDecision, Option<String>) {
    use std::io::Write;
    let read = |prompt: &str| {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    };
    loop {
        let Some(line) = read(question) else {
            return (ApprovalDecision::Deny, None);
        };
        match line.trim().to_lowercase().as_str() {
            "o" | "once" | "y" | "yes" => return (ApprovalDecision::AllowOnce, None),
            "a" | "always" => return (ApprovalDecision::AllowAlways, None),
            "p" | "project" if project => return (ApprovalDecision::AllowProject, None),
            "d" | "deny" | "n" | "no" => return (ApprovalDecision::Deny, None),
            "r" | "reason" => {
                let why = read("Why (the model reads this): ").unwrap_or_default();
                let why = why.trim();
                return (
                    ApprovalDecision::Deny,
                    (!why.is_empty()).then(|| why.to_string()),
                );
            }
            _ if project => eprintln!("please answer o, a, p, d or r"),
            _ => eprintln!("please answer o, a, d or r"),
        }
    }
}
