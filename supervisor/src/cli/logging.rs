//! The tracing subscriber: log lines on stderr, as text or JSON (`--log-format`), filtered by `RUST_LOG`.
//!
//! The long-running server logs at `info` by default. Other commands log nothing unless `RUST_LOG` asks: their
//! output is the answer, and a terminal UI would be torn by stray lines.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per event, its fields at the top level.
    Json,
}

/// Installs the subscriber; `default_filter` applies when `RUST_LOG` is unset or empty.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| EnvFilter::try_new(v).ok())
        // A database's notices (`NOTICE: relation ... already exists`) are not the operator's business.
        .unwrap_or_else(|| EnvFilter::new(format!("{default_filter},tokio_postgres=warn")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
