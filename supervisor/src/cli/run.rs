//! `service-rs run`: a fresh session, one turn, the final answer on stdout.

use std::io::IsTerminal;
use std::process::ExitCode;

use service_supervisor::runtime::{EventStream, SessionRecord};
use service_supervisor::ServiceHome;

use super::backend::Backend;
use super::follow::{follow, Followed};
use super::output_schema::{OutputSchema, OUTPUT_INVALID};
use super::remote::Remote;
use super::run_args::InputFormat;
use super::run_args::RunArgs;
use super::run_start::{continued, start, start_in, start_new, turn_overrides};

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
