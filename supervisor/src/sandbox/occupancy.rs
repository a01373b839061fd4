//! Whether a sandbox holds anything besides its worker: another process, or an entry in its private `/tmp` or
//! `/dev/shm`. The worker of a sandbox that holds nothing else can be stopped and started again later with nothing
//! lost: the workspace is on the host, the conversation is in the journal, and approvals are the supervisor's.
//! IPC objects, the one other state a sandbox could hold, cannot outlive the command that made them: each command
//! has an IPC namespace of its own (`worker/src/confine`).
//!
//! The answers come from the kernel (`/proc`), about processes the sandbox controls, so all a sandbox can steer is a
//! yes or no about itself: one that wants to be kept keeps a file, and one that wants to be stopped loses only its
//! own state. Any error reads as "holds something". The tmpfs mounts are read through `/proc/<pid>/root`, the
//! worker's own view, and only as far as their first entry. No read there can wait on the sandbox: the only
//! file systems it could mount in a namespace of its own that call back into user space need `/dev/fuse`, which its
//! `/dev` lacks.

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// The directories a sandbox gets on tmpfs, which live only as long as it does (see `bwrap.rs`).
const PRIVATE_DIRS: [&str; 2] = ["tmp", "dev/shm"];

/// True when the sandbox whose worker (its pid 1) is `pid` in the supervisor's view holds no other process and
/// nothing in its private directories.
pub fn holds_only_its_worker(pid: u32) -> bool {
    has_no_children(pid) && PRIVATE_DIRS.iter().all(|dir| is_empty(pid, dir))
}

/// Every process of a sandbox descends from its worker, which is the init of its pid namespace: a process whose
/// parent exits is given to the worker. So no child of any of the worker's threads means no other process.
fn has_no_children(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut seen = false;
    for task in tasks {
        let Ok(task) = task else { return false };
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(children) if children.trim().is_empty() => seen = true,
            _ => return false,
        }
    }
    seen
}

/// True when `/proc/<pid>/root/<dir>` is a directory with no entry; a link there is not followed.
fn is_empty(pid: u32, dir: &str) -> bool {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(mut dir) = Dir::open(
        format!("/proc/{pid}/root/{dir}").as_str(),
        flags,
        Mode::empty(),
    ) else {
        return false;
    };
    for entry in dir.iter() {
        let Ok(entry) = entry else { return false };
        if !matches!(entry.file_name().to_bytes(), b"." | b"..") {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_with_a_child_holds_more_than_itself_and_one_that_is_gone_holds_something() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(has_no_children(pid), "sleep started no process");
        assert!(!has_no_children(std::process::id()), "sleep is our child");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!has_no_children(pid), "what cannot be read counts as held");
    }

    #[test]
    fn an_empty_directory_reads_empty_and_one_with_an_entry_or_a_link_does_not() {
        let root = tempfile::tempdir().unwrap();
        // `/proc/self/root` is `/` for the test, so a path under it stands for a sandbox's private directory.
        let rel = |p: &std::path::Path| p.strip_prefix("/").unwrap().to_str().unwrap().to_string();
        let empty = root.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let me = std::process::id();
        assert!(is_empty(me, &rel(&empty)));
        std::fs::write(empty.join(".hidden"), "").unwrap();
        assert!(!is_empty(me, &rel(&empty)), "a dot file is an entry");
        let other = root.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        assert!(!is_empty(me, &rel(&link)), "a link is not followed");
        assert!(!is_empty(me, &rel(&root.path().join("missing"))));
    }
}
