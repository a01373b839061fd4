//! HTTP benchmarks: `cargo bench -p service-supervisor --bench http`.
//!
//! - run-sync round trip of a text-only turn (scripted provider, which takes no time of its own, so the whole
//!   round trip is overhead), against the same turn through the runtime in-process, and the same turn as an
//!   OpenAI chat completion (`POST /v1/chat/completions` continuing the session, not streamed) and an A2A
//!   `SendMessage` whose context is the session;
//! - event fan-out: one turn streams `BENCH_EVENTS` deltas (default 20,000) while 100 SSE clients follow the
//!   session from a child process; reports events per second (each delivered to all 100), deliveries per second,
//!   the CPU time the supervisor and the clients spent per delivery, and events lost.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use service_ipc::{Task, TurnOverrides};
use service_supervisor::{server, RuntimeOptions, ServiceHome, ServiceRuntime};
use tokio::io::AsyncBufReadExt;

#[path = "common/stats.rs"]
mod stats;
use stats::{env_or, median};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn write_bundle(dir: &Path, words: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "bench", version: "1.0.0", tools: [], sandbox: { mode: "danger_full_access" } }"#,
    )?;
    std::fs::write(
        dir.join("agent.yaml"),
        "model: { provider: scripted, name: bench, config: { script: resources/script.json5 } }\n",
    )?;
    let long = vec!["word"; words].join(" ");
    let script = serde_json::json!({"turns": [
        {"when": "flood", "replies": [{"text": long}]},
        {"replies": [{"text": "ok"}]},
    ]});
    std::fs::write(dir.join("resources/script.json5"), script.to_string())
}

fn task(prompt: &str) -> serde_json::Value {
    serde_json::json!({"prompt": prompt, "submission_id": uuid::Uuid::new_v4(), "completed": false})
}

/// Set in the child process that plays the 100 SSE clients; holds the events URL.
const CLIENT_ENV: &str = "BENCH_SSE_CLIENTS_OF";

/// What the client process reports: events each client received, when the last arrived (seconds after the
/// clients were ready) and the CPU time the clients used.
#[derive(serde::Serialize, serde::Deserialize)]
struct ClientReport {
    counts: Vec<usize>,
    last_secs_after_ready: f64,
    cpu_secs: f64,
}

/// User plus system CPU time of this process.
fn cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
            };
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or_default()
}

/// The child process: connects 100 SSE clients to `url`, prints `ready`, follows each to the end of the turn and
/// prints a `ClientReport` line.
fn sse_clients(url: String) -> BenchResult<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    tokio.block_on(async move {
        let client = reqwest::Client::new();
        let mut responses = Vec::new();
        for _ in 0..100 {
            responses.push(client.get(&url).send().await?.error_for_status()?);
        }
        let cpu_before = cpu_time();
        let ready = Instant::now();
        let tasks: Vec<_> = responses
            .into_iter()
            .map(|resp| {
                tokio::spawn(async move {
                    let mut stream = service_supervisor::event_source::events(resp.bytes_stream());
                    let mut count = 0usize;
                    while let Some(Ok(ev)) = stream.next().await {
                        count += 1;
                        if ev.data.contains("\"turn_completed\"") {
                            break;
                        }
                    }
                    (count, ready.elapsed())
                })
            })
            .collect();
        println!("ready");
        let (mut counts, mut last) = (Vec::new(), Duration::ZERO);
        for t in tasks {
            let (count, at) = t.await?;
            counts.push(count);
            last = last.max(at);
        }
        let report = ClientReport {
            counts,
            last_secs_after_ready: last.as_secs_f64(),
            cpu_secs: (cpu_time() - cpu_before).as_secs_f64(),
        };
        println!("{}", serde_json::to_string(&report)?);
        BenchResult::Ok(())
    })
}

fn main() -> BenchResult<()> {
    if let Ok(url) = std::env::var(CLIENT_ENV) {
        return sse_clients(url);
    }
    let iters: usize = env_or("BENCH_ITERS", 200);
    let events: usize = env_or("BENCH_EVENTS", 20_000);
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_service-rs"));
    let home = tempfile::TempDir::new()?;
    let bundle = tempfile::TempDir::new()?;
    // The scripted provider streams three words per delta.
    write_bundle(bundle.path(), events * 3)?;
    let bundle_ref = bundle.path().display().to_string();
    // Installed too: A2A serves installed bundles, and the session made from the directory has the same bundle id.
    service_supervisor::bundle::store::install(&ServiceHome::new(home.path()), bundle.path())?;
    let rt = ServiceRuntime::new(ServiceHome::new(home.path()), RuntimeOptions::new(exe));
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    tokio.block_on(async move {
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let stop = tokio_util::sync::CancellationToken::new();
        let stopper = stop.clone();
        let server_rt = rt.clone();
        let server = tokio::spawn(async move {
            // No token: the bench measures the server's own work per request, as before.
            let mut options =
                server::ServeOptions::new(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
            options.auth = server::Auth::None;
            // The bench bundle runs on the host, as the runtime's own sessions of it do.
            options.policy.dangerous = true;
            server::serve(
                server_rt,
                options,
                |a, _| {
                    let _ = addr_tx.send(a);
                },
                async move {
                    stopper.cancelled().await;
                    server::Stop::Now
                },
            )
            .await
        });
        let base = format!("http://{}", addr_rx.await?);
        let client = reqwest::Client::new();

        // run-sync round trip against the in-process turn.
        let id = rt.create_session(&bundle_ref, None).await?.id;
        rt.start_worker(&id).await?;
        let (mut http, mut direct, mut openai, mut a2a) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..iters {
            let t = Instant::now();
            rt.run_turn(&id, Task::new("hi"), TurnOverrides::default())
                .await?;
            direct.push(t.elapsed());
            let t = Instant::now();
            let resp = client
                .post(format!("{base}/sessions/{id}/run-sync"))
                .json(&serde_json::json!({"input": task("hi")}))
                .send()
                .await?;
            let body: serde_json::Value = resp.json().await?;
            http.push(t.elapsed());
            if body["status"] != "completed" {
                return Err(format!("run-sync failed: {body}").into());
            }
            let t = Instant::now();
            let resp = client
                .post(format!("{base}/v1/chat/completions"))
                .header("x-service-session", &id)
                .json(&serde_json::json!({"model": "bench", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await?;
            let body: serde_json::Value = resp.json().await?;
            openai.push(t.elapsed());
            if body["choices"][0]["message"]["content"] != "ok" {
                return Err(format!("the chat completion failed: {body}").into());
            }
            // A2A: the session is the context; the answer is the finished task.
            let t = Instant::now();
            let resp = client
                .post(format!("{base}/a2a/bench"))
                .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": {"messageId": "m", "role": "ROLE_USER", "contextId": id,
                        "parts": [{"text": "hi"}]}}}))
                .send()
                .await?;
            let body: serde_json::Value = resp.json().await?;
            a2a.push(t.elapsed());
            if body["result"]["task"]["status"]["state"] != "TASK_STATE_COMPLETED" {
                return Err(format!("the A2A SendMessage failed: {body}").into());
            }
        }

        // Fan-out to 100 SSE subscribers, which run in a child process of their own so the CPU time of the
        // supervisor (journal, broadcast, SSE encoding, sockets) can be told apart from the clients' parsing.
        let flood = rt.create_session(&bundle_ref, None).await?.id;
        rt.start_worker(&flood).await?;
        let mut clients = tokio::process::Command::new(std::env::current_exe()?)
            .env(CLIENT_ENV, format!("{base}/sessions/{flood}/events"))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines =
            tokio::io::BufReader::new(clients.stdout.take().ok_or("no client stdout")?).lines();
        if lines.next_line().await?.as_deref() != Some("ready") {
            return Err("the SSE clients did not connect".into());
        }
        let cpu_before = cpu_time();
        let start = Instant::now();
        rt.run_turn(&flood, Task::new("flood"), TurnOverrides::default())
            .await?;
        let produced = start.elapsed();
        let report: ClientReport =
            serde_json::from_str(&lines.next_line().await?.ok_or("no client report")?)?;
        let server_cpu = cpu_time() - cpu_before;
        clients.wait().await?;
        let journaled = {
            let mut all = rt.subscribe_session_from(&flood, 0).await?;
            let mut n = 0usize;
            while let Ok(Some(ev)) =
                tokio::time::timeout(Duration::from_millis(200), all.next()).await
            {
                n += 1;
                if ev.payload.ends_turn() {
                    break;
                }
            }
            n
        };
        let delivered: usize = report.counts.iter().sum();
        let lost = journaled * report.counts.len() - delivered;
        let elapsed = produced.as_secs_f64().max(report.last_secs_after_ready);
        stop.cancel();
        rt.shutdown("bench over").await;
        let _ = server.await;

        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (h, d) = (median(http), median(direct));
        println!("| {:<52} | {:>14} |", "benchmark", "median");
        println!("|{:-<54}|{:-<16}|", "", "");
        println!(
            "| {:<52} | {:>11.3} ms |",
            "text-only turn via POST run-sync (round trip)",
            ms(h)
        );
        println!(
            "| {:<52} | {:>11.3} ms |",
            "same turn via ServiceRuntime::run_turn in-process",
            ms(d)
        );
        println!(
            "| {:<52} | {:>11.3} ms |",
            "HTTP overhead per turn (difference)",
            ms(h.saturating_sub(d))
        );
        let o = median(openai);
        println!(
            "| {:<52} | {:>11.3} ms |",
            "same turn via POST /v1/chat/completions",
            ms(o)
        );
        println!(
            "| {:<52} | {:>11.3} ms |",
            "chat completion over run-sync (difference)",
            ms(o) - ms(h)
        );
        let a = median(a2a);
        println!(
            "| {:<52} | {:>11.3} ms |",
            "same turn via A2A SendMessage (blocking)",
            ms(a)
        );
        println!(
            "| {:<52} | {:>11.3} ms |",
            "A2A SendMessage over run-sync (difference)",
            ms(a) - ms(h)
        );
        println!(
            "| {:<52} | {:>14} |",
            "events in the flood turn (journaled)", journaled
        );
        println!(
            "| {:<52} | {:>14.0} |",
            "events/s produced and journaled",
            journaled as f64 / produced.as_secs_f64()
        );
        println!(
            "| {:<52} | {:>14.0} |",
            "events/s delivered to all 100 SSE subscribers",
            journaled as f64 / elapsed
        );
        println!(
            "| {:<52} | {:>14.0} |",
            "SSE deliveries/s (events x subscribers)",
            delivered as f64 / elapsed
        );
        println!(
            "| {:<52} | {:>11.3} µs |",
            "supervisor CPU per SSE delivery",
            server_cpu.as_secs_f64() * 1e6 / delivered.max(1) as f64
        );
        println!(
            "| {:<52} | {:>11.3} µs |",
            "SSE clients' CPU per delivery (parsing)",
            report.cpu_secs * 1e6 / delivered.max(1) as f64
        );
        println!("| {:<52} | {:>14} |", "events lost", lost);
        BenchResult::Ok(())
    })
}
