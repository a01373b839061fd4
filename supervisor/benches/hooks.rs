//! What a no-op `PreToolUse` hook adds to a tool call, confined: `cargo bench -p service-supervisor --bench hooks`.
//!
//! Two bundles in `workspace_write` sandboxes with real workers, one session each, the same scripted model: the
//! prompt `calls N.` gets one reply of N Read calls, then an answer. One bundle declares a `PreToolUse` hook on Read
//! that reads its input and exits 0 (`cat > /dev/null`, as a script that decides nothing does); the other none.
//! A call's cost is a turn of 1 + CALLS calls less a turn of 1 call, over CALLS, from turns sampled next to each
//! other (the median of those differences), so the turn's own work cancels out. The issue's target: the hook adds
//! at most 5 ms to a call.
//!
//! `BENCH_ITERS` sets the samples of each kind (default 20), `BENCH_CALLS` the calls added (default 20),
//! `BENCH_HOOK` the hook's command.

use std::path::Path;
use std::time::Duration;

#[path = "common/stats.rs"]
mod stats;
use stats::env_or;
#[path = "common/turns.rs"]
mod turns;
use turns::{per_call, turn, BenchResult};

fn write_bundle(dir: &Path, calls: usize, hook: Option<&str>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "bench", version: "1.0.0", tools: ["Read"],
            sandbox: { mode: "workspace_write", permissions: { network: [] } } }"#,
    )?;
    let hooks = hook
        .map(|h| {
            format!("hooks:\n  PreToolUse:\n    - matcher: Read\n      hooks:\n        - {{ type: command, command: {h:?} }}\n")
        })
        .unwrap_or_default();
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            "model: {{ provider: scripted, name: s, config: {{ script: resources/script.json5 }} }}\n\
             memory: {{ provider: sliding_window, window: {} }}\n{hooks}",
            2 * calls + 40
        ),
    )?;
    let turn = |n: usize| {
        let reads: Vec<_> = (0..n)
            .map(|_| serde_json::json!({"name": "Read", "arguments": {"file_path": "data.txt"}}))
            .collect();
        serde_json::json!({"when": format!("calls {n}."), "replies": [{"tool_calls": reads}, {"text": "done"}]})
    };
    let script = serde_json::json!({"turns": [turn(1), turn(1 + calls)]});
    std::fs::write(dir.join("resources/script.json5"), script.to_string())
}

fn main() -> BenchResult<()> {
    let (iters, calls) = (env_or("BENCH_ITERS", 20), env_or("BENCH_CALLS", 20));
    let hook = std::env::var("BENCH_HOOK").unwrap_or_else(|_| "cat > /dev/null".into());
    let home = tempfile::TempDir::new()?;
    let plain = tempfile::TempDir::new()?;
    write_bundle(plain.path(), calls, None)?;
    let hooked = tempfile::TempDir::new()?;
    write_bundle(hooked.path(), calls, Some(&hook))?;
    let workspace = turns::workspace()?;
    let (rt, tokio) = turns::runtime(home.path())?;
    let samples: [Vec<Duration>; 4] = tokio.block_on(async {
        let (plain_ref, hooked_ref) = (
            plain.path().display().to_string(),
            hooked.path().display().to_string(),
        );
        let without = rt
            .create_session(&plain_ref, Some(workspace.path()))
            .await?
            .id;
        let with = rt
            .create_session(&hooked_ref, Some(workspace.path()))
            .await?
            .id;
        let (one, many) = ("calls 1.".to_string(), format!("calls {}.", 1 + calls));
        for _ in 0..3 {
            turn(&rt, &without, &one).await?;
            turn(&rt, &with, &one).await?;
        }
        let mut samples: [Vec<Duration>; 4] = Default::default();
        for _ in 0..iters {
            samples[0].push(turn(&rt, &without, &one).await?);
            samples[1].push(turn(&rt, &without, &many).await?);
            samples[2].push(turn(&rt, &with, &one).await?);
            samples[3].push(turn(&rt, &with, &many).await?);
        }
        rt.shutdown("bench over").await;
        BenchResult::Ok(samples)
    })?;
    let bare = per_call(&samples[0], &samples[1], calls);
    let hooked = per_call(&samples[2], &samples[3], calls);
    println!("hooks bench: {iters} turns of each kind, sampled in turn, real confined workers, {calls} calls added");
    println!("| a Read call                                  | median ms |");
    println!("|----------------------------------------------|-----------|");
    println!("| {:<44} | {bare:>9.3} |", "without hooks");
    println!(
        "| {:<44} | {hooked:>9.3} |",
        format!("with a PreToolUse hook `{hook}`")
    );
    println!(
        "the hook adds {:.3} ms to a call (target at most 5 ms)",
        hooked - bare
    );
    Ok(())
}
