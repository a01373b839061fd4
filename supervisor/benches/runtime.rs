//! Runtime benchmarks: `cargo bench -p service-supervisor --bench runtime`.
//!
//! Prints medians (and p90) measured in one run, so machine noise affects every row alike:
//! - session create: `create_session` plus the worker spawned and handshaken;
//! - text-only turn on a warm session with the scripted provider (full round trip through the worker);
//! - turn overhead: the same turn minus the provider's own time (the scripted provider has none, so the turn time
//!   is all overhead);
//! - one-shot `service-rs run` wall time, as a user runs it.
//!
//! `BENCH_ITERS` sets the number of samples (default 200).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use service_ipc::{Task, TurnOverrides};
use service_supervisor::{RuntimeOptions, ServiceHome, ServiceRuntime};

fn write_bundle(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "bench", version: "1.0.0", tools: ["Bash"],
             sandbox: { mode: "danger_full_access" } }"#,
    )?;
    std::fs::write(
        dir.join("agent.yaml"),
        "model: { provider: scripted, name: bench, config: { script: resources/script.json5 } }\n",
    )?;
    std::fs::write(
        dir.join("resources/script.json5"),
        r#"{turns: [{replies: [{text: "ok"}]}]}"#,
    )
}

struct Stats {
    median: Duration,
    p90: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Stats {
        median: at(0.5),
        p90: at(0.9),
    }
}

fn row(name: &str, s: &Stats) {
    println!(
        "| {name:<44} | {:>10.3} | {:>10.3} |",
        s.median.as_secs_f64() * 1e3,
        s.p90.as_secs_f64() * 1e3
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_service-rs"));
    let home = tempfile::TempDir::new()?;
    let bundle = tempfile::TempDir::new()?;
    write_bundle(bundle.path())?;
    let bundle_ref = bundle.path().display().to_string();
    let rt = ServiceRuntime::new(
        ServiceHome::new(home.path()),
        RuntimeOptions::new(exe.clone()),
    );
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let (create, turn) = tokio.block_on(async {
        let mut create = Vec::new();
        for _ in 0..iters.min(100) {
            let t = Instant::now();
            let id = rt.create_session(&bundle_ref, None)?.id;
            rt.start_worker(&id).await?;
            create.push(t.elapsed());
            rt.delete_session(&id).await?;
        }
        let id = rt.create_session(&bundle_ref, None)?.id;
        rt.start_worker(&id).await?;
        let mut turn = Vec::new();
        for _ in 0..iters {
            let t = Instant::now();
            rt.run_turn(&id, Task::new("hi"), TurnOverrides::default())
                .await?;
            turn.push(t.elapsed());
        }
        rt.shutdown("bench over").await;
        Ok::<_, Box<dyn std::error::Error>>((create, turn))
    })?;

    let mut oneshot = Vec::new();
    for _ in 0..iters.min(50) {
        let t = Instant::now();
        let out = std::process::Command::new(&exe)
            .args(["run", &bundle_ref, "--prompt", "hi"])
            .env("SERVICE_HOME", home.path())
            .output()?;
        oneshot.push(t.elapsed());
        if !out.status.success() {
            return Err(format!("run failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
    }

    println!(
        "| {:<44} | {:>10} | {:>10} |",
        "benchmark", "median ms", "p90 ms"
    );
    println!("|{:-<46}|{:-<12}|{:-<12}|", "", "", "");
    row("session create (worker up and handshaken)", &stats(create));
    row("text-only turn, warm session (all overhead)", &stats(turn));
    row("one-shot `service-rs run` wall time", &stats(oneshot));
    Ok(())
}
