//! `service-rs tui`: chat over a session, of the local runtime or of a server (`--remote`).
//!
//! One loop draws the state and waits for a key, a session event, or a note from a background action (starting a
//! turn, an operator command, an approval). The terminal is restored on every exit path: normal, error, panic.

use std::io::Stdout;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use futures::{FutureExt, StreamExt};
use ratatui::crossterm::event::{self, DisableBracketedPaste, EnableBracketedPaste, Event};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::prelude::CrosstermBackend;
use ratatui::Terminal;
use service_ipc::{ApprovalDecision, ModelRef, Task, TurnOverrides};
use service_supervisor::runtime::EventStream;
use service_supervisor::tui::app::{App, TurnState};
use service_supervisor::tui::commands::{self, Input};
use service_supervisor::ServiceHome;
use tokio::sync::mpsc;

use super::backend::Backend;

mod keys;
mod slash;

/// Arguments of `tui`.
#[derive(Debug, clap::Args)]
pub struct TuiArgs {
    /// Bundle of a new session (default: the default_bundle of `service-rs config`, else builtin/coder).
    #[arg(value_name = "BUNDLE", conflicts_with_all = ["bundle", "session", "resume"], add = super::complete::bundles())]
    bundle_arg: Option<String>,
    /// A first prompt, sent as soon as the session is open.
    #[arg(value_name = "PROMPT")]
    prompt: Option<String>,
    /// Bundle of a new session (the same as BUNDLE).
    #[arg(long, add = super::complete::bundles())]
    bundle: Option<String>,
    /// Attach to an existing session instead.
    #[arg(long, conflicts_with = "bundle", add = super::complete::sessions())]
    session: Option<String>,
    /// Pick the session to attach to from this directory's, newest first (filtered as you type).
    #[arg(long, conflicts_with_all = ["bundle", "session"])]
    resume: bool,
    /// Working directory of a new session (default: the current directory). With --remote, a directory of the
    /// server's under one of its --workspace-root.
    #[arg(long)]
    cwd: Option<std::path::PathBuf>,
    /// What a new session works in when --cwd is not given: `cwd`, the current directory (the default; with
    /// --remote, the server's fresh workspace), or `fresh`, an empty directory of the session's own.
    #[arg(long, value_enum, conflicts_with = "cwd")]
    workspace: Option<super::workspace::WorkspaceChoice>,
    /// Run the session worker on the host with no confinement.
    #[arg(long)]
    dangerous_sandbox_mode: bool,
    /// When running as root: the host user sandboxes run as where root owns the session's directory (a name,
    /// uid or uid:gid; default nobody; also SERVICE_SANDBOX_USER). `root` gives sandboxes root's rights.
    #[arg(long, value_name = "USER")]
    sandbox_user: Option<String>,
    /// Fixed address for a host the sandbox reaches through the egress proxy, as curl's --resolve: HOST:PORT:ADDR
    /// (repeatable).
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    resolve: Vec<String>,
}

/// Restores the terminal when dropped.
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        DisableBracketedPaste,
        LeaveAlternateScreen,
        ratatui::crossterm::cursor::Show
    );
}

/// A turn that takes this long calls the user back when it ends.
const LONG_TURN: Duration = Duration::from_secs(10);

/// Calls the user back: the bell, or a desktop notification (OSC 9) that terminals show when unfocused.
fn notify(how: service_supervisor::config_file::Notify, message: &str) {
    use service_supervisor::config_file::Notify;
    use std::io::Write;
    let seq = match how {
        Notify::Off => return,
        Notify::Bell => "\x07".to_string(),
        Notify::Osc9 => format!("\x1b]9;{message}\x07"),
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(seq.as_bytes()).and_then(|()| out.flush());
}

/// Gives the terminal to another program (the editor of Ctrl-G) until [`resume_screen`].
fn suspend() {
    restore();
}

/// Takes the terminal back after [`suspend`].
fn resume_screen() {
    let _ = enable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        EnterAlternateScreen,
        EnableBracketedPaste
    );
}

pub fn run(home: ServiceHome, args: TuiArgs) -> anyhow::Result<ExitCode> {
    let defaults = super::config::defaults(&home)?;
    let rt = super::runtime(
        home,
        args.dangerous_sandbox_mode,
        true,
        &args.resolve,
        args.sandbox_user.as_deref(),
    )?;
    super::tokio()?.block_on(async move {
        let result = session_loop(Backend::Local(rt.clone()), &args, defaults).await;
        // A session opened and left without a prompt is not kept.
        rt.delete_unused_made_here().await;
        rt.shutdown("the TUI closed").await;
        result
    })
}

/// `tui --remote <url>`: the same TUI over a running server.
pub fn run_remote(remote: super::remote::Remote, args: TuiArgs) -> anyhow::Result<ExitCode> {
    if args.dangerous_sandbox_mode {
        anyhow::bail!("--dangerous-sandbox-mode is the server's choice: start `service-rs serve` with it instead");
    }
    let defaults = match ServiceHome::from_env() {
        Some(home) => super::config::defaults(&home)?,
        None => Default::default(),
    };
    super::tokio()?.block_on(session_loop(Backend::Remote(remote), &args, defaults))
}

/// Notes from background actions.
enum Note {
    Info(String),
    Error(String),
}

struct Ui {
    backend: Backend,
    app: App,
    events: EventStream,
    notes: mpsc::Sender<Note>,
    model: Option<ModelRef>,
    /// The working directory `/cwd` chose for the next turns.
    cwd: Option<String>,
    /// Where new sessions of this TUI work (None: a fresh workspace), chosen at start.
    workspace: Option<std::path::PathBuf>,
    /// The current session's workspace on the host, and whether its sandbox confines turns to it.
    session_workspace: (std::path::PathBuf, bool),
    /// Reference of the current session's bundle, for /new.
    bundle_ref: String,
    /// How requests are answered before they are shown (`approvals` of `service-rs config`).
    approvals: service_supervisor::config_file::Approvals,
    /// The model of every session's turns unless /model says otherwise (`default_model`).
    default_model: Option<String>,
    /// Model prices from config.toml, for /cost.
    prices: std::collections::BTreeMap<String, service_supervisor::tenancy::usage::Price>,
    /// The turn a Ctrl-C interrupted: another Ctrl-C while it runs quits.
    interrupted: Option<String>,
    /// The screen must be drawn anew (another program used the terminal).
    redraw: bool,
    /// How to call the user back (`notify` in config.toml).
    notify: service_supervisor::config_file::Notify,
}

impl Ui {
    /// Switches to session `id`: a fresh view that replays its journal.
    /// Attaches to the session whose id is or starts with `id`.
    async fn attach(&mut self, id: &str) -> anyhow::Result<()> {
        let record = self.backend.find_session(id).await?;
        let id = record.id.as_str();
        let bundle = self.backend.bundle(&record.bundle.reference).await?;
        let label = format!("{}@{}", record.bundle.id, record.bundle.version);
        let model = format!("{}/{}", bundle.model.provider, bundle.model.name);
        let mode = bundle.sandbox.mode;
        let mut app = App::new(id, &label, &model, &mode.to_string());
        app.skills = bundle.skills.clone();
        let who = self
            .backend
            .sandbox_user_over(std::path::Path::new(&record.cwd));
        app.workspace = super::workspace::describe(&record.cwd, mode, who);
        self.session_workspace = (
            record.cwd.clone().into(),
            mode != service_ipc::SandboxMode::DangerFullAccess,
        );
        app.history = std::mem::take(&mut self.app.history);
        self.app = app;
        self.bundle_ref = record.bundle.reference.clone();
        self.events = self.backend.events(id).await?;
        self.model = None;
        if let Some(spec) = self.default_model.clone() {
            self.use_model(&spec)?;
        }
        self.cwd = None;
        Ok(())
    }

    async fn new_session(&mut self, bundle_ref: &str) -> anyhow::Result<()> {
        if let Backend::Local(rt) = &self.backend {
            super::registry::pull_on_first_use(rt.home(), bundle_ref).await?;
        }
        let record = self
            .backend
            .create_session(bundle_ref, self.workspace.as_deref())
            .await?;
        self.attach(&record.id).await?;
        self.app.info(format!(
            "new session {} of {}",
            record.id, record.bundle.reference
        ));
        Ok(())
    }

    /// The directory `/cwd dir` names, checked now rather than at every later turn: relative to the session's
    /// workspace, an existing directory (on this machine; a server checks its own), and inside the workspace
    /// unless the session is unconfined.
    fn checked_cwd(&self, dir: &str) -> anyhow::Result<String> {
        let (workspace, confined) = &self.session_workspace;
        let mut path = workspace.join(dir);
        if let Backend::Local(_) = self.backend {
            path = std::fs::canonicalize(&path)
                .ok()
                .filter(|p| p.is_dir())
                .with_context(|| format!("/cwd: {} is not a directory", path.display()))?;
        }
        let inside = path
            .components()
            .all(|c| c != std::path::Component::ParentDir)
            && path.starts_with(workspace);
        if *confined && !inside {
            anyhow::bail!(
                "/cwd: {} is outside the session's workspace {}; its sandbox sees only that directory: pick one                  inside it, or start a session in the other directory (tui --cwd DIR)",
                path.display(),
                workspace.display()
            );
        }
        Ok(path.display().to_string())
    }

    /// Attaches to session `id` and says so.
    async fn resume(&mut self, id: &str) -> anyhow::Result<()> {
        self.attach(id).await?;
        self.app
            .info(format!("resumed session {}", self.app.session_id));
        Ok(())
    }

    /// Opens the resume picker over the sessions of this directory (of all, when it has none or on a server).
    async fn open_picker(&mut self) -> anyhow::Result<()> {
        let records = self.backend.sessions().await?;
        let here = match &self.backend {
            Backend::Local(_) => std::env::current_dir()
                .ok()
                .map(|d| d.display().to_string()),
            Backend::Remote(_) => None,
        };
        self.app.picker = Some(service_supervisor::tui::picker::Picker::new(
            &records,
            here.as_deref(),
            chrono::Utc::now(),
        ));
        Ok(())
    }

    /// Makes the next turns use the model `spec` (provider/name).
    fn use_model(&mut self, spec: &str) -> anyhow::Result<()> {
        let (provider, name) = spec
            .split_once('/')
            .context("/model takes provider/name, e.g. anthropic/claude-sonnet-4-5")?;
        self.model = Some(ModelRef {
            provider: provider.into(),
            name: name.into(),
            config: None,
        });
        self.app.model = spec.to_string();
        Ok(())
    }

    /// Answers the pending request at once when `approvals` in config.toml says so: `deny` denies all, `auto-edit`
    /// allows a Write or an Edit inside the workspace.
    fn auto_answer(&mut self) {
        use service_supervisor::config_file::Approvals;
        let Some(asked) = self.app.approval.clone() else {
            return;
        };
        let (workspace, confined) = &self.session_workspace;
        let root = if *confined {
            service_supervisor::sandbox::bwrap::WORKSPACE_DIR.to_string()
        } else {
            workspace.display().to_string()
        };
        let decision = match self.approvals {
            Approvals::Deny => ApprovalDecision::Deny,
            Approvals::AutoEdit
                if service_supervisor::runtime::approvals::auto_edit_allows(&asked, &root) =>
            {
                ApprovalDecision::AllowOnce
            }
            _ => return,
        };
        self.app.approval = None;
        let backend = self.backend.clone();
        self.background(async move {
            backend
                .resolve(&asked.request_id, decision)
                .await
                .map(|()| None)
        });
    }

    /// Runs `action` in the background; its error (or info) comes back as a note.
    fn background<F>(&self, action: F)
    where
        F: std::future::Future<Output = anyhow::Result<Option<String>>> + Send + 'static,
    {
        let notes = self.notes.clone();
        tokio::spawn(async move {
            let note = match action.await {
                Ok(Some(info)) => Note::Info(info),
                Ok(None) => return,
                Err(e) => Note::Error(format!("{e:#}")),
            };
            let _ = notes.send(note).await;
        });
    }

    /// Starts a turn with `prompt`, its `@` files attached; refused, and kept in the input, while a turn runs.
    fn prompt(&mut self, prompt: String) {
        if let TurnState::Running(_) = self.app.turn {
            // Nothing typed is lost: it goes back to the input, to send once the turn ends.
            self.app.input = prompt;
            self.app
                .error("a turn is running; wait for it or press Esc to interrupt it");
            return;
        }
        let (prompt, notes) =
            service_supervisor::tui::input::attach_mentions(&prompt, &self.session_workspace.0);
        for note in notes {
            self.app.info(note);
        }
        let (backend, id) = (self.backend.clone(), self.app.session_id.clone());
        let overrides = TurnOverrides {
            cwd: self.cwd.clone(),
            model: self.model.clone(),
            ..TurnOverrides::default()
        };
        self.background(async move {
            backend
                .start_turn(&id, Task::new(prompt), overrides)
                .await
                .map(|_| None)
        });
    }

    async fn submit(&mut self, line: String) {
        match commands::parse(&line) {
            Err(e) => self.app.error(e),
            Ok(Input::Prompt(prompt)) => self.prompt(prompt),
            Ok(Input::Operator(command)) => {
                let (backend, id) = (self.backend.clone(), self.app.session_id.clone());
                self.background(async move { backend.command(&id, &command).await.map(|()| None) });
            }
            Ok(Input::Slash(slash)) => {
                if let Err(e) = self.slash(slash).await {
                    self.app.error(format!("{e:#}"));
                }
            }
        }
    }
}

async fn session_loop(
    backend: Backend,
    args: &TuiArgs,
    defaults: service_supervisor::config_file::ConfigFile,
) -> anyhow::Result<ExitCode> {
    let (notes_tx, mut notes) = mpsc::channel(64);
    let mut ui = Ui {
        backend: backend.clone(),
        app: App::new("", "", "", ""),
        events: Box::pin(futures::stream::pending()),
        notes: notes_tx,
        model: None,
        cwd: None,
        approvals: defaults.approvals,
        notify: defaults.notify,
        default_model: defaults.default_model.clone(),
        prices: defaults.prices.clone(),
        workspace: match &backend {
            // Attaching, a directory that cannot be a workspace (the home directory) only leaves /new a fresh one.
            Backend::Local(_) if args.session.is_some() || args.resume => {
                super::workspace::for_new_session(args.cwd.as_deref(), args.workspace)
                    .ok()
                    .flatten()
            }
            Backend::Local(_) => {
                super::workspace::for_new_session(args.cwd.as_deref(), args.workspace)?
            }
            // The server's rule: its fresh workspace unless --cwd names a directory under its --workspace-root.
            Backend::Remote(_) => args.cwd.clone(),
        },
        session_workspace: Default::default(),
        bundle_ref: String::new(),
        interrupted: None,
        redraw: false,
    };
    let bundle = args
        .bundle_arg
        .clone()
        .or(args.bundle.clone())
        .or(defaults.default_bundle.clone())
        .unwrap_or_else(|| service_supervisor::bundle::builtin::DEFAULT.to_string());
    match &args.session {
        _ if args.resume => ui.open_picker().await?,
        Some(id) => ui.attach(id).await?,
        None => ui.new_session(&bundle).await?,
    }
    if let Some(prompt) = args.prompt.clone().filter(|p| !p.trim().is_empty()) {
        ui.app.history.push(prompt.clone());
        ui.submit(prompt).await;
    }

    // Keys and pastes come from a blocking reader thread; it ends with the process.
    let (keys_tx, mut keys) = mpsc::channel::<Option<Event>>(64);
    std::thread::spawn(move || loop {
        let item = match event::read() {
            Ok(e @ (Event::Key(_) | Event::Paste(_))) => Some(e),
            Ok(_) => None, // resize and the like: just redraw
            Err(_) => return,
        };
        if keys_tx.blocking_send(item).is_err() {
            return;
        }
    });

    enable_raw_mode().context("cannot switch the terminal to raw mode")?;
    let _guard = TerminalGuard;
    execute!(
        std::io::stdout(),
        EnterAlternateScreen,
        EnableBracketedPaste
    )
    .context("cannot open the alternate screen")?;
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
    let mut terminal: Terminal<CrosstermBackend<Stdout>> =
        Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    // When the running turn began, to call the user back when a long one ends.
    let mut turn_began: Option<std::time::Instant> = None;

    while !ui.app.quit {
        if std::mem::take(&mut ui.redraw) {
            terminal.clear()?;
        }
        terminal.draw(|f| service_supervisor::tui::view::render(f, &ui.app))?;
        tokio::select! {
            key = keys.recv() => match key {
                Some(Some(Event::Key(k))) => ui.key(k).await,
                Some(Some(Event::Paste(text))) => ui.paste(&text),
                Some(_) => {}
                None => break,
            },
            msg = ui.events.next() => {
                if let Some(msg) = msg {
                    let (asking, running) = (ui.app.approval.is_some(), ui.app.turn != TurnState::Idle);
                    ui.app.apply(&msg);
                    // Apply what else has arrived before redrawing, so fast streams do not redraw per delta.
                    while let Some(Some(more)) = ui.events.next().now_or_never() {
                        ui.app.apply(&more);
                    }
                    ui.auto_answer();
                    if !asking && ui.app.approval.is_some() {
                        notify(ui.notify, "service-rs: an approval is waiting");
                        turn_began.get_or_insert_with(std::time::Instant::now);
                    }
                    if running && ui.app.turn == TurnState::Idle {
                        if turn_began.take().is_some_and(|t| t.elapsed() >= LONG_TURN) {
                            notify(ui.notify, "service-rs: the turn ended");
                        }
                    } else if !running && ui.app.turn != TurnState::Idle {
                        turn_began = Some(std::time::Instant::now());
                    }
                }
            }
            note = notes.recv() => match note {
                Some(Note::Info(t)) => ui.app.info(t),
                Some(Note::Error(t)) => ui.app.error(t),
                None => {}
            },
            _ = tick.tick() => {}
            _ = tokio::signal::ctrl_c() => ui.ctrl_c(),
        }
    }
    if let TurnState::Running(_) = ui.app.turn {
        let _ = backend.interrupt(&ui.app.session_id).await;
    }
    // The conversation stays in the terminal's scrollback, with how to come back to it.
    drop(_guard);
    let ran = ui
        .app
        .entries
        .iter()
        .any(|e| matches!(e, service_supervisor::tui::app::Entry::User(_)));
    if ran {
        use std::io::Write;
        let text = service_supervisor::tui::transcript::plain(&ui.app);
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{}", super::term_text::safe(&text));
        let _ = writeln!(
            out,
            "\nresume: service-rs tui --session {}",
            ui.app.session_id
        );
    }
    Ok(ExitCode::SUCCESS)
}
