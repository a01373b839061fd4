//! The cost of a tool call made from a CodeAct program against the same JSON tool call:
//! `cargo bench -p service-supervisor --bench codeact`.
//!
//! Two bundles in `workspace_write` sandboxes with real workers, on one session each: a react bundle whose scripted
//! model calls Read `n` times, all in one reply or one per reply (as calls that depend on each other must be), and a
//! codeact bundle whose program calls `read` `n` times in a loop. Each turn reads the same small file. Turns of the
//! six kinds are sampled in turn. A call's cost is a turn with 1 + CALLS calls less a turn with 1 call, over CALLS,
//! so the program's start and the turn's own work cancel out; the target is a ratio of at most 2 against the JSON
//! call. The ratio is read from differences of turns sampled next to each other (their median over the
//! iterations): the machine's speed drifts within a run, and the difference of two medians over the whole run,
//! also printed, keeps what the drift did to each. Over ten runs at 604e942, each beside a run of the worker before
//! it, the paired ratio read 1.53-2.18x (median 1.94x), against 1.88-2.68x (median 2.17x) before.
//!
//! `BENCH_ITERS` sets the number of samples of each kind (default 30), `BENCH_CALLS` the calls added (default 100;
//! more makes the program's start, which varies by milliseconds, matter less), `BENCH_CPU` both sandboxes'
//! `resources.cpu` (default 1: a program and the worker each poll while the other works, so a long run of calls
//! uses two CPUs' time and meets a one-CPU quota); `BENCH_EXE` runs another build's worker.

use std::path::Path;
use std::time::Duration;

#[path = "common/stats.rs"]
mod stats;
use stats::{env_or, median};
#[path = "common/turns.rs"]
mod turns;
use turns::{per_call, BenchResult};

/// The calls added to a turn to measure one, unless `BENCH_CALLS` says otherwise.
const CALLS: usize = 100;

/// Both bundles' `sandbox.resources.cpu`, unless `BENCH_CPU` says otherwise: the manifest's default.
const CPU: usize = 1;

fn write_bundle(
    dir: &Path,
    executor: &str,
    script: serde_json::Value,
    calls: usize,
    cpu: usize,
) -> std::io::Result<()> {
    // The window keeps the prompt of a turn of `calls` results in sight, and steps cover one reply per call.
    let (max_steps, window) = (calls.min(CALLS) + 10, 2 * calls + 40);
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "bench", version: "1.0.0", tools: ["Read"],
            sandbox: { mode: "workspace_write", permissions: { network: [] }, resources: { cpu: CPU } } }"#
            .replace("CPU", &cpu.to_string()),
    )?;
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            "model: {{ provider: scripted, name: s, config: {{ script: resources/script.json5 }} }}\n\
             executor: {executor}\nmax_steps: {max_steps}\nmemory: {{ provider: sliding_window, window: {window} }}\n"
        ),
    )?;
    std::fs::write(dir.join("resources/script.json5"), script.to_string())
}

/// A react script: the prompt `calls N` gets one reply with N Read calls, then an answer; `steps N` gets N replies
/// of one Read call each, then an answer.
fn react_script(calls: usize, steps: usize) -> serde_json::Value {
    let read = || serde_json::json!({"name": "Read", "arguments": {"file_path": "data.txt"}});
    let batched = |n: usize| {
        let reads: Vec<_> = (0..n).map(|_| read()).collect();
        serde_json::json!({"when": format!("calls {n}."), "replies": [{"tool_calls": reads}, {"text": "done"}]})
    };
    let stepped = |n: usize| {
        let mut replies: Vec<_> = (0..n)
            .map(|_| serde_json::json!({"tool_calls": [read()]}))
            .collect();
        replies.push(serde_json::json!({"text": "done"}));
        serde_json::json!({"when": format!("steps {n}."), "replies": replies})
    };
    serde_json::json!({"turns": [batched(1), batched(1 + calls), stepped(1), stepped(1 + steps)]})
}

/// A codeact script: the prompt `calls N` gets one program that reads N times and answers.
fn codeact_script(calls: usize) -> serde_json::Value {
    let turn = |n: usize| {
        let program = format!(
            "```python\nfor _ in range({n}):\n    read('data.txt')\nfinal_answer('done')\n```"
        );
        serde_json::json!({"when": format!("calls {n}."), "replies": [{"text": program}]})
    };
    serde_json::json!({"turns": [turn(1), turn(1 + calls)]})
}

async fn turn(
    rt: &service_supervisor::ServiceRuntime,
    id: &str,
    how: &str,
    calls: usize,
) -> BenchResult<Duration> {
    turns::turn(rt, id, &format!("{how} {calls}.")).await
}

fn main() -> BenchResult<()> {
    let (iters, calls) = (env_or("BENCH_ITERS", 30), env_or("BENCH_CALLS", CALLS));
    let cpu = env_or("BENCH_CPU", CPU);
    // One model step per call: agent.yaml allows at most 1,000 steps, and this figure is only a comparison.
    let steps = calls.min(CALLS);
    let home = tempfile::TempDir::new()?;
    let react = tempfile::TempDir::new()?;
    write_bundle(
        react.path(),
        "react",
        react_script(calls, steps),
        calls,
        cpu,
    )?;
    let codeact = tempfile::TempDir::new()?;
    write_bundle(codeact.path(), "codeact", codeact_script(calls), calls, cpu)?;
    let workspace = turns::workspace()?;
    let (rt, tokio) = turns::runtime(home.path())?;
    let samples: [Vec<Duration>; 6] = tokio.block_on(async {
        let json = rt
            .create_session(&react.path().display().to_string(), Some(workspace.path()))
            .await?
            .id;
        let code = rt
            .create_session(
                &codeact.path().display().to_string(),
                Some(workspace.path()),
            )
            .await?
            .id;
        // Warm: the workers start, and the first program pays for the first python3 start.
        for _ in 0..3 {
            turn(&rt, &json, "calls", 1).await?;
            turn(&rt, &code, "calls", 1).await?;
        }
        let mut samples: [Vec<Duration>; 6] = Default::default();
        for _ in 0..iters {
            samples[0].push(turn(&rt, &json, "calls", 1).await?);
            samples[1].push(turn(&rt, &json, "calls", 1 + calls).await?);
            samples[2].push(turn(&rt, &json, "steps", 1).await?);
            samples[3].push(turn(&rt, &json, "steps", 1 + steps).await?);
            samples[4].push(turn(&rt, &code, "calls", 1).await?);
            samples[5].push(turn(&rt, &code, "calls", 1 + calls).await?);
        }
        rt.shutdown("bench over").await;
        BenchResult::Ok(samples)
    })?;
    let paired = Paired::of(&samples, calls);
    let [json_one, json_many, step_one, step_many, code_one, code_many] = samples.map(median);
    let per_call = |one: Duration, many: Duration, n: usize| {
        many.saturating_sub(one).as_secs_f64() * 1e3 / n as f64
    };
    let json_call = per_call(json_one, json_many, calls);
    let step_call = per_call(step_one, step_many, steps);
    let code_call = per_call(code_one, code_many, calls);
    let many = 1 + calls;
    println!("codeact bench: medians of {iters} turns of each kind, sampled in turn, real confined workers, {cpu} cpu");
    println!("| turn                                        | median ms |");
    println!("|---------------------------------------------|-----------|");
    for (name, d) in [
        ("react, 1 Read call".to_string(), json_one),
        (format!("react, {many} Read calls in one reply"), json_many),
        ("react, 1 reply of one Read call".to_string(), step_one),
        (
            format!("react, {} replies of one Read call", 1 + steps),
            step_many,
        ),
        ("codeact, a program with 1 read()".to_string(), code_one),
        (format!("codeact, a program with {many} read()s"), code_many),
    ] {
        println!("| {name:<43} | {:>9.3} |", d.as_secs_f64() * 1e3);
    }
    println!();
    println!("| one call                                    | paired ms | medians ms |");
    println!("|---------------------------------------------|-----------|------------|");
    for (name, paired, apart) in [
        (
            "a JSON tool call, batched in a reply",
            paired.json,
            json_call,
        ),
        ("a call from a program", paired.code, code_call),
    ] {
        println!("| {name:<43} | {paired:>9.3} | {apart:>10.3} |");
    }
    println!(
        "| {:<43} | {:>9} | {:>10.3} |",
        "a JSON tool call, its own model step", "", step_call
    );
    println!();
    println!(
        "ratio of a program's call to a batched JSON call (target at most 2x): {:.2}x paired, {:.2}x from the medians",
        paired.ratio(),
        code_call / json_call
    );
    println!(
        "ratio to a JSON call with its own model step (scripted model, in process): {:.2}x",
        code_call / step_call
    );
    Ok(())
}

/// A call's cost from the differences of turns sampled next to each other: the machine's speed drifts over a run,
/// and a difference of two medians over the whole run keeps what the drift did to each, where a difference of
/// neighbours does not.
struct Paired {
    json: f64,
    code: f64,
}

impl Paired {
    /// From the samples in the order `main` takes them, where the turns of many add `calls` calls.
    fn of(samples: &[Vec<Duration>; 6], calls: usize) -> Self {
        Self {
            json: per_call(&samples[0], &samples[1], calls),
            code: per_call(&samples[4], &samples[5], calls),
        }
    }

    fn ratio(&self) -> f64 {
        self.code / self.json
    }
}
