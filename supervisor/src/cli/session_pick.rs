//! Which sessions a `sessions` command is about: a listing's directory filter (`--here`, `--cwd`), and one session
//! named by id or by `--last`.

use super::backend::Backend;

/// Which sessions a listing shows.
#[derive(Debug, Clone, Default, clap::Args)]
pub(super) struct Filter {
    /// Only the sessions that work in the current directory.
    #[arg(long, conflicts_with = "cwd")]
    pub(super) here: bool,
    /// Only the sessions that work in this directory.
    #[arg(long, value_name = "DIR")]
    pub(super) cwd: Option<std::path::PathBuf>,
}

impl Filter {
    /// The directory asked for, made absolute as session records keep theirs.
    pub(super) fn dir(&self) -> anyhow::Result<Option<std::path::PathBuf>> {
        let dir = match (&self.cwd, self.here) {
            (Some(d), _) => d.clone(),
            (None, true) => std::env::current_dir()?,
            (None, false) => return Ok(None),
        };
        Ok(Some(std::fs::canonicalize(&dir).unwrap_or(dir)))
    }
}

/// A session named by id (or the start of one), or with `--last` the latest of this directory, else of all.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Which {
    /// Session id, or the start of one.
    #[arg(add = super::complete::sessions())]
    id: Option<String>,
    /// The session used last in this directory (else the last one used anywhere).
    #[arg(long, conflicts_with = "id")]
    last: bool,
}

impl Which {
    /// The session's id, or the start the user gave.
    pub(super) async fn id(&self, backend: &Backend) -> anyhow::Result<String> {
        if let Some(id) = &self.id {
            return Ok(id.clone());
        }
        if !self.last {
            anyhow::bail!(
                "which session? Name it (its id, or the start of one; `service-rs sessions` lists them), or pass \
                 --last for the one used last in this directory"
            );
        }
        let mut records = backend.sessions().await?;
        records.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
        let here = std::env::current_dir().ok();
        let latest_here = records
            .iter()
            .find(|r| here.as_deref() == Some(std::path::Path::new(&r.cwd)));
        latest_here
            .or(records.first())
            .map(|r| r.id.clone())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--last: there is no session yet; start one with `service-rs \"prompt\"`"
                )
            })
    }
}
