//! The runtime bench's comparison with Odyssey 0.1.1 (github.com/liquidos-ai/odyssey), another Rust runtime of
//! agent bundles that confines its tools with bubblewrap: the one-shot whose model calls Bash once, whole process,
//! each against the bench's loopback model server (`common/openai.rs`; Odyssey speaks the Responses API to it,
//! `service-rs` Chat Completions). `BENCH_ODYSSEY` names a built `odyssey-rs`; without it the rows are skipped.
//! `BENCH_ONLY=odyssey` runs them alone.
//!
//! Odyssey is built once from its source (its `Cargo.toml` takes AutoAgents from git: point those dependencies at
//! a checkout of the revision its `Cargo.lock` names), with `cargo build --release -p odyssey-rs`. Both run their
//! bundle's Bash tool confined and read-only, with no approval asked, from the bench's working directory; the two
//! alternate sample by sample, and the ratio is taken pair by pair.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{alternating, answered_ok, openai, print_pairs, BenchResult};

/// An Odyssey bundle whose agent calls the model server at `base` (a Responses API root) and may run Bash.
fn write_odyssey_bundle(dir: &Path, base: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("agents/oneshot"))?;
    std::fs::create_dir_all(dir.join("skills"))?;
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(dir.join("README.md"), "# oneshot\n")?;
    std::fs::write(
        dir.join("odyssey.bundle.yaml"),
        "apiVersion: odyssey.ai/bundle.v1\nkind: AgentBundle\nmetadata: {name: oneshot, version: 0.1.0, readme: README.md}\n\
         spec:\n  abiVersion: v1\n  skills: []\n  tools: [{name: Bash, source: builtin}]\n  sandbox:\n    mode: read_only\n    env: {}\n\
         \x20   permissions: {filesystem: {exec: [], mounts: {read: [], write: []}}, network: []}\n\
         \x20   system_tools_mode: standard\n    system_tools: []\n    resources: {cpu: 1, memory_mb: 512}\n\
         \x20 agents: [{id: oneshot, spec: agents/oneshot/agent.yaml, default: true}]\n",
    )?;
    std::fs::write(
        dir.join("agents/oneshot/agent.yaml"),
        format!(
            "apiVersion: odyssey.ai/v1\nkind: Agent\nmetadata: {{name: oneshot, version: 0.1.0, description: bench}}\n\
             spec:\n  kind: prompt\n  abiVersion: v1\n  prompt: Be brief.\n\
             \x20 model: {{provider: openai, name: bench, config: {{base_url: \"{base}/\", api_key: sk-bench}}}}\n\
             \x20 tools: {{allow: [Bash], ask: [], deny: []}}\n"
        ),
    )
}

/// The rows, when `BENCH_ODYSSEY` names an `odyssey-rs`: `iters` pairs (at most 100).
pub(super) fn rows(exe: &Path, iters: usize) -> BenchResult<()> {
    let Some(odyssey) = std::env::var_os("BENCH_ODYSSEY") else {
        println!("\nnote: BENCH_ODYSSEY is not set; the comparison with Odyssey is skipped");
        return Ok(());
    };
    let server = openai::start()?;
    let (home, odyssey_home) = (tempfile::TempDir::new()?, tempfile::TempDir::new()?);
    let (ours, theirs) = (tempfile::TempDir::new()?, tempfile::TempDir::new()?);
    openai::write_bundle_at(ours.path(), &server.bash, "read_only")?;
    write_odyssey_bundle(theirs.path(), &server.bash)?;
    let odyssey_run = |args: &[&str]| -> BenchResult<std::process::Output> {
        // Odyssey keeps its store under $HOME/.odyssey.
        Ok(std::process::Command::new(&odyssey)
            .args(args)
            .env("HOME", odyssey_home.path())
            .output()?)
    };
    let built = odyssey_run(&["build", &theirs.path().display().to_string()])?;
    if !built.status.success() {
        return Err(format!(
            "odyssey-rs build: {}",
            String::from_utf8_lossy(&built.stderr)
        )
        .into());
    }
    let ours_once = || -> BenchResult<Duration> {
        answered_ok(
            std::process::Command::new(exe)
                .arg("run")
                .arg(ours.path())
                .args(["--prompt", "run true"])
                .env("SERVICE_HOME", home.path()),
        )
    };
    let theirs_once = || -> BenchResult<Duration> {
        let t = Instant::now();
        let out = odyssey_run(&["run", "oneshot@0.1.0", "--prompt", "run true"])?;
        let took = t.elapsed();
        // Its answer follows an `assistant` heading; the Bash call's status is in its own output.
        let said = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !said.lines().any(|l| l.trim() == "ok") {
            return Err(format!(
                "odyssey-rs run failed: {said} {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        Ok(took)
    };
    // One of each first, uncounted: the first runs fill caches.
    print_pairs(
        "Against Odyssey, a one-shot whose model calls Bash once, confined and read-only, whole processes",
        ("`service-rs run`", "`odyssey-rs run`"),
        alternating(iters, ours_once, theirs_once)?,
        "service-rs / Odyssey, median of the pairs' ratios (target at most 0.5)",
    );
    Ok(())
}
