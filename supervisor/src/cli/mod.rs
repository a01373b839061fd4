//! The command line: clap definitions and one function per command. Errors end up here and are printed once.

mod acp;
mod answer;
mod approvals;
mod audit;
mod backend;
mod batch;
mod batch_files;
mod bundles;
pub(crate) mod complete;
mod config;
mod doctor;
mod event_lines;
mod export;
mod follow;
mod history;
mod hooks;
mod logging;
mod mcp;
mod migrate;
mod output_schema;
mod progress;
mod prune;
mod registry;
mod remote;
mod run;
mod run_args;
mod run_start;
pub(crate) mod secret_files;
mod serve;
mod serve_config;
mod session_pick;
mod sessions;
mod store_open;
mod stream_input;
mod suggest;
mod term_text;
mod tokens;
mod tui;
mod usage;
mod workspace;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use service_supervisor::ServiceHome;

/// service-rs: build agent bundles and run prompts against them.
#[derive(Debug, Parser)]
#[command(name = "service-rs", version, about)]
pub struct Cli {
    /// Run the command against a running `service-rs serve` at this base URL: bundles, export, import, push, pull,
    /// sessions, inspect, run, tui, acp and tokens.
    #[arg(long, global = true, value_name = "BASE_URL")]
    remote: Option<String>,
    /// Log lines on stderr as text or JSON; `RUST_LOG` filters them (serve logs at info by default, other
    /// commands only when RUST_LOG asks).
    #[arg(long, global = true, value_enum, default_value_t)]
    log_format: logging::LogFormat,
    /// What confines sandboxes: bwrap, landlock (Landlock and seccomp, for containers where bubblewrap cannot
    /// start) or auto (bubblewrap where it starts, else Landlock); `sandbox_backend` in config.toml otherwise.
    #[arg(
        long,
        global = true,
        env = "SERVICE_SANDBOX_BACKEND",
        value_name = "BACKEND"
    )]
    sandbox_backend: Option<service_supervisor::sandbox::backend::BackendChoice>,
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
        /// The model to start with: anthropic, openai, local (an OpenAI-compatible server such as Ollama or
        /// llama.cpp on this machine) or scripted (offline, answers from a script).
        #[arg(long, value_enum, default_value_t)]
        provider: service_supervisor::bundle::template::Starter,
        /// How the model acts: react (one JSON tool call at a time) or codeact (Python programs that call the
        /// tools).
        #[arg(long, default_value = "react")]
        executor: service_ipc::ExecutorKind,
        /// Start from a built-in bundle instead of the starter: `coder`, the built-in coding agent, as a project
        /// to change (its model stays `auto`; --provider and --executor do not apply).
        #[arg(long, value_name = "NAME", conflicts_with_all = ["provider", "executor"])]
        template: Option<String>,
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
        #[arg(add = complete::bundles())]
        bundle_ref: String,
        /// Print the full metadata as JSON.
        #[arg(long)]
        json: bool,
        /// Also say which project instructions (AGENTS.md and the like) a session of it in this directory reads.
        #[arg(long)]
        cwd: Option<PathBuf>,
    },
    /// List installed bundles.
    Bundles(bundles::BundlesArgs),
    /// Write an installed bundle as an OCI image layout tar (skopeo reads it as oci-archive:).
    Export {
        /// Bundle reference.
        #[arg(add = complete::bundles())]
        bundle_ref: String,
        /// The tar file to write; `-` writes it to stdout.
        #[arg(long, short)]
        output: PathBuf,
    },
    /// Push an installed bundle to an OCI registry: <registry>/<repository>:<tag>.
    Push {
        /// Bundle reference.
        #[arg(add = complete::bundles())]
        bundle_ref: String,
        /// Where to: <registry>/<repository>:<tag>, e.g. 127.0.0.1:5000/team/hello:0.1.0.
        target: String,
        #[command(flatten)]
        access: registry::AccessArgs,
    },
    /// Pull a bundle from an OCI registry and install it: <registry>/<repository>:<tag> or @sha256:<digest>.
    Pull {
        /// <registry>/<repository>:<tag> or <registry>/<repository>@sha256:<digest>.
        source: String,
        #[command(flatten)]
        access: registry::AccessArgs,
    },
    /// Install the bundle in an OCI image layout tar (as `export` writes, or `skopeo copy ... oci-archive:`).
    Import {
        /// The tar file.
        archive: PathBuf,
    },
    /// Run one prompt in a new session (or a continued one) and print the answer.
    #[command(after_help = run_args::EXIT_CODES)]
    Run(run_args::RunArgs),
    /// Run a bundle over a dataset (tasks.jsonl): a fresh session per item in a copy of its workspace, a verifier's
    /// reward, the git diff as model_patch, an ATIF trajectory each; results appended to --out as items end, and a
    /// restarted batch skips what --out holds.
    Batch(batch::BatchArgs),
    /// Chat with a bundle in the terminal.
    Tui(tui::TuiArgs),
    /// Start the HTTP server.
    Serve(Box<serve::ServeArgs>),
    /// Serve the Agent Client Protocol on stdin and stdout, for editors: each session runs a bundle in the
    /// editor's project directory, confined.
    Acp(acp::AcpArgs),
    /// MCP: list a bundle's MCP tools, or serve the installed bundles as an MCP server.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// List, show, delete and prune sessions.
    Sessions(sessions::SessionsArgs),
    /// Tenants of `serve`: their tokens, quotas and bundle grants (on the local store, or over --remote with an
    /// admin token).
    Tokens(tokens::TokensArgs),
    /// What tenants spent: tokens, turns, tool calls, wall and sandbox CPU time, and cost where config.toml prices
    /// the models (from the local store, or over --remote).
    Usage(usage::UsageArgs),
    /// Who changed tokens, quotas and grants, from where: the audit log (from the local store, or over --remote with
    /// an operator's token).
    Audit(audit::AuditArgs),
    /// The approvals kept "always in this project": list and remove them, per project directory.
    Approvals(approvals::ApprovalsArgs),
    /// The hooks a session here would run (the bundle's and the project's), and trusting the project's.
    Hooks(hooks::HooksArgs),
    /// Read and set your defaults in $SERVICE_HOME/config.toml: default_bundle, default_model, approvals.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Check that this machine runs confined sessions, that the store is writable, and that a bundle's model
    /// answers.
    Doctor(doctor::DoctorArgs),
    /// Bring the shared PostgreSQL database's schema to this release's (`serve` also does when it starts); with
    /// --status, say where it is and change nothing.
    Migrate(migrate::MigrateArgs),
    /// Print the shell's completion registration: `source <(service-rs completions bash)`; it completes bundle
    /// references and session ids from the store.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print a page of the manual's reference, generated from the definitions (`docs/generate` writes them).
    #[command(hide = true)]
    Reference {
        /// The page.
        #[arg(value_enum)]
        page: service_supervisor::reference::Page,
    },
}

impl Cli {
    /// The command line, where `service-rs "fix the failing test"` means `service-rs run "fix the failing test"`: a
    /// first word that holds a space (no command or option does) is a prompt for the default bundle (or a bundle, as
    /// `run` settles). `service-rs` alone on a terminal opens the TUI (`service-rs tui`); elsewhere it prints the help. A single word is left to clap; when it
    /// names no command, a bundle it is close to is suggested.
    pub fn parse_args() -> Cli {
        use clap::Parser;
        let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let mut i = 1;
        // Skip the global options and their values.
        while let Some(arg) = args.get(i).and_then(|a| a.to_str()) {
            match arg {
                "--remote" | "--log-format" => i += 2,
                a if a.starts_with("--remote=") || a.starts_with("--log-format=") => i += 1,
                _ => break,
            }
        }
        // Building clap's command tree to look the word up would cost a one-shot run about as much again as parsing.
        // `service-rs -p "prompt"` is a headless run of the default bundle, as `claude -p` is.
        let prompt = args.get(i).and_then(|a| a.to_str()).is_some_and(|w| {
            (!w.starts_with('-') && w.trim().contains(char::is_whitespace))
                || w == "-p"
                || w == "--print"
                || w.starts_with("--print=")
        });
        if prompt {
            args.insert(i, "run".into());
        } else if args.len() == i
            && std::io::stdin().is_terminal()
            && std::io::stdout().is_terminal()
        {
            args.push("tui".into());
        }
        let word = args.get(i).and_then(|a| a.to_str()).map(String::from);
        if word.as_deref() == Some("serve") {
            let home = ServiceHome::from_env();
            match serve_config::options(&args[i + 1..], home.as_ref().map(|h| h.root())) {
                Ok(options) => {
                    args.splice(i + 1..i + 1, options);
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    std::process::exit(2);
                }
            }
        }
        Cli::try_parse_from(args).unwrap_or_else(|e| {
            if e.kind() == clap::error::ErrorKind::InvalidSubcommand {
                if let Some(hint) = word.as_deref().and_then(bundle_hint) {
                    eprintln!("error: {hint}");
                    std::process::exit(2);
                }
            }
            e.exit()
        })
    }
}

/// What to say of a first word that names no command but names a bundle, or is close to one's name.
fn bundle_hint(word: &str) -> Option<String> {
    let home = ServiceHome::from_env()?;
    let bundles = suggest::bundles(&home);
    if bundles.iter().any(|b| b == word) {
        return Some(format!(
            "\"{word}\" is a bundle, not a command: run it with `service-rs run {word} \"prompt\"`, or open it with \
             `service-rs tui --bundle {word}`"
        ));
    }
    let near = suggest::near(word, bundles)?;
    Some(format!(
        "\"{word}\" names no command or bundle; did you mean the bundle {near} (`service-rs run {near} \"prompt\"`)?"
    ))
}

/// Runs the parsed command line and turns any error into a message on stderr and a failing exit code.
pub fn run(cli: Cli) -> ExitCode {
    quiet_when_a_reader_goes_away();
    let _ = SANDBOX_BACKEND.set(cli.sandbox_backend);
    // `mcp serve` talks on stdio to a client that shows its stderr: it logs only when RUST_LOG asks.
    let server = matches!(cli.command, Command::Serve(_));
    logging::init(cli.log_format, if server { "info" } else { "off" });
    // `serve` sets up its traces itself (it also takes --otlp-endpoint); these export when OTEL_* asks.
    let traced = matches!(
        cli.command,
        Command::Run(_) | Command::Tui(_) | Command::Acp(_) | Command::Batch(_)
    );
    if traced {
        if let Err(e) = service_supervisor::telemetry::init(None) {
            eprintln!("warning: {e}; going on without traces");
        }
    }
    let json = server && cli.log_format == logging::LogFormat::Json;
    let code = match dispatch(cli) {
        Ok(code) => code,
        // A server logging JSON says its last word as JSON too.
        Err(err) if json => {
            tracing::error!(error = %message(&err), "serve failed");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("error: {}", message(&err));
            ExitCode::FAILURE
        }
    };
    // Every span batched so far is exported before the process ends.
    service_supervisor::telemetry::shutdown();
    code
}

/// The error and its causes on one line, each said once: many errors already quote their cause in their own
/// message, and `{:#}` would repeat it.
fn message(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    if matches!(
        cli.command,
        Command::Inspect { .. }
            | Command::Bundles(_)
            | Command::Export { .. }
            | Command::Sessions(_)
            | Command::Completions { .. }
            | Command::Reference { .. }
    ) {
        end_quietly_on_a_closed_pipe();
    }
    if let Some(base) = cli.remote.as_deref() {
        return dispatch_remote(base, cli.command);
    }
    let log_format = cli.log_format;
    match cli.command {
        Command::Init {
            dir,
            force,
            template: Some(name),
            ..
        } => bundles::init_from(&dir, force, &name),
        Command::Init {
            dir,
            force,
            provider,
            executor,
            template: None,
        } => bundles::init(&dir, force, provider, executor),
        Command::Build { dir, output } => bundles::build(&home()?, &dir, output.as_deref()),
        Command::Inspect {
            bundle_ref,
            json,
            cwd,
        } => bundles::inspect(&home()?, &bundle_ref, json, cwd.as_deref()),
        Command::Bundles(args) => bundles::run(home()?, args),
        Command::Export { bundle_ref, output } => bundles::export(&home()?, &bundle_ref, &output),
        Command::Import { archive } => bundles::import(&home()?, &archive),
        Command::Push {
            bundle_ref,
            target,
            access,
        } => registry::push(&home()?, &bundle_ref, &target, &access),
        Command::Pull { source, access } => registry::pull(&home()?, &source, &access),
        Command::Run(args) => run::run(home()?, args),
        Command::Batch(args) => batch::run(home()?, args),
        Command::Serve(args) => serve::serve(home()?, *args, log_format),
        Command::Sessions(args) => match sessions::store_prune(&args) {
            Some((url, ca, older_than, dry_run)) => {
                prune::prune_store(url, ca, older_than, dry_run)
            }
            None => sessions::run(
                backend::Backend::Local(runtime(home()?, false, false, &[], None)?),
                args,
            ),
        },
        Command::Mcp(command) => mcp::run(home()?, command),
        Command::Acp(args) => acp::run(home()?, args),
        Command::Completions { shell } => {
            complete::write_registration(shell, &mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate(args) => migrate::run(args),
        Command::Reference { page } => {
            use clap::CommandFactory;
            use service_supervisor::reference::{self, Page};
            let text = match page {
                Page::Cli => reference::cli(&Cli::command()),
                Page::Http => reference::http(),
                Page::Config => reference::config(),
            };
            std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tui(args) => tui::run(home()?, args),
        Command::Doctor(args) => doctor::run(home()?, args),
        Command::Config(command) => config::run(&home()?, command),
        Command::Approvals(args) => approvals::run(&home()?, args),
        Command::Hooks(args) => hooks::run(&home()?, args),
        Command::Tokens(args) => tokens::run(home()?, args),
        Command::Usage(args) => usage::run(home()?, args),
        Command::Audit(args) => audit::run(home()?, args),
    }
}

fn dispatch_remote(base: &str, command: Command) -> anyhow::Result<ExitCode> {
    let remote = remote::Remote::new(base);
    let rt = tokio()?;
    match command {
        Command::Bundles(args) => rt.block_on(remote::bundles(&remote, args)),
        Command::Export { bundle_ref, output } => {
            rt.block_on(remote::export(&remote, &bundle_ref, &output))
        }
        Command::Import { archive } => rt.block_on(remote::import(&remote, &archive)),
        Command::Push {
            bundle_ref,
            target,
            access,
        } => rt.block_on(registry::push_remote(
            &remote,
            &bundle_ref,
            &target,
            &access,
        )),
        Command::Pull { source, access } => {
            rt.block_on(registry::pull_remote(&remote, &source, &access))
        }
        Command::Sessions(args) => sessions::run(backend::Backend::Remote(remote), args),
        Command::Inspect { cwd: Some(_), .. } => Err(anyhow::anyhow!(
            "inspect --cwd reads this machine's files: run it without --remote"
        )),
        Command::Inspect {
            bundle_ref, json, ..
        } => rt.block_on(remote::inspect(&remote, &bundle_ref, json)),
        Command::Run(args) => run::run_remote(remote, args),
        Command::Init { .. } => Err(local_only("init")),
        Command::Batch(_) => Err(local_only("batch")),
        Command::Build { .. } => Err(local_only("build")),
        Command::Serve { .. } => Err(local_only("serve")),
        Command::Mcp(_) => Err(local_only("mcp")),
        Command::Acp(args) => acp::run_remote(remote, args),
        Command::Completions { .. } => Err(local_only("completions")),
        Command::Reference { .. } => Err(local_only("reference")),
        Command::Migrate(_) => Err(local_only("migrate")),
        Command::Doctor(_) => Err(local_only("doctor")),
        Command::Config(_) => Err(local_only("config")),
        Command::Approvals(_) => Err(local_only("approvals")),
        Command::Hooks(_) => Err(local_only("hooks")),
        Command::Tui(args) => tui::run_remote(remote, args),
        Command::Tokens(args) => tokens::run_remote(remote, args),
        Command::Usage(args) => usage::run_remote(remote, args),
        Command::Audit(args) => audit::run_remote(remote, args),
    }
}

fn local_only(command: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "`{command}` cannot run with --remote: it works on this machine's files; run it without --remote (on the \
         server's machine to change the server's store)"
    )
}

/// A runtime whose workers are this very binary; `dangerous` runs them all on the host. `long_running` (serve, the
/// TUI) keeps a sandboxed worker started ahead for the next session of each bundle in use, and removes the cgroups
/// a killed supervisor left (on a thread of its own; a one-shot command would only pay for it). `resolve` are the
/// `--resolve HOST:PORT:ADDR` entries of the egress proxy; `sandbox_user` is `--sandbox-user` (see
/// `sandbox::identity`).
fn runtime(
    home: ServiceHome,
    dangerous: bool,
    long_running: bool,
    resolve: &[String],
    sandbox_user: Option<&str>,
) -> anyhow::Result<service_supervisor::ServiceRuntime> {
    let options = runtime_options(&home, dangerous, long_running, resolve, sandbox_user)?;
    Ok(service_supervisor::ServiceRuntime::new(home, options))
}

/// `--sandbox-backend` (or `SERVICE_SANDBOX_BACKEND`), when given.
static SANDBOX_BACKEND: std::sync::OnceLock<
    Option<service_supervisor::sandbox::backend::BackendChoice>,
> = std::sync::OnceLock::new();

/// The sandbox backend setting: `--sandbox-backend` (or its variable), else config.toml's, else `auto`.
fn sandbox_backend(
    config: &service_supervisor::config_file::ConfigFile,
) -> anyhow::Result<service_supervisor::sandbox::backend::BackendChoice> {
    Ok(match SANDBOX_BACKEND.get().copied().flatten() {
        Some(choice) => choice,
        None => match config.sandbox_backend.as_deref() {
            Some(value) => value
                .parse()
                .map_err(|e| anyhow::anyhow!("sandbox_backend in config.toml: {e}"))?,
            None => Default::default(),
        },
    })
}

/// The settings of a runtime over `home` (see [`runtime`]).
fn runtime_options(
    home: &ServiceHome,
    dangerous: bool,
    long_running: bool,
    resolve: &[String],
    sandbox_user: Option<&str>,
) -> anyhow::Result<service_supervisor::RuntimeOptions> {
    let exe = std::env::current_exe()
        .context("cannot find the service-rs binary to start workers from")?;
    let mut options =
        service_supervisor::RuntimeOptions::new(service_supervisor::worker_beside(&exe));
    options.dangerous_sandbox_mode = dangerous;
    options.prestart_sandboxes = long_running;
    let config = service_supervisor::config_file::load(home.root())?;
    options.sandbox_user = service_supervisor::sandbox::identity::SandboxUser::for_this_process(
        sandbox_user,
        config.sandbox_user.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    options.sandbox_backend = sandbox_backend(&config)?;
    options.keys = service_supervisor::providers::keys::KeyPolicy::load(home.root())?;
    if let Some(mb) = config.checkpoint_max_mb {
        options.checkpoint_max_bytes = mb.saturating_mul(1024 * 1024);
    }
    options.checkpoint_ignore = config.checkpoint_ignore.clone();
    if let Some(depth) = config.max_subagent_depth {
        options.max_subagent_depth = depth;
    }
    options.prices = config.prices;
    options.turn_flush = config.turn_flush;
    options.resolver =
        std::sync::Arc::new(service_supervisor::egress::Resolver::from_entries(resolve)?);
    if long_running && !dangerous {
        service_supervisor::sandbox::limits::sweep_stale();
    }
    Ok(options)
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

/// For the commands that print a listing or a file and nothing else: a reader that stops early (`| head`) ends the
/// command as it ends `cat`, by SIGPIPE (status 141 in a shell), with nothing on stderr. The Rust runtime ignores
/// SIGPIPE, which turns the write into an error that `println!` panics on. Socket writes are not affected: they
/// are sent with `MSG_NOSIGNAL`. The commands that serve or run sessions keep ignoring it.
/// For every other command: a print to a closed stdout or stderr (`println!` panics on it, since SIGPIPE is
/// ignored) ends the process quietly with the status SIGPIPE would give, instead of a panic message. `run` handles
/// a closed stdout itself, so that its turn is recorded as interrupted first.
fn quiet_when_a_reader_goes_away() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.starts_with("failed printing to std") && text.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info)
    }));
}

fn end_quietly_on_a_closed_pipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: restoring the default disposition installs no handler, so no code runs in signal context.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

fn home() -> anyhow::Result<ServiceHome> {
    let home = ServiceHome::from_env()
        .context("cannot find the store: set SERVICE_HOME or HOME to a writable directory")?;
    home.secure().with_context(|| {
        format!(
            "cannot make the store {} private to this user: set SERVICE_HOME to a directory you own",
            home.root().display()
        )
    })?;
    Ok(home)
}
