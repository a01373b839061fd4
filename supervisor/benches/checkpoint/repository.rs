//! A real repository's first turn: 200 source files under git, with and without a git-ignored `target/` (300 MB in
//! 600 files) and `node_modules/` (20,000 small files), as a Rust or Node project has them. Each sample is a new
//! session's first turn through the whole `service-rs run` process, confined, whose model runs Bash once; the two
//! projects are sampled in turn. Also what each new session adds to the store.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{du, fill, row, stats, BenchResult};

const SOURCES: usize = 200;
const TARGET_FILES: usize = 600;
const TARGET_BYTES: usize = 500 * 1024;
const MODULES: usize = 20_000;

fn sources(root: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(root.join("src"))?;
    let mut buf = vec![0u8; 3000];
    for i in 0..SOURCES {
        fill(&mut buf, 50_000 + i as u64);
        let text: String = buf.iter().map(|b| char::from(b'a' + b % 26)).collect();
        std::fs::write(root.join(format!("src/m{i:03}.rs")), text)?;
    }
    std::fs::write(root.join(".gitignore"), "target/\nnode_modules/\n")?;
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(root)
        .status()?;
    if !git.success() {
        return Err(std::io::Error::other("git init failed"));
    }
    Ok(())
}

fn build_output(root: &Path) -> std::io::Result<()> {
    let mut buf = vec![0u8; TARGET_BYTES];
    for i in 0..TARGET_FILES {
        let dir = root.join(format!("target/debug/deps{}", i % 6));
        if i < 6 {
            std::fs::create_dir_all(&dir)?;
        }
        fill(&mut buf, 90_000 + i as u64);
        std::fs::write(dir.join(format!("lib{i}.rlib")), &buf)?;
    }
    for i in 0..MODULES {
        let dir = root.join(format!("node_modules/pkg{}", i / 20));
        if i % 20 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(
            dir.join(format!("f{i}.js")),
            format!("module.exports = {i};\n"),
        )?;
    }
    Ok(())
}

fn write_bundle(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "ckrepo", version: "1.0.0", tools: ["Bash"],
             sandbox: { mode: "workspace_write" } }"#,
    )?;
    std::fs::write(
        dir.join("agent.yaml"),
        "model: { provider: scripted, name: bench, config: { script: resources/script.json5 } }\n\
         permissions: { default: allow }\n",
    )?;
    std::fs::write(
        dir.join("resources/script.json5"),
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "true"}}]}, {text: "ok"}]}]}"#,
    )
}

/// A new session's first turn in `cwd`, as a user runs it.
fn first_turn(exe: &Path, home: &Path, cwd: &Path) -> BenchResult<Duration> {
    let t = Instant::now();
    let out = Command::new(exe)
        .env("SERVICE_HOME", home)
        .current_dir(cwd)
        .args(["run", "ckrepo", "go"])
        .output()?;
    let took = t.elapsed();
    if !out.status.success() {
        return Err(format!("run failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(took)
}

/// Runs the rows: `iters` first turns in each project, in turn.
pub fn run(exe: &Path, root: &Path, iters: usize) -> BenchResult<()> {
    let (with, without) = (root.join("repo-built"), root.join("repo-clean"));
    for dir in [&with, &without] {
        sources(dir)?;
    }
    build_output(&with)?;
    std::thread::sleep(Duration::from_millis(2100));
    let bundle = root.join("bundle-repo");
    write_bundle(&bundle)?;
    let home = root.join("home-repo");
    super::as_root_sandboxes_keep_root(&home)?;
    let built = Command::new(exe)
        .env("SERVICE_HOME", &home)
        .args(["build", bundle.to_str().unwrap_or_default()])
        .output()?;
    if !built.status.success() {
        return Err(String::from_utf8_lossy(&built.stderr).into_owned().into());
    }
    println!(
        "\nrepository: {SOURCES} sources under git; built: plus git-ignored target/ ({} MB in {TARGET_FILES} \
         files) and node_modules/ ({MODULES} files); {iters} new sessions in each, in turn",
        TARGET_FILES * TARGET_BYTES / 1_000_000
    );
    first_turn(exe, &home, &with)?;
    first_turn(exe, &home, &without)?;
    let stored = |h: &Path| du(&[&h.join("checkpoints"), &h.join("sessions")]);
    let (mut a, mut b, mut grown) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iters {
        let before = stored(&home);
        a.push(first_turn(exe, &home, &with)?);
        grown.push(stored(&home).saturating_sub(before));
        b.push(first_turn(exe, &home, &without)?);
    }
    let (a, b) = (stats(a), stats(b));
    row(
        "new session's first turn, with target/ and node_modules/",
        a,
    );
    row("new session's first turn, without them", b);
    grown.sort();
    println!(
        "ratio of medians: {:.2}x; the store grows by {} bytes per new session there (median)",
        a.median.as_secs_f64() / b.median.as_secs_f64(),
        grown[grown.len() / 2]
    );
    Ok(())
}
