//! Code blocks in colour: `syntect` with its bundled Sublime Text grammars and a dark theme, for a block whose fence
//! names a language it knows (`rust`, `py`, `sh`, `json`, …). The grammars load once, at the first such block.

use std::sync::OnceLock;

use ratatui::style::{Color, Style};
use ratatui::text::Span;
use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::SyntaxSet;
use syntect::util::LinesWithEndings;

fn assets() -> &'static (SyntaxSet, Theme) {
    static ASSETS: OnceLock<(SyntaxSet, Theme)> = OnceLock::new();
    ASSETS.get_or_init(|| {
        let themes = ThemeSet::load_defaults();
        let theme = themes
            .themes
            .get("base16-ocean.dark")
            .cloned()
            .unwrap_or_default();
        (SyntaxSet::load_defaults_newlines(), theme)
    })
}

/// `code` as lines of coloured spans when `lang` names a grammar; None otherwise (drawn plain).
pub fn lines(code: &str, lang: &str) -> Option<Vec<Vec<Span<'static>>>> {
    let token = lang.split([',', ' ']).next().unwrap_or("").trim();
    if token.is_empty() {
        return None;
    }
    let (syntaxes, theme) = assets();
    let syntax = syntaxes
        .find_syntax_by_token(token)
        .or_else(|| syntaxes.find_syntax_by_extension(token))?;
    let mut h = HighlightLines::new(syntax, theme);
    let mut out = Vec::new();
    for line in LinesWithEndings::from(code) {
        let ranges = h.highlight_line(line, syntaxes).ok()?;
        let spans = ranges
            .into_iter()
            .map(|(style, text)| {
                let c = style.foreground;
                Span::styled(
                    text.trim_end_matches('\n').to_string(),
                    Style::default().fg(Color::Rgb(c.r, c.g, c.b)),
                )
            })
            .filter(|s| !s.content.is_empty())
            .collect();
        out.push(spans);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_known_language_is_coloured_and_an_unknown_one_is_not() {
        let lines = super::lines("fn main() {}\nlet x = 1;\n", "rust").expect("rust is known");
        assert_eq!(lines.len(), 2);
        let first: String = lines[0].iter().map(|s| s.content.as_ref()).collect();
        assert_eq!(first, "fn main() {}");
        assert!(lines[0].len() > 1, "several colours: {:?}", lines[0]);
        assert!(super::lines("x", "no-such-language").is_none());
        assert!(super::lines("x", "").is_none());
    }
}
