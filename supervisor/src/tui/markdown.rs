//! Assistant text as terminal lines: the markdown a model writes (headings, lists, emphasis, inline code, fenced
//! code blocks, quotes, links, tables), parsed by `pulldown-cmark` and drawn with styles. A line break the model
//! wrote stays a line break (models write `Tests output:\nok` meaning two lines, not markdown's one paragraph). Raw
//! HTML stays text: nothing in a model's answer becomes anything but characters on the screen.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// The lines `text` draws as.
pub fn lines(text: &str) -> Vec<Line<'static>> {
    let mut r = Renderer::default();
    let options =
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS | Options::ENABLE_TABLES;
    for event in Parser::new_ext(text, options) {
        r.event(event);
    }
    r.flush();
    // No blank line at the end: the transcript adds its own between entries.
    while r.out.last().is_some_and(|l| l.spans.is_empty()) {
        r.out.pop();
    }
    r.out
}

#[derive(Default)]
struct Renderer {
    out: Vec<Line<'static>>,
    /// The line being built.
    spans: Vec<Span<'static>>,
    /// Inline styles in force (emphasis, strong, links, headings).
    styles: Vec<Style>,
    /// One entry per open list: the next number of an ordered one, None for bullets.
    lists: Vec<Option<u64>>,
    /// Open block quotes.
    quotes: usize,
    /// Inside a code block.
    code: bool,
    /// The language a fenced code block names, for its colours.
    lang: String,
    /// The prefix of the current list item's first line, still to be written.
    bullet: Option<String>,
    /// Where an open link points, shown after its text.
    link: Option<String>,
    /// The table being read, drawn at its end.
    table: Option<Table>,
}

/// A table's cells as read, and its columns' alignment.
#[derive(Default)]
struct Table {
    aligns: Vec<pulldown_cmark::Alignment>,
    rows: Vec<Vec<String>>,
    /// Rows of the header.
    head: usize,
    cell: String,
}

impl Table {
    /// The table as lines: columns as wide as their widest cell, `│` between them, a rule under the header.
    fn lines(&self) -> Vec<Line<'static>> {
        use unicode_width::UnicodeWidthStr;
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0usize; columns];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.width());
            }
        }
        let border = Style::default().fg(Color::DarkGray);
        let mut out = Vec::new();
        for (r, row) in self.rows.iter().enumerate() {
            let mut spans = Vec::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                let pad = width.saturating_sub(cell.width());
                let (left, right) = match self.aligns.get(i) {
                    Some(pulldown_cmark::Alignment::Right) => (pad, 0),
                    Some(pulldown_cmark::Alignment::Center) => (pad / 2, pad - pad / 2),
                    _ => (0, pad),
                };
                if i > 0 {
                    spans.push(Span::styled(" │ ", border));
                }
                let style = if r < self.head {
                    Style::default().add_modifier(Modifier::BOLD)
                } else {
                    Style::default()
                };
                spans.push(Span::styled(
                    format!("{}{cell}{}", " ".repeat(left), " ".repeat(right)),
                    style,
                ));
            }
            out.push(Line::from(spans));
            if r + 1 == self.head {
                let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
                out.push(Line::styled(rule.join("─┼─"), border));
            }
        }
        out
    }
}

impl Renderer {
    fn style(&self) -> Style {
        self.styles
            .iter()
            .fold(Style::default(), |acc, s| acc.patch(*s))
    }

    /// The indentation of lines in the current block: quotes, then list nesting.
    fn indent(&self) -> Vec<Span<'static>> {
        let mut prefix = Vec::new();
        for _ in 0..self.quotes {
            prefix.push(Span::styled("│ ", Style::default().fg(Color::DarkGray)));
        }
        if !self.lists.is_empty() {
            let depth = self.lists.len() - 1;
            match &self.bullet {
                Some(_) => prefix.push(Span::raw("  ".repeat(depth))),
                None => prefix.push(Span::raw("  ".repeat(depth + 1))),
            }
        }
        prefix
    }

    fn push_text(&mut self, text: &str, style: Style) {
        for (i, part) in text.split('\n').enumerate() {
            if i > 0 {
                self.flush();
            }
            if !part.is_empty() {
                self.start_line();
                self.spans.push(Span::styled(part.to_string(), style));
            }
        }
    }

    /// Writes the indentation (and a pending bullet) at the start of a line.
    fn start_line(&mut self) {
        if !self.spans.is_empty() {
            return;
        }
        self.spans = self.indent();
        if let Some(bullet) = self.bullet.take() {
            self.spans
                .push(Span::styled(bullet, Style::default().fg(Color::Yellow)));
        }
        if self.code {
            self.spans.push(Span::styled("  ", Style::default()));
        }
    }

    fn flush(&mut self) {
        if !self.spans.is_empty() {
            self.out.push(Line::from(std::mem::take(&mut self.spans)));
        }
    }

    fn blank(&mut self) {
        self.flush();
        if self.out.last().is_some_and(|l| !l.spans.is_empty()) {
            self.out.push(Line::default());
        }
    }

    fn event(&mut self, event: Event<'_>) {
        if let Some(table) = &mut self.table {
            match &event {
                Event::Text(t) | Event::Code(t) | Event::Html(t) | Event::InlineHtml(t) => {
                    table.cell.push_str(t);
                    return;
                }
                Event::SoftBreak | Event::HardBreak => {
                    table.cell.push(' ');
                    return;
                }
                _ => {}
            }
        }
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) if self.code => {
                if let Some(lines) = super::highlight::lines(&text, &self.lang) {
                    for spans in lines {
                        self.start_line();
                        self.spans.extend(spans);
                        self.flush();
                    }
                    return;
                }
                let style = Style::default().fg(Color::Gray);
                for line in text.lines() {
                    self.start_line();
                    self.spans.push(Span::styled(line.to_string(), style));
                    self.flush();
                }
            }
            Event::Text(text) => {
                let style = self.style();
                self.push_text(&text, style);
            }
            Event::Code(code) => {
                self.start_line();
                self.spans
                    .push(Span::styled(code.to_string(), self.style().fg(Color::Cyan)));
            }
            // Markup in a model's text is shown as the characters it is.
            Event::Html(html) | Event::InlineHtml(html) => {
                let style = self.style();
                self.push_text(&html, style);
            }
            // The model's own line break.
            Event::SoftBreak => self.flush(),
            Event::HardBreak => self.flush(),
            Event::Rule => {
                self.blank();
                self.out.push(Line::styled(
                    "────────────────",
                    Style::default().fg(Color::DarkGray),
                ));
            }
            Event::TaskListMarker(done) => {
                self.start_line();
                self.spans
                    .push(Span::raw(if done { "[x] " } else { "[ ] " }));
            }
            Event::FootnoteReference(name) => {
                self.start_line();
                self.spans.push(Span::raw(format!("[{name}]")));
            }
            Event::InlineMath(m) | Event::DisplayMath(m) => {
                let style = self.style();
                self.push_text(&m, style);
            }
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { level, .. } => {
                self.blank();
                let style = Style::default().add_modifier(Modifier::BOLD);
                self.styles.push(match level {
                    HeadingLevel::H1 | HeadingLevel::H2 => style.add_modifier(Modifier::UNDERLINED),
                    _ => style,
                });
            }
            Tag::Paragraph if self.bullet.is_none() => self.blank(),
            Tag::CodeBlock(kind) => {
                self.blank();
                self.code = true;
                self.lang.clear();
                if let CodeBlockKind::Fenced(lang) = kind {
                    self.lang = lang.to_string();
                    if !lang.is_empty() {
                        self.start_line();
                        self.spans.push(Span::styled(
                            lang.to_string(),
                            Style::default().fg(Color::DarkGray),
                        ));
                        self.flush();
                    }
                }
            }
            Tag::List(first) => {
                if self.lists.is_empty() {
                    self.blank();
                } else {
                    self.flush();
                }
                self.lists.push(first);
            }
            Tag::Item => {
                self.flush();
                let bullet = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let b = format!("{n}. ");
                        *n += 1;
                        b
                    }
                    _ => "• ".to_string(),
                };
                self.bullet = Some(bullet);
            }
            Tag::BlockQuote(_) => {
                self.blank();
                self.quotes += 1;
            }
            Tag::HtmlBlock => self.blank(),
            Tag::Table(aligns) => {
                self.blank();
                self.table = Some(Table {
                    aligns,
                    ..Table::default()
                });
            }
            Tag::TableHead | Tag::TableRow => {
                if let Some(t) = &mut self.table {
                    t.rows.push(Vec::new());
                }
            }
            Tag::Emphasis => self
                .styles
                .push(Style::default().add_modifier(Modifier::ITALIC)),
            Tag::Strong => self
                .styles
                .push(Style::default().add_modifier(Modifier::BOLD)),
            Tag::Strikethrough => self
                .styles
                .push(Style::default().add_modifier(Modifier::CROSSED_OUT)),
            Tag::Link { dest_url, .. } => {
                self.link = Some(dest_url.to_string());
                self.styles
                    .push(Style::default().add_modifier(Modifier::UNDERLINED));
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) | TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                self.styles.pop();
                if matches!(tag, TagEnd::Heading(_)) {
                    self.flush();
                }
            }
            TagEnd::Link => {
                self.styles.pop();
                if let Some(url) = self.link.take() {
                    self.start_line();
                    self.spans.push(Span::styled(
                        format!(" ({url})"),
                        Style::default().fg(Color::DarkGray),
                    ));
                }
            }
            TagEnd::Paragraph | TagEnd::Item | TagEnd::HtmlBlock => self.flush(),
            TagEnd::CodeBlock => {
                self.flush();
                self.code = false;
            }
            TagEnd::List(_) => {
                self.flush();
                self.lists.pop();
            }
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.quotes = self.quotes.saturating_sub(1);
            }
            TagEnd::TableCell => {
                if let Some(t) = &mut self.table {
                    let cell = std::mem::take(&mut t.cell).trim().to_string();
                    if let Some(row) = t.rows.last_mut() {
                        row.push(cell);
                    }
                }
            }
            TagEnd::TableHead => {
                if let Some(t) = &mut self.table {
                    t.head = t.rows.len();
                }
            }
            TagEnd::Table => {
                if let Some(t) = self.table.take() {
                    let indent = self.indent();
                    for mut line in t.lines() {
                        let mut spans = indent.clone();
                        spans.append(&mut line.spans);
                        self.out.push(Line::from(spans));
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }

    #[test]
    fn headings_lists_emphasis_code_and_fences_are_drawn_not_shown_as_marks() {
        let md = "## Plan\n\nFirst *look*, then **act** with `ls -la`.\n\n- one\n- two\n  1. nested\n\n```rust\nfn main() {}\n```\n\n> quoted\n\n<script>alert(1)</script>";
        let lines = lines(md);
        let shown = text(&lines);
        assert_eq!(
            shown,
            [
                "Plan",
                "",
                "First look, then act with ls -la.",
                "",
                "• one",
                "• two",
                "  1. nested",
                "",
                "  rust",
                "  fn main() {}",
                "",
                "│ quoted",
                "",
                "<script>alert(1)</script>",
            ]
        );
        assert!(lines[0].spans[0]
            .style
            .add_modifier
            .contains(Modifier::BOLD));
        let emphasis = &lines[2].spans[1];
        assert_eq!(emphasis.content, "look");
        assert!(emphasis.style.add_modifier.contains(Modifier::ITALIC));
        let code = lines[2]
            .spans
            .iter()
            .find(|s| s.content == "ls -la")
            .unwrap();
        assert_eq!(code.style.fg, Some(Color::Cyan));
    }

    #[test]
    fn line_breaks_the_model_wrote_stay_and_a_table_is_drawn_with_aligned_columns() {
        let shown = text(&lines(
            "Tests output:\nok\n\n| a | bb |\n|---|---:|\n| 10 | 2 |\n| 3 | 4 |",
        ));
        assert_eq!(
            shown,
            [
                "Tests output:",
                "ok",
                "",
                "a  │ bb",
                "───┼───",
                "10 │  2",
                "3  │  4"
            ]
        );
    }
}
