//! What `run` shows on a terminal while a turn runs: the answer as it streams in, on stdout, and one spinner line
//! on stderr saying what the run waits for and for how long. Each is on only when its stream is a terminal and
//! `--json` is off, so pipes and scripts see exactly what they saw before.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use service_ipc::EventPayload;

use super::term_text::Output;

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// The terminal side of one run.
pub struct Progress {
    out: Output,
    spinner: bool,
    stream: bool,
    started: Instant,
    status: Option<String>,
    frame: usize,
    drawn: bool,
    /// The answer text on stdout does not end with a newline yet.
    text_open: bool,
    /// The text of the current model step was streamed, so the final answer need not be printed again.
    step_streamed: bool,
    /// A write to stdout failed: its reader went away (`| head`).
    closed: bool,
}

impl Progress {
    /// Spinner and streaming as the terminals allow; both off with `--json`. Answer text goes out through `out`.
    pub fn new(json: bool, out: Output) -> Progress {
        Progress {
            out,
            spinner: !json && std::io::stderr().is_terminal(),
            stream: !json && std::io::stdout().is_terminal(),
            started: Instant::now(),
            status: None,
            frame: 0,
            drawn: false,
            text_open: false,
            step_streamed: false,
            closed: false,
        }
    }

    /// Whether stdout was closed under the run (a reader such as `head` went away).
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Writes answer text to stdout; a failed write marks stdout closed instead of panicking as `print!` would.
    fn write_out(&mut self, text: &str) {
        if self.closed {
            return;
        }
        let mut out = std::io::stdout().lock();
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            self.closed = true;
        }
    }

    /// Whether the spinner wants redrawing on a timer.
    pub fn spinning(&self) -> bool {
        self.spinner && self.status.is_some()
    }

    /// Follows one event of the turn: what the run now waits for, and answer text to stream.
    pub fn event(&mut self, payload: &EventPayload) {
        let status = match payload {
            EventPayload::TurnStarted { .. } => Some("model…".to_string()),
            EventPayload::AgentMessageDelta { delta, .. } => {
                if self.stream {
                    self.clear();
                    let text = self.out.stdout(delta).into_owned();
                    self.write_out(&text);
                    self.text_open = !delta.ends_with('\n');
                    self.step_streamed = true;
                }
                Some("model…".to_string())
            }
            EventPayload::ToolCallStarted { tool, .. } => {
                self.end_text();
                self.step_streamed = false;
                Some(format!("{tool}…"))
            }
            EventPayload::ExecCommandBegin {
                command,
                turn_id: Some(_),
                ..
            } => {
                // After a CodeAct program (which no tool call precedes) the text is a new step's.
                self.end_text();
                self.step_streamed = false;
                Some(format!(
                    "running: {}",
                    command.lines().next().unwrap_or_default()
                ))
            }
            EventPayload::ToolCallFinished { .. } => Some("model…".to_string()),
            EventPayload::ModelRetry {
                attempt,
                max_attempts,
                reason,
                ..
            } => Some(format!(
                "retrying provider ({attempt}/{max_attempts}): {reason}"
            )),
            _ => None,
        };
        if let Some(status) = status {
            if self.status.as_deref() != Some(&status) {
                self.status = Some(status);
                self.tick();
            }
        }
    }

    /// Redraws the spinner line (not while answer text is mid-line on the same terminal).
    pub fn tick(&mut self) {
        let Some(status) = self.status.as_deref().filter(|_| self.spinner) else {
            return;
        };
        if self.text_open {
            return;
        }
        self.frame = (self.frame + 1) % FRAMES.len();
        let line = format!(
            "{} {status} ({}s · Ctrl-C interrupts)",
            FRAMES[self.frame],
            self.started.elapsed().as_secs()
        );
        // One line that never wraps, or `\r` could not take it back.
        let width = ratatui::crossterm::terminal::size()
            .map(|(w, _)| usize::from(w))
            .unwrap_or(80);
        let line: String = line.chars().take(width.saturating_sub(1)).collect();
        eprint!("\r\x1b[2K{line}");
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    /// Takes the spinner line off the screen, before anything else is written to it.
    pub fn clear(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
            self.drawn = false;
        }
    }

    /// Makes room for a line on stderr: the spinner goes, and streamed text gets its newline.
    pub fn interject(&mut self) {
        self.clear();
        self.end_text();
    }

    /// Stops the spinner (for a question on the terminal, or the end of the run).
    pub fn pause(&mut self) {
        self.interject();
        self.status = None;
    }

    /// Starts the spinner again after a pause.
    pub fn resume(&mut self) {
        if self.status.is_none() {
            self.status = Some("model…".into());
        }
    }

    /// Prints the final answer, unless it already streamed, and ends the line.
    pub fn finish(&mut self, final_message: &str) {
        self.pause();
        if !(self.stream && self.step_streamed) {
            let text = format!("{}\n", self.out.stdout(final_message));
            self.write_out(&text);
        }
    }

    fn end_text(&mut self) {
        if self.text_open {
            self.clear();
            self.write_out("\n");
            self.text_open = false;
        }
    }
}
