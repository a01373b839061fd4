//! What exporting traces adds to a warm turn: `cargo bench -p service-supervisor --bench traces`.
//!
//! Two `service-rs serve` processes over stores of their own, one exporting traces over OTLP/HTTP to a receiver in
//! this process (which takes and discards the batches), one with traces off. The same text-only turn (a scripted
//! model, which takes no time of its own) runs with `run-sync` in one session on each, the two sampled in turn.
//! Reports the median round trip of each and their difference; the target is at most 0.1 ms added.
//!
//! `BENCH_ITERS` sets the samples of each (default 400).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const TOKEN: &str = "bench-token";

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

/// A server over `home`, with `extra` arguments; its base URL. Killed when the child is dropped by the caller.
fn serve(home: &Path, extra: &[&str]) -> BenchResult<(Child, String)> {
    use std::io::BufRead;
    let exe = env!("CARGO_BIN_EXE_service-rs");
    let mut child = Command::new(exe)
        .args(["serve", "--bind", "127.0.0.1:0", "--token", TOKEN])
        .args(extra)
        .env("SERVICE_HOME", home)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let base = line
        .trim()
        .strip_prefix("service-rs listening on ")
        .ok_or_else(|| format!("unexpected first line: {line}"))?
        .to_string();
    Ok((child, base))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> BenchResult<()> {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
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
            let made: serde_json::Value = client
                .post(format!("{base}/sessions"))
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({"bundle_ref": bundle}))
                .send()
                .await?
                .json()
                .await?;
            let id = made["id"].as_str().ok_or("no session id")?.to_string();
            sessions.push(format!("{base}/sessions/{id}/run-sync"));
        }
        let turn = |url: String| {
            let client = client.clone();
            async move {
                let body = serde_json::json!({"input": {"prompt": "hi",
                    "submission_id": uuid::Uuid::new_v4(), "completed": false}});
                let started = Instant::now();
                let answer: serde_json::Value = client
                    .post(url)
                    .bearer_auth(TOKEN)
                    .json(&body)
                    .send()
                    .await?
                    .json()
                    .await?;
                if answer["status"] != "completed" {
                    return Err(format!("the turn did not complete: {answer}").into());
                }
                BenchResult::Ok(started.elapsed())
            }
        };
        for _ in 0..50 {
            turn(sessions[0].clone()).await?;
            turn(sessions[1].clone()).await?;
        }
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..iters {
            without.push(turn(sessions[0].clone()).await?);
            with.push(turn(sessions[1].clone()).await?);
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
