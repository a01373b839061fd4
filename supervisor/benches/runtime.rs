//! Runtime benchmarks: `cargo bench -p service-supervisor --bench runtime`.
//!
//! Prints medians (and p90) measured in one run, so machine noise affects every row alike:
//! - session create: `create_session` plus the worker spawned and handshaken (on the host);
//! - text-only turn on a warm session with the scripted provider (full round trip through the worker; the scripted
//!   provider takes no time of its own, so the whole turn is runtime overhead);
//! - one-shot `service-rs run` wall time, as a user runs it: on the host, and confined against a bare bwrap spawn
//!   sampled in turn (the scripted provider makes no request, so bare bwrap is the whole limit here);
//! - session create with the worker confined by bubblewrap, against a bare `bwrap --unshare-all true` sampled in
//!   turn: started for the session, and taken from the spare the runtime keeps started ahead (`prestart`; the
//!   bench waits for the spare before each such sample, untimed, as a session created by a person or a client
//!   would find it);
//! - `true` run as an operator command in a live sandbox, against `sh -c true` on the host, back to back and with
//!   20 ms of idle time before each (as commands arrive from a model or a person; it lets the worker's spare
//!   shell be ready, see `worker/src/tools/spare_shell.rs`).
//!
//! - against an OpenAI-compatible server on loopback (`common/openai.rs`), in three rounds whose medians are all
//!   printed, so the machine's noise shows as their spread:
//!   - a warm turn (its session's host worker running) against the same client's direct streaming request on a
//!     kept connection; the difference is the runtime's overhead per turn; the same for a turn of a confined
//!     session that has never needed its worker (the supervisor answers text turns itself, see
//!     `runtime/lead.rs`);
//!   - the confined one-shot `service-rs run`, whole process, against its limit: a bare bwrap spawn plus one
//!     direct streaming request on a new connection, sampled in turn; the same against a model that waits 30 ms,
//!     and against one that calls Bash once (so the sandbox starts), whose limit adds `sh -c true` on the host;
//!   - bwrap alone with a session's own arguments (`common/session_sandbox.rs`) next to the bare bwrap of the
//!     limits: what the sandbox's mounts cost before the worker runs;
//!   - before each round, the time to make a new file in the home's file system, which tells a run that met
//!     recent deletions (below) from a slower build;
//! - against a model that takes 300 ms before each answer (`runtime/slow_model.rs`, alone with
//!   `BENCH_ONLY=slow_model`): the confined one-shot against the same with `--dangerous-sandbox-mode`, with one
//!   Bash call and with a text answer;
//! - against Odyssey 0.1.1 (`runtime/odyssey.rs`, when `BENCH_ODYSSEY` names its binary; alone with
//!   `BENCH_ONLY=odyssey`): the confined one-shot whose model calls Bash once, each whole process;
//! - bubblewrap against Landlock (`runtime/backends.rs`, alone with `BENCH_ONLY=backends`): the confined one-shot
//!   whose model calls Bash once, whole process, under each sandbox backend;
//! - workers as the session gets them (`service-worker`, the small binary beside `service-rs`) and as
//!   `service-rs worker`: time to start and handshake on the host, and idle RSS and PSS.
//!
//! `BENCH_ITERS` sets the number of samples (default 200); `BENCH_EXE` runs another build of `service-rs` (to
//! compare two builds in one sitting), whose sessions run the `service-worker` beside it as an install has it, else
//! `service-rs worker`: copy the small worker beside a build measured alone. `BENCH_HOST_MOUNTS=N` (root) adds N
//! mounts to the table every sandbox starts from (`runtime/host_mounts.rs`). `BENCH_BASELINE_EXE` names a second
//! build whose confined one-shots (text, and one Bash call) are sampled in turn with this one's, and adds their
//! ratios: the file system drifts from run to run (below), so two builds compare best within one round. Build the
//! small worker first (`cargo build --release -p service-worker`); without it the runtime uses `service-rs
//! worker`, and the bench says so.
//!
//! The file system under the temporary directory shows in every row that makes sessions. On the bench machine's
//! ext4 (no journal), the confined one-shot slows from run to run (1.24-1.34x, then up to 2.0x, even with 40 s
//! between runs), and with `TMPDIR=/dev/shm` it does not (1.03-1.20x in back-to-back runs). One cause is measured:
//! ext4 without a journal steps over every recently freed inode when it makes a file (0.59-0.67 ms a file just
//! after 2,000 were deleted, 0.04 ms after 45 s of quiet), and a run deletes thousands at its end while a one-shot
//! makes six. So the loopback rows run first, before the rows that create and delete hundreds of sessions; a run
//! that follows another within minutes would meet that run's deletions (docs/src/benchmarks.md, "The machine, and how to
//! read the figures"). The kernel counts a freed inode as recent for 60 s, or 360 s while its inode table block is
//! not written back; with a journal it does not check (`find_inode_bit` in `fs/ext4/ialloc.c`). New files re-dirty the same blocks, so the one-shots
//! themselves can keep the window open; waiting for a quiet probe before the rows did not help (tried at commit
//! 968202f). The probe row says what each round met, and a note follows it when a probe read over 0.05 ms.
//! docs/src/benchmarks.md reads the one-shot and create rows on a calm file system: each run starts at least 6 minutes (the kernel's window) after the previous run's deletions.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use service_ipc::{Task, TurnOverrides};
use service_supervisor::{worker_beside, RuntimeOptions, ServiceHome, ServiceRuntime};

#[path = "common/openai.rs"]
mod openai;

#[path = "runtime/loopback.rs"]
mod loopback;

#[path = "runtime/host_mounts.rs"]
mod host_mounts;

#[path = "runtime/slow_model.rs"]
mod slow_model;

#[path = "runtime/odyssey.rs"]
mod odyssey;

#[path = "runtime/backends.rs"]
mod backends;

#[path = "common/session_sandbox.rs"]
mod session_sandbox;

#[path = "common/stats.rs"]
mod stats;
use stats::env_or;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// What the runtime measures in-process: samples of each kind, and memory in KiB.
struct Measured {
    create: Vec<Duration>,
    boxed_create: Vec<Duration>,
    prestarted_create: Vec<Duration>,
    bare_bwrap: Vec<Duration>,
    turn: Vec<Duration>,
    boxed_true: Vec<Duration>,
    paced_true: Vec<Duration>,
    idle: Idle,
    supervisor_rss: u64,
}

/// Medians over the idle workers of live sessions, in KiB.
struct Idle {
    rss: u64,
    pss: u64,
    seen: usize,
}

/// Idle time before each command of the paced rows.
const PAUSE: Duration = Duration::from_millis(20);

fn write_bundle(dir: &Path, mode: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        format!(
            r#"{{ manifest_version: "service.bundle/v1", id: "bench", version: "1.0.0", tools: ["Bash"],
                 sandbox: {{ mode: "{mode}" }} }}"#
        ),
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

#[derive(Clone)]
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

fn time(n: usize, mut f: impl FnMut() -> BenchResult<()>) -> BenchResult<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// Milliseconds of `d`.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn row(name: &str, s: &Stats) {
    println!(
        "| {name:<46} | {:>10.3} | {:>10.3} |",
        ms(s.median),
        ms(s.p90)
    );
}

fn ratio(name: &str, a: &Stats, b: &Stats) {
    let r = a.median.as_secs_f64() / b.median.as_secs_f64();
    println!("| {name:<46} | {:>9.2}x | {:>10} |", r, "");
}

/// Two rows and the ratio of the first to the second.
fn compared(names: [&str; 3], a: &Stats, b: &Stats) {
    row(names[0], a);
    row(names[1], b);
    ratio(names[2], a, b);
}

/// Resident set size of a process, from /proc.
fn rss_kib(pid: &str) -> Option<u64> {
    kib_field(&format!("/proc/{pid}/status"), "VmRSS:")
}

/// Proportional set size of a process: its private pages plus its share of the pages it shares.
fn pss_kib(pid: &str) -> Option<u64> {
    kib_field(&format!("/proc/{pid}/smaps_rollup"), "Pss:")
}

fn kib_field(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Starts `n` sessions of `reference` and measures their idle workers; the sessions are then deleted.
async fn idle_workers(rt: &ServiceRuntime, reference: &str, n: usize) -> BenchResult<Idle> {
    let mut live = Vec::new();
    for _ in 0..n {
        let id = rt.create_session(reference, None).await?.id;
        rt.start_worker(&id).await?;
        live.push(id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pids = worker_pids(&live);
    let mid = |mut v: Vec<u64>| {
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let idle = Idle {
        rss: mid(pids.iter().filter_map(|p| rss_kib(p)).collect()),
        pss: mid(pids.iter().filter_map(|p| pss_kib(p)).collect()),
        seen: pids.len(),
    };
    for id in live {
        rt.delete_session(&id).await?;
    }
    Ok(idle)
}

/// Pids of the host workers serving sessions (their `--label` names the session).
fn worker_pids(session_ids: &[String]) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().into_owned();
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let is_worker = cmdline.contains(" worker --ipc-fd ")
                && session_ids.iter().any(|id| cmdline.contains(id.as_str()));
            is_worker.then_some(pid)
        })
        .collect()
}

/// Creates a session of `reference` and starts its worker; returns the time taken (the session is then deleted).
async fn create_once(rt: &ServiceRuntime, reference: &str) -> BenchResult<Duration> {
    let t = Instant::now();
    let id = rt.create_session(reference, None).await?.id;
    rt.start_worker(&id).await?;
    let took = t.elapsed();
    rt.delete_session(&id).await?;
    Ok(took)
}

/// Times one bare `bwrap --unshare-all true`, the baseline of the sandboxed create.
fn bare_bwrap_once() -> BenchResult<Duration> {
    succeeded(std::process::Command::new("bwrap").args([
        "--unshare-all",
        "--ro-bind",
        "/",
        "/",
        "true",
    ]))
}

/// Runs `cmd` to its end and times it; fails unless it succeeded.
fn succeeded(cmd: &mut std::process::Command) -> BenchResult<Duration> {
    let t = Instant::now();
    let status = cmd.status()?;
    let took = t.elapsed();
    if status.success() {
        Ok(took)
    } else {
        Err(format!("{:?} failed: {status}", cmd.get_program()).into())
    }
}

/// Runs `a` and `b` once each uncounted, then `iters` pairs (at most 100), which goes first alternating so neither
/// always follows the other's teardown: both series and the median of the pairs' ratios a/b.
fn alternating(
    iters: usize,
    mut a: impl FnMut() -> BenchResult<Duration>,
    mut b: impl FnMut() -> BenchResult<Duration>,
) -> BenchResult<(Vec<Duration>, Vec<Duration>, f64)> {
    a()?;
    b()?;
    let (mut xs, mut ys, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..iters.min(100) {
        let (x, y) = if i % 2 == 0 {
            let x = a()?;
            (x, b()?)
        } else {
            let y = b()?;
            (a()?, y)
        };
        ratios.push(x.as_secs_f64() / y.as_secs_f64());
        xs.push(x);
        ys.push(y);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
    Ok((xs, ys, median))
}

/// Prints what [`alternating`] measured: `title`, each side's median under its `names`, and the median of the
/// pairs' ratios under `ratio_label`.
fn print_pairs(
    title: &str,
    names: (&str, &str),
    (a, b, ratio): (Vec<Duration>, Vec<Duration>, f64),
    ratio_label: &str,
) {
    println!();
    println!("{title}, {} pairs:", a.len());
    println!();
    println!("| {:<64} | {:>10} |", "benchmark", "median ms");
    println!("|{:-<66}|{:-<12}|", "", "");
    println!("| {:<64} | {:>10.2} |", names.0, ms(stats(a).median));
    println!("| {:<64} | {:>10.2} |", names.1, ms(stats(b).median));
    println!("| {:<64} | {:>9.2}x |", ratio_label, ratio);
}

/// Times `cmd`, a one-shot whose model answers `ok`: its wall time, or what it said when it did not answer so.
fn answered_ok(cmd: &mut std::process::Command) -> BenchResult<Duration> {
    let t = Instant::now();
    let out = cmd.output()?;
    let took = t.elapsed();
    if !out.status.success() || out.stdout != b"ok\n" {
        return Err(format!("run failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(took)
}

fn main() -> BenchResult<()> {
    // First, while this process has one thread.
    let host_mounts = host_mounts::add(env_or("BENCH_HOST_MOUNTS", 0))?;
    if let Some(m) = &host_mounts {
        println!(
            "in a mount namespace of its own, with {} more mounts than the host's",
            m.count()
        );
    }
    let iters: usize = env_or("BENCH_ITERS", 200);
    let exe = std::env::var_os("BENCH_EXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_service-rs")));
    let worker_exe = worker_beside(&exe);
    // Said for every row, the one-shots' included: an install runs the small worker.
    if worker_exe == exe {
        println!(
            "note: no service-worker beside {}; workers are `service-rs worker`",
            exe.display()
        );
    }
    match std::env::var("BENCH_ONLY").as_deref() {
        Ok("slow_model") => return slow_model::rows(&exe, iters),
        Ok("odyssey") => return odyssey::rows(&exe, iters),
        Ok("backends") => return backends::rows(&exe, iters),
        _ => {}
    }
    let home = tempfile::TempDir::new()?;
    let host_bundle = tempfile::TempDir::new()?;
    write_bundle(host_bundle.path(), "danger_full_access")?;
    let host_ref = host_bundle.path().display().to_string();
    let boxed_bundle = tempfile::TempDir::new()?;
    write_bundle(boxed_bundle.path(), "workspace_write")?;
    let boxed_ref = boxed_bundle.path().display().to_string();
    let rt = ServiceRuntime::new(
        ServiceHome::new(home.path()),
        RuntimeOptions::new(worker_exe.clone()),
    );
    let prestart_home = tempfile::TempDir::new()?;
    let mut prestart_options = RuntimeOptions::new(worker_exe.clone());
    prestart_options.prestart_sandboxes = true;
    let prestarting = ServiceRuntime::new(ServiceHome::new(prestart_home.path()), prestart_options);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // First: the rows below create and delete hundreds of sessions, and on ext4 without a journal a new file
    // costs more for a while after many were deleted (see the header). The one-shots should not measure that.
    loopback::rows(&exe, &worker_exe, iters, &tokio)?;
    slow_model::rows(&exe, iters)?;
    odyssey::rows(&exe, iters)?;
    backends::rows(&exe, iters)?;

    let m = tokio.block_on(async {
        // Interleaved, so the sandboxed create and its baseline share the machine's drift.
        let (mut create, mut boxed_create, mut bare_bwrap) = (Vec::new(), Vec::new(), Vec::new());
        let mut prestarted_create = Vec::new();
        // The first create starts the spare.
        create_once(&prestarting, &boxed_ref).await?;
        for _ in 0..iters.min(100) {
            create.push(create_once(&rt, &host_ref).await?);
            boxed_create.push(create_once(&rt, &boxed_ref).await?);
            bare_bwrap.push(bare_bwrap_once()?);
            let waiting = Instant::now();
            while prestarting.spare_workers() == 0 {
                if waiting.elapsed() > Duration::from_secs(10) {
                    return Err("the runtime started no spare worker".into());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            prestarted_create.push(create_once(&prestarting, &boxed_ref).await?);
        }
        prestarting.shutdown("bench over").await;
        let id = rt.create_session(&host_ref, None).await?.id;
        rt.start_worker(&id).await?;
        let mut turn = Vec::new();
        for _ in 0..iters {
            let t = Instant::now();
            rt.run_turn(&id, Task::new("hi"), TurnOverrides::default())
                .await?;
            turn.push(t.elapsed());
        }
        let boxed = rt.create_session(&boxed_ref, None).await?.id;
        rt.start_worker(&boxed).await?;
        // Back to back, and with a pause before each (as commands come from a model or a person), which lets
        // the worker's spare shell be ready.
        let (mut boxed_true, mut paced_true) = (Vec::new(), Vec::new());
        for _ in 0..iters {
            let t = Instant::now();
            rt.run_session_command(&boxed, "true").await?;
            boxed_true.push(t.elapsed());
        }
        for _ in 0..iters {
            tokio::time::sleep(PAUSE).await;
            let t = Instant::now();
            rt.run_session_command(&boxed, "true").await?;
            paced_true.push(t.elapsed());
        }
        // Memory: an idle host worker, and this process (the supervisor) with 100 live sessions.
        let idle = idle_workers(&rt, &host_ref, 100).await?;
        let supervisor_rss = rss_kib("self").unwrap_or(0);
        rt.shutdown("bench over").await;
        BenchResult::Ok(Measured {
            create,
            boxed_create,
            prestarted_create,
            bare_bwrap,
            turn,
            boxed_true,
            paced_true,
            idle,
            supervisor_rss,
        })
    })?;

    // One-shot runs as a user types them, whole process from start to exit: on the host, confined, and the bare
    // bwrap spawn that bounds the confined one from below, sampled in turn so they share the machine's drift.
    let run_once = |bundle: &str| -> BenchResult<Duration> {
        let t = Instant::now();
        let out = std::process::Command::new(&exe)
            .args(["run", bundle, "--prompt", "hi"])
            .env("SERVICE_HOME", home.path())
            .output()?;
        let took = t.elapsed();
        if out.status.success() {
            Ok(took)
        } else {
            Err(format!("run failed: {}", String::from_utf8_lossy(&out.stderr)).into())
        }
    };
    let (mut oneshot, mut boxed_oneshot, mut oneshot_bwrap) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iters.min(50) {
        oneshot.push(run_once(&host_ref)?);
        boxed_oneshot.push(run_once(&boxed_ref)?);
        oneshot_bwrap.push(bare_bwrap_once()?);
    }
    let host_true = time(iters, || {
        std::process::Command::new("sh")
            .args(["-c", "true"])
            .status()?;
        Ok(())
    })?;
    let mut paced_host_true = Vec::with_capacity(iters);
    for _ in 0..iters {
        std::thread::sleep(PAUSE);
        let t = Instant::now();
        std::process::Command::new("sh")
            .args(["-c", "true"])
            .status()?;
        paced_host_true.push(t.elapsed());
    }

    let (boxed_create, bare_bwrap) = (stats(m.boxed_create), stats(m.bare_bwrap));
    let (boxed_true, host_true) = (stats(m.boxed_true), stats(host_true));
    let (paced_true, paced_host_true) = (stats(m.paced_true), stats(paced_host_true));
    println!(
        "| {:<46} | {:>10} | {:>10} |",
        "benchmark", "median ms", "p90 ms"
    );
    println!("|{:-<48}|{:-<12}|{:-<12}|", "", "", "");
    row("session create, host worker", &stats(m.create));
    row(
        "text-only turn, warm session (all overhead)",
        &stats(m.turn),
    );
    row("one-shot `service-rs run` wall time", &stats(oneshot));
    compared(
        [
            "same, the worker confined (whole process)",
            "bare `bwrap --unshare-all true`, in turn",
            "ratio: confined one-shot / bare bwrap",
        ],
        &stats(boxed_oneshot),
        &stats(oneshot_bwrap),
    );
    compared(
        [
            "session create, bwrap'd worker handshaken",
            "bare `bwrap --unshare-all true`",
            "ratio: sandboxed create / bare bwrap",
        ],
        &boxed_create,
        &bare_bwrap,
    );
    let prestarted_create = stats(m.prestarted_create);
    row("same, the spare taken (prestart)", &prestarted_create);
    ratio(
        "ratio: spare taken / bare bwrap",
        &prestarted_create,
        &bare_bwrap,
    );
    compared(
        [
            "`true` in a live sandbox (operator command)",
            "`sh -c true` on the host",
            "ratio: sandboxed true / host `sh -c true`",
        ],
        &boxed_true,
        &host_true,
    );
    compared(
        [
            "same, 20 ms after the previous: sandboxed",
            "same, 20 ms after the previous: host",
            "ratio: paced sandboxed true / paced host",
        ],
        &paced_true,
        &paced_host_true,
    );
    let seen = format!("{} seen", m.idle.seen);
    println!(
        "| {:<46} | {:>6} KiB | {:>10} |",
        "RSS of an idle worker (median)", m.idle.rss, seen
    );
    println!(
        "| {:<46} | {:>6} KiB | {:>10} |",
        "PSS of an idle worker (median)", m.idle.pss, ""
    );
    println!(
        "| {:<46} | {:>6} KiB | {:>10} |",
        "RSS of the supervisor with 100 live sessions", m.supervisor_rss, ""
    );
    worker_kinds(&exe, &worker_exe, &host_ref, iters, &tokio)?;
    Ok(())
}

/// The two worker executables side by side: binary size, host session create, idle memory.
fn worker_kinds(
    exe: &Path,
    worker_exe: &Path,
    host_ref: &str,
    iters: usize,
    tokio: &tokio::runtime::Runtime,
) -> BenchResult<()> {
    if worker_exe == exe {
        return Ok(());
    }
    let kinds = [("service-worker", worker_exe), ("service-rs worker", exe)];
    let homes = [tempfile::TempDir::new()?, tempfile::TempDir::new()?];
    let runtimes: Vec<ServiceRuntime> = kinds
        .iter()
        .zip(&homes)
        .map(|((_, exe), home)| {
            ServiceRuntime::new(
                ServiceHome::new(home.path()),
                RuntimeOptions::new(exe.to_path_buf()),
            )
        })
        .collect();
    let (creates, idle) = tokio.block_on(async {
        let mut creates = [Vec::new(), Vec::new()];
        for _ in 0..iters.min(100) {
            for (rt, samples) in runtimes.iter().zip(creates.iter_mut()) {
                samples.push(create_once(rt, host_ref).await?);
            }
        }
        let mut idle = Vec::new();
        for rt in &runtimes {
            idle.push(idle_workers(rt, host_ref, 50).await?);
            rt.shutdown("bench over").await;
        }
        BenchResult::Ok((creates, idle))
    })?;
    println!();
    println!("The worker's executable (host workers, 50 idle sessions each):");
    println!();
    println!(
        "| {:<20} | {:>9} | {:>16} | {:>12} | {:>12} |",
        "worker", "size MB", "create median ms", "idle RSS KiB", "idle PSS KiB"
    );
    println!(
        "|{:-<22}|{:-<11}|{:-<18}|{:-<14}|{:-<14}|",
        "", "", "", "", ""
    );
    for (((name, exe), samples), idle) in kinds.iter().zip(creates).zip(idle) {
        let size = std::fs::metadata(exe)?.len() as f64 / 1e6;
        let create = stats(samples).median.as_secs_f64() * 1e3;
        println!(
            "| {name:<20} | {size:>9.1} | {create:>16.3} | {:>12} | {:>12} |",
            idle.rss, idle.pss
        );
    }
    Ok(())
}
