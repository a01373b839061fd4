//! The runtime bench's rows against an OpenAI-compatible server on loopback: the warm turn and the confined
//! one-shot, each next to its baseline (see the bench's header).

use std::path::Path;
use std::time::{Duration, Instant};

use service_ipc::{Task, TurnOverrides};
use service_supervisor::{RuntimeOptions, ServiceHome, ServiceRuntime};

use super::session_sandbox::SessionSandbox;
use super::{answered_ok, bare_bwrap_once, ms, openai, stats, succeeded, BenchResult, Stats};

/// Rounds of each comparison against the loopback server; each round's medians are printed.
const ROUNDS: usize = 3;

/// The warm turn and the confined one-shot against an OpenAI-compatible server on loopback, each next to its
/// baseline, in [`ROUNDS`] rounds.
pub(super) fn rows(
    exe: &Path,
    worker_exe: &Path,
    iters: usize,
    tokio: &tokio::runtime::Runtime,
) -> BenchResult<()> {
    let server = openai::start()?;
    let home = tempfile::TempDir::new()?;
    let host = tempfile::TempDir::new()?;
    openai::write_bundle(host.path(), &server, "danger_full_access")?;
    let boxed = tempfile::TempDir::new()?;
    openai::write_bundle(boxed.path(), &server, "workspace_write")?;
    let rt = ServiceRuntime::new(
        ServiceHome::new(home.path()),
        RuntimeOptions::new(worker_exe.to_path_buf()),
    );
    let host_ref = host.path().display().to_string();
    let boxed_ref = boxed.path().display().to_string();
    let (warm, led) = tokio.block_on(async {
        let id = rt.create_session(&host_ref, None).await?.id;
        rt.start_worker(&id).await?;
        // A confined session whose turns never call a tool: it never needs its worker.
        let chat = rt.create_session(&boxed_ref, None).await?.id;
        let client = reqwest::Client::new();
        let (mut warm, mut led) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (mut turn, mut chat_turn, mut direct) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..iters {
                turn.push(timed_turn(&rt, &id).await?);
                chat_turn.push(timed_turn(&rt, &chat).await?);
                direct.push(openai::direct(&client, &server).await?);
            }
            let direct = stats(direct);
            warm.push((stats(turn), direct.clone()));
            led.push((stats(chat_turn), direct));
        }
        rt.shutdown("bench over").await;
        BenchResult::Ok((warm, led))
    })?;
    let thinking = tempfile::TempDir::new()?;
    openai::write_bundle_at(thinking.path(), &server.thinking, "workspace_write")?;
    let thinking_ref = thinking.path().display().to_string();
    let bash = tempfile::TempDir::new()?;
    openai::write_bundle_at(bash.path(), &server.bash, "workspace_write")?;
    let bash_ref = bash.path().display().to_string();
    // Another build whose one-shots are sampled in turn with this one's, so that both meet the same machine.
    let baseline = std::env::var_os("BENCH_BASELINE_EXE").map(std::path::PathBuf::from);
    let one_shot_of = |exe: &Path, reference: &str| -> BenchResult<Duration> {
        answered_ok(
            std::process::Command::new(exe)
                .args(["run", reference, "--prompt", "hi"])
                .env("SERVICE_HOME", home.path()),
        )
    };
    let one_shot = |reference: &str| one_shot_of(exe, reference);
    let scratch = tempfile::TempDir::new()?;
    let session_sandbox = SessionSandbox::new(scratch.path(), &["/usr/bin/true"])
        .map_err(|e| e as Box<dyn std::error::Error>)?;
    let (mut oneshots, mut thinking_oneshots, mut bash_oneshots) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut sandboxes = Vec::new();
    let (mut against_baseline, mut bash_against_baseline) = (Vec::new(), Vec::new());
    let mut new_files = Vec::new();
    for round in 0..ROUNDS {
        new_files.push(stats::new_file(
            &home.path().join(format!("probe-{round}")),
        )?);
        let (mut oneshot, mut limit, mut slow, mut tool) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut tool_limit, mut bare, mut session_bwrap) = (Vec::new(), Vec::new(), Vec::new());
        let (mut base, mut base_tool) = (Vec::new(), Vec::new());
        for i in 0..iters.min(50) {
            // Before this build's rows or after them, in turn: a one-shot that ran a tool leaves its sandbox to
            // be torn down as the next one starts.
            let mut sample_baseline = |turn: usize| -> BenchResult<()> {
                if let Some(other) = baseline.as_deref().filter(|_| i % 2 == turn) {
                    base.push(one_shot_of(other, &boxed_ref)?);
                    base_tool.push(one_shot_of(other, &bash_ref)?);
                }
                Ok(())
            };
            sample_baseline(0)?;
            oneshot.push(one_shot(&boxed_ref)?);
            slow.push(one_shot(&thinking_ref)?);
            tool.push(one_shot(&bash_ref)?);
            sample_baseline(1)?;
            // A new client per request: a new connection, as the one-shot makes.
            let request = tokio.block_on(openai::direct(&reqwest::Client::new(), &server))?;
            let bwrap = bare_bwrap_once()?;
            let shell = succeeded(std::process::Command::new("sh").args(["-c", "true"]))?;
            limit.push(bwrap + request);
            tool_limit.push(bwrap + request + shell);
            bare.push(bwrap);
            session_bwrap.push(succeeded(&mut session_sandbox.command())?);
        }
        if baseline.is_some() {
            against_baseline.push((stats(oneshot.clone()), stats(base)));
            bash_against_baseline.push((stats(tool.clone()), stats(base_tool)));
        }
        thinking_oneshots.push((stats(slow), stats(oneshot.clone())));
        bash_oneshots.push((stats(tool), stats(tool_limit)));
        sandboxes.push((stats(session_bwrap), stats(bare)));
        oneshots.push((stats(oneshot), stats(limit)));
    }
    println!();
    println!(
        "Against an OpenAI-compatible server on loopback, the median of each of {ROUNDS} rounds:"
    );
    println!();
    println!(
        "| {:<56} | {:>26} |",
        "benchmark", "median ms, rounds 1 / 2 / 3"
    );
    println!("|{:-<58}|{:-<28}|", "", "");
    // Each row: its name, the rounds it reads (a measurement and its baseline), and the cell it makes of one.
    type Cell = fn(&Stats, &Stats) -> String;
    type Rounds = [(Stats, Stats)];
    let rows: [(&str, &Rounds, Cell); 15] = [
        (
            "warm turn (host worker running), whole round trip",
            &warm,
            |t, _| format!("{:.3}", ms(t.median)),
        ),
        (
            "direct streaming request, same client, kept connection",
            &warm,
            |_, d| format!("{:.3}", ms(d.median)),
        ),
        ("overhead of a warm turn (difference)", &warm, |t, d| {
            format!("{:.3}", ms(t.median.saturating_sub(d.median)))
        }),
        (
            "turn of a confined session with no worker (text answers)",
            &led,
            |t, _| format!("{:.3}", ms(t.median)),
        ),
        (
            "its overhead (difference with the direct request)",
            &led,
            |t, d| format!("{:.3}", ms(t.median.saturating_sub(d.median))),
        ),
        (
            "confined one-shot `service-rs run`, whole process",
            &oneshots,
            |o, _| format!("{:.2}", ms(o.median)),
        ),
        (
            "limit: bare bwrap + direct request, new connection",
            &oneshots,
            |_, l| format!("{:.2}", ms(l.median)),
        ),
        ("ratio: confined one-shot / limit", &oneshots, |o, l| {
            format!("{:.2}x", o.median.as_secs_f64() / l.median.as_secs_f64())
        }),
        (
            "confined one-shot, model that waits 30 ms before answering",
            &thinking_oneshots,
            |t, _| format!("{:.2}", ms(t.median)),
        ),
        ("what its 30 ms add", &thinking_oneshots, |t, o| {
            format!("{:.2}", ms(t.median) - ms(o.median))
        }),
        (
            "confined one-shot, one Bash `true` call, then the answer",
            &bash_oneshots,
            |t, _| format!("{:.2}", ms(t.median)),
        ),
        (
            "its limit: bare bwrap + direct request + `sh -c true`",
            &bash_oneshots,
            |_, l| format!("{:.2}", ms(l.median)),
        ),
        (
            "ratio: that one-shot / its limit",
            &bash_oneshots,
            |t, l| format!("{:.2}x", t.median.as_secs_f64() / l.median.as_secs_f64()),
        ),
        (
            "bare bwrap (`--unshare-all`, running `true`)",
            &sandboxes,
            |_, b| format!("{:.2}", ms(b.median)),
        ),
        (
            "bwrap with a session's arguments, running `true`",
            &sandboxes,
            |s, _| format!("{:.2}", ms(s.median)),
        ),
    ];
    let ratio: Cell = |t, b| format!("{:.3}x", t.median.as_secs_f64() / b.median.as_secs_f64());
    let baseline_rows: [(&str, &Rounds, Cell); 4] = [
        (
            "BENCH_BASELINE_EXE's confined one-shot, in turn",
            &against_baseline,
            |_, b| format!("{:.2}", ms(b.median)),
        ),
        (
            "ratio: this build's / the baseline's",
            &against_baseline,
            ratio,
        ),
        (
            "BENCH_BASELINE_EXE's one-shot with one Bash call",
            &bash_against_baseline,
            |_, b| format!("{:.2}", ms(b.median)),
        ),
        (
            "ratio: this build's / the baseline's",
            &bash_against_baseline,
            ratio,
        ),
    ];
    let baseline_rows = if baseline.is_some() {
        &baseline_rows[..]
    } else {
        &[]
    };
    for (name, rounds, cell) in rows.iter().chain(baseline_rows) {
        let values: Vec<String> = rounds.iter().map(|(a, b)| cell(a, b)).collect();
        println!("| {name:<56} | {:>26} |", values.join(" / "));
    }
    let values: Vec<String> = new_files.iter().map(|d| format!("{:.3}", ms(*d))).collect();
    println!(
        "| {:<56} | {:>26} |",
        "a new file in the home's file system (before the round)",
        values.join(" / ")
    );
    // A quiet ext4 makes a file in 0.01-0.03 ms; just after many deletions, 0.2 ms and more.
    if new_files.iter().any(|d| *d > Duration::from_micros(50)) {
        println!();
        println!(
            "The home's file system met recent deletions (a new file took over 0.05 ms), so the one-shot rows read \
             high. docs/src/benchmarks.md reads them on a calm file system: 6 minutes after the last run's deletions."
        );
    }
    Ok(())
}

/// One turn of `hi` in session `id`, timed; fails unless the answer is the server's `ok`.
async fn timed_turn(rt: &ServiceRuntime, id: &str) -> BenchResult<Duration> {
    let t = Instant::now();
    let outcome = rt
        .run_turn(id, Task::new("hi"), TurnOverrides::default())
        .await?;
    let took = t.elapsed();
    if outcome.final_message != "ok" {
        return Err(format!(
            "the turn answered {:?}: {:?}",
            outcome.final_message, outcome.error
        )
        .into());
    }
    Ok(took)
}
