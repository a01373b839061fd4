//! Input lines: a plain line is a turn, `/` starts a slash command, `!` an operator command.

/// What a submitted line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A chat turn.
    Prompt(String),
    /// An operator command in the session sandbox; not stored as a turn.
    Operator(String),
    /// A slash command.
    Slash(Slash),
}

/// The slash commands.
#[derive(Debug, Clone, PartialEq)]
pub enum Slash {
    /// `/help`.
    Help,
    /// `/new`: a fresh session of the same bundle.
    New,
    /// `/sessions`: list sessions.
    Sessions,
    /// `/resume <id>`: switch to a session.
    Resume(Option<String>),
    /// `/bundle <ref>`: a fresh session of another bundle.
    Bundle(String),
    /// `/model [provider/name]`: model for the next turns; without one, the current model and the choices.
    Model(Option<String>),
    /// `/status`: model, directory and what the sandbox may do, instructions read, context used.
    Status,
    /// `/mcp`: the session's MCP servers and their tools.
    Mcp,
    /// `/init`: asks the agent to write an `AGENTS.md` for the project.
    Init,
    /// `/cwd <dir>`: working directory for the next turns.
    Cwd(String),
    /// `/diff`: what the last turn's Write and Edit calls changed.
    Diff,
    /// `/compact [focus]`: summarise the older turns now.
    Compact(Option<String>),
    /// `/rewind [N]`: files and conversation back to before turn N (a picker without N).
    Rewind(Option<u64>),
    /// `/fork [N]`: a new session as this one was before turn N (now without N), opened.
    Fork(Option<u64>),
    /// `/cost`: what this session has spent.
    Cost,
    /// `/budget [TOKENS] [$USD] | off`: what the session may spend over all its turns; without arguments, what it
    /// has spent of it.
    Budget(BudgetArg),
    /// `/clear`: clear the transcript view.
    Clear,
    /// `/quit`.
    Quit,
}

/// What `/budget` was given.
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetArg {
    /// Show the budget and what was spent of it.
    Show,
    /// Lift it.
    Off,
    /// Set it: tokens, US dollars (either may be left out).
    Set {
        /// `budget.max_tokens`.
        tokens: Option<u64>,
        /// `budget.max_cost_usd`.
        usd: Option<f64>,
    },
}

/// `/budget`'s arguments: nothing, `off`, or a token count and/or a `$` amount.
fn budget_arg(arg: &str) -> Result<BudgetArg, String> {
    match arg {
        "" => return Ok(BudgetArg::Show),
        "off" | "none" => return Ok(BudgetArg::Off),
        _ => {}
    }
    let (mut tokens, mut usd) = (None, None);
    for word in arg.split_whitespace() {
        let bad = || {
            format!(
                "/budget takes a number of tokens and/or dollars, as in /budget 200000 $1.50, or off; not \"{word}\""
            )
        };
        match word.strip_prefix('$') {
            Some(amount) => {
                let v: f64 = amount.parse().map_err(|_| bad())?;
                usd = Some(v).filter(|v| v.is_finite() && *v > 0.0);
                usd.ok_or_else(bad)?;
            }
            None => tokens = Some(word.replace([',', '_'], "").parse().map_err(|_| bad())?),
        }
    }
    Ok(BudgetArg::Set { tokens, usd })
}

/// Every slash command with its help line.
pub const HELP: &[(&str, &str)] = &[
    ("/help", "show this help"),
    ("/new", "start a new session of the same bundle"),
    ("/sessions", "list sessions"),
    (
        "/resume [id]",
        "switch to an existing session (the start of its id is enough); without one, pick it from a list",
    ),
    ("/bundle <ref>", "start a new session of another bundle"),
    (
        "/model [provider/name]",
        "use this model for the next turns; without one, pick from the models this machine offers",
    ),
    (
        "/status",
        "the model, the directory and what the sandbox may do there, instructions read, context used",
    ),
    ("/mcp", "the session's MCP servers and their tools"),
    (
        "/init",
        "ask the agent to write an AGENTS.md that tells agents how to work in this project",
    ),
    (
        "/cwd <dir>",
        "run the next turns in this directory (inside the workspace when sandboxed)",
    ),
    (
        "/diff",
        "show what the last turn changed in the workspace, commands included",
    ),
    (
        "/rewind [N]",
        "restore the files and cut the conversation to before turn N; without N, pick the turn from a list",
    ),
    (
        "/fork [N]",
        "open a new session as this one was before turn N (now, without N)",
    ),
    (
        "/compact [focus]",
        "summarise the older turns now, keeping the last ones; the focus says what to keep above all",
    ),
    (
        "/cost",
        "what this session has spent: tokens, steps, tool calls, and cost at config.toml's price",
    ),
    (
        "/budget [N] [$USD] | off",
        "cap what this session may spend over all its turns, in tokens and/or dollars; alone, what it spent of it",
    ),
    ("/clear", "clear the transcript view"),
    (
        "/quit",
        "leave (also Ctrl-C; during a turn the first Ctrl-C interrupts it)",
    ),
];

/// Parses a submitted line; an unknown or incomplete slash command is an error that says what exists.
pub fn parse(line: &str) -> Result<Input, String> {
    let line = line.trim_end();
    if let Some(cmd) = line.strip_prefix('!') {
        let cmd = cmd.trim();
        if cmd.is_empty() {
            return Err("! needs a command, e.g. !ls -la".into());
        }
        return Ok(Input::Operator(cmd.into()));
    }
    let Some(rest) = line.strip_prefix('/') else {
        return Ok(Input::Prompt(line.into()));
    };
    let (name, arg) = match rest.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a.trim()),
        None => (rest, ""),
    };
    let needs = |what: &str| -> Result<String, String> {
        if arg.is_empty() {
            Err(format!("/{name} needs {what}"))
        } else {
            Ok(arg.to_string())
        }
    };
    let slash = match name {
        "help" => Slash::Help,
        "new" => Slash::New,
        "sessions" => Slash::Sessions,
        "resume" => Slash::Resume(Some(arg.to_string()).filter(|a| !a.is_empty())),
        "bundle" => Slash::Bundle(needs("a bundle reference")?),
        "model" => Slash::Model(Some(arg.to_string()).filter(|a| !a.is_empty())),
        "status" => Slash::Status,
        "mcp" => Slash::Mcp,
        "init" => Slash::Init,
        "cwd" => Slash::Cwd(needs("a directory")?),
        "clear" => Slash::Clear,
        "cost" => Slash::Cost,
        "budget" => Slash::Budget(budget_arg(arg)?),
        "diff" => Slash::Diff,
        "compact" => Slash::Compact(Some(arg.to_string()).filter(|a| !a.is_empty())),
        "rewind" | "fork" => {
            let turn = match arg {
                "" => None,
                n => Some(n.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    format!("/{name} takes a turn number (1 is the first), not \"{n}\"")
                })?),
            };
            match name {
                "rewind" => Slash::Rewind(turn),
                _ => Slash::Fork(turn),
            }
        }
        "quit" | "exit" => Slash::Quit,
        _ => {
            let known: Vec<&str> = HELP
                .iter()
                .map(|(c, _)| c.split(' ').next().unwrap_or(c))
                .collect();
            return Err(format!(
                "unknown command /{name}; known commands: {}",
                known.join(" ")
            ));
        }
    };
    Ok(Input::Slash(slash))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn lines_are_prompts_operator_commands_or_slash_commands() {
        assert_eq!(
            parse("hello there"),
            Ok(Input::Prompt("hello there".into()))
        );
        assert_eq!(parse("!ls -la"), Ok(Input::Operator("ls -la".into())));
        assert_eq!(
            parse("/resume abc"),
            Ok(Input::Slash(Slash::Resume(Some("abc".into()))))
        );
        assert_eq!(
            parse("/model openai/gpt"),
            Ok(Input::Slash(Slash::Model(Some("openai/gpt".into()))))
        );
        assert_eq!(parse("/quit"), Ok(Input::Slash(Slash::Quit)));
        assert_eq!(parse("/resume"), Ok(Input::Slash(Slash::Resume(None))));
        assert_eq!(parse("/model"), Ok(Input::Slash(Slash::Model(None))));
        assert_eq!(parse("/rewind 2"), Ok(Input::Slash(Slash::Rewind(Some(2)))));
        assert_eq!(parse("/fork"), Ok(Input::Slash(Slash::Fork(None))));
        assert!(parse("/rewind two").unwrap_err().contains("turn number"));
        assert_eq!(
            parse("/budget 200,000 $1.50"),
            Ok(Input::Slash(Slash::Budget(BudgetArg::Set {
                tokens: Some(200_000),
                usd: Some(1.5)
            })))
        );
        assert_eq!(
            parse("/budget off"),
            Ok(Input::Slash(Slash::Budget(BudgetArg::Off)))
        );
        assert!(parse("/budget $-1").unwrap_err().contains("not \"$-1\""));
        let err = parse("/fly").unwrap_err();
        assert!(
            err.starts_with("unknown command /fly; known commands: /help /new /sessions /resume"),
            "{err}"
        );
    }
}
