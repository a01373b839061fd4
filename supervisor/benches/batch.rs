//! What `service-rs batch` costs beside the sessions it keeps busy: `cargo bench -p service-supervisor --bench batch`.
//!
//! The whole `service-rs batch` process, as a user runs it, over 100 items (`BENCH_ITEMS`) four at a time
//! (`BENCH_CONCURRENCY`), against an OpenAI-compatible HTTP model on loopback that takes 30 ms before its first byte.
//! Each item is what an evaluation item is: its git workspace copied into a confined session (`workspace_write`),
//! one model call, the git diff taken and a verifier run in its sandbox, an ATIF trajectory written, the session
//! deleted. Reported, each the median of `BENCH_RUNS` batches (default 5):
//! - the batch process's own CPU time (`/proc/PID/stat` utime + stime, sampled until it exits; its workers and
//!   their commands are other processes) over its wall time: the share of a core it used, for these 100 items;
//! - how busy it kept its sessions: the items' own durations summed, over wall time times the concurrency.
//!
//! The target: at most 5% of a core of its own per 100 items. The share depends on how long an item takes (the CPU
//! an item costs the batch process is about the same whatever its model's latency), so the bench also says from
//! which item duration on the share is under 5%.

use std::path::Path;
use std::time::{Duration, Instant};

#[path = "common/openai.rs"]
mod openai;
#[path = "common/stats.rs"]
mod stats;
use stats::env_or;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const BIN: &str = env!("CARGO_BIN_EXE_service-rs");

fn write_bundle(dir: &Path, base: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "bench", version: "1.0.0", tools: ["Bash"],
            sandbox: { mode: "workspace_write" } }"#,
    )?;
    std::fs::write(
        dir.join("agent.yaml"),
        format!("model: {{ provider: openai, name: bench, config: {{ base_url: \"{base}\" }} }}\n"),
    )
}

fn git(dir: &Path, args: &[&str]) -> std::io::Result<()> {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()?;
    if ok.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("git {args:?} failed")))
    }
}

/// A small project: a git repository of 20 files.
fn repo(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    for i in 0..20 {
        std::fs::write(
            dir.join(format!("src/f{i}.py")),
            format!("def f{i}():\n    return {i}\n"),
        )?;
    }
    git(dir, &["init", "-q"])?;
    git(dir, &["add", "."])?;
    git(
        dir,
        &[
            "-c",
            "user.email=b@b",
            "-c",
            "user.name=b",
            "commit",
            "-qm",
            "init",
        ],
    )
}

/// utime + stime of process `pid` (itself, not its children), in clock ticks.
fn own_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line; 12 and 13 after the name and state.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

struct Run {
    cpu: Duration,
    wall: Duration,
    busy: f64,
}

fn one_batch(home: &Path, work: &Path, bundle: &Path, concurrency: usize) -> BenchResult<Run> {
    let out = work.join("results.jsonl");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_dir_all(work.join("results.trajectories"));
    let began = Instant::now();
    let mut child = std::process::Command::new(BIN)
        .args([
            "batch",
            &bundle.display().to_string(),
            "--tasks",
            "tasks.jsonl",
            "--out",
            "results.jsonl",
        ])
        .args([
            "--concurrency",
            &concurrency.to_string(),
            "--approvals",
            "allow",
        ])
        .current_dir(work)
        .env("SERVICE_HOME", home)
        .env("OPENAI_API_KEY", "sk-bench")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut ticks = 0;
    let status = loop {
        if let Some(t) = own_ticks(child.id()) {
            ticks = t;
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let wall = began.elapsed();
    if !status.success() {
        return Err(format!("batch failed: {status}").into());
    }
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.unwrap_or(100) as u64;
    let mut busy_ms = 0u64;
    for line in std::fs::read_to_string(&out)?.lines() {
        let r: serde_json::Value = serde_json::from_str(line)?;
        if r["outcome"] != "completed" || r["reward"] != 1.0 {
            return Err(format!("an item did not complete: {r}").into());
        }
        busy_ms += r["duration_ms"].as_u64().unwrap_or(0);
    }
    Ok(Run {
        cpu: Duration::from_millis(ticks * 1000 / hz),
        wall,
        busy: busy_ms as f64 / (wall.as_millis() as f64 * concurrency as f64),
    })
}

fn main() -> BenchResult<()> {
    let (items, concurrency, runs) = (
        env_or("BENCH_ITEMS", 100),
        env_or("BENCH_CONCURRENCY", 4),
        env_or("BENCH_RUNS", 5),
    );
    let server = openai::start()?;
    let (home, work) = (tempfile::TempDir::new()?, tempfile::TempDir::new()?);
    let bundle = work.path().join("bundle");
    write_bundle(&bundle, &server.thinking)?;
    repo(&work.path().join("repo"))?;
    let tasks: Vec<String> = (0..items)
        .map(|i| {
            serde_json::json!({"id": i, "prompt": format!("item {i}"), "workspace": "repo", "verifier": "test -f src/f0.py"})
                .to_string()
        })
        .collect();
    std::fs::write(work.path().join("tasks.jsonl"), tasks.join("\n") + "\n")?;
    let mut all = Vec::new();
    for _ in 0..runs {
        all.push(one_batch(home.path(), work.path(), &bundle, concurrency)?);
    }
    let mut share: Vec<f64> = all
        .iter()
        .map(|r| r.cpu.as_secs_f64() / r.wall.as_secs_f64())
        .collect();
    let mut busy: Vec<f64> = all.iter().map(|r| r.busy).collect();
    let walls = stats::median(all.iter().map(|r| r.wall).collect());
    let cpus = stats::median(all.iter().map(|r| r.cpu).collect());
    share.sort_by(f64::total_cmp);
    busy.sort_by(f64::total_cmp);
    let per_item = cpus.as_secs_f64() / items as f64;
    let item_wall = walls.as_secs_f64() * concurrency as f64 / items as f64;
    println!(
        "batch of {items} items, {concurrency} at a time, {runs} runs (medians): wall {walls:.2?}, the batch process's own CPU \
         {cpus:.2?} = {:.1}% of a core (range {:.1}-{:.1}%), {:.2} ms a item; sessions busy {:.0}% of wall x {concurrency} \
         (range {:.0}-{:.0}%)",
        share[share.len() / 2] * 100.0,
        share[0] * 100.0,
        share[share.len() - 1] * 100.0,
        cpus.as_secs_f64() * 1000.0 / items as f64,
        busy[busy.len() / 2] * 100.0,
        busy[0] * 100.0,
        busy[busy.len() - 1] * 100.0,
    );
    // The share of a core is the CPU an item costs over the time an item takes, times the items at once.
    println!(
        "an item took {:.0} ms here; at {concurrency} at a time the batch uses 5% of a core or less once items take {:.2} s \
         or more (an agent's item with real model calls takes tens of seconds)",
        item_wall * 1000.0,
        per_item * concurrency as f64 / 0.05
    );
    Ok(())
}
