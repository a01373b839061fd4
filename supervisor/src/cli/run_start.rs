//! Starting a run's turn, for `run` and its stream-json input: the session it continues (`--session`,
//! `--continue`) or the new one it makes, and what the run's flags override in the turn.

use service_ipc::{ModelRef, Task, TurnOverrides};
use service_supervisor::runtime::{EventStream, SessionRecord};

use super::backend::Backend;
use super::run_args::RunArgs;

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
    let overrides = prepare(backend, args, record).await?;
    start_in(backend, record, prompt, overrides).await
}

/// Readies the existing session `record` for the run's turns, once: says what the run cannot hold it to, sets
/// its budget, and answers what the run's flags override in each turn.
pub(super) async fn prepare(
    backend: &Backend,
    args: &RunArgs,
    record: &SessionRecord,
) -> anyhow::Result<TurnOverrides> {
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
    Ok(overrides)
}

/// What the run's flags override in a turn: `cwd` as given, the model, the turn's budget.
pub(super) fn turn_overrides(
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
pub(super) async fn start_in(
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
