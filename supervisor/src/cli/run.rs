//! `service-rs run`: a fresh session, one turn, the final answer on stdout.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use service_ipc::{ModelRef, Task, TurnOverrides};
use service_supervisor::runtime::{EventStream, SessionRecord};
use service_supervisor::ServiceHome;

use super::backend::Backend;
use super::follow::{follow, Followed};
use super::output_schema::{OutputSchema, OUTPUT_INVALID};
use super::remote::Remote;

impl RunArgs {
    /// The prompt: `--prompt TEXT`, or stdin for `--prompt -` and for a piped run without `--prompt`.
    pub(super) fn prompt_text(&self) -> anyhow::Result<String> {
        use std::io::{IsTerminal, Read};
        match self.prompt.as_deref() {
            Some(p) if p != "-" => return Ok(p.to_string()),
            None if std::io::stdin().is_terminal() => anyhow::bail!(
                "no prompt: pass it after the bundle (service-rs run {} \"fix the failing test\"), as --prompt TEXT, \
                 or on stdin (echo hi | service-rs run {})",
                self.bundle_ref.as_deref().unwrap_or("<bundle>"),
                self.bundle_ref.as_deref().unwrap_or("<bundle>")
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

impl RunArgs {
    /// The session budget `--budget-tokens` and `--budget-cost` set, if either is given.
    pub(super) fn session_budget(&self) -> Option<service_supervisor::runtime::Budget> {
        (self.budget_tokens.is_some() || self.budget_cost.is_some()).then_some(
            service_supervisor::runtime::Budget {
                max_tokens: self.budget_tokens,
                max_cost_usd: self.budget_cost,
            },
        )
    }

    /// Settles which positional names the bundle and which is the prompt, and applies the user's defaults
    /// (`config.toml`): one positional is the bundle when `--prompt` is given or when it names a bundle; a word
    /// close to a bundle's name is refused as a probable typo; otherwise it is the prompt, for the
    /// default bundle (`default_bundle`, else the built-in coding agent).
    pub(super) async fn settle(
        &mut self,
        backend: &Backend,
        defaults: &service_supervisor::config_file::ConfigFile,
    ) -> anyhow::Result<()> {
        if self.model.is_none() {
            self.model = defaults.default_model.clone();
        }
        self.approvals = defaults.approvals;
        match self.decide {
            Some(Decide::Allow) => self.approve = true,
            Some(Decide::Deny) => self.deny = true,
            None => {}
        }
        if self.session.is_some()
            && self.bundle_ref.is_some()
            && (self.prompt_arg.is_some() || self.prompt.is_some())
        {
            anyhow::bail!(
                "--session continues a session of its own bundle: name no bundle, and pass the prompt alone \
                 (service-rs run --session ID \"prompt\")"
            );
        }
        match (self.bundle_ref.take(), self.prompt_arg.take()) {
            (Some(bundle), Some(prompt)) => {
                self.bundle_ref = Some(bundle);
                self.prompt = Some(prompt);
            }
            (Some(word), None) => {
                let bundle = if self.prompt.is_some() {
                    true
                } else if self.session.is_some() {
                    false
                } else {
                    names_a_bundle(backend, &word).await
                };
                if bundle {
                    self.bundle_ref = Some(word);
                } else {
                    if let Backend::Local(rt) = backend {
                        let names = super::suggest::bundles(rt.home());
                        if let Some(near) = super::suggest::near(&word, names) {
                            anyhow::bail!(
                                "\"{word}\" names no bundle; did you mean {near}? To send the word as the prompt, \
                                 pass it as --prompt {word}"
                            );
                        }
                    }
                    self.prompt = Some(word);
                }
            }
            (None, _) => {}
        }
        if self.bundle_ref.is_none() && self.session.is_none() && !self.continue_last {
            self.bundle_ref = Some(
                defaults
                    .default_bundle
                    .clone()
                    .unwrap_or_else(|| service_supervisor::bundle::builtin::DEFAULT.to_string()),
            );
        }
        Ok(())
    }
}

/// Whether `word` names a bundle: an installed one, a bundle directory, or a registry reference.
async fn names_a_bundle(backend: &Backend, word: &str) -> bool {
    if word.contains(char::is_whitespace) {
        return false;
    }
    let registry = word.contains('/') && (word.contains(':') || word.contains('@'));
    registry || std::path::Path::new(word).is_dir() || backend.bundle(word).await.is_ok()
}

/// How `run` exits, for scripts: said in `run --help` and the README.
pub(super) const EXIT_CODES: &str = "Exit codes:
  0    the turn completed
  1    the turn failed (or the run could not start it)
  3    the turn reached the bundle's max_steps
  4    the turn spent its --max-tokens or --max-cost, or the session its budget; no further model call was made
  5    output_invalid: the answer did not validate against --output-schema, also after one retry
  124  --timeout passed; what the turn started was stopped
  130  interrupted (Ctrl-C, or an interrupt from elsewhere)
  141  stdout was closed under the run (a reader such as `head` went away); the turn was interrupted";

/// `--input-format`: where a run's prompts come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum InputFormat {
    /// One prompt, from the arguments or stdin.
    #[default]
    Text,
    /// JSON lines on stdin: prompts, approvals and interrupts for one session.
    StreamJson,
}

/// `--approvals`: every permission request of a run decided up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Decide {
    /// Allow every request once.
    Allow,
    /// Deny every request.
    Deny,
}

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Bundle reference: <name>, <name>@latest, <namespace>/<name>:<version>, builtin/coder or a directory
    /// (default: the default_bundle of `service-rs config`, else builtin/coder, the built-in coding agent). With
    /// --continue, it picks the last session of that bundle. When it names no bundle, it is the prompt.
    #[arg(add = super::complete::bundles())]
    pub(super) bundle_ref: Option<String>,
    /// The prompt (or --prompt TEXT, or stdin).
    #[arg(value_name = "PROMPT", conflicts_with = "prompt")]
    pub(super) prompt_arg: Option<String>,
    /// Continue this session (its id, or the start of one) instead of creating one.
    #[arg(long, short = 's', conflicts_with = "continue_last", add = super::complete::sessions())]
    pub(super) session: Option<String>,
    /// Continue the most recently used session (of the bundle, when one is named).
    #[arg(long = "continue", short = 'c')]
    pub(super) continue_last: bool,
    /// The prompt; `-` reads it from stdin, which is also where it comes from when no prompt is given and stdin is
    /// not a terminal (`echo hi | service-rs run b`). `-p`/`--print` is the same (`service-rs -p "prompt"`).
    #[arg(long, short = 'p', visible_alias = "print")]
    pub(super) prompt: Option<String>,
    /// Also write the final answer to FILE (created or replaced) when the turn completes.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub(super) output_last_message: Option<PathBuf>,
    /// A JSON Schema file the final answer must validate against: the model is told the schema, an answer that
    /// does not validate is sent back once with what is wrong, and then the run exits 5 (`output_invalid`). The
    /// answer printed (and written by -o) is the JSON value alone.
    #[arg(long, value_name = "FILE.json")]
    pub(super) output_schema: Option<PathBuf>,
    /// End the turn after this long (`90s`, `10m`), stopping what it started; the run exits 124.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(super) timeout: Option<std::time::Duration>,
    /// Tokens (input plus output, as the provider reports them) the turn may spend: no model call is made once
    /// they are spent, and the run exits 4.
    #[arg(long, value_name = "N")]
    pub(super) max_tokens: Option<u64>,
    /// US dollars the turn may spend, at the prices of config.toml's `[prices]`: no model call is made once they
    /// are spent, or when the next call's prompt alone would pass them, and the run exits 4. A model with no price
    /// is held to nothing (the run says so).
    #[arg(long, value_name = "USD")]
    pub(super) max_cost: Option<f64>,
    /// Tokens the session may spend over all its turns, this one and later ones (`budget.max_tokens`): set on the
    /// new or continued session, the run exits 4 once they are spent.
    #[arg(long, value_name = "N")]
    pub(super) budget_tokens: Option<u64>,
    /// US dollars the session may spend over all its turns, at the prices of config.toml (`budget.max_cost_usd`):
    /// set on the new or continued session, the run exits 4 once they are spent.
    #[arg(long, value_name = "USD")]
    pub(super) budget_cost: Option<f64>,
    /// Decide every permission request of this run up front: `allow` or `deny` (each decision is journaled).
    #[arg(long = "approvals", value_enum, value_name = "DECISION", conflicts_with_all = ["approve", "deny"])]
    pub(super) decide: Option<Decide>,
    /// Where prompts come from: `text`, one prompt (the default), or `stream-json`, JSON lines on stdin (prompts,
    /// approvals, interrupts, as Claude Code's stream-json input) for one session until stdin closes, every event
    /// going out as a JSON line on stdout.
    #[arg(
        long,
        value_enum,
        default_value_t,
        value_name = "FORMAT",
        conflicts_with_all = ["prompt", "prompt_arg", "output_schema", "output_last_message", "quiet"]
    )]
    pub(super) input_format: InputFormat,
    /// Stream every event as a JSON line on stdout instead of printing the answer.
    #[arg(long)]
    pub(super) json: bool,
    /// Write the answer as the model sent it, control characters included, when stdout is not a terminal (by
    /// default they are shown as escapes such as `^[`, so that no answer can drive the terminal).
    #[arg(long)]
    pub(super) raw: bool,
    /// Describe every event on stderr as it happens, besides what the agent did.
    #[arg(long, short, conflicts_with = "quiet")]
    pub(super) verbose: bool,
    /// Print nothing but the answer: no progress, no list of what the agent did, no usage line.
    #[arg(long, short, conflicts_with = "json")]
    pub(super) quiet: bool,
    /// Working directory of a new session (default: the current directory); of this turn only when continuing
    /// one. With --remote, a directory of the server's under one of its --workspace-root.
    #[arg(long)]
    pub(super) cwd: Option<PathBuf>,
    /// What a new session works in when --cwd is not given: `cwd`, the current directory (the default; with
    /// --remote, the server's fresh workspace), or `fresh`, an empty directory of the session's own.
    #[arg(long, value_enum, conflicts_with = "cwd")]
    pub(super) workspace: Option<super::workspace::WorkspaceChoice>,
    /// Model override as provider/name, e.g. scripted/demo.
    #[arg(long)]
    pub(super) model: Option<String>,
    /// Run the worker on the host with no confinement.
    #[arg(long)]
    pub(super) dangerous_sandbox_mode: bool,
    /// When running as root: the host user sandboxes run as where root owns the session's directory (a name,
    /// uid or uid:gid; default nobody; also SERVICE_SANDBOX_USER). `root` gives sandboxes root's rights.
    #[arg(long, value_name = "USER")]
    pub(super) sandbox_user: Option<String>,
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
    /// How requests are answered without --approve or --deny (`approvals` of `service-rs config`).
    #[arg(skip)]
    pub(super) approvals: service_supervisor::config_file::Approvals,
}

/// When a run starts warming up the cgroup lock for a worker it may start, where one is needed (cgroup v2). Not at
/// once: a text answer from a model on loopback comes within 4 ms, and the run's exit then waited for the warm-up's
/// first move to return (a process has exited only when its last thread has): 13.5 ms at p90 against 3.6 ms,
/// measured at commit f6c968e.
const WARM_UP_AFTER: std::time::Duration = std::time::Duration::from_millis(10);

pub fn run(home: ServiceHome, mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let defaults = super::config::defaults(&home)?;
    // On cgroup v2 the worker's move into its cgroups waits for an RCU grace period unless a move happened just
    // before: start one early (see `WARM_UP_AFTER` for why not at once). A worker started sooner warms up on its
    // own (`spawn::start`). On v1 the worker moves itself, without that wait (`sandbox::limits`).
    let warm = !args.dangerous_sandbox_mode
        && !service_supervisor::sandbox::limits::workers_move_themselves();
    let _warm = warm.then(|| {
        service_supervisor::sandbox::limits::warm_up_after(
            WARM_UP_AFTER,
            std::time::Duration::from_secs(1),
        )
    });
    let rt = super::runtime(
        home,
        args.dangerous_sandbox_mode,
        false,
        &args.resolve,
        args.sandbox_user.as_deref(),
    )?;
    let backend = Backend::Local(rt.clone());
    let tokio = super::tokio()?;
    let result = tokio.block_on(async {
        let result = match args.settle(&backend, &defaults).await {
            Ok(()) => session_run(&backend, &args).await,
            Err(e) => Err(e),
        };
        // The answer is out: exit without waiting for the worker, its sandbox or its cgroups (1.5-3 ms here).
        let cgroups = rt.leave("the run ended").await;
        service_supervisor::sandbox::limits::release_after_exit(&cgroups);
        result
    });
    // After Ctrl-C at a question, a blocking read of stdin is still pending: do not wait for it.
    tokio.shutdown_background();
    result
}

/// `run --remote`: the same run against a server.
pub fn run_remote(remote: Remote, mut args: RunArgs) -> anyhow::Result<ExitCode> {
    if args.dangerous_sandbox_mode {
        anyhow::bail!("--dangerous-sandbox-mode is the server's choice: start `service-rs serve` with it instead");
    }
    if !args.resolve.is_empty() {
        anyhow::bail!("--resolve is the server's choice: start `service-rs serve` with it instead");
    }
    // The user's defaults are this machine's, as for a local run.
    let defaults = match ServiceHome::from_env() {
        Some(home) => super::config::defaults(&home)?,
        None => Default::default(),
    };
    let tokio = super::tokio()?;
    let backend = Backend::Remote(remote);
    let result = tokio.block_on(async {
        args.settle(&backend, &defaults).await?;
        session_run(&backend, &args).await
    });
    tokio.shutdown_background();
    result
}

pub(super) fn model_override(
    spec: Option<&str>,
    default: Option<ModelRef>,
) -> anyhow::Result<Option<ModelRef>> {
    let Some(spec) = spec else { return Ok(None) };
    let (provider, name) = spec
        .split_once('/')
        .filter(|(p, n)| !p.is_empty() && !n.is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--model takes provider/name, e.g. anthropic/claude-sonnet-4-5 or scripted/demo; got \"{spec}\""
            )
        })?;
    // Keep the bundle's provider settings (base URL, script) when the provider stays the same.
    let config = default
        .filter(|d| d.provider == provider)
        .and_then(|d| d.config);
    Ok(Some(ModelRef {
        provider: provider.into(),
        name: name.into(),
        config,
    }))
}

/// The session a run continues (`--session`, `--continue`); None for a new one.
pub(super) async fn continued(
    backend: &Backend,
    args: &RunArgs,
) -> anyhow::Result<Option<SessionRecord>> {
    if let Some(prefix) = &args.session {
        return Ok(Some(backend.find_session(prefix).await?));
    }
    if !args.continue_last {
        return Ok(None);
    }
    let records = backend.sessions().await?;
    let of_bundle = |r: &SessionRecord| {
        args.bundle_ref
            .as_deref()
            .is_none_or(|b| r.bundle_ref == b || r.bundle.id == b || r.bundle.reference == b)
    };
    let here = match backend {
        Backend::Local(_) => Some(std::env::current_dir().map_err(|e| {
            anyhow::anyhow!("--continue: cannot tell which directory this is: {e}")
        })?),
        // The server's sessions work in the server's directories: the latest one, said before it goes on.
        Backend::Remote(_) => None,
    };
    let mut candidates: Vec<SessionRecord> = records.into_iter().filter(of_bundle).collect();
    candidates.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
    let Some(here) = here else {
        let last = candidates.into_iter().next();
        if let Some(r) = &last {
            eprintln!("continuing session {} (in {} on the server)", r.id, r.cwd);
        }
        return last.map(Some).ok_or_else(|| no_session_yet(args));
    };
    let (mine, elsewhere): (Vec<_>, Vec<_>) = candidates
        .into_iter()
        .partition(|r| std::path::Path::new(&r.cwd) == here);
    if let Some(r) = mine.into_iter().next() {
        return Ok(Some(r));
    }
    if elsewhere.is_empty() {
        return Err(no_session_yet(args));
    }
    // Never another directory's session without being told: say which there are, and how to continue one.
    let latest: Vec<String> = elsewhere
        .iter()
        .take(5)
        .map(|r| {
            format!(
                "  {}  {}  {}  {}",
                &r.id[..8.min(r.id.len())],
                r.updated_at
                    .get(..16)
                    .unwrap_or(&r.updated_at)
                    .replace('T', " "),
                r.bundle.id,
                r.cwd
            )
        })
        .collect();
    Err(anyhow::anyhow!(
        "--continue: no session was started in {}{}; the latest elsewhere:\n{}\ncontinue one of them with \
         --session ID, or start one here without --continue",
        here.display(),
        args.bundle_ref
            .as_deref()
            .map(|b| format!(" with bundle {b}"))
            .unwrap_or_default(),
        latest.join("\n")
    ))
}

fn no_session_yet(args: &RunArgs) -> anyhow::Error {
    match &args.bundle_ref {
        Some(b) => anyhow::anyhow!(
            "--continue: no session of bundle {b} yet; start one with `service-rs run {b} \"prompt\"`"
        ),
        None => anyhow::anyhow!(
            "--continue: there is no session yet; start one with `service-rs \"prompt\"`"
        ),
    }
}

/// One turn in a new or continued session; the answer on stdout, progress on stderr.
async fn session_run(backend: &Backend, args: &RunArgs) -> anyhow::Result<ExitCode> {
    if args.input_format == InputFormat::StreamJson {
        return super::stream_input::run(backend, args).await;
    }
    // Read first: a run without a prompt, or with a schema that is not one, leaves no session behind.
    let prompt = args.prompt_text()?;
    let schema = args
        .output_schema
        .as_deref()
        .map(OutputSchema::load)
        .transpose()?;
    let prompt = match &schema {
        Some(schema) => schema.prompt(&prompt),
        None => prompt,
    };
    // From here on Ctrl-C is this run's to handle: it interrupts the turn rather than killing the process.
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("cannot watch for Ctrl-C: {e}"))?;
    let (record, events, turn_id) = match continued(backend, args).await? {
        Some(record) => {
            let (events, turn_id) = start(backend, args, &record, prompt).await?;
            (record, events, turn_id)
        }
        None => start_new(backend, args, prompt).await?,
    };
    // Said where someone reads it: on a terminal (where approval questions are asked too) or with --verbose.
    let shown = args.verbose || (std::io::stderr().is_terminal() && !args.quiet && !args.json);
    let workspace = if shown {
        let bundle = backend.bundle(&record.bundle.reference).await?;
        let who = backend.sandbox_user_over(std::path::Path::new(&record.cwd));
        let workspace = super::workspace::describe(&record.cwd, bundle.sandbox.mode, who);
        eprintln!("session: {}", record.id);
        eprintln!("workspace: {workspace}");
        workspace
    } else {
        String::new()
    };
    let (mut events, mut turn_id) = (events, turn_id);
    let mut retried = false;
    loop {
        let followed = follow(
            backend,
            args,
            &record,
            events,
            &turn_id,
            &workspace,
            &mut sigint,
            schema.as_ref(),
        )
        .await?;
        let (problems, schema) = match (followed, &schema) {
            (Followed::Exit(code), _) => return Ok(code),
            (Followed::Invalid(problems), Some(schema)) => (problems, schema),
            (Followed::Invalid(_), None) => return Ok(ExitCode::FAILURE),
        };
        let shown = super::term_text::safe(&problems);
        if retried {
            eprintln!(
                "error: turn {turn_id} failed ({OUTPUT_INVALID}): the answer does not validate against \
                 --output-schema, also after one retry:\n{shown}"
            );
            return Ok(ExitCode::from(super::follow::OUTPUT_INVALID));
        }
        retried = true;
        if !args.quiet && !args.json {
            eprintln!(
                "the answer does not validate against --output-schema; asking once more:\n{shown}"
            );
        }
        (events, turn_id) = start_in(
            backend,
            &record,
            schema.retry_prompt(&problems),
            turn_overrides(args, None, None)?,
        )
        .await?;
    }
}

/// A new session of the run's bundle, with the run's turn started in it: its record, events and turn id. A
/// session whose turn did not start is not kept.
pub(super) async fn start_new(
    backend: &Backend,
    args: &RunArgs,
    prompt: String,
) -> anyhow::Result<(SessionRecord, EventStream, String)> {
    let bundle_ref = args.bundle_ref.as_deref().ok_or_else(|| {
        anyhow::anyhow!(
            "no bundle to run: name one (service-rs run <bundle> \"prompt\"), set a default with `service-rs config \
             set default_bundle <bundle>`, or continue a session with --session ID or --continue"
        )
    })?;
    let rt = match backend {
        Backend::Local(rt) => rt,
        Backend::Remote(_) => {
            // The server's rule: its fresh workspace, unless --cwd names a directory under its --workspace-root.
            let record = backend
                .create_session(bundle_ref, args.cwd.as_deref())
                .await?;
            return match start(backend, args, &record, prompt).await {
                Ok((events, turn_id)) => Ok((record, events, turn_id)),
                Err(e) => {
                    let _ = backend.delete(&record.id).await;
                    Err(e)
                }
            };
        }
    };
    let cwd = super::workspace::for_new_session(args.cwd.as_deref(), args.workspace)?;
    super::registry::pull_on_first_use(rt.home(), bundle_ref).await?;
    let bundle = service_supervisor::bundle::resolve(rt.home(), bundle_ref)?;
    super::warn_unconfined(&bundle.manifest, args.dangerous_sandbox_mode);
    // The session runs in --cwd already.
    let overrides = turn_overrides(args, None, Some(bundle.agent.model.to_ref()))?;
    let model = overrides
        .model
        .clone()
        .unwrap_or(bundle.agent.model.to_ref());
    warn_unpriced(rt, args.max_cost.or(args.budget_cost), &model);
    // Its first model call goes out while the session is made (`create_session_with_turn`).
    let first = rt
        .create_session_with_turn(
            bundle,
            bundle_ref,
            cwd.as_deref(),
            Task::new(prompt),
            overrides,
            args.session_budget(),
        )
        .await?;
    Ok((first.record, first.events, first.turn.turn_id))
}

/// Says on stderr that `--max-cost` cannot hold `model`, which config.toml gives no price.
fn warn_unpriced(rt: &service_supervisor::ServiceRuntime, max_cost: Option<f64>, model: &ModelRef) {
    let name = format!("{}/{}", model.provider, model.name);
    if max_cost.is_some() && !rt.prices().contains_key(&name) {
        eprintln!(
            "service-rs: a budget in dollars (--max-cost, --budget-cost) does not apply: config.toml has no price for \
             {name} ([prices.\"{name}\"] input = …, output = …); the run is held to its tokens only"
        );
    }
}

/// The run's turn started in the existing session `record`: its events and turn id.
pub(super) async fn start(
    backend: &Backend,
    args: &RunArgs,
    record: &SessionRecord,
    prompt: String,
) -> anyhow::Result<(EventStream, String)> {
    let default = match backend {
        Backend::Local(rt) => {
            let bundle = rt.session_bundle(&record.id).await?;
            super::warn_unconfined(&bundle.manifest, args.dangerous_sandbox_mode);
            Some(bundle.agent.model.to_ref())
        }
        // The server keeps its bundles' provider settings to itself.
        Backend::Remote(_) => None,
    };
    // A new session already runs in --cwd; a continued one takes it for this turn.
    let cwd = match (&args.session, args.continue_last) {
        (None, false) => None,
        _ => args.cwd.as_ref().map(|c| c.display().to_string()),
    };
    let overrides = turn_overrides(args, cwd, default.clone())?;
    if let (Backend::Local(rt), Some(model)) = (backend, overrides.model.clone().or(default)) {
        warn_unpriced(rt, args.max_cost.or(args.budget_cost), &model);
    }
    if let Some(budget) = args.session_budget() {
        backend.set_budget(&record.id, Some(budget)).await?;
    }
    start_in(backend, record, prompt, overrides).await
}

/// What the run's flags override in a turn: `cwd` as given, the model, the turn's budget.
fn turn_overrides(
    args: &RunArgs,
    cwd: Option<String>,
    default: Option<ModelRef>,
) -> anyhow::Result<TurnOverrides> {
    Ok(TurnOverrides {
        cwd,
        model: model_override(args.model.as_deref(), default)?,
        max_tokens: args.max_tokens,
        max_cost_usd: args.max_cost,
    })
}

/// A turn of `prompt` started in the session `record`, its events followed from before it starts.
async fn start_in(
    backend: &Backend,
    record: &SessionRecord,
    prompt: String,
    overrides: TurnOverrides,
) -> anyhow::Result<(EventStream, String)> {
    // Subscribe before starting the turn, so no event is missed.
    let events = backend.events_after(&record.id, None).await?;
    let turn_id = backend
        .start_turn(&record.id, Task::new(prompt), overrides)
        .await?;
    Ok((events, turn_id))
}
