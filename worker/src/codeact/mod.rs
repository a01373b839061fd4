//! The codeact executor: the model answers with a Python program in a fenced block; the worker runs it in the
//! sandbox, where the module `service_tools` calls the bundle's tools; what the program printed and what its calls
//! returned is the observation the model reads next. The turn ends when the program calls `final_answer`, when the
//! model answers without a program, or after `max_steps` model calls.
//!
//! A program runs as any command does (`tools::exec`: its own pid namespace, the seccomp filter, the time-out of
//! `codeact.timeout_ms`) and reaches the worker only through one end of a socket pair it inherits ([`channel`]).
//! Each call it makes there is a tool call made by [`Turn::run_tool`], the path of a JSON tool call: the same
//! lookup, permission rules, approvals and events. The socket gives the program nothing it could not do as a tool
//! call, and code in the sandbox can already run anything the sandbox allows.

mod channel;

use std::time::Duration;

use service_ipc::{BuiltinTool, ChatMessage, ChatRole, EventPayload, Usage};

use crate::tools::exec::{self, ExecRequest, Inherit};
use crate::turn::{Reply, Stop, Turn};

/// The module a program imports, written beside it.
const MODULE: &str = include_str!("service_tools.py");
/// The part of one call's result the observation lists (the program holds the whole of it).
const CALL_RESULT_CAP: usize = 2 * 1024;

/// Runs the turn's steps: model call, program, observation, until an answer.
pub(crate) async fn steps(
    turn: &Turn<'_>,
    history: &mut Vec<ChatMessage>,
    start: &mut usize,
    mut first: Option<Reply>,
    usage: &mut Usage,
) -> Result<String, Stop> {
    let config = &turn.shared.config;
    let system = system_prompt(turn).await;
    let mut stop_hook_active = false;
    for _ in 0..config.max_steps {
        let reply = match first.take() {
            Some(reply) => reply,
            None => {
                let messages = turn.context(&system, history, start);
                turn.call_model(messages, Vec::new(), usage).await?
            }
        };
        let program = program_of(&reply.text);
        // Tool calls are not offered; a provider that sends some anyway gets no result for them, so they stay out.
        history.push(ChatMessage {
            role: ChatRole::Assistant,
            content: reply.text.clone(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            opaque: reply.opaque,
        });
        let Some(program) = program else {
            if !reply.calls.is_empty() {
                history.push(ChatMessage::observation(
                    "No program ran: this agent calls its tools from a Python program in a ```python block, not \
                     as tool calls.",
                ));
                continue;
            }
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
        };
        let ran = run_program(turn, &program).await;
        history.push(ChatMessage::observation(&ran.observation));
        if ran.interrupted {
            return Err(Stop::Interrupted);
        }
        if let Some(answer) = ran.final_answer {
            turn.shared
                .outbox
                .event(EventPayload::AgentMessageDelta {
                    turn_id: turn.turn_id.to_string(),
                    delta: format!("\n\n{answer}"),
                })
                .await;
            history.push(ChatMessage::text(ChatRole::Assistant, answer.clone()));
            if turn.goes_on(history, &answer, &mut stop_hook_active).await {
                continue;
            }
            return Ok(answer);
        }
    }
    Err(Stop::out_of_steps(config.max_steps, "programs"))
}

/// What one program came to.
struct Ran {
    observation: String,
    final_answer: Option<String>,
    interrupted: bool,
}

async fn run_program(turn: &Turn<'_>, program: &str) -> Ran {
    let exec_id = uuid::Uuid::new_v4().to_string();
    let dir = std::env::temp_dir().join(format!("service-codeact-{exec_id}"));
    // Private to the sandbox's user: where the worker runs on the host, other users may not read the program.
    let prepared = std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&dir)
        .and_then(|()| std::fs::write(dir.join("service_tools.py"), MODULE))
        .and_then(|()| std::fs::write(dir.join("program.py"), program))
        .and_then(|()| std::os::unix::net::UnixStream::pair())
        .and_then(|(ours, theirs)| {
            ours.set_nonblocking(true)?;
            Ok((tokio::net::UnixStream::from_std(ours)?, theirs))
        });
    let (ours, theirs) = match prepared {
        Ok(pair) => pair,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Ran {
                observation: format!("the program could not be prepared: {e}"),
                final_answer: None,
                interrupted: false,
            };
        }
    };
    let fd = std::os::fd::OwnedFd::from(theirs);
    let env = vec![(
        "SERVICE_TOOLS_FD".to_string(),
        std::os::fd::AsRawFd::as_raw_fd(&fd).to_string(),
    )];
    let timeout = Duration::from_millis(turn.shared.config.codeact_timeout_ms);
    let req = ExecRequest {
        turn_id: Some(turn.turn_id.to_string()),
        call_id: None,
        exec_id: exec_id.clone(),
        command: format!(
            "exec python3 -B -u {0}/service_tools.py {0}/program.py",
            dir.display()
        ),
        cwd: turn.cwd.clone(),
        timeout,
        inherit: Some(Inherit { fd, env }),
    };
    // The program's calls end with it: one still running when it is killed (its time-out, or a process it left
    // holding the channel where the sandbox allows no namespaces) is stopped as an interrupt stops it.
    let program_over = turn.cancel.child_token();
    let calling = Turn {
        shared: turn.shared,
        turn_id: turn.turn_id,
        cancel: &program_over,
        cwd: turn.cwd.clone(),
    };
    let mut calls = channel::Calls::default();
    let outcome = {
        let serving = channel::serve(&calling, ours, &exec_id, &mut calls);
        let running = exec::run(&turn.shared.outbox, req, turn.cancel);
        tokio::pin!(serving, running);
        let mut served = false;
        let outcome = loop {
            tokio::select! {
                outcome = &mut running => break outcome,
                () = &mut serving, if !served => served = true,
            }
        };
        if !served {
            program_over.cancel();
            serving.await;
        }
        outcome
    };
    let _ = std::fs::remove_dir_all(&dir);

    let mut observation = String::new();
    if let Some(e) = &outcome.spawn_error {
        observation.push_str(&format!("{e} (is python3 in the sandbox?)\n"));
    }
    if outcome.output.is_empty() {
        observation.push_str("The program printed nothing.\n");
    } else {
        observation.push_str("Output:\n");
        observation.push_str(&outcome.output);
        if !outcome.output.ends_with('\n') {
            observation.push('\n');
        }
        if outcome.omitted > 0 {
            observation.push_str(&format!("[{} bytes of output omitted]\n", outcome.omitted));
        }
    }
    if outcome.timed_out {
        observation.push_str(&format!(
            "[killed: the program ran longer than {} ms]\n",
            timeout.as_millis()
        ));
    } else if outcome.interrupted {
        observation.push_str("[killed: the turn was interrupted]\n");
    } else if calls.final_answer.is_none() {
        match outcome.exit_code {
            Some(0) => {}
            Some(code) => observation.push_str(&format!("[exit code {code}]\n")),
            None => observation.push_str("[killed by a signal]\n"),
        }
    }
    if !calls.made.is_empty() {
        observation.push_str("Tool calls:\n");
        for made in &calls.made {
            observation.push_str(&format!("- {made}\n"));
        }
    }
    Ran {
        observation,
        final_answer: calls.final_answer,
        interrupted: outcome.interrupted || turn.cancel.is_cancelled(),
    }
}

/// The first fenced code block of `text` tagged `python` or `py` (or untagged), found by a Markdown parser.
fn program_of(text: &str) -> Option<String> {
    use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
    let mut inside = false;
    let mut code = String::new();
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let lang = info.split_whitespace().next().unwrap_or("");
                inside = matches!(lang, "" | "python" | "py" | "python3");
            }
            Event::Text(t) if inside => code.push_str(&t),
            Event::End(TagEnd::CodeBlock) if inside => {
                return (!code.trim().is_empty()).then_some(code);
            }
            _ => {}
        }
    }
    None
}

/// A call's result as the observation lists it, cut at [`CALL_RESULT_CAP`].
fn summary(tool: &str, arguments: &str, status: &str, output: &str) -> String {
    let mut cut = output.len().min(CALL_RESULT_CAP);
    while !output.is_char_boundary(cut) {
        cut -= 1;
    }
    let more = if cut < output.len() {
        format!(" [{} more bytes]", output.len() - cut)
    } else {
        String::new()
    };
    format!("{tool} {arguments} -> {status}: {}{more}", &output[..cut])
}

/// The system prompt: agent.yaml's, the skills, and how to act in code with the functions of the offered tools.
async fn system_prompt(turn: &Turn<'_>) -> String {
    let config = &turn.shared.config;
    let skills = config
        .skills
        .iter()
        .map(|s| (s.name.as_str(), s.description.as_str()));
    let mut system = crate::turn::system_prompt(&config.system_prompt, &config.tools, skills);
    system.push_str(
        "\n\nYou act by writing Python programs. To act, answer with one program in a ```python block; it runs in \
         the working directory, and what it prints, with what its tool calls returned, comes back to you. Call \
         final_answer(text) when you have the answer, or answer without a program. These functions are defined \
         (each returns the tool's text; Denied is raised when a call is refused, ToolError when it fails):\n",
    );
    for tool in &config.tools {
        system.push_str(&format!("- {}\n", signature(*tool)));
    }
    for spec in turn.shared.registry.specs().await {
        if spec.name == crate::subagents::TOOL {
            system.push_str(&format!("- agent(subagent, prompt): {}", spec.description));
        } else if spec.name.parse::<BuiltinTool>().is_err() {
            system.push_str(&format!(
                "- call(\"{}\", **arguments): {} Arguments: {}\n",
                spec.name, spec.description, spec.parameters
            ));
        }
    }
    system.push_str("- final_answer(text): ends the turn with this answer.\n");
    system
}

fn signature(tool: BuiltinTool) -> &'static str {
    match tool {
        BuiltinTool::Read => "read(file_path, offset=None, limit=None): the file's numbered lines.",
        BuiltinTool::Write => "write(file_path, content): writes the whole file.",
        BuiltinTool::Edit => {
            "edit(file_path, old_string, new_string, replace_all=False): replaces exact text in a file."
        }
        BuiltinTool::Bash => "bash(command, timeout_ms=None): runs a shell command, returns its output.",
        BuiltinTool::Glob => "glob(pattern, path=None): the matching file paths, one per line.",
        BuiltinTool::Grep => "grep(pattern, path=None, glob=None): matching lines as path:line:text.",
        BuiltinTool::Skill => "skill(name): the named skill's instructions.",
        BuiltinTool::UpdatePlan => {
            "update_plan(plan, explanation=None): publishes the plan, a list of {\"step\", \"status\"}."
        }
        BuiltinTool::WebFetch => "web_fetch(url, prompt=None): the page at url as markdown.",
    }
}

#[cfg(test)]
mod tests {
    use super::program_of;

    #[test]
    fn the_first_python_block_is_the_program() {
        let text = "I will look.\n\n```text\nnot code\n```\n\n```python\nprint(read('a'))\n```\n\n```python\nx\n```";
        assert_eq!(program_of(text).as_deref(), Some("print(read('a'))\n"));
    }

    #[test]
    fn an_answer_without_a_block_has_no_program() {
        assert_eq!(program_of("The answer is 42."), None);
        assert_eq!(program_of("```python\n   \n```"), None);
        assert_eq!(program_of("```rust\nfn main() {}\n```"), None);
    }
}
