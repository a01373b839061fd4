//! Scale benchmark: `cargo bench -p service-supervisor --bench scale` (build the small worker first:
//! `cargo build --release -p service-worker`).
//!
//! The real `service-rs serve` runs as a child process, its sessions confined (`workspace_write`), its model an
//! OpenAI-compatible server on loopback (`common/openai.rs`, in this process). For each count of `BENCH_SESSIONS`
//! (comma-separated, default 300), that many sessions are created over HTTP, then `BENCH_CLIENTS` clients (default
//! 16) send `run-sync` turns at once:
//! - first, the time to make a new file on the store's file system (`stats::new_file`): on ext4 without a journal
//!   it shows whether the run met recent deletions, which slow every file a session makes;
//! - then, for sessions that run a tool and before `serve` starts: as many sandboxes made by bwrap alone, with a
//!   session's arguments, as many at once as there are clients (`scale/ceiling.rs`): the ceiling under first turns;
//! - first turns: the first turn of every session; turns per second and p99 latency;
//! - warm: `BENCH_WARM_ROUNDS` (default 10) more turns per session, each client on its own sessions; turns per
//!   second, median and p99 latency;
//! - after the turns (0.5 s later) and after `BENCH_IDLE_SECS` (default 35: past the 30 s after which the worker
//!   lets idle spare shells go and `serve` stops the worker of an empty sandbox) of idle time: processes per session, the proportional memory (PSS) of the server and all its
//!   processes, and the server's open descriptors and threads;
//! - then one more turn per session whose model runs Bash again: what a session coming back after the idle time
//!   pays, a new sandbox where `serve --empty-idle-timeout` (30 s by default) stopped its worker;
//!   `BENCH_EMPTY_IDLE_TIMEOUT` (seconds, `0` for off) sets that option;
//! - with `BENCH_IDLE_TIMEOUT` (seconds; `serve --idle-timeout`, whose default is 15 minutes): the same once that
//!   timeout has stopped the idle workers, then one more turn per session whose model runs Bash again, so each
//!   starts a new sandbox and worker: what a session returning after the timeout pays.
//!
//! Two kinds of sessions, each in runs of its own: sessions whose model answers the first turn with a Bash call
//! (`true`), so each starts its sandbox and worker and runs a command, as an agent's turns do; and sessions whose
//! turns all answer with text, which the supervisor serves itself with no worker (see `runtime/lead.rs`).
//! `BENCH_KINDS` picks them (`bash,text`, the default).
//!
//! The whole run is repeated `BENCH_RUNS` times (default 3), each with a new server, and every run's figures are
//! printed, so the spread shows the machine's noise. Every run's directories are removed only after the last run:
//! ext4 without a journal steps over every recently freed inode when it makes a file (0.59-0.67 ms a file just
//! after 2,000 were deleted, 0.04 ms after 45 s of quiet), so removing a run's sessions made the next run measure
//! that cleanup rather than its own turns (see `runtime.rs`).
//!
//! `BENCH_CONFIG_TOML` is written as each server's `config.toml` (e.g. `checkpoint_max_mb = 0`, to see what
//! workspace checkpoints cost). `BENCH_PLOT` (default `target/scale.png` in the workspace) receives a chart of the Bash sessions' latencies and
//! memory against the session count, each point the median of its runs. `BENCH_HOLD_SECS` keeps each server that
//! long once its sessions are idle (its pid printed), to look at its processes. `BENCH_EXE` runs another build of
//! `service-rs` (with its `service-worker` beside it), to compare two builds in one sitting; `BENCH_SERVE_ARGS`
//! adds arguments to `serve` (split at spaces), to compare two settings of one build.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "scale/ceiling.rs"]
mod ceiling;
#[path = "common/openai.rs"]
mod openai;
#[path = "scale/plot.rs"]
mod plot;
#[path = "common/serve.rs"]
mod serve_child;
#[path = "common/session_sandbox.rs"]
mod session_sandbox;

#[path = "common/stats.rs"]
mod stats;
use stats::env_or;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What one run measured.
pub struct Run {
    pub sessions: usize,
    /// The median time to make a new file on the store's file system, just before the run (see `stats::new_file`).
    pub new_file: Duration,
    /// Sandboxes a second that bwrap alone makes with a session's arguments, `clients` at once, just before; for
    /// sessions that run a tool.
    pub bare_per_sec: Option<f64>,
    pub cold_per_sec: f64,
    pub cold_p99: Duration,
    pub warm_per_sec: f64,
    pub warm_median: Duration,
    pub warm_p99: Duration,
    /// Right after the turns.
    pub after: Footprint,
    /// After the idle time.
    pub idle: Footprint,
    /// One more turn per session after the idle time, each running Bash again: what a session that comes back pays
    /// (a new sandbox where `--empty-idle-timeout` stopped its worker).
    pub returned: Option<Returned>,
    /// After `BENCH_IDLE_TIMEOUT`, when set: what the sessions hold once their workers were stopped, and their next
    /// turns, each running Bash again in a new sandbox.
    pub reaped: Option<Reaped>,
}

/// Turns that each run Bash: how many a second, and their p99 latency.
pub struct Returned {
    pub per_sec: f64,
    pub p99: Duration,
}

/// Sessions whose workers the idle timeout stopped, and their next tool turns.
pub struct Reaped {
    pub footprint: Footprint,
    pub per_sec: f64,
    pub p99: Duration,
}

/// What one run does: `sessions` sessions, `clients` clients, `rounds` warm turns each, footprints after
/// `idle_secs` and, when `idle_timeout` is not 0, past that idle timeout of `serve`'s.
#[derive(Clone, Copy)]
struct Plan {
    sessions: usize,
    clients: usize,
    rounds: usize,
    idle_secs: u64,
    idle_timeout: u64,
    /// `serve --empty-idle-timeout` in seconds; None leaves serve's default.
    empty_idle_timeout: Option<u64>,
    /// Measure bwrap's own rate first (`ceiling`).
    ceiling: bool,
}

/// What the server and its processes hold.
#[derive(Default)]
pub struct Footprint {
    pub procs_per_session: f64,
    pub pss_mib: f64,
    pub server_pss_mib: f64,
    pub server_fds: usize,
    pub server_threads: usize,
}

/// One `run-sync` turn of `prompt`; fails unless the answer is the server's `ok`.
async fn turn(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    prompt: &str,
) -> BenchResult<Duration> {
    let t = Instant::now();
    let body = serde_json::json!({"input": {"prompt": prompt, "submission_id": uuid::Uuid::new_v4(), "completed": false}});
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

/// What `server_pid` and its processes hold now, for `n` sessions.
fn footprint(server_pid: u32, n: usize) -> Footprint {
    let procs = descendants(server_pid);
    let server_pss = pss_kib(server_pid);
    let pss: u64 = server_pss + procs.iter().map(|p| pss_kib(*p)).sum::<u64>();
    let threads = std::fs::read_to_string(format!("/proc/{server_pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|t| t.trim().parse().ok())
        })
        .unwrap_or(0);
    Footprint {
        procs_per_session: procs.len() as f64 / n as f64,
        pss_mib: pss as f64 / 1024.0,
        server_pss_mib: server_pss as f64 / 1024.0,
        server_fds: std::fs::read_dir(format!("/proc/{server_pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0),
        server_threads: threads,
    }
}

/// Starts `serve` on a free loopback port over `home`, stopping workers idle for `plan.idle_timeout` seconds (its
/// default when 0) and those of empty sandboxes after `plan.empty_idle_timeout`; returns it and its base URL.
async fn serve(
    exe: &Path,
    home: &Path,
    plan: Plan,
) -> BenchResult<(tokio::process::Child, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut timeout = Vec::new();
    if plan.idle_timeout > 0 {
        timeout = vec![
            "--idle-timeout".to_string(),
            format!("{}s", plan.idle_timeout),
        ];
    }
    if let Some(empty) = plan.empty_idle_timeout {
        timeout.extend(["--empty-idle-timeout".to_string(), format!("{empty}s")]);
    }
    let mut command = tokio::process::Command::new(exe);
    command
        .args(["serve", "--no-auth", "--bind", &format!("127.0.0.1:{port}")])
        .args(timeout)
        .args(
            std::env::var("BENCH_SERVE_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env("SERVICE_HOME", home)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    // SAFETY: `dies_with_bench` makes one async-signal-safe system call; `one_run` is polled by `block_on` on the
    // main thread, which spawns `serve` here and outlives it.
    unsafe {
        command.pre_exec(serve_child::dies_with_bench);
    }
    let child = command.spawn()?;
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

/// Sends turns of `prompt` to `sessions` from `clients` clients at once, client `c` taking sessions `c`,
/// `c + clients`, …, `rounds` times each; returns every turn's latency, sorted, and the wall time.
async fn load(
    client: &reqwest::Client,
    base: &str,
    sessions: &Arc<Vec<String>>,
    (clients, rounds): (usize, usize),
    prompt: &'static str,
) -> BenchResult<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, base, sessions) = (client.clone(), base.to_string(), sessions.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            for _ in 0..rounds {
                for id in sessions.iter().skip(c).step_by(clients) {
                    samples.push(turn(&client, &base, id, prompt).await?);
                }
            }
            BenchResult::Ok(samples)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    all.sort();
    Ok((all, started.elapsed()))
}

/// The `p`-quantile of sorted `all`; zero when there is none (`BENCH_WARM_ROUNDS=0`).
fn quantile(all: &[Duration], p: f64) -> Duration {
    match all.len() {
        0 => Duration::ZERO,
        n => all[((n - 1) as f64 * p).round() as usize],
    }
}

/// Waits from `since` (the last turn) past `serve`'s idle timeout (`plan.idle_timeout`) until `server_pid` has no
/// process left under it, for at most twice the timeout, as the reaper looks every quarter of it; then what the
/// sessions hold, and their next turns, each of which runs Bash again in a sandbox of its own.
async fn after_reaping(
    (client, base, ids): (&reqwest::Client, &str, &Arc<Vec<String>>),
    server_pid: u32,
    plan: Plan,
    since: Instant,
) -> BenchResult<Reaped> {
    let timeout = Duration::from_secs(plan.idle_timeout);
    tokio::time::sleep((since + timeout).saturating_duration_since(Instant::now())).await;
    while !descendants(server_pid).is_empty() && since.elapsed() < 2 * timeout {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let footprint = footprint(server_pid, plan.sessions);
    let (back, wall) = load(client, base, ids, (plan.clients, 1), openai::AGAIN).await?;
    Ok(Reaped {
        footprint,
        per_sec: plan.sessions as f64 / wall.as_secs_f64(),
        p99: quantile(&back, 0.99),
    })
}

/// One run over a new home and bundle directory, which are added to `kept`.
async fn one_run(
    exe: &Path,
    model: &str,
    plan: Plan,
    kept: &mut Vec<tempfile::TempDir>,
) -> BenchResult<Run> {
    let (n, clients, rounds, idle_secs) =
        (plan.sessions, plan.clients, plan.rounds, plan.idle_secs);
    let home = tempfile::TempDir::new()?;
    if let Ok(config) = std::env::var("BENCH_CONFIG_TOML") {
        std::fs::write(home.path().join("config.toml"), config)?;
    }
    let bundle = tempfile::TempDir::new()?;
    openai::write_bundle_at(bundle.path(), model, "workspace_write")?;
    let new_file = stats::new_file(&home.path().join("probe"))?;
    let scratch = tempfile::TempDir::new()?;
    let bare_per_sec = match plan.ceiling {
        false => None,
        true => {
            let at = scratch.path().to_path_buf();
            let made =
                tokio::task::spawn_blocking(move || ceiling::sandboxes_per_sec(n, clients, &at))
                    .await??;
            // Let the kernel finish tearing those sandboxes down before serve starts.
            tokio::time::sleep(Duration::from_secs(2)).await;
            Some(made)
        }
    };
    let built = std::process::Command::new(exe)
        .args(["build", &bundle.path().display().to_string()])
        .env("SERVICE_HOME", home.path())
        .output()?;
    if !built.status.success() {
        return Err(format!("build failed: {}", String::from_utf8_lossy(&built.stderr)).into());
    }
    let (server, base) = serve(exe, home.path(), plan).await?;
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
    let (cold, cold_wall) = load(&client, &base, &ids, (clients, 1), "hi").await?;
    let (warm, warm_wall) = load(&client, &base, &ids, (clients, rounds), "hi").await?;
    let last_turn = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = footprint(server_pid, n);
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let hold = env_or("BENCH_HOLD_SECS", 0);
    if hold > 0 {
        eprintln!("serve {server_pid} holds its {n} idle sessions for {hold} s");
        tokio::time::sleep(Duration::from_secs(hold as u64)).await;
    }
    let idle = footprint(server_pid, n);
    let mut since = last_turn;
    let mut returned = None;
    if idle_secs > 0 {
        let (back, wall) = load(&client, &base, &ids, (clients, 1), openai::AGAIN).await?;
        since = Instant::now();
        returned = Some(Returned {
            per_sec: n as f64 / wall.as_secs_f64(),
            p99: quantile(&back, 0.99),
        });
    }
    let reaped = match plan.idle_timeout {
        0 => None,
        _ => Some(after_reaping((&client, &base, &ids), server_pid, plan, since).await?),
    };
    let run = Run {
        sessions: n,
        new_file,
        bare_per_sec,
        cold_per_sec: n as f64 / cold_wall.as_secs_f64(),
        cold_p99: quantile(&cold, 0.99),
        warm_per_sec: warm.len() as f64 / warm_wall.as_secs_f64(),
        warm_median: quantile(&warm, 0.5),
        warm_p99: quantile(&warm, 0.99),
        after,
        idle,
        returned,
        reaped,
    };
    drop(server);
    kept.extend([home, bundle, scratch]);
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
    let counts: Vec<usize> = std::env::var("BENCH_SESSIONS")
        .unwrap_or_else(|_| "300".into())
        .split(',')
        .map(|c| c.trim().parse())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("BENCH_SESSIONS: {e}"))?;
    let kinds = std::env::var("BENCH_KINDS").unwrap_or_else(|_| "bash,text".into());
    let clients = env_or("BENCH_CLIENTS", 16);
    let (rounds, runs) = (env_or("BENCH_WARM_ROUNDS", 10), env_or("BENCH_RUNS", 3));
    let idle_secs = env_or("BENCH_IDLE_SECS", 35) as u64;
    let idle_timeout = env_or("BENCH_IDLE_TIMEOUT", 0) as u64;
    let empty_idle_timeout = std::env::var("BENCH_EMPTY_IDLE_TIMEOUT")
        .ok()
        .map(|v| v.parse::<u64>())
        .transpose()
        .map_err(|e| format!("BENCH_EMPTY_IDLE_TIMEOUT: {e}"))?;
    let provider = openai::start().map_err(|e| e.to_string())?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut kept = Vec::new();
    let mut plotted = Vec::new();
    println!("Confined sessions, {clients} clients, OpenAI-compatible server on loopback; one column per run.");
    for &n in &counts {
        for kind in kinds.split(',') {
            let (model, idle, timeout, title) = match kind.trim() {
                "bash" => (
                    &provider.bash,
                    idle_secs,
                    idle_timeout,
                    "whose first turn runs a Bash command, so each starts its sandbox and worker",
                ),
                // No worker starts: the idle time would change nothing.
                "text" => (
                    &provider.base,
                    0,
                    0,
                    "whose turns all answer with text, which the supervisor serves with no worker",
                ),
                other => {
                    return Err(format!("BENCH_KINDS: unknown kind {other}; bash or text").into())
                }
            };
            let mut results = Vec::new();
            for _ in 0..runs {
                let plan = Plan {
                    sessions: n,
                    clients,
                    rounds,
                    idle_secs: idle,
                    idle_timeout: timeout,
                    empty_idle_timeout,
                    ceiling: kind.trim() == "bash",
                };
                results.push(tokio.block_on(one_run(&exe, model, plan, &mut kept))?);
            }
            println!();
            println!("{n} sessions {title}:");
            print_runs(&results, idle);
            if kind.trim() == "bash" {
                plotted.push(plot::Point::median_of(&results));
            }
        }
    }
    drop(kept);
    if plotted.len() > 1 {
        let path = std::env::var_os("BENCH_PLOT")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/scale.png"));
        match plot::draw(&path, &plotted, clients) {
            Ok(()) => println!("\nchart: {}", path.display()),
            Err(e) => println!("\nno chart: {e}"),
        }
    }
    Ok(())
}

fn print_runs(results: &[Run], idle_secs: u64) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!();
    let row = |name: &str, f: &dyn Fn(&Run) -> String| {
        let values: Vec<String> = results.iter().map(f).collect();
        println!("| {name:<50} | {} |", values.join(" | "));
    };
    let header: Vec<String> = (1..=results.len())
        .map(|i| format!("{:>9}", format!("run {i}")))
        .collect();
    println!("| {:<50} | {} |", "benchmark", header.join(" | "));
    println!("|{:-<52}|{}", "", "-----------|".repeat(results.len()));
    row("new file on the store's disk before the run, ms", &|r| {
        format!("{:>9.3}", ms(r.new_file))
    });
    row("first turns per second", &|r| {
        format!("{:>9.0}", r.cold_per_sec)
    });
    if results.iter().all(|r| r.bare_per_sec.is_some()) {
        let bare = |r: &Run| r.bare_per_sec.unwrap_or(f64::NAN);
        row("bare sandboxes per second (bwrap alone)", &|r| {
            format!("{:>9.0}", bare(r))
        });
        row("first turns / bare sandboxes", &|r| {
            format!("{:>9.2}", r.cold_per_sec / bare(r))
        });
    }
    row("first turn latency, p99 ms", &|r| {
        format!("{:>9.1}", ms(r.cold_p99))
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
    type Stage = fn(&Run) -> &Footprint;
    let mut stages: Vec<(&str, Stage)> = vec![("after the turns", |r| &r.after)];
    if idle_secs > 0 {
        stages.push(("idle", |r| &r.idle));
    }
    fn reaped(r: &Run) -> Option<&Reaped> {
        r.reaped.as_ref()
    }
    if results.iter().all(|r| reaped(r).is_some()) {
        stages.push(("past the idle timeout", |r| {
            reaped(r).map_or(&r.after, |g| &g.footprint)
        }));
    }
    for (stage, of) in stages {
        let label = |what: &str| format!("{what}, {stage}");
        row(&label("processes per session"), &|r| {
            format!("{:>9.2}", of(r).procs_per_session)
        });
        row(&label("PSS of serve and its processes, MiB"), &|r| {
            format!("{:>9.1}", of(r).pss_mib)
        });
        row(&label("of which serve itself, MiB"), &|r| {
            format!("{:>9.1}", of(r).server_pss_mib)
        });
        row(&label("serve's descriptors"), &|r| {
            format!("{:>9}", of(r).server_fds)
        });
        row(&label("serve's threads"), &|r| {
            format!("{:>9}", of(r).server_threads)
        });
    }
    if results.iter().all(|r| r.returned.is_some()) {
        let returned = |r: &Run, f: fn(&Returned) -> f64| r.returned.as_ref().map_or(0.0, f);
        row("turns after the idle time (Bash again) per second", &|r| {
            format!("{:>9.0}", returned(r, |g| g.per_sec))
        });
        row("turn after the idle time, p99 ms", &|r| {
            format!("{:>9.1}", returned(r, |g| g.p99.as_secs_f64() * 1e3))
        });
    }
    if results.iter().all(|r| reaped(r).is_some()) {
        row("next turns (Bash in a new sandbox) per second", &|r| {
            format!("{:>9.0}", reaped(r).map_or(0.0, |g| g.per_sec))
        });
        row("next turn latency, p99 ms", &|r| {
            format!("{:>9.1}", reaped(r).map_or(0.0, |g| ms(g.p99)))
        });
    }
}
