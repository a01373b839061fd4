//! The host user a sandbox runs as.
//!
//! For every permission check on the host, a sandbox is the user its namespace's root is mapped to. For a
//! supervisor run by a normal user that is that user, who owns the store. For one running as root it would be root:
//! a sandbox could read every root-only file among what it sees (a 0600 file under `/usr/local`), and could not
//! write a project owned by a user, since host root has no rights over other users' files from inside a user
//! namespace. So a root supervisor runs each sandbox as another user:
//! - the owner of the session's workspace directory when that is not root: the user whose project it is, or the
//!   sandbox user a fresh workspace was given to;
//! - otherwise the sandbox user (`--sandbox-user`, `SERVICE_SANDBOX_USER`; by default `nobody`), which may read
//!   such a directory as any other user may, and is refused before a writable sandbox starts over it.
//!
//! How is in [`super::userns`]. `--sandbox-user root` keeps root, for single-purpose containers where everything
//! belongs to root; SECURITY.md says what that gives up.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Environment variable that names the sandbox user of a supervisor running as root.
pub const SANDBOX_USER_ENV: &str = "SERVICE_SANDBOX_USER";
/// The sandbox user of a root supervisor when none is named.
pub const DEFAULT_SANDBOX_USER: &str = "nobody";

/// A host user and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostId {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// How this supervisor's sandboxes get their host user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SandboxUser {
    /// As the supervisor's own user: it is not root, or `root` was named.
    #[default]
    Own,
    /// As the workspace's owner, or this user where root owns the workspace (a root supervisor).
    Other {
        /// The sandbox user.
        id: HostId,
        /// Its name as given, for messages.
        name: String,
    },
}

impl SandboxUser {
    /// The sandbox user of this process: `requested` (a user name, `uid` or `uid:gid`), else `SERVICE_SANDBOX_USER`,
    /// else `configured` (`sandbox_user` in config.toml), else `nobody`, when it runs as root; its own user otherwise.
    pub fn for_this_process(
        requested: Option<&str>,
        configured: Option<&str>,
    ) -> Result<SandboxUser, String> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(SandboxUser::Own);
        }
        let from_env = std::env::var(SANDBOX_USER_ENV).ok();
        match requested
            .or(from_env.as_deref())
            .or(configured)
            .filter(|n| !n.is_empty())
        {
            Some(name) => Self::named(name),
            // A host without a `nobody` entry still gets its usual ids, never root.
            None => Ok(Self::named(DEFAULT_SANDBOX_USER).unwrap_or_else(|_| Self::nobody())),
        }
    }

    /// [`Self::for_this_process`] with no request, for a library default: a name that does not resolve falls back
    /// to uid and gid 65534, never to root.
    pub fn default_for_this_process() -> SandboxUser {
        Self::for_this_process(None, None).unwrap_or_else(|_| Self::nobody())
    }

    fn nobody() -> SandboxUser {
        SandboxUser::Other {
            id: HostId {
                uid: 65534,
                gid: 65534,
            },
            name: DEFAULT_SANDBOX_USER.into(),
        }
    }

    /// The sandbox user `name` of a root supervisor: a user name, `uid` or `uid:gid`; `root` (or uid 0) keeps root.
    pub fn named(name: &str) -> Result<SandboxUser, String> {
        let numeric = |t: &str| t.parse::<u32>().ok();
        let id = match name.split_once(':') {
            Some((u, g)) => numeric(u)
                .zip(numeric(g))
                .map(|(uid, gid)| HostId { uid, gid }),
            None => numeric(name).map(|uid| HostId { uid, gid: uid }),
        };
        let id = match id {
            Some(id) => id,
            None => nix::unistd::User::from_name(name)
                .ok()
                .flatten()
                .map(|u| HostId {
                    uid: u.uid.as_raw(),
                    gid: u.gid.as_raw(),
                })
                .ok_or_else(|| {
                    format!(
                        "the sandbox user \"{name}\" does not exist on this host: create it (useradd --system \
                         {name}), or name another with --sandbox-user or {SANDBOX_USER_ENV} (a name, uid or uid:gid)"
                    )
                })?,
        };
        if id.uid == 0 {
            return Ok(SandboxUser::Own);
        }
        Ok(SandboxUser::Other {
            id,
            name: name.to_string(),
        })
    }

    /// Who a sandbox over the workspace `dir` (a descriptor of it, `path` in messages) runs as; None for the
    /// supervisor's own user. A `fresh` workspace (one the store made for the session) that root owns is first
    /// given to the sandbox user; a writable sandbox over a host directory that root owns is refused, unless the
    /// sandbox user may write it.
    pub fn over(
        &self,
        dir: BorrowedFd<'_>,
        path: &Path,
        writable: bool,
        fresh: bool,
    ) -> Result<Option<HostId>, String> {
        let SandboxUser::Other { id, name } = self else {
            return Ok(None);
        };
        let meta = std::fs::metadata(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.uid() != 0 {
            // Never root's group: a directory of a user's that kept group root (`chown user dir`) still runs its
            // sandbox without root's group rights.
            let gid = if meta.gid() == 0 { id.gid } else { meta.gid() };
            return Ok(Some(HostId {
                uid: meta.uid(),
                gid,
            }));
        }
        if fresh {
            nix::unistd::fchownat(
                dir,
                "",
                Some(nix::unistd::Uid::from_raw(id.uid)),
                Some(nix::unistd::Gid::from_raw(id.gid)),
                nix::fcntl::AtFlags::AT_EMPTY_PATH,
            )
            .map_err(|e| {
                format!(
                    "cannot give the workspace {} to the sandbox user {name}: {e}",
                    path.display()
                )
            })?;
            return Ok(Some(*id));
        }
        let mode = meta.mode();
        // bwrap's chdir into the workspace fails for a user who may not search it, with an error that names neither
        // the directory's owner nor the user.
        let may_enter = mode & 0o001 != 0 || (mode & 0o010 != 0 && meta.gid() == id.gid);
        if !may_enter {
            return Err(format!(
                "{} belongs to root and only root may enter it (mode {:o}), and this supervisor runs as root, so \
                 its sandboxes run as the user {name}, who cannot: let others enter it (chmod o+rx {}), give it to \
                 the user who works in it (chown -R USER {}), or name a user who may with `service-rs config set \
                 sandbox_user USER` or --sandbox-user (see SECURITY.md)",
                path.display(),
                mode & 0o7777,
                path.display(),
                path.display()
            ));
        }
        let may_write = mode & 0o002 != 0 || (mode & 0o020 != 0 && meta.gid() == id.gid);
        if writable && !may_write {
            return Err(format!(
                "{} belongs to root, and this supervisor runs as root, so its sandboxes run as the user {name}, \
                 who may not write there: give the directory to the user who works in it (chown -R USER {}), or \
                 name a user who may write it with `service-rs config set sandbox_user USER` (in a container where \
                 everything is root's, `sandbox_user root`, which gives sandboxes root's rights over everything they \
                 see; see SECURITY.md)",
                path.display(),
                path.display()
            ));
        }
        Ok(Some(*id))
    }

    /// Who a sandbox over `dir` is on the host, for a person to read: None for the supervisor's own unprivileged
    /// user (the person running it), `root` with a warning for a root supervisor that keeps root, else the name of
    /// the user it runs as (the directory's owner, or the sandbox user where root owns it).
    pub fn who_over(&self, dir: &Path) -> Option<String> {
        match self {
            SandboxUser::Own if nix::unistd::geteuid().is_root() => {
                Some("as root, with root's rights over what it sees".into())
            }
            SandboxUser::Own => None,
            SandboxUser::Other { id, name } => {
                let uid = std::fs::metadata(dir)
                    .ok()
                    .map(|m| m.uid())
                    .filter(|u| *u != 0)
                    .unwrap_or(id.uid);
                let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                    .ok()
                    .flatten()
                    .map_or_else(
                        || {
                            if uid == id.uid {
                                name.clone()
                            } else {
                                uid.to_string()
                            }
                        },
                        |u| u.name,
                    );
                Some(format!("as the user {user}"))
            }
        }
    }

    /// Why a sandbox over the directory `dir` (a host path) could not write its existing file `rel` (relative, of
    /// plain components), for the question of a Write or Edit to it; None when it could, or when that cannot be told
    /// (no such file, a link anywhere on the way: the sandbox may have made one to learn of a file outside). The
    /// sandbox is the user [`Self::over`] picks, with no supplementary groups.
    pub fn cannot_write(&self, dir: &Path, rel: &Path) -> Option<String> {
        let (uid, gid) = match self {
            SandboxUser::Own if nix::unistd::geteuid().is_root() => return None,
            SandboxUser::Own => (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            ),
            SandboxUser::Other { id, .. } => {
                let owner = std::fs::metadata(dir).ok()?;
                match owner.uid() {
                    0 => (id.uid, id.gid),
                    uid => (
                        uid,
                        if owner.gid() == 0 {
                            id.gid
                        } else {
                            owner.gid()
                        },
                    ),
                }
            }
        };
        let file = dir.join(rel);
        let parent = super::host_dir::open_no_links(file.parent()?).ok()?;
        let stat = nix::sys::stat::fstatat(
            &parent,
            file.file_name()?,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok()?;
        let kind = nix::sys::stat::SFlag::from_bits_truncate(
            stat.st_mode & nix::sys::stat::SFlag::S_IFMT.bits(),
        );
        if kind != nix::sys::stat::SFlag::S_IFREG {
            return None;
        }
        let (owner, group, mode) = (stat.st_uid, stat.st_gid, stat.st_mode);
        // The owner's bits, else the group's, else the others': the first class the user is in decides.
        let bit = if owner == uid {
            0o200
        } else if group == gid {
            0o020
        } else {
            0o002
        };
        let may = mode & bit != 0;
        (!may).then(|| {
            format!(
                "{} belongs to uid {} (mode {:o}), and the sandbox runs as uid {uid}, which may not write it: the \
                 call would fail; give the file back (chown {uid} {}) first",
                file.display(),
                owner,
                mode & 0o7777,
                file.display()
            )
        })
    }

    /// What `doctor` says of it.
    pub fn describe(&self) -> String {
        match self {
            SandboxUser::Own => format!(
                "sandboxes run as host uid {}, the user this supervisor runs as",
                nix::unistd::geteuid()
            ),
            SandboxUser::Other { id, name } => format!(
                "sandboxes run as the owner of each session's directory, or as {name} (uid {}, gid {}) where root \
                 owns it",
                id.uid, id.gid
            ),
        }
    }
}

/// Gives the supervisor's own socket at `path` (in its private run directory) to `id`, so that a sandbox running
/// as that user may connect to it.
pub fn give_socket(path: &Path, id: HostId) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(id.uid), Some(id.gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_by_any_name_is_the_supervisors_own_user() {
        for name in ["root", "0", "0:0"] {
            assert_eq!(SandboxUser::named(name), Ok(SandboxUser::Own), "{name}");
        }
    }

    #[test]
    fn numeric_and_named_users_resolve_and_an_unknown_name_says_how_to_fix_it() {
        assert_eq!(
            SandboxUser::named("1234:5678"),
            Ok(SandboxUser::Other {
                id: HostId {
                    uid: 1234,
                    gid: 5678
                },
                name: "1234:5678".into()
            })
        );
        assert!(matches!(
            SandboxUser::named("nobody"),
            Ok(SandboxUser::Other { id, .. }) if id.uid == 65534
        ));
        let err = SandboxUser::named("no-such-user-here").unwrap_err();
        assert!(
            err.contains("useradd") && err.contains("--sandbox-user"),
            "{err}"
        );
    }
}
