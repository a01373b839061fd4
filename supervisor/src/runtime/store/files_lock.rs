//! What processes sharing one files store must know of each other, by `flock`: the kernel drops a lock when its
//! holder dies, so a killed process leaves nothing stale behind.
//!
//! - `serve.lock`: one `serve` per files store. A second one would run sessions the first also runs, each without
//!   knowing of the other's workers. (A PostgreSQL store is made for many nodes: it has leases.)
//! - `sessions/<id>/live.lock`: held, shared, while this process runs the session's worker or a turn of it. Another
//!   process (`bundles remove` beside a `serve`) sees the session live when it cannot take the lock exclusively.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use crate::home::ServiceHome;

/// The name of a session directory's lease file.
pub const LIVE_LOCK: &str = "live.lock";

/// Why the store is taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another server holds the store.
    #[error(
        "another `service-rs serve` ({holder}) already serves the store {store}: one files store serves one server. \
         Stop that one, give this one its own SERVICE_HOME, or share a PostgreSQL store between servers (serve \
         --store postgres://...)"
    )]
    Taken {
        /// The store's root.
        store: String,
        /// What the holder wrote: its pid.
        holder: String,
    },
    /// The lock file could not be used.
    #[error("cannot lock {path}: {source}")]
    Io {
        /// The lock file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// This process's hold on the store as its server; released when dropped or when the process ends.
pub struct ServeLock(#[allow(dead_code)] Flock<File>);

/// Takes `serve.lock` of the store at `home`, or says who holds it.
pub fn serve(home: &ServiceHome) -> Result<ServeLock, LockError> {
    let path = home.root().join("serve.lock");
    let io = |source| LockError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(LockError::Taken {
                store: home.root().display().to_string(),
                holder: holder.trim().to_string(),
            });
        }
        Err((_, e)) => return Err(io(e.into())),
    };
    lock.set_len(0).map_err(io)?;
    write!(lock, "pid {}", std::process::id()).map_err(io)?;
    Ok(ServeLock(lock))
}

/// A shared hold on a session's `live.lock`: the session is live in this process while one exists.
pub struct LiveLease(#[allow(dead_code)] Flock<File>);

/// Takes a shared hold on `dir/live.lock` (the session directory `dir`); None when the file cannot be made (a
/// session directory that is gone), which only makes the session look idle to other processes.
pub fn live(dir: &Path) -> Option<LiveLease> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(LIVE_LOCK))
        .ok()?;
    Flock::lock(file, FlockArg::LockSharedNonblock)
        .ok()
        .map(LiveLease)
}

/// Whether some process holds the session directory `dir` live.
pub fn held_elsewhere(dir: &Path) -> bool {
    let Ok(file) = File::open(dir.join(LIVE_LOCK)) else {
        return false;
    };
    matches!(
        Flock::lock(file, FlockArg::LockExclusiveNonblock),
        Err((_, nix::errno::Errno::EWOULDBLOCK))
    )
}
