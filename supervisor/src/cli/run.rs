//! `service-rs run`: a fresh session, one turn, the final answer on stdout.

use std::io::IsTerminal;
use std::process::ExitCode;

use service_ipc::{ModelRef, Task, TurnOverrides};
use service_supervisor::runtime::{EventStream, SessionRecord};
use service_supervisor::ServiceHome;

use super::backend::Backend;
use super::follow::{follow, Followed};
use super::output_schema::{OutputSchema, OUTPUT_INVALID};
use super::remote::Remote;
use super::run_args::InputFormat;
use super::run_args::RunArgs;

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
    let code = follow_to_end(
        backend,
        args,
        &record,
        events,
        turn_id,
        &workspace,
        &mut sigint,
        schema,
    )
    .await;
    if let Some(file) = &args.trajectory {
        let format = super::export::Format::Atif;
        // Said, but the run's status stays the turn's: a script reads how the turn ended from it.
        if let Err(e) = super::export::write(backend, &record.id, format, Some(file)).await {
            eprintln!("error: --trajectory: {e:#}");
        }
    }
    code
}

/// Follows the run's turn, and with `--output-schema` its one retry, to the run's status.
#[allow(clippy::too_many_arguments)]
async fn follow_to_end(
    backend: &Backend,
    args: &RunArgs,
    record: &SessionRecord,
    events: EventStream,
    turn_id: String,
    workspace: &str,
    sigint: &mut tokio::signal::unix::Signal,
    schema: Option<OutputSchema>,
) -> anyhow::Result<ExitCode> {
    let (mut events, mut turn_id) = (events, turn_id);
    let mut retried = false;
    loop {
        let followed = follow(
            backend,
            args,
            record,
            events,
            &turn_id,
            workspace,
            sigint,
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
            record,
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
