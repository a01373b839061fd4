//! What `serve` adds to a warm turn against a real HTTP provider: `cargo bench -p service-supervisor --bench
//! overhead`.
//!
//! A `service-rs serve` process runs one confined session whose model is the OpenAI-compatible server on loopback
//! (`common/openai.rs`, on a thread of this process, as a provider in another process would be). The same client
//! sends, in turn, a `run-sync` text turn to the session (client to `serve`, `serve` to the provider, the journal,
//! the answer back) and the direct streaming request a turn's model call makes, on its kept connection. The
//! difference of the medians is what a user's turn pays beyond the provider's own time; the target is at most
//! 0.5 ms. A text turn starts no sandbox: the supervisor answers it itself (`runtime/lead.rs`).
//!
//! `BENCH_ITERS` sets the samples of each (default 400); `BENCH_ROUNDS` the rounds (default 3), whose medians are
//! all printed so the machine's noise shows. `BENCH_MODE` sets the sandbox mode (default `workspace_write`, whose
//! turns take workspace checkpoints; `read_only` takes none); `BENCH_TURN_FLUSH` the store's `turn_flush` (default
//! `turn`: each turn's end is on disk before it is reported; `background` flushes it right after); the direct request
//! follows each turn at once, so a flush left after a turn's answer competes with it, as with a next turn.

#[path = "common/openai.rs"]
mod openai;
#[path = "common/serve.rs"]
mod serve;

#[path = "common/stats.rs"]
mod stats;
use stats::{env_or, median};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> BenchResult<()> {
    let (iters, rounds) = (env_or("BENCH_ITERS", 400), env_or("BENCH_ROUNDS", 3));
    let provider = openai::start()?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    tokio.block_on(async move {
        let (home, bundle) = (tempfile::tempdir()?, tempfile::tempdir()?);
        let mode = std::env::var("BENCH_MODE").unwrap_or_else(|_| "workspace_write".into());
        let flush = std::env::var("BENCH_TURN_FLUSH").unwrap_or_else(|_| "turn".into());
        std::fs::write(
            home.path().join("config.toml"),
            format!("turn_flush = \"{flush}\"\n"),
        )?;
        openai::write_bundle(bundle.path(), &provider, &mode)?;
        let bundle = bundle.path().to_str().ok_or("path")?.to_string();
        let (mut server, base) = serve::serve(home.path(), &["--allow-path", &bundle])?;
        let client = reqwest::Client::new();
        let url = serve::session(&client, &base, &bundle).await?;
        for _ in 0..50 {
            serve::turn(&client, &url).await?;
            openai::direct(&client, &provider).await?;
        }
        println!(
            "warm text turn over HTTP against the loopback provider, {iters} samples each, in turn \
             ({mode}, turn_flush = {flush})"
        );
        println!("| round | `run-sync` turn | direct request | added by service-rs |");
        println!("|---|---|---|---|");
        for round in 1..=rounds {
            let (mut turns, mut direct) = (Vec::new(), Vec::new());
            for _ in 0..iters {
                turns.push(serve::turn(&client, &url).await?);
                direct.push(openai::direct(&client, &provider).await?);
            }
            let ms = |v| median(v).as_secs_f64() * 1e3;
            let (t, d) = (ms(turns), ms(direct));
            println!(
                "| {round} | {t:.3} ms | {d:.3} ms | {:+.3} ms (target at most 0.5) |",
                t - d
            );
        }
        let _ = server.kill();
        let _ = server.wait();
        BenchResult::Ok(())
    })
}
