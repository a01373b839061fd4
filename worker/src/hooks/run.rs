//! Starting one hook command in the sandbox, as commands start (the same confinement, process group, egress
//! variables and death with the worker), with the event's JSON on its stdin, its output capped and a time-out.
//! The supervisor starts the operator's host hooks with the same code, unconfined: a process group of their own,
//! a cleared environment and death with the supervisor.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::tools::exec;

/// Output kept of each of a hook's stdout and stderr; the rest is read and dropped.
const OUTPUT_CAP: usize = 64 * 1024;

/// How a hook command ended.
#[derive(Debug, Default)]
pub struct Ran {
    /// Exit code; None when killed or not started.
    pub exit_code: Option<i32>,
    /// Its time-out killed it.
    pub timed_out: bool,
    /// Why it could not start.
    pub spawn_error: Option<String>,
    /// Its stdout, cut at the cap.
    pub stdout: String,
    /// Its stderr, cut at the cap.
    pub stderr: String,
    /// Wall time.
    pub duration: Duration,
}

/// What a hook's process is given besides its command.
pub struct Launch<'a> {
    /// The command line.
    pub command: &'a str,
    /// Its working directory.
    pub cwd: &'a std::path::Path,
    /// Variables added to its environment.
    pub env: &'a [(&'static str, String)],
    /// The event's JSON, written to its stdin.
    pub input: &'a [u8],
    /// Confined as the sandbox's commands are; false only for the operator's host hooks.
    pub confine: bool,
    /// Its time limit.
    pub timeout: Duration,
}

/// Runs one hook to its end; its whole process group is killed once the shell exits, at the time-out, or when
/// `cancel` fires.
pub async fn run(launch: Launch<'_>, cancel: &tokio_util::sync::CancellationToken) -> Ran {
    let started = Instant::now();
    let mut ran = Ran::default();
    let mut command = tokio::process::Command::new(exec::shell());
    if !launch.confine {
        on_host(&mut command);
    }
    command
        .arg("-c")
        .arg(launch.command)
        .current_dir(launch.cwd)
        .envs(launch.env.iter().map(|(k, v)| (*k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let prepared = if launch.confine {
        exec::confine_process(&mut command)
    } else {
        Ok(())
    };
    let child = prepared.and_then(|()| crate::leftovers::spawn(&mut command));
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            ran.spawn_error = Some(format!(
                "cannot start the hook in {}: {e}",
                launch.cwd.display()
            ));
            ran.duration = started.elapsed();
            return ran;
        }
    };
    let pgid = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
    let stdin = child.stdin.take();
    let input = launch.input.to_vec();
    // A hook that never reads its stdin must not block the worker: the write runs on its own.
    let writer = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&input).await;
        }
    });
    let stdout = tokio::spawn(capped(child.stdout.take()));
    let stderr = tokio::spawn(capped(child.stderr.take()));
    let status = tokio::select! {
        s = child.wait() => s.ok(),
        _ = tokio::time::sleep(launch.timeout) => {
            ran.timed_out = true;
            None
        }
        _ = cancel.cancelled() => None,
    };
    // The shell's leftovers would hold the pipes open; a killed hook's group goes with it.
    exec::kill_group(pgid);
    let _ = child.wait().await;
    writer.abort();
    ran.exit_code = status.and_then(|s| s.code());
    ran.stdout = stdout.await.unwrap_or_default();
    ran.stderr = stderr.await.unwrap_or_default();
    ran.duration = started.elapsed();
    ran
}

/// A host hook's process: its own group, none of the supervisor's variables (its keys among them) but `PATH`,
/// `HOME` and `LANG`, and death with the supervisor.
fn on_host(command: &mut tokio::process::Command) {
    let keep: Vec<(String, String)> = ["PATH", "HOME", "LANG"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    command.env_clear().envs(keep);
    exec::own_group(command);
}

/// A pipe's text, the first [`OUTPUT_CAP`] bytes of it; the rest is drained so the hook never blocks on a full
/// pipe.
async fn capped(pipe: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}
