//! `service-rs tui`: chat over a session of the local runtime.
//!
//! One loop draws the state and waits for a key, a session event, or a note from a background action (starting a
//! turn, an operator command, an approval). The terminal is restored on every exit path: normal, error, panic.

use std::io::Stdout;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::prelude::CrosstermBackend;
use ratatui::Terminal;
use service_ipc::{ApprovalDecision, ModelRef, Task, TurnOverrides};
use service_supervisor::runtime::EventStream;
use service_supervisor::tui::app::{App, TurnState};
use service_supervisor::tui::commands::{self, Input, Slash, HELP};
use service_supervisor::{ServiceHome, ServiceRuntime};
use tokio::sync::mpsc;

/// Arguments of `tui`.
#[derive(Debug, clap::Args)]
pub struct TuiArgs {
    /// Bundle of a new session.
    #[arg(long, required_unless_present = "session")]
    bundle: Option<String>,
    /// Attach to an existing session instead.
    #[arg(long, conflicts_with = "bundle")]
    session: Option<String>,
    /// Run the session worker on the host with no confinement.
    #[arg(long)]
    dangerous_sandbox_mode: bool,
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
        LeaveAlternateScreen,
        ratatui::crossterm::cursor::Show
    );
}

pub fn run(home: ServiceHome, args: TuiArgs) -> anyhow::Result<ExitCode> {
    let rt = super::runtime(home, args.dangerous_sandbox_mode)?;
    super::tokio()?.block_on(async move {
        let result = session_loop(&rt, &args).await;
        rt.shutdown("the TUI closed").await;
        result
    })
}

/// Notes from background actions.
enum Note {
    Info(String),
    Error(String),
}

struct Ui {
    rt: ServiceRuntime,
    app: App,
    events: EventStream,
    notes: mpsc::Sender<Note>,
    model: Option<ModelRef>,
    cwd: Option<String>,
    /// Reference of the current session's bundle, for /new.
    bundle_ref: String,
}

impl Ui {
    /// Switches to session `id`: a fresh view that replays its journal.
    fn attach(&mut self, id: &str) -> anyhow::Result<()> {
        let record = self.rt.get_session(id)?;
        let bundle = service_supervisor::bundle::resolve(self.rt.home(), &record.bundle.reference)?;
        let model = bundle.agent.model.to_ref();
        let label = format!("{}@{}", record.bundle.id, record.bundle.version);
        let mut app = App::new(
            id,
            &label,
            &format!("{}/{}", model.provider, model.name),
            &bundle.manifest.sandbox.mode.to_string(),
        );
        self.bundle_ref = record.bundle.reference.clone();
        app.history = std::mem::take(&mut self.app.history);
        self.app = app;
        self.events = self.rt.subscribe_session_from(id, 0)?;
        self.model = None;
        self.cwd = None;
        Ok(())
    }

    fn new_session(&mut self, bundle_ref: &str) -> anyhow::Result<()> {
        let record = self.rt.create_session(bundle_ref, None)?;
        self.attach(&record.id)?;
        self.app.info(format!(
            "new session {} of {}",
            record.id, record.bundle.reference
        ));
        Ok(())
    }

    fn note(
        &self,
        f: impl std::future::Future<Output = Result<Option<String>, String>> + Send + 'static,
    ) {
        let notes = self.notes.clone();
        tokio::spawn(async move {
            let note = match f.await {
                Ok(Some(info)) => Some(Note::Info(info)),
                Ok(None) => None,
                Err(e) => Some(Note::Error(e)),
            };
            if let Some(n) = note {
                let _ = notes.send(n).await;
            }
        });
    }

    fn submit(&mut self, line: String) {
        match commands::parse(&line) {
            Err(e) => self.app.error(e),
            Ok(Input::Prompt(prompt)) => {
                if let TurnState::Running(_) = self.app.turn {
                    self.app
                        .error("a turn is running; wait for it or press Esc to interrupt it");
                    return;
                }
                let rt = self.rt.clone();
                let id = self.app.session_id.clone();
                let overrides = TurnOverrides {
                    cwd: self.cwd.clone(),
                    model: self.model.clone(),
                };
                self.note(async move {
                    rt.start_turn(&id, Task::new(prompt), overrides)
                        .await
                        .map(|_| None)
                        .map_err(|e| e.to_string())
                });
            }
            Ok(Input::Operator(command)) => {
                let rt = self.rt.clone();
                let id = self.app.session_id.clone();
                self.note(async move {
                    rt.run_session_command(&id, &command)
                        .await
                        .map(|_| None)
                        .map_err(|e| e.to_string())
                });
            }
            Ok(Input::Slash(slash)) => {
                if let Err(e) = self.slash(slash) {
                    self.app.error(format!("{e:#}"));
                }
            }
        }
    }

    fn slash(&mut self, slash: Slash) -> anyhow::Result<()> {
        match slash {
            Slash::Help => {
                let text: Vec<String> = HELP.iter().map(|(c, h)| format!("{c:<24} {h}")).collect();
                self.app.info(format!("{}\n!<command>               run a command in the session sandbox (not a turn)\nCtrl-R                   show or hide reasoning", text.join("\n")));
            }
            Slash::New => {
                let bundle = self.bundle_ref.clone();
                self.new_session(&bundle)?;
            }
            Slash::Bundle(reference) => self.new_session(&reference)?,
            Slash::Sessions => {
                let list: Vec<String> = self
                    .rt
                    .list_sessions()?
                    .iter()
                    .map(|r| format!("{}  {}  {} turns", r.id, r.bundle.reference, r.turn_count))
                    .collect();
                self.app.info(if list.is_empty() {
                    "no sessions".into()
                } else {
                    list.join("\n")
                });
            }
            Slash::Resume(id) => {
                self.attach(&id)?;
                self.app.info(format!("resumed session {id}"));
            }
            Slash::Model(spec) => {
                let (provider, name) = spec
                    .split_once('/')
                    .context("/model takes provider/name, e.g. anthropic/claude-sonnet-4-5")?;
                self.model = Some(ModelRef {
                    provider: provider.into(),
                    name: name.into(),
                    config: None,
                });
                self.app.model = spec.clone();
                self.app.info(format!("next turns use {spec}"));
            }
            Slash::Cwd(dir) => {
                self.app.info(format!("next turns run in {dir}"));
                self.cwd = Some(dir);
            }
            Slash::Clear => self.app.entries.clear(),
            Slash::Quit => self.app.quit = true,
        }
        Ok(())
    }

    fn key(&mut self, key: KeyEvent) {
        if key.kind != KeyEventKind::Press {
            return;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if let Some(a) = self.app.approval.clone() {
            let decision = match key.code {
                KeyCode::Char('o') => Some(ApprovalDecision::AllowOnce),
                KeyCode::Char('a') => Some(ApprovalDecision::AllowAlways),
                KeyCode::Char('d') => Some(ApprovalDecision::Deny),
                _ => None,
            };
            if let Some(decision) = decision {
                let rt = self.rt.clone();
                self.note(async move {
                    rt.resolve_approval(&a.request_id, decision)
                        .await
                        .map(|_| None)
                        .map_err(|e| e.to_string())
                });
                return;
            }
        }
        match key.code {
            KeyCode::Char('c') if ctrl => self.app.quit = true,
            KeyCode::Char('r') if ctrl => self.app.show_reasoning = !self.app.show_reasoning,
            KeyCode::Char('j') if ctrl => self.app.input.push('\n'),
            KeyCode::Enter => {
                if let Some(line) = self.app.take_input() {
                    self.submit(line);
                }
            }
            KeyCode::Esc => {
                if let TurnState::Running(_) = self.app.turn {
                    let rt = self.rt.clone();
                    let id = self.app.session_id.clone();
                    self.note(async move {
                        rt.interrupt(&id)
                            .await
                            .map(|_| Some("interrupting…".into()))
                            .map_err(|e| e.to_string())
                    });
                }
            }
            KeyCode::Backspace => {
                self.app.input.pop();
            }
            KeyCode::Up => self.app.browse_history(true),
            KeyCode::Down => self.app.browse_history(false),
            KeyCode::PageUp => self.app.scroll = self.app.scroll.saturating_add(10),
            KeyCode::PageDown => self.app.scroll = self.app.scroll.saturating_sub(10),
            KeyCode::Char(c) => self.app.input.push(c),
            _ => {}
        }
    }
}

async fn session_loop(rt: &ServiceRuntime, args: &TuiArgs) -> anyhow::Result<ExitCode> {
    let (notes_tx, mut notes) = mpsc::channel(64);
    let mut ui = Ui {
        rt: rt.clone(),
        app: App::new("", "", "", ""),
        events: Box::pin(futures::stream::pending()),
        notes: notes_tx,
        model: None,
        cwd: None,
        bundle_ref: String::new(),
    };
    match (&args.session, &args.bundle) {
        (Some(id), _) => ui.attach(id)?,
        (None, Some(bundle)) => ui.new_session(bundle)?,
        (None, None) => anyhow::bail!("pass --bundle <ref> or --session <id>"),
    }

    // Keys come from a blocking reader thread; it ends with the process.
    let (keys_tx, mut keys) = mpsc::channel::<Option<KeyEvent>>(64);
    std::thread::spawn(move || loop {
        let item = match event::read() {
            Ok(Event::Key(k)) => Some(k),
            Ok(_) => None, // resize and the like: just redraw
            Err(_) => return,
        };
        if keys_tx.blocking_send(item).is_err() {
            return;
        }
    });

    enable_raw_mode().context("cannot switch the terminal to raw mode")?;
    let _guard = TerminalGuard;
    execute!(std::io::stdout(), EnterAlternateScreen)
        .context("cannot open the alternate screen")?;
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
    let mut terminal: Terminal<CrosstermBackend<Stdout>> =
        Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    let mut tick = tokio::time::interval(Duration::from_millis(250));

    while !ui.app.quit {
        terminal.draw(|f| service_supervisor::tui::view::render(f, &ui.app))?;
        tokio::select! {
            key = keys.recv() => match key {
                Some(Some(k)) => ui.key(k),
                Some(None) => {}
                None => break,
            },
            msg = ui.events.next() => {
                if let Some(msg) = msg {
                    ui.app.apply(&msg);
                    // Apply what else has arrived before redrawing, so fast streams do not redraw per delta.
                    while let Some(Some(more)) = ui.events.next().now_or_never() {
                        ui.app.apply(&more);
                    }
                }
            }
            note = notes.recv() => match note {
                Some(Note::Info(t)) => ui.app.info(t),
                Some(Note::Error(t)) => ui.app.error(t),
                None => {}
            },
            _ = tick.tick() => {}
            _ = tokio::signal::ctrl_c() => ui.app.quit = true,
        }
    }
    if let TurnState::Running(_) = ui.app.turn {
        let _ = rt.interrupt(&ui.app.session_id).await;
    }
    Ok(ExitCode::SUCCESS)
}

use futures::FutureExt;
