//! Turns of scripted bundles in real confined sessions, for the benches that measure a tool call's cost from
//! turns of 1 and of 1 + N calls: a workspace with a small file to read, a runtime on a fresh store, a turn that
//! must answer `done`, and a call's cost from turns sampled next to each other.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use service_ipc::{Task, TurnOverrides, TurnStatus};
use service_supervisor::{worker_beside, RuntimeOptions, ServiceHome, ServiceRuntime};

/// What a bench can fail with.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A workspace holding `data.txt`; a root supervisor runs sandboxes as the workspace's owner, nobody here.
pub fn workspace() -> BenchResult<tempfile::TempDir> {
    let workspace = tempfile::TempDir::new()?;
    std::fs::write(workspace.path().join("data.txt"), "one\ntwo\nthree\n")?;
    if nix::unistd::geteuid().is_root() {
        for path in [
            workspace.path().to_path_buf(),
            workspace.path().join("data.txt"),
        ] {
            std::os::unix::fs::chown(path, Some(65534), Some(65534))?;
        }
    }
    Ok(workspace)
}

/// A runtime on the store `home` whose workers are this build's (or `BENCH_EXE`'s), and a two-thread tokio
/// runtime to drive it.
pub fn runtime(home: &std::path::Path) -> BenchResult<(ServiceRuntime, tokio::runtime::Runtime)> {
    let exe = std::env::var_os("BENCH_EXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_service-rs")));
    let rt = ServiceRuntime::new(
        ServiceHome::new(home),
        RuntimeOptions::new(worker_beside(&exe)),
    );
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok((rt, tokio))
}

/// One turn of `prompt` in session `id`, which must complete with the answer `done`; its wall time.
pub async fn turn(rt: &ServiceRuntime, id: &str, prompt: &str) -> BenchResult<Duration> {
    let started = Instant::now();
    let pending = rt
        .start_turn(id, Task::new(prompt), TurnOverrides::default())
        .await?;
    let outcome = pending.outcome.await?;
    if outcome.status != TurnStatus::Completed || outcome.final_message != "done" {
        return Err(format!("the turn \"{prompt}\" ended {outcome:?}").into());
    }
    Ok(started.elapsed())
}

/// A call's cost in milliseconds: the median over iterations of (`many` - `one`) / `calls`, each pair sampled next
/// to each other, as the machine's speed drifts over a run.
pub fn per_call(one: &[Duration], many: &[Duration], calls: usize) -> f64 {
    let mut diffs: Vec<f64> = one
        .iter()
        .zip(many)
        .map(|(o, m)| (m.as_secs_f64() - o.as_secs_f64()) * 1e3 / calls as f64)
        .collect();
    diffs.sort_by(f64::total_cmp);
    diffs.get(diffs.len() / 2).copied().unwrap_or(f64::NAN)
}
