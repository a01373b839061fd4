//! What exporting traces adds to a warm turn: `cargo bench -p service-supervisor --bench traces`.
//!
//! Two `service-rs serve` processes over stores of their own, one exporting traces over OTLP/HTTP to a receiver in
//! this process (which takes and discards the batches), one with traces off. The same text-only turn (a scripted
//! model, which takes no time of its own) runs with `run-sync` in one session on each, the two sampled in turn.
//! Reports the median round trip of each and their difference; the target is at most 0.1 ms added.
//!
//! `BENCH_ITERS` sets the samples of each (default 400).

use std::path::Path;

#[path = "common/serve.rs"]
mod serve;
use serve::{serve, session, turn};

#[path = "common/stats.rs"]
mod stats;
use stats::{env_or, median};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn write_bundle(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "bench", version: "1.0.0", tools: [],
            sandbox: { mode: "read_only", permissions: { network: [] } } }"#,
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

fn main() -> BenchResult<()> {
    let iters: usize = env_or("BENCH_ITERS", 400);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    tokio.block_on(async move {
        // The receiver: takes each batch and answers as a collector does.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let receiver = format!("http://{}", listener.local_addr()?);
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(|_body: axum::body::Bytes| async { "" }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });

        let dirs = (
            tempfile::tempdir()?,
            tempfile::tempdir()?,
            tempfile::tempdir()?,
        );
        write_bundle(dirs.2.path())?;
        let bundle = dirs.2.path().to_str().ok_or("path")?.to_string();
        let (mut off, off_url) = serve(dirs.0.path(), &["--allow-path", &bundle])?;
        let (mut on, on_url) = serve(
            dirs.1.path(),
            &["--allow-path", &bundle, "--otlp-endpoint", &receiver],
        )?;
        let client = reqwest::Client::new();
        let mut sessions = Vec::new();
        for base in [&off_url, &on_url] {
            sessions.push(session(&client, base, &bundle).await?);
        }
        for _ in 0..50 {
            turn(&client, &sessions[0]).await?;
            turn(&client, &sessions[1]).await?;
        }
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..iters {
            without.push(turn(&client, &sessions[0]).await?);
            with.push(turn(&client, &sessions[1]).await?);
        }
        let (a, b) = (median(without), median(with));
        println!("warm text turn over HTTP, {iters} samples each, sampled in turn");
        println!("  traces off: {:.3} ms", a.as_secs_f64() * 1000.0);
        println!("  traces on:  {:.3} ms", b.as_secs_f64() * 1000.0);
        println!(
            "  added:      {:+.3} ms (target at most 0.1 ms)",
            (b.as_secs_f64() - a.as_secs_f64()) * 1000.0
        );
        let _ = off.kill();
        let _ = on.kill();
        let _ = (off.wait(), on.wait());
        BenchResult::Ok(())
    })
}
