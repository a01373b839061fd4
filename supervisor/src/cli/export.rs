//! `sessions export` and `run --trajectory`: a session's journal written out, as an ATIF trajectory (see
//! `service_supervisor::trajectory`) or as the journal's events, one JSON line each.

use std::io::Write;
use std::path::Path;

use super::backend::Backend;

/// What `sessions export` writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Format {
    /// An ATIF v1.8 trajectory (one JSON document), as eval harnesses such as Harbor read it.
    #[default]
    Atif,
    /// The journal's events, one JSON line each.
    Jsonl,
}

/// The journal of session `id` (or the one whose id starts so) in `format`, as bytes to write.
pub(super) async fn render(backend: &Backend, id: &str, format: Format) -> anyhow::Result<Vec<u8>> {
    let record = backend.find_session(id).await?;
    let events = backend.journal(&record.id).await?;
    match format {
        Format::Jsonl => {
            let mut out = Vec::new();
            for e in &events {
                serde_json::to_writer(&mut out, e)?;
                out.push(b'\n');
            }
            Ok(out)
        }
        Format::Atif => {
            // The prices are this machine's config.toml's (a server's own are its business).
            let prices = match backend {
                Backend::Local(rt) => rt.prices().clone(),
                Backend::Remote(_) => service_supervisor::ServiceHome::from_env()
                    .and_then(|home| super::config::defaults(&home).ok())
                    .map(|c| c.prices)
                    .unwrap_or_default(),
            };
            let about = service_supervisor::trajectory::About {
                session_id: &record.id,
                bundle: &record.bundle.reference,
                prices: &prices,
            };
            let trajectory = service_supervisor::trajectory::from_journal(&events, &about);
            let mut out = serde_json::to_vec_pretty(&trajectory)?;
            out.push(b'\n');
            Ok(out)
        }
    }
}

/// Writes session `id`'s journal in `format` to `file` (replaced whole: written beside it, then renamed), or to
/// stdout without one.
pub(super) async fn write(
    backend: &Backend,
    id: &str,
    format: Format,
    file: Option<&Path>,
) -> anyhow::Result<()> {
    let bytes = render(backend, id, format).await?;
    let Some(file) = file else {
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes)?;
        return Ok(out.flush()?);
    };
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let cannot = |e: std::io::Error| anyhow::anyhow!("cannot write {}: {e}", file.display());
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(cannot)?;
    tmp.write_all(&bytes).map_err(cannot)?;
    tmp.persist(file).map_err(|e| cannot(e.error))?;
    Ok(())
}
