//! `service-rs run`: a fresh session, one turn, the final answer on stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use futures::StreamExt;
use service_ipc::{
    ApprovalDecision, EventMsg, EventPayload, ModelRef, Task, TurnOverrides, TurnStatus,
};
use service_supervisor::ServiceHome;

impl RunArgs {
    /// The prompt: `--prompt TEXT`, or stdin for `--prompt -` and for a piped run without `--prompt`.
    pub(super) fn prompt_text(&self) -> anyhow::Result<String> {
        use std::io::{IsTerminal, Read};
        match self.prompt.as_deref() {
            Some(p) if p != "-" => return Ok(p.to_string()),
            None if std::io::stdin().is_terminal() => anyhow::bail!(
                "no prompt: pass --prompt TEXT, or pipe it on stdin (echo hi | service-rs run {})",
                self.bundle_ref
            ),
            _ => {}
        }
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| anyhow::anyhow!("cannot read the prompt from stdin: {e}"))?;
        let text = text.trim_end_matches(['\n', '\r']).to_string();
        if text.trim().is_empty() {
            anyhow::bail!("the prompt on stdin is empty: pipe some text, or pass --prompt TEXT");
        }
        Ok(text)
    }
}

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Bundle reference: <name>, <name>@latest, <namespace>/<name>:<version> or a directory.
    pub(super) bundle_ref: String,
    /// The prompt; `-` reads it from stdin, which is also where it comes from when this is absent and stdin is not
    /// a terminal (`echo hi | service-rs run b`).
    #[arg(long)]
    pub(super) prompt: Option<String>,
    /// Stream every event as a JSON line on stdout instead of printing the answer.
    #[arg(long)]
    pub(super) json: bool,
    /// Describe events on stderr as they happen.
    #[arg(long, short)]
    pub(super) verbose: bool,
    /// Working directory of the session (default: a fresh workspace under the session).
    #[arg(long)]
    pub(super) cwd: Option<PathBuf>,
    /// Model override as provider/name, e.g. scripted/demo.
    #[arg(long)]
    pub(super) model: Option<String>,
    /// Run the worker on the host with no confinement.
    #[arg(long)]
    pub(super) dangerous_sandbox_mode: bool,
    /// Fixed address for a host the sandbox reaches through the egress proxy, as curl's --resolve: HOST:PORT:ADDR
    /// (repeatable).
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    pub(super) resolve: Vec<String>,
    /// Allow every permission request of this run without asking.
    #[arg(long, conflicts_with = "deny")]
    pub(super) approve: bool,
    /// Deny every permission request of this run without asking.
    #[arg(long)]
    pub(super) deny: bool,
}

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
            _ if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() => {
                Answer::AskTerminal
            }
            _ => Answer::DenyNoTerminal,
        }
    }

    /// For a permission request, the request id and this run's answer to it; None for any other event.
    pub(super) async fn respond(
        self,
        payload: &EventPayload,
    ) -> Option<(String, ApprovalDecision)> {
        let asked = service_supervisor::runtime::approvals::asked(payload)?;
        let what = match asked.tool.as_str() {
            "network" => "network access to",
            tool => tool,
        };
        let decision = self.decide(what, &asked.summary).await;
        Some((asked.request_id, decision))
    }

    async fn decide(self, tool: &str, summary: &str) -> ApprovalDecision {
        match self {
            Answer::Approve => ApprovalDecision::AllowOnce,
            Answer::Deny => ApprovalDecision::Deny,
            Answer::DenyNoTerminal => {
                eprintln!(
                    "denied {tool} `{summary}`: agent.yaml asks for approval and there is no terminal to ask on; pass \
                     --approve to allow every request of this run, or --deny to deny them without this message"
                );
                ApprovalDecision::Deny
            }
            Answer::AskTerminal => {
                let question =
                    format!("Allow {tool} `{summary}`? [o]nce, [a]lways in this session, [d]eny: ");
                tokio::task::spawn_blocking(move || ask(&question))
                    .await
                    .unwrap_or(ApprovalDecision::Deny)
            }
        }
    }
}

/// Asks on the terminal until the answer is one of the three; end of input denies.
fn ask(question: &str) -> ApprovalDecision {
    use std::io::Write;
    loop {
        eprint!("{question}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => return ApprovalDecision::Deny,
            Ok(_) => {}
        }
        match line.trim().to_lowercase().as_str() {
            "o" | "once" | "y" | "yes" => return ApprovalDecision::AllowOnce,
            "a" | "always" => return ApprovalDecision::AllowAlways,
            "d" | "deny" | "n" | "no" => return ApprovalDecision::Deny,
            _ => eprintln!("please answer o, a or d"),
        }
    }
}

pub fn run(home: ServiceHome, args: RunArgs) -> anyhow::Result<ExitCode> {
    let rt = super::runtime(home, args.dangerous_sandbox_mode, false, &args.resolve)?;
    super::tokio()?.block_on(async move {
        let result = one_turn(&rt, &args).await;
        rt.shutdown("the run ended").await;
        result
    })
}

pub(super) fn model_override(
    spec: Option<&str>,
    default: ModelRef,
) -> anyhow::Result<Option<ModelRef>> {
    let Some(spec) = spec else { return Ok(None) };
    let (provider, name) = spec.split_once('/').ok_or_else(|| {
        anyhow::anyhow!(
            "--model takes provider/name, e.g. anthropic/claude-sonnet-4-5; got \"{spec}\""
        )
    })?;
    // Keep the bundle's provider settings (base URL, script) when the provider stays the same.
    let config = if provider == default.provider {
        default.config
    } else {
        None
    };
    Ok(Some(ModelRef {
        provider: provider.into(),
        name: name.into(),
        config,
    }))
}

async fn one_turn(
    rt: &service_supervisor::ServiceRuntime,
    args: &RunArgs,
) -> anyhow::Result<ExitCode> {
    // Read first: a run without a prompt leaves no session behind.
    let prompt = args.prompt_text()?;
    let record = rt.create_session(&args.bundle_ref, args.cwd.as_deref())?;
    // The bundle the session resolved, not a second read of it.
    let info = rt.session_bundle(&record.id)?;
    super::warn_unconfined(&info.manifest, args.dangerous_sandbox_mode);
    let mut events = rt.subscribe_session(&record.id)?;
    let overrides = TurnOverrides {
        cwd: None,
        model: model_override(args.model.as_deref(), info.agent.model.to_ref())?,
    };
    let pending = rt
        .start_turn(&record.id, Task::new(prompt), overrides)
        .await?;
    let turn_id = pending.turn_id.clone();
    let (json, verbose) = (args.json, args.verbose);
    let answer = Answer::from_args(args);
    let approver = rt.clone();
    let printer = tokio::spawn(async move {
        while let Some(msg) = events.next().await {
            show(&msg, json, verbose);
            if let Some((request_id, decision)) = answer.respond(&msg.payload).await {
                if let Err(e) = approver.resolve_approval(&request_id, decision).await {
                    eprintln!("warning: could not answer the permission request: {e}");
                }
            }
            if msg.payload.ends_turn() && msg.payload.turn_id() == Some(turn_id.as_str()) {
                return;
            }
        }
    });
    let mut outcome = pending.outcome;
    let mut interrupted = false;
    let outcome = tokio::select! {
        o = &mut outcome => o,
        _ = tokio::signal::ctrl_c() => {
            interrupted = true;
            eprintln!("interrupting...");
            let _ = rt.interrupt(&record.id).await;
            outcome.await
        }
    };
    let _ = printer.await;
    let outcome = outcome.map_err(|_| anyhow::anyhow!("the turn ended without an outcome"))?;
    match outcome.status {
        TurnStatus::Completed => {
            if !args.json {
                println!("{}", outcome.final_message);
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            let (code, message) = outcome
                .error
                .unwrap_or_else(|| ("failed".into(), "the turn failed".into()));
            eprintln!("error: turn {} failed ({code}): {message}", outcome.turn_id);
            Ok(if interrupted {
                ExitCode::from(130)
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// Prints an event as a JSON line (`--json`) or a description on stderr (`--verbose`).
pub(super) fn show(msg: &EventMsg, json: bool, verbose: bool) {
    if json {
        println!("{}", serde_json::to_string(msg).unwrap_or_default());
    } else if verbose {
        describe(msg);
    } else if let EventPayload::ModelRetry { .. } = &msg.payload {
        // A wait the user would otherwise sit through in silence.
        describe(msg);
    }
}

/// One line on stderr per event, for --verbose.
fn describe(msg: &EventMsg) {
    let line = match &msg.payload {
        EventPayload::TurnStarted { context, .. } => format!(
            "turn started: model {}/{}, sandbox {}, cwd {}",
            context.model.provider, context.model.name, context.sandbox_mode, context.cwd
        ),
        EventPayload::ReasoningDelta { delta, .. } => format!("thinking: {delta}"),
        EventPayload::ToolCallStarted {
            tool, arguments, ..
        } => format!("tool {tool} {arguments}"),
        EventPayload::ToolCallFinished { tool, status, .. } => {
            format!("tool {tool} finished: {status:?}")
        }
        EventPayload::ExecCommandOutputDelta { chunk, .. } => format!("  | {}", chunk.trim_end()),
        EventPayload::PermissionRequested { tool, summary, .. } => {
            format!("permission needed: {tool} {summary}")
        }
        EventPayload::NetworkPermissionRequested {
            host,
            port,
            addresses,
            internal,
            ..
        } => format!(
            "permission needed: network {}",
            service_supervisor::runtime::approvals::network_summary(
                host, *port, addresses, *internal
            )
        ),
        EventPayload::NetworkAccess {
            host,
            port,
            decision: service_ipc::NetworkDecision::Allow,
            rule,
            ..
        } => format!(
            "network: {host}:{port} allowed by {}",
            rule.as_deref().unwrap_or("?")
        ),
        EventPayload::NetworkAccess {
            host, port, reason, ..
        } => format!(
            "network: {host}:{port} refused: {}",
            reason.as_deref().unwrap_or("?")
        ),
        EventPayload::NetworkClosed {
            host,
            port,
            bytes_sent,
            bytes_received,
            ..
        } => format!(
            "network: {host}:{port} closed ({bytes_sent} B sent, {bytes_received} B received)"
        ),
        EventPayload::PlanUpdate { plan, .. } => format!("plan: {} steps", plan.len()),
        EventPayload::ModelRetry {
            attempt,
            max_attempts,
            delay_ms,
            reason,
            ..
        } => service_supervisor::providers::retry_line(*attempt, *max_attempts, *delay_ms, reason),
        EventPayload::Error { code, message, .. } => format!("error ({code}): {message}"),
        _ => return,
    };
    eprintln!("[{}] {line}", msg.id);
}
