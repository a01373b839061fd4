//! The command line: clap definitions and one function per command. Errors end up here and are printed once.

mod bundles;
mod run;
mod sessions;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use service_supervisor::ServiceHome;

/// service-rs: build agent bundles and run prompts against them.
#[derive(Debug, Parser)]
#[command(name = "service-rs", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a starter bundle project in <dir>.
    Init {
        /// Directory to create (or fill, if empty).
        dir: PathBuf,
        /// Write into a non-empty directory, overwriting the template's files.
        #[arg(long)]
        force: bool,
    },
    /// Validate a bundle project and install it into the local store, or write an OCI layout with --output.
    Build {
        /// The bundle project directory.
        dir: PathBuf,
        /// Write an OCI image layout here instead of installing.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Print the metadata of a bundle.
    Inspect {
        /// Bundle reference: <name>, <name>@latest, <namespace>/<name>:<version> or a directory.
        bundle_ref: String,
        /// Print the full metadata as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List installed bundles.
    Bundles {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run one prompt in a fresh session and print the final answer.
    Run(run::RunArgs),
    /// List persisted sessions.
    Sessions {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The session worker entry point, started by the supervisor (not for direct use).
    #[command(hide = true)]
    Worker {
        /// The supervisor's socket.
        #[arg(long)]
        socket: PathBuf,
    },
}

/// Runs the parsed command line and turns any error into a message on stderr and a failing exit code.
pub fn run(cli: Cli) -> ExitCode {
    match dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Init { dir, force } => bundles::init(&dir, force),
        Command::Build { dir, output } => bundles::build(&home()?, &dir, output.as_deref()),
        Command::Inspect { bundle_ref, json } => bundles::inspect(&home()?, &bundle_ref, json),
        Command::Bundles { json } => bundles::list(&home()?, json),
        Command::Run(args) => run::run(home()?, args),
        Command::Sessions { json } => sessions::list(home()?, json),
        Command::Worker { socket } => {
            service_worker::main(&socket)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A runtime whose workers are this very binary; `dangerous` runs them all on the host.
fn runtime(
    home: ServiceHome,
    dangerous: bool,
) -> anyhow::Result<service_supervisor::ServiceRuntime> {
    let exe = std::env::current_exe()
        .context("cannot find the service-rs binary to start workers from")?;
    let mut options = service_supervisor::RuntimeOptions::new(exe);
    options.dangerous_sandbox_mode = dangerous;
    Ok(service_supervisor::ServiceRuntime::new(home, options))
}

/// Says once on stderr when the worker of this bundle will run without confinement.
fn warn_unconfined(manifest: &service_supervisor::bundle::Manifest, dangerous: bool) {
    if dangerous {
        eprintln!(
            "warning: --dangerous-sandbox-mode: the worker runs on the host without confinement"
        );
    } else if manifest.sandbox.mode == service_ipc::SandboxMode::DangerFullAccess {
        eprintln!(
            "warning: bundle {} uses sandbox mode danger_full_access: the worker runs on the host without confinement",
            manifest.id
        );
    }
}

/// A Tokio runtime for the commands that run sessions.
fn tokio() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn home() -> anyhow::Result<ServiceHome> {
    ServiceHome::from_env()
        .context("cannot find the store: set SERVICE_HOME or HOME to a writable directory")
}
