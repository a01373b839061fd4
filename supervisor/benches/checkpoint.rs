//! Checkpoint benchmarks: `cargo bench -p service-supervisor --bench checkpoint`.
//!
//! A workspace of 10,000 files and 200 MB (20 KB each, in 100 directories, no two alike) is checkpointed as a
//! session whose bundle can write would be. Medians (and p90) measured in one run:
//! - the first checkpoint of the workspace, which reads and stores all of it;
//! - the checkpoint before a turn after one file changed (what a turn's start waits for), and the one as that
//!   turn ends, the same in-process calls the runtime makes;
//! - the disk a turn costs: manifest bytes and new content per turn, from the store's files after the loop;
//! - whole processes, as a user runs them: `service-rs run --continue` of a writable bundle in that workspace
//!   (one file changed before each run), with checkpoints and with `checkpoint_max_mb = 0`, sampled in turn; the
//!   difference of their medians is what checkpoints add to a turn, start and end together.
//!
//! - a repository's first turn with and without git-ignored build output (`checkpoint/repository.rs`).
//!
//! `BENCH_ITERS` sets the number of samples (default 40); `BENCH_EXE` runs another build of `service-rs`;
//! `BENCH_ONLY=repository` runs the repository rows alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use service_supervisor::checkpoint::Checkpoints;

#[path = "common/stats.rs"]
mod stats;

#[path = "checkpoint/repository.rs"]
mod repository;
use stats::env_or;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const FILES: usize = 10_000;
const DIRS: usize = 100;
const FILE_BYTES: usize = 20 * 1024;

/// Fills `buf` with bytes from a xorshift seeded by `seed`: every file differs, so nothing is stored once for two.
fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

fn make_workspace(root: &Path) -> std::io::Result<()> {
    let mut buf = vec![0u8; FILE_BYTES];
    for i in 0..FILES {
        let dir = root.join(format!("d{:03}", i % DIRS));
        if i < DIRS {
            std::fs::create_dir_all(&dir)?;
        }
        fill(&mut buf, i as u64);
        std::fs::write(dir.join(format!("f{i:05}.bin")), &buf)?;
    }
    Ok(())
}

/// Changes one file of the workspace, a different one each time.
fn change_one(root: &Path, n: u64) -> std::io::Result<()> {
    let i = (n as usize * 7919) % FILES;
    let mut buf = vec![0u8; FILE_BYTES];
    fill(&mut buf, 1_000_000 + n);
    std::fs::write(
        root.join(format!("d{:03}", i % DIRS))
            .join(format!("f{i:05}.bin")),
        &buf,
    )
}

#[derive(Clone, Copy)]
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn row(name: &str, s: Stats) {
    println!(
        "| {name:<52} | {:>10.3} | {:>10.3} |",
        ms(s.median),
        ms(s.p90)
    );
}

/// Bytes of the files under `paths`, each file once however many links it has (a session's objects are hard
/// links into the pool).
fn du(paths: &[&Path]) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    paths
        .iter()
        .flat_map(|p| walkdir::WalkDir::new(p).into_iter().flatten())
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .filter(|m| seen.insert((m.dev(), m.ino())))
        .map(|m| m.len())
        .sum()
}

/// The sizes of the manifests in `dir` numbered after `after`.
fn manifests_after(dir: &Path, after: u64) -> Vec<u64> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".manifest")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n > after)
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .collect()
}

/// Run as root (a container, a CI machine), the bench's projects are root's: its sandboxes keep root, as such a
/// machine is configured (`sandbox_user = "root"`), instead of being refused a directory they cannot write.
fn as_root_sandboxes_keep_root(home: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(home)?;
    if nix::unistd::geteuid().is_root() {
        std::fs::write(home.join("config.toml"), "sandbox_user = \"root\"\n")?;
    }
    Ok(())
}

fn write_bundle(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "ckbench", version: "1.0.0", tools: ["Bash"],
             sandbox: { mode: "workspace_write" } }"#,
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

fn run_once(exe: &Path, home: &Path, cwd: &Path, first: bool) -> BenchResult<Duration> {
    let mut cmd = Command::new(exe);
    cmd.env("SERVICE_HOME", home).current_dir(cwd).arg("run");
    if !first {
        cmd.arg("--continue");
    }
    cmd.args(["ckbench", "go on"]);
    let t = Instant::now();
    let out = cmd.output()?;
    let took = t.elapsed();
    if !out.status.success() {
        return Err(format!("run failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(took)
}

fn main() -> BenchResult<()> {
    let iters: usize = env_or("BENCH_ITERS", 40);
    let exe = std::env::var_os("BENCH_EXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_service-rs")));
    let tmp = tempfile::TempDir::new()?;
    let root = std::fs::canonicalize(tmp.path())?;
    if std::env::var("BENCH_ONLY").as_deref() == Ok("repository") {
        return repository::run(&exe, &root, iters.min(20));
    }
    let ws = root.join("workspace");
    std::fs::create_dir_all(&ws)?;
    make_workspace(&ws)?;
    // As a project's files are: older than the two seconds within which a checkpoint reads a file again.
    std::thread::sleep(Duration::from_millis(2100));
    println!(
        "workspace: {FILES} files, {} MB, in {DIRS} directories; {iters} samples",
        FILES * FILE_BYTES / 1_000_000
    );
    println!("| {:<52} | {:>10} | {:>10} |", "ms", "median", "p90");
    println!("|{:-<54}|{:->12}|{:->12}|", "", "", "");

    // In-process: the calls a turn makes.
    let pool = root.join("pool");
    let cp = Checkpoints::new(&root.join("session"), &pool, u64::MAX);
    let t = Instant::now();
    cp.start(&ws, "t0")?;
    let first = t.elapsed();
    cp.expect_end();
    cp.end(&ws, "t0")?;
    row(
        "first checkpoint (reads and stores 200 MB)",
        Stats {
            median: first,
            p90: first,
        },
    );
    let (session_dir, checkpoints_dir) = (root.join("session"), root.join("session/checkpoints"));
    let before = du(&[&session_dir, &pool]);
    let (mut starts, mut ends) = (Vec::new(), Vec::new());
    for n in 0..iters as u64 {
        change_one(&ws, n)?;
        let turn = format!("t{}", n + 1);
        let t = Instant::now();
        cp.start(&ws, &turn)?;
        starts.push(t.elapsed());
        change_one(&ws, 10_000 + n)?;
        cp.expect_end();
        let t = Instant::now();
        cp.end(&ws, &turn)?;
        ends.push(t.elapsed());
    }
    let per_turn = du(&[&session_dir, &pool]).saturating_sub(before) / iters as u64;
    // The first two manifests are the first turn's (the whole tree, then its changes).
    let mut sizes = manifests_after(&checkpoints_dir, 1);
    sizes.sort();
    let manifests = sizes.iter().sum::<u64>() / iters as u64;
    let median_manifest = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
    row("checkpoint before a turn, one file changed", stats(starts));
    row("checkpoint as the turn ends, one file changed", stats(ends));
    println!(
        "disk per turn, one file changed before it and one during it: {per_turn} bytes ({} of new content, \
         {manifests} of manifests, the rest the index); a checkpoint's manifest: {median_manifest} bytes \
         (median), and the whole tree again every 64 checkpoints: {} bytes",
        2 * FILE_BYTES,
        sizes.last().copied().unwrap_or(0)
    );

    // Whole processes: a writable bundle's one-shot in the workspace, with and without checkpoints.
    let bundle = root.join("bundle");
    write_bundle(&bundle)?;
    let (with_home, without_home) = (root.join("home-with"), root.join("home-without"));
    for home in [&with_home, &without_home] {
        let built = Command::new(&exe)
            .env("SERVICE_HOME", home)
            .args(["build", bundle.to_str().unwrap_or_default()])
            .output()?;
        if !built.status.success() {
            return Err(String::from_utf8_lossy(&built.stderr).into_owned().into());
        }
    }
    for home in [&with_home, &without_home] {
        as_root_sandboxes_keep_root(home)?;
    }
    let kept = std::fs::read_to_string(without_home.join("config.toml")).unwrap_or_default();
    std::fs::write(
        without_home.join("config.toml"),
        format!("{kept}checkpoint_max_mb = 0\n"),
    )?;
    run_once(&exe, &with_home, &ws, true)?;
    run_once(&exe, &without_home, &ws, true)?;
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for n in 0..iters as u64 {
        change_one(&ws, 20_000 + n)?;
        with.push(run_once(&exe, &with_home, &ws, false)?);
        change_one(&ws, 30_000 + n)?;
        without.push(run_once(&exe, &without_home, &ws, false)?);
    }
    let (with, without) = (stats(with), stats(without));
    row("one-shot run --continue, checkpoints on", with);
    row("one-shot run --continue, checkpoint_max_mb = 0", without);
    println!(
        "| {:<52} | {:>10.3} | {:>10} |",
        "added by checkpoints (difference of medians)",
        ms(with.median.saturating_sub(without.median)),
        ""
    );
    repository::run(&exe, &root, iters.min(20))
}
