//! The transcript as terminal lines: prompts, answers (markdown), reasoning, tool calls in the shared tool view
//! (`facade::tool_text`) with their diffs, command output. Also what the TUI leaves in the scrollback on exit.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use service_ipc::ToolCallStatus;

use super::app::{App, Entry};

/// Lines of a tool result or command output shown under it.
const OUTPUT_LINES: usize = 8;
/// Lines of an edit's hunks shown under it.
const EDIT_LINES: usize = 20;

fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

/// Every line of the transcript, oldest first.
pub fn transcript_lines(app: &App) -> Vec<Line<'static>> {
    let mut lines: Vec<Line<'static>> = Vec::new();
    for (i, entry) in app.entries.iter().enumerate() {
        match entry {
            Entry::User(text) => {
                let style = Style::default()
                    .fg(Color::Cyan)
                    .add_modifier(Modifier::BOLD);
                // Files a mention attached are named, not shown.
                let (text, attached) = match text.split_once("\n\n<attached uri=\"") {
                    Some((said, rest)) => (said, Some(attached_names(rest))),
                    None => (text.as_str(), None),
                };
                for (i, l) in text.lines().enumerate() {
                    let mark = if i == 0 { "› " } else { "  " };
                    lines.push(Line::from(Span::styled(format!("{mark}{l}"), style)));
                }
                if let Some(names) = attached {
                    lines.push(Line::from(Span::styled(
                        format!("  (attached: {names})"),
                        dim(),
                    )));
                }
            }
            Entry::Assistant(text) => lines.extend(super::markdown::lines(text)),
            Entry::Reasoning(text) if text.trim().is_empty() => {}
            Entry::Reasoning(text) => {
                let style = dim().add_modifier(Modifier::ITALIC);
                if app.show_reasoning {
                    lines.extend(
                        text.lines()
                            .map(|l| Line::from(Span::styled(format!("  {l}"), style))),
                    );
                } else {
                    let first: String =
                        text.lines().next().unwrap_or("").chars().take(70).collect();
                    lines.push(Line::from(Span::styled(
                        format!("  thinking: {first}… (Ctrl-R shows all)"),
                        style,
                    )));
                }
            }
            Entry::Tool {
                name,
                title,
                outcome,
                status,
                output,
                diff,
                approval,
                ..
            } => {
                let (mark, text, style) = match (status, outcome) {
                    (Some(ToolCallStatus::Ok), Some(o)) => {
                        ("✓", o, Style::default().fg(Color::Green))
                    }
                    (Some(_), Some(o)) => ("✗", o, Style::default().fg(Color::Red)),
                    _ => ("⚙", title, Style::default().fg(Color::Yellow)),
                };
                lines.push(Line::from(Span::styled(
                    format!("{mark} {text}"),
                    style.add_modifier(Modifier::BOLD),
                )));
                if let Some(approval) = approval {
                    lines.push(Line::from(Span::styled(
                        format!("  · {approval}"),
                        Style::default().fg(Color::Blue),
                    )));
                }
                if let Some(diff) = diff {
                    // The change itself, also when a rule let it through without a question.
                    let hunks = crate::facade::tool_text::hunks(diff);
                    lines.extend(diff_lines(&hunks, EDIT_LINES));
                    continue;
                }
                if status.is_none() {
                    continue;
                }
                // A command's output is shown live under it (the next entries, up to the next call): not again.
                let shown_live = name == "Bash"
                    && app.entries[i + 1..]
                        .iter()
                        .take_while(|e| !matches!(e, Entry::Tool { .. }))
                        .any(|e| matches!(e, Entry::Exec { .. }));
                // The outcome line says what a read, a search or an update did.
                let summarised = *status == Some(ToolCallStatus::Ok)
                    && matches!(
                        name.as_str(),
                        "Read" | "Write" | "Edit" | "UpdatePlan" | "Skill"
                    );
                if !shown_live && !summarised {
                    let text = app.paths.text(output);
                    lines.extend(
                        tail(&text, OUTPUT_LINES)
                            .into_iter()
                            .map(|l| Line::from(Span::styled(format!("    {l}"), dim()))),
                    );
                }
            }
            Entry::Exec {
                command,
                output,
                exit,
                ..
            } => {
                lines.push(Line::from(Span::styled(
                    format!("$ {command}"),
                    Style::default().fg(Color::Magenta),
                )));
                lines.extend(
                    tail(output, OUTPUT_LINES)
                        .into_iter()
                        .map(|l| Line::from(Span::raw(format!("  {l}")))),
                );
                match exit {
                    Some(Some(0)) | None => {}
                    Some(Some(code)) => lines.push(Line::from(Span::styled(
                        format!("  [exit {code}]"),
                        Style::default().fg(Color::Red),
                    ))),
                    Some(None) => lines.push(Line::from(Span::styled(
                        "  [killed]".to_string(),
                        Style::default().fg(Color::Red),
                    ))),
                }
            }
            Entry::Error(text) => lines.push(Line::from(Span::styled(
                format!("✗ {text}"),
                Style::default().fg(Color::Red),
            ))),
            Entry::Info(text) => lines.extend(text.lines().map(|l| {
                Line::from(Span::styled(
                    format!("· {l}"),
                    Style::default().fg(Color::Blue),
                ))
            })),
            Entry::Diff(text) => lines.extend(diff_lines(text, usize::MAX)),
        }
        lines.push(Line::default());
    }
    lines
}

/// The last `n` lines of `text`, with a marker when lines were left out.
fn tail(text: &str, n: usize) -> Vec<String> {
    let all: Vec<&str> = text.trim_end().lines().collect();
    let mut out = Vec::new();
    if all.len() > n {
        out.push(format!("… {} more lines", all.len() - n));
    }
    out.extend(
        all[all.len().saturating_sub(n)..]
            .iter()
            .map(|l| expand_tabs(l)),
    );
    out
}

/// Tabs as spaces to the next multiple of 8: the terminal backend does not draw tab characters.
fn expand_tabs(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if c == '\t' {
            let pad = 8 - out.chars().count() % 8;
            out.extend(std::iter::repeat_n(' ', pad));
        } else {
            out.push(c);
        }
    }
    out
}

/// Up to `max` lines of a unified diff, `-` red and `+` green, with a marker when lines were left out.
pub(super) fn diff_lines(diff: &str, max: usize) -> Vec<Line<'static>> {
    let all: Vec<&str> = diff.lines().collect();
    let mut lines: Vec<Line<'static>> = all
        .iter()
        .take(max)
        .map(|l| {
            let style = match l.chars().next() {
                _ if l.starts_with("---") || l.starts_with("+++") => {
                    Style::default().add_modifier(Modifier::BOLD)
                }
                Some('-') => Style::default().fg(Color::Red),
                Some('+') => Style::default().fg(Color::Green),
                Some('@') => Style::default().fg(Color::Cyan),
                _ => Style::default(),
            };
            Line::styled(l.to_string(), style)
        })
        .collect();
    if all.len() > max {
        lines.push(Line::styled(
            format!(
                "… {} more lines (/diff after the turn shows them)",
                all.len() - max
            ),
            dim(),
        ));
    }
    lines
}

/// The names of the files attached after a prompt (`<attached uri="NAME">` blocks), comma-separated.
fn attached_names(rest: &str) -> String {
    let mut names = Vec::new();
    for part in format!("<attached uri=\"{rest}")
        .split("<attached uri=\"")
        .skip(1)
    {
        if let Some((name, _)) = part.split_once('"') {
            names.push(name.to_string());
        }
    }
    names.join(", ")
}

/// The transcript as plain text, for the scrollback when the TUI closes: what a person would copy.
pub fn plain(app: &App) -> String {
    let mut out = String::new();
    for line in transcript_lines(app) {
        for span in &line.spans {
            out.push_str(&span.content);
        }
        out.push('\n');
    }
    out
}
