//! The runtime bench's rows against a model that takes [`openai::SLOW`] (300 ms) before each answer, as a hosted
//! model's first byte does: what confinement adds to a one-shot the user waits for, now that the sandbox starts
//! beside the first model call (`runtime/lead.rs`). `BENCH_ONLY=slow_model` runs these rows alone.
//!
//! Each sample runs, in turn, the whole `service-rs run` confined and with `--dangerous-sandbox-mode`, for a model
//! that calls Bash once (the sandbox is needed) and for one that answers with text (a sandbox started ahead goes
//! unused). With `BENCH_BASELINE_EXE`, that build's confined one-shots are sampled in the same turn, so the two
//! builds meet the same machine.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{ms, openai, stats, BenchResult};

/// One sample of each kind, interleaved.
#[derive(Default)]
struct Samples {
    confined: Vec<Duration>,
    dangerous: Vec<Duration>,
    baseline: Vec<Duration>,
}

/// The rows, `iters` samples of each (at most 30: a sample takes over 0.6 s).
pub(super) fn rows(exe: &Path, iters: usize) -> BenchResult<()> {
    let server = openai::start()?;
    let home = tempfile::TempDir::new()?;
    let bash = tempfile::TempDir::new()?;
    openai::write_bundle_at(bash.path(), &server.slow_bash, "workspace_write")?;
    let text = tempfile::TempDir::new()?;
    openai::write_bundle_at(text.path(), &server.slow, "workspace_write")?;
    let baseline = std::env::var_os("BENCH_BASELINE_EXE").map(std::path::PathBuf::from);
    let one_shot = |exe: &Path, bundle: &Path, dangerous: bool| -> BenchResult<Duration> {
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("run").arg(bundle).args(["--prompt", "hi"]);
        if dangerous {
            cmd.arg("--dangerous-sandbox-mode");
        }
        let t = Instant::now();
        let out = cmd.env("SERVICE_HOME", home.path()).output()?;
        let took = t.elapsed();
        if !out.status.success() || out.stdout != b"ok\n" {
            return Err(format!("run failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(took)
    };
    let (mut tool, mut answer) = (Samples::default(), Samples::default());
    for i in 0..iters.min(30) {
        for (samples, bundle) in [(&mut tool, bash.path()), (&mut answer, text.path())] {
            // Which goes first alternates, so neither always follows the other's teardown.
            let mut each = |dangerous: bool| -> BenchResult<()> {
                let took = one_shot(exe, bundle, dangerous)?;
                match dangerous {
                    true => samples.dangerous.push(took),
                    false => samples.confined.push(took),
                }
                Ok(())
            };
            each(i % 2 == 0)?;
            each(i % 2 == 1)?;
            if let Some(other) = &baseline {
                samples.baseline.push(one_shot(other, bundle, false)?);
            }
        }
    }
    println!();
    println!(
        "Against a model that takes {} ms before each answer, whole `service-rs run` processes, {} samples each:",
        openai::SLOW.as_millis(),
        tool.confined.len()
    );
    println!();
    println!("| {:<64} | {:>10} |", "benchmark", "median ms");
    println!("|{:-<66}|{:-<12}|", "", "");
    let row = |name: &str, value: f64| println!("| {name:<64} | {value:>10.2} |");
    for (what, samples) in [("one Bash call", &tool), ("a text answer", &answer)] {
        row(
            &format!("{what}, confined"),
            ms(stats(samples.confined.clone()).median),
        );
        row(
            &format!("{what}, `--dangerous-sandbox-mode`"),
            ms(stats(samples.dangerous.clone()).median),
        );
        row(
            "  confinement adds (median of paired differences)",
            paired(&samples.confined, &samples.dangerous),
        );
        if !samples.baseline.is_empty() {
            row(
                "  BENCH_BASELINE_EXE's confined one-shot, in turn",
                ms(stats(samples.baseline.clone()).median),
            );
            row(
                "  this build less the baseline (median of paired differences)",
                paired(&samples.confined, &samples.baseline),
            );
        }
    }
    Ok(())
}

/// The median of `a[i] - b[i]`, in milliseconds.
fn paired(a: &[Duration], b: &[Duration]) -> f64 {
    let mut d: Vec<f64> = a.iter().zip(b).map(|(a, b)| ms(*a) - ms(*b)).collect();
    d.sort_by(f64::total_cmp);
    d.get(d.len() / 2).copied().unwrap_or(f64::NAN)
}
