//! The ceiling under first turns that run a tool: how many sandboxes a second bwrap alone makes on this machine,
//! with the arguments a session's sandbox gets, as many at once as the bench has clients.
//!
//! The arguments are a session's (`common/session_sandbox.rs`); the program is a shell that says it is up and then
//! waits, where a session runs its worker. A sandbox counts once its program has written that line, and every
//! sandbox stays up until the last is made, as sessions' sandboxes do, so their teardown is not timed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::session_sandbox::SessionSandbox;
use super::BenchResult;

/// Makes `n` sandboxes, `at_once` at a time, and returns how many a second were made; all are stopped before it
/// returns. `scratch` holds the bundle, the workspace and the `/etc` snapshot.
pub fn sandboxes_per_sec(n: usize, at_once: usize, scratch: &Path) -> BenchResult<f64> {
    let sandbox = SessionSandbox::new(scratch, &["/bin/sh", "-c", "echo up; exec cat"])?;
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let made: Vec<BenchResult<Vec<Child>>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..at_once)
            .map(|_| {
                s.spawn(|| {
                    let mut up = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        let mut child = sandbox
                            .command()
                            .stdin(Stdio::piped())
                            .stdout(Stdio::piped())
                            .stderr(Stdio::null())
                            .spawn()?;
                        let mut line = String::new();
                        let stdout = child.stdout.take().ok_or("no stdout")?;
                        BufReader::new(stdout).read_line(&mut line)?;
                        if line != "up\n" {
                            return Err(format!("a bare sandbox did not start: {line:?}").into());
                        }
                        up.push(child);
                    }
                    Ok(up)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    let wall = started.elapsed();
    let mut first_error = None;
    for children in made {
        match children {
            Ok(children) => stop(children),
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(n as f64 / wall.as_secs_f64()),
    }
}

/// Closes each sandbox's input, which ends its program and so the sandbox, and reaps it.
fn stop(children: Vec<Child>) {
    for mut child in children {
        drop(child.stdin.take());
        let _ = child.wait();
    }
}
