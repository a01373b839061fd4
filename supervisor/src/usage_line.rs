//! One line that says what a turn cost: tokens in and out, how much of the context window the conversation fills,
//! model calls and time. `run` prints it on stderr, `sessions show` per turn, and the TUI's status line holds it.

use std::time::Duration;

use service_ipc::Usage;

/// `tokens 1,234 in · 56 out · context 12% of 128,000 · 3 steps · 4.2 s`; the parts that are not known are left
/// out (a provider that reports no counts, a model whose window is not configured).
pub fn describe(usage: &Usage, elapsed: Option<Duration>) -> String {
    let mut parts = vec![match (usage.input_tokens, usage.output_tokens) {
        (None, None) => "tokens not reported".to_string(),
        (i, o) => format!(
            "tokens {} in · {} out",
            grouped(i.unwrap_or(0)),
            grouped(o.unwrap_or(0))
        ),
    }];
    match (usage.context_tokens, usage.context_window) {
        (Some(used), Some(window)) if window > 0 => parts.push(format!(
            "context {}% of {}",
            (used.saturating_mul(100) / window).min(999),
            grouped(window)
        )),
        (Some(used), _) => parts.push(format!("context {} tokens", grouped(used))),
        _ => {}
    }
    if let Some(calls) = usage.model_calls {
        parts.push(format!("{calls} step{}", if calls == 1 { "" } else { "s" }));
    }
    if let Some(t) = elapsed {
        parts.push(format!("{:.1} s", t.as_secs_f64()));
    }
    parts.join(" · ")
}

/// `n` with thousands separated by commas.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` and `word`, plural unless `n` is 1: `1 turn`, `3 turns`.
pub fn count(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_what_is_known_and_leaves_out_the_rest() {
        let mut usage = Usage::default();
        assert_eq!(describe(&usage, None), "tokens not reported");
        usage.count_call(Usage::new(1000, 20));
        usage.count_call(Usage::new(12_345, 56));
        usage.context_window = Some(128_000);
        assert_eq!(
            describe(&usage, Some(Duration::from_millis(4200))),
            "tokens 13,345 in · 76 out · context 9% of 128,000 · 2 steps · 4.2 s"
        );
        usage.context_window = None;
        assert_eq!(
            describe(&usage, None),
            "tokens 13,345 in · 76 out · context 12,345 tokens · 2 steps"
        );
    }
}
