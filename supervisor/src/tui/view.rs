//! Drawing the TUI: transcript, plan, approval prompt, input box and status line. A pure function of [`App`], so
//! tests render it into ratatui's test backend.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::Frame;
use service_ipc::PlanStatus;

use super::app::{App, TurnState};
use super::editing::{PopupKind, POPUP_ROWS};

/// Draws the whole screen.
pub fn render(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let plan_h = if app.plan.is_empty() {
        0
    } else {
        (app.plan.len() as u16 + 2).min(area.height / 3)
    };
    let approval_h = match &app.approval {
        Some(a) => {
            let diff = a.diff.as_deref().map_or(0, |d| {
                let n = d.lines().count();
                n.min(APPROVAL_DIFF_LINES) + usize::from(n > APPROVAL_DIFF_LINES)
            });
            let place = usize::from(a.tool != "network" && !app.workspace.is_empty())
                + usize::from(a.warning.is_some());
            // The question, the keys on a line of their own, where, and the diff.
            (4 + place + diff).min(usize::from(area.height / 2).max(4)) as u16
        }
        None => 0,
    };
    let input_h = (app.input.split('\n').count() as u16).clamp(1, 5) + 2;
    let header_h = u16::from(!app.workspace.is_empty());
    let [header, main, plan, approval, input, status] = Layout::vertical([
        Constraint::Length(header_h),
        Constraint::Min(3),
        Constraint::Length(plan_h),
        Constraint::Length(approval_h),
        Constraint::Length(input_h),
        Constraint::Length(1),
    ])
    .areas(area);
    if header_h > 0 {
        frame.render_widget(
            Paragraph::new(format!(" workspace {}", app.workspace)).style(dim()),
            header,
        );
    }
    match &app.picker {
        Some(picker) => picker_box(frame, main, picker),
        None => transcript(frame, main, app),
    }
    if plan_h > 0 {
        plan_box(frame, plan, app);
    }
    if approval_h > 0 {
        approval_box(frame, approval, app);
    }
    input_box(frame, input, app);
    popup_box(frame, main, app);
    status_line(frame, status, app);
    if app.no_color {
        for cell in frame.buffer_mut().content.iter_mut() {
            cell.set_fg(Color::Reset).set_bg(Color::Reset);
        }
    }
}

fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

/// The transcript as styled lines.
fn transcript(frame: &mut Frame, area: Rect, app: &App) {
    let lines = super::transcript::transcript_lines(app);
    let width = area.width.max(1) as usize;
    let rows: usize = lines.iter().map(|l| l.width().max(1).div_ceil(width)).sum();
    let top = rows
        .saturating_sub(area.height as usize)
        .saturating_sub(app.scroll as usize);
    let p = Paragraph::new(Text::from(lines))
        .wrap(Wrap { trim: false })
        .scroll((top as u16, 0));
    frame.render_widget(p, area);
}

/// The resume picker in place of the transcript: what was typed, then the matching sessions, the chosen one
/// highlighted.
fn picker_box(frame: &mut Frame, area: Rect, picker: &super::picker::Picker) {
    let matching = picker.matching();
    let mut lines = vec![
        Line::from(vec![
            Span::styled("filter: ", dim()),
            Span::raw(picker.filter.clone()),
            Span::styled("▏", Style::default().fg(Color::Yellow)),
        ]),
        Line::default(),
    ];
    if matching.is_empty() {
        lines.push(Line::styled("no session matches", dim()));
    }
    let rows = area.height.saturating_sub(4) as usize;
    let first = picker.selected.saturating_sub(rows.saturating_sub(1));
    for (i, choice) in matching.iter().enumerate().skip(first).take(rows) {
        let style = if i == picker.selected {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default()
        };
        lines.push(Line::styled(choice.label.clone(), style));
    }
    let what = match picker.purpose {
        super::picker::Purpose::Resume => "resume",
        super::picker::Purpose::Rewind => "rewind",
    };
    let title = format!(
        " {what}: {} · type to filter · ↑↓ choose · Enter picks · Esc closes ",
        picker.title
    );
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        area,
    );
}

fn plan_box(frame: &mut Frame, area: Rect, app: &App) {
    let lines: Vec<Line> = app
        .plan
        .iter()
        .map(|item| {
            let (mark, style) = match item.status {
                PlanStatus::Completed => ("✓", Style::default().fg(Color::Green)),
                PlanStatus::InProgress => (
                    "▸",
                    Style::default()
                        .fg(Color::Yellow)
                        .add_modifier(Modifier::BOLD),
                ),
                PlanStatus::Pending => ("·", dim()),
            };
            Line::from(Span::styled(format!("{mark} {}", item.step), style))
        })
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" plan ")),
        area,
    );
}

/// The `/` or `@` popup, drawn at the bottom of the transcript, just above the input.
fn popup_box(frame: &mut Frame, area: Rect, app: &App) {
    let Some(popup) = &app.popup else { return };
    let rows = popup.items.len().min(POPUP_ROWS);
    let height = (rows as u16 + 2).min(area.height);
    let rect = Rect {
        x: area.x,
        y: area.y + area.height - height,
        width: area.width,
        height,
    };
    let first = popup.selected.saturating_sub(rows.saturating_sub(1));
    let width = popup
        .items
        .iter()
        .map(|(name, _)| name.chars().count())
        .max()
        .unwrap_or(0);
    let lines: Vec<Line> = popup
        .items
        .iter()
        .enumerate()
        .skip(first)
        .take(rows)
        .map(|(i, (name, note))| {
            let style = if i == popup.selected {
                Style::default().add_modifier(Modifier::REVERSED)
            } else {
                Style::default()
            };
            Line::from(vec![
                Span::styled(format!("{name:width$}"), style),
                Span::styled(format!("  {note}"), dim()),
            ])
        })
        .collect();
    let title = match popup.kind {
        PopupKind::Slash => " commands · Tab completes · ↑↓ choose · Esc closes ",
        PopupKind::File => " files · Tab inserts · ↑↓ choose · Esc closes ",
        PopupKind::Model => " models · Enter switches · ↑↓ choose · Esc closes ",
    };
    frame.render_widget(ratatui::widgets::Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        rect,
    );
}

/// Diff lines the approval box shows at most.
const APPROVAL_DIFF_LINES: usize = 12;

fn approval_box(frame: &mut Frame, area: Rect, app: &App) {
    let Some(a) = &app.approval else { return };
    let question = match a.tool.as_str() {
        "network" => format!("Allow network access to `{}`?", a.summary),
        tool => format!("Allow {tool} `{}`?", app.paths.text(&a.summary)),
    };
    let keys = match (&a.project_rule, app.denying) {
        (_, true) => "type why, then Enter to deny (Esc: back)".to_string(),
        (Some(rule), false) => format!(
            "[o] once  [a] always  [p] always `{}` in this project  [d] deny  [r] deny, saying why",
            app.paths.text(rule)
        ),
        (None, false) => "[o] once  [a] always  [d] deny  [r] deny, saying why".to_string(),
    };
    let mut lines = vec![
        Line::styled(question, Style::default().add_modifier(Modifier::BOLD)),
        Line::styled(keys, Style::default().fg(Color::Yellow)),
    ];
    if a.tool != "network" && !app.workspace.is_empty() {
        lines.push(Line::styled(format!("in {}", app.workspace), dim()));
    }
    if let Some(warning) = &a.warning {
        lines.push(Line::styled(
            format!("warning: {}", app.paths.text(warning)),
            Style::default().fg(Color::Red),
        ));
    }
    if let Some(diff) = &a.diff {
        lines.extend(super::transcript::diff_lines(
            &app.paths.diff(diff),
            APPROVAL_DIFF_LINES,
        ));
    }
    let block = Block::bordered()
        .title(" permission needed ")
        .border_style(Style::default().fg(Color::Red));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn input_box(frame: &mut Frame, area: Rect, app: &App) {
    let title = match &app.confirm {
        Some(super::editing::Confirm::Rewind(turn)) => format!(
            " rewind to before turn {turn}? [b] files and conversation · [f] files only · [c] conversation only \
             · Esc cancels "
        ),
        None => " message · Enter sends · Alt-Enter or Ctrl-J new line · Ctrl-G editor · @ file · / commands "
            .to_string(),
    };
    let text: Vec<Line> = app
        .input
        .split('\n')
        .map(|l| Line::from(l.to_string()))
        .collect();
    let shown = text
        .len()
        .saturating_sub(area.height.saturating_sub(2) as usize);
    frame.render_widget(
        Paragraph::new(text)
            .block(Block::bordered().title(title))
            .scroll((shown as u16, 0)),
        area,
    );
    let last = app.input.split('\n').next_back().unwrap_or("");
    let rows = app
        .input
        .split('\n')
        .count()
        .min(area.height.saturating_sub(2) as usize)
        .max(1);
    let x = area.x + 1 + (last.chars().count() as u16).min(area.width.saturating_sub(3));
    let y = area.y + rows as u16;
    frame.set_cursor_position((x, y));
}

fn status_line(frame: &mut Frame, area: Rect, app: &App) {
    let state = match (&app.turn, &app.approval) {
        (_, Some(_)) => "waiting for approval",
        (TurnState::Running(_), _) => "running",
        (TurnState::Idle, _) => "idle",
    };
    let short: String = app.session_id.chars().take(8).collect();
    // The state and the session first: they are what a narrow terminal must still show.
    let mut text = format!(
        " {state} │ session {short} │ {} │ {} │ sandbox {} ",
        app.bundle, app.model, app.sandbox
    );
    if !app.usage.is_empty() {
        text.push_str(&format!("│ {} ", app.usage));
    }
    frame.render_widget(
        Paragraph::new(text).style(Style::default().bg(Color::Blue).fg(Color::White)),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::transcript::transcript_lines;
    use pretty_assertions::assert_eq;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;
    use service_ipc::{
        EventMsg, EventPayload, ModelRef, PlanItem, SandboxMode, ToolCallStatus, TurnContext,
    };

    fn ev(payload: EventPayload) -> EventMsg {
        EventMsg {
            id: "1".into(),
            session_id: "s".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            payload,
        }
    }

    fn started(prompt: &str) -> EventMsg {
        ev(EventPayload::TurnStarted {
            turn_id: "t".into(),
            context: Box::new(TurnContext {
                cwd: "/workspace".into(),
                model: ModelRef {
                    provider: "scripted".into(),
                    name: "demo".into(),
                    config: None,
                },
                sandbox_mode: SandboxMode::ReadOnly,
                instructions: Vec::new(),
                approval_policy: None,
                metadata: None,
            }),
            submission_id: "x".into(),
            prompt: prompt.into(),
            history_mark: None,
        })
    }

    fn screen(app: &App) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(60, 14)).unwrap();
        terminal.draw(|f| render(f, app)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol().to_string())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    fn app() -> App {
        App::new(
            "0123456789abcdef",
            "hello@0.1.0",
            "scripted/demo",
            "read_only",
        )
    }

    #[test]
    fn no_color_draws_every_cell_in_the_terminal_default_colours() {
        let mut app = app();
        app.no_color = false;
        app.apply(&started("hi"));
        let draw = |app: &App| {
            let mut terminal = Terminal::new(TestBackend::new(60, 14)).unwrap();
            terminal.draw(|f| render(f, app)).unwrap();
            terminal.backend().buffer().clone()
        };
        let coloured = |b: &ratatui::buffer::Buffer| {
            b.content
                .iter()
                .any(|c| c.fg != Color::Reset || c.bg != Color::Reset)
        };
        assert!(coloured(&draw(&app)), "the default has colours");
        app.no_color = true;
        let plain = draw(&app);
        assert!(!coloured(&plain));
        assert!(
            screen(&app).iter().any(|l| l.contains("hi")),
            "the text is all there"
        );
    }

    #[test]
    fn streaming_text_and_collapsed_reasoning() {
        let mut app = app();
        app.apply(&started("hi there"));
        app.apply(&ev(EventPayload::ReasoningDelta {
            turn_id: "t".into(),
            delta: "Look first.".into(),
        }));
        app.apply(&ev(EventPayload::AgentMessageDelta {
            turn_id: "t".into(),
            delta: "Hello, ".into(),
        }));
        app.apply(&ev(EventPayload::AgentMessageDelta {
            turn_id: "t".into(),
            delta: "wor".into(),
        }));
        app.input = "next question".into();
        assert_eq!(
            screen(&app),
            [
                "› hi there",
                "",
                "  thinking: Look first.… (Ctrl-R shows all)",
                "",
                "Hello, wor",
                "",
                "",
                "",
                "",
                "",
                "┌ message · Enter sends · Alt-Enter or Ctrl-J new line · Ct┐",
                "│next question                                             │",
                "└──────────────────────────────────────────────────────────┘",
                " running │ session 01234567 │ hello@0.1.0 │ scripted/demo │",
            ]
        );
    }

    #[test]
    fn tool_call_with_result_and_plan() {
        let mut app = app();
        app.apply(&started("read it"));
        app.apply(&ev(EventPayload::ToolCallStarted {
            turn_id: "t".into(),
            call_id: "c".into(),
            tool: "Read".into(),
            arguments: json!({"file_path": "a.txt"}),
            parent_exec_id: None,
        }));
        app.apply(&ev(EventPayload::ToolCallFinished {
            turn_id: "t".into(),
            call_id: "c".into(),
            tool: "Read".into(),
            status: ToolCallStatus::Ok,
            output: "     1\thello".into(),
            diff: None,
        }));
        app.apply(&ev(EventPayload::PlanUpdate {
            turn_id: "t".into(),
            explanation: None,
            plan: vec![
                PlanItem {
                    step: "read a.txt".into(),
                    status: PlanStatus::Completed,
                },
                PlanItem {
                    step: "answer".into(),
                    status: PlanStatus::InProgress,
                },
            ],
        }));
        let s = screen(&app);
        assert_eq!(
            &s[..5],
            ["› read it", "", "✓ Read a.txt (1 line)", "", ""].map(String::from)
        );
        assert_eq!(
            &s[6..10],
            [
                "┌ plan ────────────────────────────────────────────────────┐",
                "│✓ read a.txt                                              │",
                "│▸ answer                                                  │",
                "└──────────────────────────────────────────────────────────┘"
            ]
            .map(String::from)
        );
        assert!(s[13].starts_with(" running │"), "{}", s[13]);
    }

    #[test]
    fn approval_prompt_replaces_nothing_and_says_the_keys() {
        let mut app = app();
        app.apply(&started("write"));
        app.apply(&ev(EventPayload::PermissionRequested {
            turn_id: "t".into(),
            request_id: "r".into(),
            call_id: "c".into(),
            tool: "Write".into(),
            summary: "/workspace/out.txt".into(),
            rule: None,
            diff: Some("--- out.txt\n+++ out.txt\n@@ -0,0 +1 @@\n+new line\n".into()),
            project_rule: None,
            warning: None,
            child_session_id: None,
        }));
        let s = screen(&app);
        let top = s
            .iter()
            .position(|l| l == "┌ permission needed ───────────────────────────────────────┐")
            .unwrap_or_else(|| panic!("no approval box:\n{}", s.join("\n")));
        assert_eq!(
            s[top + 1],
            "│Allow Write `out.txt`?                                    │"
        );
        assert!(
            s[top + 2].starts_with("│[o] once  [a] always  [d] deny"),
            "{}",
            s[top + 2]
        );
        // The diff of what the Write would change, under the question.
        assert!(s[top + 3].starts_with("│--- out.txt"), "{}", s.join("\n"));
        // The box takes at most half the screen; this one is 14 lines high.
        assert!(s[top + 5].starts_with("│@@ -0,0 +1 @@"), "{}", s.join("\n"));
        assert!(s[13].starts_with(" waiting for approval │"), "{}", s[13]);
        app.apply(&ev(EventPayload::ApprovalResolved {
            turn_id: "t".into(),
            request_id: "r".into(),
            decision: service_ipc::ApprovalDecision::AllowOnce,
            reason: None,
            child_session_id: None,
            hook: None,
        }));
        assert!(app.approval.is_none());
        assert!(screen(&app)
            .iter()
            .any(|l| l == "· permission allowed once"));
    }

    #[test]
    fn errors_appear_in_the_transcript_and_the_turn_ends() {
        let mut app = app();
        app.apply(&started("go"));
        app.apply(&ev(EventPayload::Error {
            turn_id: Some("t".into()),
            code: "worker_died".into(),
            message: "killed by signal 9".into(),
        }));
        let s = screen(&app);
        assert_eq!(s[2], "✗ worker_died: killed by signal 9");
        assert!(s[13].starts_with(" idle │"), "{}", s[13]);
    }

    #[test]
    fn a_failed_commands_output_shows_once_its_answer_sits_above_its_result_and_a_plan_ends_with_its_turn(
    ) {
        let mut app = app();
        app.apply(&started("go"));
        app.apply(&ev(EventPayload::PlanUpdate {
            turn_id: "t".into(),
            explanation: None,
            plan: vec![PlanItem {
                step: "look".into(),
                status: PlanStatus::InProgress,
            }],
        }));
        app.apply(&ev(EventPayload::ToolCallStarted {
            turn_id: "t".into(),
            call_id: "c".into(),
            tool: "Bash".into(),
            arguments: json!({"command": "false"}),
            parent_exec_id: None,
        }));
        app.apply(&ev(EventPayload::PermissionRequested {
            turn_id: "t".into(),
            request_id: "r".into(),
            call_id: "c".into(),
            tool: "Bash".into(),
            summary: "false".into(),
            rule: None,
            diff: None,
            project_rule: None,
            warning: None,
            child_session_id: None,
        }));
        app.apply(&ev(EventPayload::ApprovalResolved {
            turn_id: "t".into(),
            request_id: "r".into(),
            decision: service_ipc::ApprovalDecision::AllowOnce,
            reason: None,
            child_session_id: None,
            hook: None,
        }));
        app.apply(&ev(EventPayload::ExecCommandBegin {
            turn_id: Some("t".into()),
            exec_id: "e".into(),
            call_id: Some("c".into()),
            command: "false".into(),
            cwd: "/workspace".into(),
        }));
        app.apply(&ev(EventPayload::ExecCommandOutputDelta {
            turn_id: Some("t".into()),
            exec_id: "e".into(),
            stream: service_ipc::ExecStream::Stderr,
            chunk: "boom-once\n".into(),
        }));
        app.apply(&ev(EventPayload::ExecCommandEnd {
            turn_id: Some("t".into()),
            exec_id: "e".into(),
            exit_code: Some(1),
            duration_ms: 1,
            timed_out: false,
        }));
        app.apply(&ev(EventPayload::ToolCallFinished {
            turn_id: "t".into(),
            call_id: "c".into(),
            tool: "Bash".into(),
            status: ToolCallStatus::Error,
            output: "boom-once\n[exit 1]".into(),
            diff: None,
        }));
        let lines: Vec<String> = transcript_lines(&app)
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect();
        let count = lines.iter().filter(|l| l.contains("boom-once")).count();
        assert_eq!(count, 1, "{lines:#?}");
        // The answer to its question sits under the call, which says how it went.
        let answered = lines
            .iter()
            .position(|l| l == "  · permission allowed once")
            .unwrap();
        let result = lines.iter().position(|l| l == "✗ failed: $ false").unwrap();
        assert_eq!(result + 1, answered, "{lines:#?}");
        assert_eq!(app.plan.len(), 1);
        app.apply(&started("next"));
        assert!(
            app.plan.is_empty(),
            "the last turn's plan is not pinned over the next"
        );
    }
}
