//! A real `service-rs serve` as a child process, for the benches that time what a client of it sees.
// Each bench that includes this module uses part of it.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The bearer token of the benches' servers.
pub const TOKEN: &str = "bench-token";

/// A server over `home` with `extra` arguments, on a free loopback port; the child (the caller kills it) and its
/// base URL. `BENCH_EXE` names the `service-rs` to run instead of this build's; `BENCH_SERVE_ARGS` adds arguments
/// (split at spaces), e.g. `--http-threads 0` to compare two settings of one build.
pub fn serve(home: &Path, extra: &[&str]) -> Result<(Child, String), Box<dyn std::error::Error>> {
    use std::io::BufRead;
    // `BENCH_EXE` runs another build (to compare two in one sitting).
    let exe =
        std::env::var_os("BENCH_EXE").unwrap_or_else(|| env!("CARGO_BIN_EXE_service-rs").into());
    let mut command = Command::new(exe);
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--token", TOKEN])
        .args(extra)
        .args(
            std::env::var("BENCH_SERVE_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env("SERVICE_HOME", home)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: `dies_with_bench` makes one async-signal-safe system call.
    unsafe {
        command.pre_exec(dies_with_bench);
    }
    let mut child = command.spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let base = line
        .trim()
        .strip_prefix("service-rs listening on ")
        .ok_or_else(|| format!("unexpected first line: {line}"))?
        .to_string();
    Ok((child, base))
}

/// For a child's pre-exec hook: the child is killed when the bench ends, a bench stopped by a signal (whose
/// destructors never run) included. The kernel sends it when the thread that spawned the child ends, so spawn
/// from a thread that outlives the child (the main thread, or a future `block_on` polls there).
pub fn dies_with_bench() -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
}

/// Creates a session of `bundle` on the server at `base`; its `run-sync` URL.
pub async fn session(
    client: &reqwest::Client,
    base: &str,
    bundle: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let made: serde_json::Value = client
        .post(format!("{base}/sessions"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"bundle_ref": bundle}))
        .send()
        .await?
        .json()
        .await?;
    let id = made["id"].as_str().ok_or("no session id")?;
    Ok(format!("{base}/sessions/{id}/run-sync"))
}

/// One text turn with `run-sync` at `url`; its round trip. Fails unless the turn completed.
pub async fn turn(
    client: &reqwest::Client,
    url: &str,
) -> Result<std::time::Duration, Box<dyn std::error::Error>> {
    let body = serde_json::json!({"input": {"prompt": "hi",
        "submission_id": uuid::Uuid::new_v4(), "completed": false}});
    let started = std::time::Instant::now();
    let answer: serde_json::Value = client
        .post(url)
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await?
        .json()
        .await?;
    if answer["status"] != "completed" {
        return Err(format!("the turn did not complete: {answer}").into());
    }
    Ok(started.elapsed())
}
