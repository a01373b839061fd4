//! `session.json`: the persisted session record, always replaced atomically (temp file, fsync, rename).
//!
//! A new session's first record is flushed to disk in the background instead: that fsync (0.85 ms on this
//! machine's disk, most of `create_session`) sat on every session create and one-shot `run`. As before, the
//! directory is not flushed: the new name is durable with the file system's next journal commit. The price: until
//! the flush lands, a power cut can lose (or leave unreadable) a session that has had no turn yet. A process crash
//! loses nothing (the page cache survives it). The record of a turn starting is not flushed either (0.3-0.5 ms of
//! every turn): a power cut before the next flush may lose that turn's start, as it loses the turn's messages, which
//! are flushed at its end. Every other save is synchronous; the record that ends a turn is flushed at the same time
//! as the turn's messages (`SessionLog::save_turn_end`), so that ext4 makes one journal commit of the two.

use service_ipc::Usage;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use service_ipc::TurnStatus;

use super::error::{Result, RuntimeError};

/// Whether a turn is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Ready for a turn.
    Idle,
    /// A turn is running.
    Running,
}

/// The bundle a session runs, pinned to the exact version it was created with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BundleRecord {
    /// Reference naming exactly this bundle (`local/id:version`, or the layout/project directory).
    pub reference: String,
    /// Bundle id.
    pub id: String,
    /// Version.
    pub version: String,
    /// Content digest.
    pub digest: String,
}

/// How the last turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LastTurn {
    /// Turn id.
    pub turn_id: String,
    /// How it ended.
    pub status: TurnStatus,
    /// When it ended.
    pub finished_at: String,
}

/// The persisted session record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionRecord {
    /// Session id (a UUID).
    pub id: String,
    /// The reference the session was created from, as given.
    pub bundle_ref: String,
    /// The bundle it resolved to.
    pub bundle: BundleRecord,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
    /// Default working directory of turns (host path).
    pub cwd: String,
    /// Whether a turn is running.
    pub status: SessionStatus,
    /// The running turn, if any.
    pub active_turn: Option<String>,
    /// Turns started so far.
    pub turn_count: u64,
    /// How the last finished turn ended.
    pub last_turn: Option<LastTurn>,
    /// The first prompt, on one line, cut at [`TITLE_CHARS`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Tokens in and out over every turn, as the supervisor counted them at the provider.
    #[serde(default)]
    pub usage: Usage,
    /// Tool calls and times summed over every turn.
    #[serde(default)]
    pub activity: service_ipc::TurnActivity,
    /// The id a protocol client knows the session by when it chose one (an A2A context id); else the session id
    /// serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// For a subagent's session: the session and `Agent` call that started it, and the confinement it may not
    /// exceed. Absent for a top-level session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The tenant whose token created the session (a subagent's and a fork's: their parent's); absent for the
    /// default tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// A fork no turn has ended in yet: its first worker's `SessionStart` hooks read the source `fork`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fork_fresh: bool,
    /// What the session may spend over all its turns; absent for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// With a shared store: the node whose disk holds the session's files (its own writable workspace and its
    /// checkpoints). Its turns run there, and no other node runs it in an empty directory of its own. Absent for a
    /// session whose files any node reaches, or that has none to lose (a `cwd` the client named, a read-only
    /// workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// US dollars its ended turns cost at the supervisor's prices (`[prices]` of config.toml); turns of a model
    /// without a price add nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_usd: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// What a session may spend over all its turns: once it has, no further model call is made and its turn ends
/// with `budget_exceeded`. A user's own cap, beside the operator's tenant quotas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Input plus output tokens, as the provider reported them.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::tenancy::limit"
    )]
    #[schema(minimum = 1, maximum = 9223372036854775807_u64)]
    pub max_tokens: Option<u64>,
    /// US dollars at the supervisor's prices; turns of a model without a price are held to `max_tokens` only.
    #[serde(default, alias = "max_cost", skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0.0)]
    pub max_cost_usd: Option<f64>,
}

impl Budget {
    /// Refuses a limit that is not a positive number; Ok for none.
    pub fn check(&self) -> Result<()> {
        if let Some(max) = self.max_cost_usd.filter(|m| !(m.is_finite() && *m > 0.0)) {
            return Err(RuntimeError::InvalidRequest(format!(
                "budget.max_cost_usd {max} is not a positive number of US dollars"
            )));
        }
        if self.max_tokens == Some(0) {
            return Err(RuntimeError::InvalidRequest(
                "budget.max_tokens 0 would allow no model call; give a positive number, or null for no limit"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// What ties a subagent's session to the session that started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ParentLink {
    /// The parent session.
    pub session_id: String,
    /// The parent's `Agent` tool call.
    pub tool_call_id: String,
    /// The subagent's name in the parent's agent.yaml.
    pub subagent: String,
    /// 1 for a child of a top-level session, 2 for a grandchild, and so on.
    pub depth: u32,
    /// The parent's sandbox, which the child's bundle is cut down to whenever it is loaded.
    pub ceiling: crate::bundle::manifest::SandboxSpec,
    /// Whether the parent may ask for hosts off its list (`permissions.network: ask`); when not, neither may the
    /// child.
    pub network_ask: bool,
    /// The subagent's `max_steps`, when agent.yaml sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
}

/// How long before `now` the time `when` (RFC 3339) was: `45s`, `12m`, `3h` or `5d`; `?` when it does not parse.
pub fn age(when: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let Ok(then) = chrono::DateTime::parse_from_rfc3339(when) else {
        return "?".into();
    };
    let secs = (now - then.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Characters of the first prompt a session's title keeps.
pub const TITLE_CHARS: usize = 60;

/// The title of a session whose first prompt is `prompt`: its words on one line, cut with `…`.
pub fn title_of(prompt: &str) -> String {
    let line = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= TITLE_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(TITLE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Now as RFC 3339 with milliseconds.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl SessionRecord {
    /// The tenant it belongs to.
    pub fn tenant(&self) -> &str {
        self.tenant
            .as_deref()
            .unwrap_or(crate::tenancy::DEFAULT_TENANT)
    }

    /// Reads a record.
    pub fn load(path: &Path) -> Result<SessionRecord> {
        let bytes = std::fs::read(path).map_err(|e| RuntimeError::io("cannot read", path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| RuntimeError::Corrupt {
            path: path.to_path_buf(),
            message: format!("damaged session record: {e}"),
        })
    }

    /// Writes the record atomically: readers see the old or the new record, never a torn one.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.write_atomically(path, true).map(drop)
    }

    /// Writes the record atomically without flushing it: the file system writes it with its next commit (replacing a
    /// file by rename orders the new data before the new name on ext4, XFS and btrfs).
    pub fn save_unflushed(&self, path: &Path) -> Result<()> {
        self.write_atomically(path, false).map(drop)
    }

    /// Writes a new session's first record atomically, and flushes it to disk on a blocking thread (inline when
    /// there is no Tokio runtime).
    pub fn save_new(&self, path: &Path) -> Result<()> {
        let file = self.save_flushed_later(path)?;
        flush_later(vec![file]);
        Ok(())
    }

    /// Writes the record atomically without flushing it; the file now at `path`, for the caller to flush.
    pub(crate) fn save_flushed_later(&self, path: &Path) -> Result<std::fs::File> {
        self.write_atomically(path, false)
    }

    /// Writes the spare copy of the record at `path` (see [`exchange`]) before any save needs it, unflushed.
    pub fn save_spare(&self, path: &Path) -> Result<std::fs::File> {
        let spare = spare_of(path);
        let json = serde_json::to_vec_pretty(self).unwrap_or_default();
        let mut file = spare_options()
            .truncate(true)
            .open(&spare)
            .map_err(|e| RuntimeError::io("cannot write", &spare, e))?;
        file.write_all(&json)
            .map_err(|e| RuntimeError::io("cannot write", &spare, e))?;
        Ok(file)
    }

    fn write_atomically(&self, path: &Path, sync: bool) -> Result<std::fs::File> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let json = serde_json::to_vec_pretty(self).unwrap_or_default();
        if let Some(file) = exchange(path, &json, sync)? {
            return Ok(file);
        }
        let mut tmp = tempfile::NamedTempFile::new_in(dir)
            .map_err(|e| RuntimeError::io("cannot write in", dir, e))?;
        tmp.write_all(&json)
            .and_then(|()| {
                if sync {
                    tmp.as_file().sync_all()
                } else {
                    Ok(())
                }
            })
            .map_err(|e| RuntimeError::io("cannot write", tmp.path().to_path_buf(), e))?;
        tmp.persist(path)
            .map_err(|e| RuntimeError::io("cannot replace", path, e.error))
    }
}

/// Flushes `files` to disk on a blocking thread (inline when there is no Tokio runtime).
pub(crate) fn flush_later(files: Vec<std::fs::File>) {
    let flush = move || {
        for file in files {
            let _ = file.sync_all();
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(flush)),
        Err(_) => flush(),
    }
}

/// The spare copy of the record at `path` (see [`exchange`]): `.session.json.spare`, hidden, as it holds whatever
/// the record said one save ago and is of no use to read.
pub fn spare_of(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.spare"))
}

/// How a spare is opened: made 0600 like the first record (a `tempfile`), so the record, which trades places with
/// its spare at every save, never turns readable by others.
fn spare_options() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).mode(0o600);
    options
}

/// Free space below which a record is not saved (see [`exchange`]).
const ROOM: u64 = 64 * 1024;

/// Replaces an existing record by exchanging it with its spare copy (`.session.json.spare`): the new record is
/// written into the spare, which then swaps names with the record in one `renameat2(RENAME_EXCHANGE)`. Readers see
/// the old or the new record, as with a temporary file and a rename, but no inode is made or freed. That matters:
/// ext4 skips recently freed inodes when it looks for a free one, and with a save per turn start and end
/// `ext4_create` was 29% of the samples of the tokio threads (server and clients) in `perf` on the scale bench.
/// None when there is no record yet, or the file system cannot exchange names; the caller then writes a temporary
/// file.
///
/// Rewriting the spare needs no new space, so a full store would go unnoticed until the turn's first event: the
/// save fails as a new file would when the file system has less than [`ROOM`] free.
fn exchange(path: &Path, json: &[u8], sync: bool) -> Result<Option<std::fs::File>> {
    if !path.is_file() {
        return Ok(None);
    }
    let spare = spare_of(path);
    let dir = path.parent().unwrap_or(Path::new("."));
    if let Ok(fs) = nix::sys::statvfs::statvfs(dir) {
        let free = fs.blocks_available().saturating_mul(fs.fragment_size());
        if free < ROOM {
            let full = std::io::Error::from_raw_os_error(nix::libc::ENOSPC);
            return Err(RuntimeError::io("cannot write", &spare, full));
        }
    }
    // Overwritten, then cut to length: truncating to nothing first frees its block for the write to take again,
    // which made a save cost 0.26 ms instead of 0.06 ms on this machine's ext4.
    let mut file = spare_options()
        .truncate(false)
        .open(&spare)
        .map_err(|e| RuntimeError::io("cannot write", &spare, e))?;
    let len = json.len() as u64;
    // Cut only when shorter: a truncate, even to the same length, marks the inode for `fdatasync` to write.
    // `fdatasync` because the exchange needs the new bytes and length on disk first, not the times: a record of
    // the same length as the spare's then costs one write, not two (the inode's block too).
    file.metadata()
        .inspect(|was| {
            // A spare made 0644 by an older build is narrowed once; the common case costs no call. Best effort: a
            // spare we may write but not chmod still takes the save, inside the 0700 store root.
            use std::os::unix::fs::PermissionsExt;
            if was.permissions().mode() & 0o077 != 0 {
                let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
            }
        })
        .and_then(|was| file.write_all(json).map(|()| was.len()))
        .and_then(|was| if len < was { file.set_len(len) } else { Ok(()) })
        .and_then(|()| if sync { file.sync_data() } else { Ok(()) })
        .map_err(|e| RuntimeError::io("cannot write", &spare, e))?;
    let at = nix::fcntl::AT_FDCWD;
    match nix::fcntl::renameat2(
        at,
        &spare,
        at,
        path,
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    ) {
        Ok(()) => Ok(Some(file)),
        Err(
            nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS | nix::errno::Errno::EOPNOTSUPP,
        ) => Ok(None),
        Err(e) => Err(RuntimeError::io("cannot replace", path, e.into())),
    }
}

/// The one record whose id starts with `prefix` (a whole id matches itself); the error says whether none or
/// several did, naming those.
pub fn by_id_prefix<'a>(
    records: &'a [SessionRecord],
    prefix: &str,
) -> Result<&'a SessionRecord, String> {
    let prefix = prefix.trim();
    if prefix.is_empty() {
        return Err("give a session id or the start of one".into());
    }
    if let Some(exact) = records.iter().find(|r| r.id == prefix) {
        return Ok(exact);
    }
    let found: Vec<&SessionRecord> = records
        .iter()
        .filter(|r| r.id.starts_with(prefix))
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("no session id starts with \"{prefix}\"; list them with `service-rs sessions` (/sessions in the TUI)")),
        many => Err(format!(
            "\"{prefix}\" starts {} session ids ({}); give more of the id",
            many.len(),
            many.iter().take(5).map(|r| r.id.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> SessionRecord {
        SessionRecord {
            id: id.into(),
            bundle_ref: "b".into(),
            bundle: BundleRecord {
                reference: "local/b:1.0.0".into(),
                id: "b".into(),
                version: "1.0.0".into(),
                digest: "sha256:0".into(),
            },
            created_at: now(),
            updated_at: now(),
            cwd: "/tmp".into(),
            status: SessionStatus::Idle,
            active_turn: None,
            turn_count: 0,
            last_turn: None,
            title: None,
            usage: Default::default(),
            activity: Default::default(),
            context_id: None,
            tenant: None,
            fork_fresh: false,
            budget: None,
            home: None,
            cost_usd: 0.0,
            parent: None,
        }
    }

    #[test]
    fn an_id_prefix_names_a_session_only_when_it_is_unambiguous() {
        let records = [record("abc123"), record("abd456"), record("ab")];
        assert_eq!(by_id_prefix(&records, "abc").unwrap().id, "abc123");
        assert_eq!(
            by_id_prefix(&records, "ab").unwrap().id,
            "ab",
            "a whole id matches itself"
        );
        let many = by_id_prefix(&records[..2], "ab").unwrap_err();
        assert!(
            many.contains("starts 2 session ids") && many.contains("abc123"),
            "{many}"
        );
        assert!(by_id_prefix(&records, "zz")
            .unwrap_err()
            .contains("no session id starts with"));
        assert!(by_id_prefix(&records, " ").is_err());
    }

    #[test]
    fn saving_a_record_again_swaps_it_with_its_spare_and_makes_no_new_inode() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("session.json");
        let mut r = record("s1");
        r.save(&path).unwrap();
        let mut inodes = std::collections::BTreeSet::new();
        for n in 1..=6 {
            r.turn_count = n;
            if n % 2 == 0 {
                r.save(&path).unwrap();
            } else {
                r.save_unflushed(&path).unwrap();
            }
            assert_eq!(SessionRecord::load(&path).unwrap().turn_count, n);
            inodes.insert(std::fs::metadata(&path).unwrap().ino());
        }
        assert_eq!(inodes.len(), 2, "the record and its spare trade places");
        // A spare an older build left readable by others is narrowed at the next save.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(spare_of(&path), std::fs::Permissions::from_mode(0o644)).unwrap();
        r.save(&path).unwrap();
        r.save(&path).unwrap();
        for file in [path.clone(), spare_of(&path)] {
            let mode = std::fs::metadata(&file).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600, "{} is {mode:o}", file.display());
        }
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_spare_written_ahead_is_readable_by_its_owner_only() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("session.json");
        record("s1").save_spare(&path).unwrap();
        let mode = std::fs::metadata(spare_of(&path)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
    }

    #[test]
    fn a_shorter_record_written_over_a_longer_spare_leaves_none_of_its_tail() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("session.json");
        let mut long = record("s1");
        long.cwd = "/a/long/working/directory/".repeat(20);
        long.save(&path).unwrap();
        long.save(&path).unwrap();
        // The spare now holds the long record; the short one is written over it.
        let short = record("s1");
        short.save(&path).unwrap();
        assert_eq!(SessionRecord::load(&path).unwrap().cwd, "/tmp");
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk, serde_json::to_vec_pretty(&short).unwrap());
    }
}
