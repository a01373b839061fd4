//! What a command leaves behind under Landlock, where no PID namespace ends with it.
//!
//! Under bubblewrap each command's shell is pid 1 of a namespace of its own, and its end kills everything it
//! started. Under Landlock there is none (containers refuse them), and a daemon that left the command's process
//! group (`setsid`, or a job of `set -m`) survives the group's kill. So the worker becomes its processes' child
//! subreaper: whatever outlives its parent is handed to the worker instead of the host's init. The worker records
//! each process it starts itself (pid and start time, so a reused pid is not mistaken for it); once a command has
//! ended, every other child of the worker was left by one, and is killed and reaped, its own children after it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Whether this worker adopts what outlives its parent (set once, under Landlock).
static ADOPTING: AtomicBool = AtomicBool::new(false);
/// The processes this worker started itself: (pid, start time in clock ticks since boot).
static OWN: Mutex<Vec<(u32, u64)>> = Mutex::new(Vec::new());

/// Makes this worker the child subreaper of everything it starts; a no-op when the kernel refuses.
pub fn adopt() {
    // SAFETY: prctl with integer arguments.
    if unsafe { nix::libc::prctl(nix::libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
        ADOPTING.store(true, Ordering::Relaxed);
    }
}

/// Starts `command`, recorded as the worker's own: every process the worker starts goes through here.
pub fn spawn(command: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let child = command.spawn()?;
    own(child.id());
    Ok(child)
}

/// Records `pid` as a process the worker started itself.
fn own(pid: Option<u32>) {
    let Some(pid) = pid.filter(|_| ADOPTING.load(Ordering::Relaxed)) else {
        return;
    };
    if let Some(started) = start_time(pid) {
        let mut own = OWN.lock().unwrap_or_else(|p| p.into_inner());
        // Entries of processes that are gone are dropped as new ones come.
        own.retain(|&(p, t)| start_time(p) == Some(t));
        own.push((pid, started));
    }
}

/// Kills and reaps every child of the worker it did not start itself, until none is left or a second has passed;
/// how many. Blocks: call it off the async threads.
pub fn kill_adopted() -> usize {
    if !ADOPTING.load(Ordering::Relaxed) {
        return 0;
    }
    let me = std::process::id();
    let mut killed = HashSet::new();
    for _ in 0..100 {
        let own: Vec<(u32, u64)> = OWN.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let adopted: Vec<u32> = children(me)
            .into_iter()
            .filter(|&pid| {
                !own.iter()
                    .any(|&(p, t)| p == pid && start_time(pid) == Some(t))
            })
            .collect();
        if adopted.is_empty() {
            break;
        }
        for pid in adopted {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            // WNOHANG: a child the kill has not ended yet is reaped on a later round.
            let _ = waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG));
            killed.insert(pid);
        }
        // Their children are handed to the worker as they die.
        std::thread::sleep(Duration::from_millis(10));
    }
    killed.len()
}

/// The children of this process: from each of its threads' `children` list, or, where the kernel keeps none, from
/// every process's `stat`.
fn children(me: u32) -> Vec<u32> {
    let listed: Option<Vec<u32>> = std::fs::read_dir("/proc/self/task").ok().and_then(|tasks| {
        let mut all = Vec::new();
        for task in tasks.flatten() {
            let list = std::fs::read_to_string(task.path().join("children")).ok()?;
            all.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
        Some(all)
    });
    if let Some(listed) = listed {
        return listed;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat_field(pid, 1).is_some_and(|p| p == u64::from(me)))
        .collect()
}

fn start_time(pid: u32) -> Option<u64> {
    stat_field(pid, 19)
}

/// Field `index` of `/proc/<pid>/stat` counted from the one after the command name (0: state, 1: ppid, 19:
/// starttime), as a number.
fn stat_field(pid: u32, index: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces or parentheses of its own.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(index)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_of_this_process_is_listed_among_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let listed = children(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(listed.contains(&child.id()), "{listed:?}");
    }

    #[test]
    fn the_parent_and_start_time_of_this_process_are_read_from_its_stat() {
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        assert_eq!(stat_field(me, 1), Some(u64::from(parent)));
        assert!(start_time(me).is_some_and(|t| t > 0));
    }
}
