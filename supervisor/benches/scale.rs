//! Scale benchmark: `cargo bench -p service-supervisor --bench scale` (build the small worker first:
//! `cargo build --release -p service-worker`).
//!
//! The real `service-rs serve` runs as a child process, its sessions confined (`workspace_write`), its model an
//! OpenAI-compatible server on loopback (`common/openai.rs`, in this process). `BENCH_SESSIONS` sessions (default
//! 300) are created over HTTP, then `BENCH_CLIENTS` clients (default 16) send `run-sync` turns at once:
//! - cold: the first turn of every session; turns per second;
//! - warm: `BENCH_WARM_ROUNDS` (default 10) more turns per session, each client on its own sessions; turns per
//!   second, median and p99 latency;
//! - idle: then the sessions' processes, per session, and the proportional memory (PSS) of the server and all its
//!   processes.
//!
//! Two kinds of sessions, each in runs of its own: sessions whose model calls a tool (Glob, which starts no shell)
//! in answer to the first turn, so each starts its sandbox and worker then; and sessions whose turns all answer
//! with text, which the supervisor serves itself with no worker (see `runtime/lead.rs`).
//!
//! The whole run is repeated `BENCH_RUNS` times (default 3), each with a new server, and every run's figures are
//! printed, so the spread shows the machine's noise. Every run's directories are removed only after the last run:
//! ext4 without a journal (the bench machine's) steps over every recently freed inode when it makes a file (0.59-0.67
//! ms a file just after 2,000 were deleted, 0.04 ms after 45 s of quiet), so removing a run's 300 sessions made the
//! next run measure that cleanup rather than its own turns (see `runtime.rs`).
//!
//! `BENCH_HOLD_SECS` keeps each server that long once its sessions are idle (its pid printed), to look at its
//! processes. `BENCH_EXE` runs another build of `service-rs` (with its `service-worker` beside it), to compare two
//! builds in one sitting.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/openai.rs"]
mod openai;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one run measured.
struct Run {
    cold_per_sec: f64,
    warm_per_sec: f64,
    warm_median: Duration,
    warm_p99: Duration,
    procs_per_session: f64,
    pss_mib: f64,
    server_pss_mib: f64,
}

/// One `run-sync` turn; fails unless the answer is the server's `ok`.
async fn turn(client: &reqwest::Client, base: &str, id: &str) -> BenchResult<Duration> {
    let t = Instant::now();
    let body = serde_json::json!({"input": {"prompt": "hi", "submission_id": uuid::Uuid::new_v4(), "completed": false}});
    let resp = client
        .post(format!("{base}/sessions/{id}/run-sync"))
        .json(&body)
        .send()
        .await?;
    let status = resp.status();
    let answer: serde_json::Value = resp.json().await?;
    let took = t.elapsed();
    if !status.is_success() || answer["final_message"] != "ok" {
        return Err(format!("turn of {id} answered {status}: {answer}").into());
    }
    Ok(took)
}

/// The pids of `root`'s descendants.
fn descendants(root: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                out.push(child);
                stack.push(child);
            }
        }
    }
    out
}

fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Starts `serve` on a free loopback port over `home`; returns it and its base URL.
async fn serve(exe: &Path, home: &Path) -> BenchResult<(tokio::process::Child, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = tokio::process::Command::new(exe)
        .args(["serve", "--no-auth", "--bind", &format!("127.0.0.1:{port}")])
        .env("SERVICE_HOME", home)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for _ in 0..500 {
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            return Ok((child, base));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("serve did not answer /healthz within 5 s".into())
}

/// Sends the turns of `sessions` from `clients` clients at once, client `c` taking sessions `c`, `c + clients`, …,
/// `rounds` times each; returns every turn's latency and the wall time.
async fn load(
    client: &reqwest::Client,
    base: &str,
    sessions: &Arc<Vec<String>>,
    clients: usize,
    rounds: usize,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, base, sessions) = (client.clone(), base.to_string(), sessions.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            for _ in 0..rounds {
                for id in sessions.iter().skip(c).step_by(clients) {
                    samples.push(turn(&client, &base, id).await?);
                }
            }
            BenchResult::Ok(samples)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok((all, started.elapsed()))
}

/// One run over a new home and bundle directory, which are added to `kept`.
async fn one_run(
    exe: &Path,
    model: &str,
    (n, clients, rounds): (usize, usize, usize),
    kept: &mut Vec<tempfile::TempDir>,
) -> BenchResult<Run> {
    let home = tempfile::TempDir::new()?;
    let bundle = tempfile::TempDir::new()?;
    openai::write_bundle_at(bundle.path(), model, "workspace_write")?;
    let built = std::process::Command::new(exe)
        .args(["build", &bundle.path().display().to_string()])
        .env("SERVICE_HOME", home.path())
        .output()?;
    if !built.status.success() {
        return Err(format!("build failed: {}", String::from_utf8_lossy(&built.stderr)).into());
    }
    let (server, base) = serve(exe, home.path()).await?;
    let server_pid = server.id().ok_or("serve has no pid")?;
    let client = reqwest::Client::new();
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let created: serde_json::Value = client
            .post(format!("{base}/sessions"))
            .json(&serde_json::json!({"bundle_ref": "local/bench-openai:1.0.0"}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        ids.push(created["id"].as_str().ok_or("no session id")?.to_string());
    }
    let ids = Arc::new(ids);
    let (_, cold) = load(&client, &base, &ids, clients, 1).await?;
    let (mut warm, warm_wall) = load(&client, &base, &ids, clients, rounds).await?;
    warm.sort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let hold = env_or("BENCH_HOLD_SECS", 0);
    if hold > 0 {
        eprintln!("serve {server_pid} holds its {n} idle sessions for {hold} s");
        tokio::time::sleep(Duration::from_secs(hold as u64)).await;
    }
    let procs = descendants(server_pid);
    let server_pss = pss_kib(server_pid);
    let pss: u64 = server_pss + procs.iter().map(|p| pss_kib(*p)).sum::<u64>();
    let at = |q: f64| warm[((warm.len() - 1) as f64 * q).round() as usize];
    let run = Run {
        cold_per_sec: n as f64 / cold.as_secs_f64(),
        warm_per_sec: warm.len() as f64 / warm_wall.as_secs_f64(),
        warm_median: at(0.5),
        warm_p99: at(0.99),
        procs_per_session: procs.len() as f64 / n as f64,
        pss_mib: pss as f64 / 1024.0,
        server_pss_mib: server_pss as f64 / 1024.0,
    };
    drop(server);
    kept.extend([home, bundle]);
    Ok(run)
}

fn main() -> BenchResult<()> {
    let exe = std::env::var_os("BENCH_EXE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_BIN_EXE_service-rs")));
    if service_supervisor::worker_beside(&exe) == exe {
        println!(
            "note: no service-worker beside {}; workers are `service-rs worker`",
            exe.display()
        );
    }
    let (n, clients) = (env_or("BENCH_SESSIONS", 300), env_or("BENCH_CLIENTS", 16));
    let (rounds, runs) = (env_or("BENCH_WARM_ROUNDS", 10), env_or("BENCH_RUNS", 3));
    let provider = openai::start().map_err(|e| e.to_string())?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (mut tools, mut chats, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    let shape = (n, clients, rounds);
    for _ in 0..runs {
        tools.push(tokio.block_on(one_run(&exe, &provider.glob, shape, &mut kept))?);
        chats.push(tokio.block_on(one_run(&exe, &provider.base, shape, &mut kept))?);
    }
    drop(kept);
    println!("{n} confined sessions, {clients} clients, OpenAI-compatible server on loopback; one column per run.");
    println!();
    println!(
        "Sessions whose first turn calls a tool (Glob), so each starts its sandbox and worker:"
    );
    print_runs(&tools);
    println!();
    println!(
        "Sessions whose turns all answer with text, which the supervisor serves with no worker:"
    );
    print_runs(&chats);
    Ok(())
}

fn print_runs(results: &[Run]) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!();
    let row = |name: &str, f: &dyn Fn(&Run) -> String| {
        let values: Vec<String> = results.iter().map(f).collect();
        println!("| {name:<44} | {} |", values.join(" | "));
    };
    let header: Vec<String> = (1..=results.len())
        .map(|i| format!("{:>9}", format!("run {i}")))
        .collect();
    println!("| {:<44} | {} |", "benchmark", header.join(" | "));
    println!("|{:-<46}|{}", "", "-----------|".repeat(results.len()));
    row("cold first turns per second", &|r| {
        format!("{:>9.0}", r.cold_per_sec)
    });
    row("warm turns per second", &|r| {
        format!("{:>9.0}", r.warm_per_sec)
    });
    row("warm turn latency, median ms", &|r| {
        format!("{:>9.2}", ms(r.warm_median))
    });
    row("warm turn latency, p99 ms", &|r| {
        format!("{:>9.2}", ms(r.warm_p99))
    });
    row("processes per idle session", &|r| {
        format!("{:>9.2}", r.procs_per_session)
    });
    row("PSS of serve and all its processes, MiB", &|r| {
        format!("{:>9.1}", r.pss_mib)
    });
    row("of which the serve process, MiB", &|r| {
        format!("{:>9.1}", r.server_pss_mib)
    });
}
