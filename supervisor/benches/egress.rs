//! Egress proxy benchmarks: `cargo bench -p service-supervisor --bench egress`.
//!
//! Everything runs as users run it: sessions of a real runtime with bwrap'd workers, curl inside the sandbox going
//! through the worker's loopback forwarder and the supervisor's proxy, and an upstream HTTP server (hyper) in a
//! child process.
//!
//! - Latency: curl's own `time_total` (so process start is not counted) for a small GET, from inside a sandbox
//!   through the proxy (absolute-form and CONNECT), against the same curl on the host straight to the upstream.
//!   Sampled in alternating blocks; medians, their difference and ratio.
//! - Load: 10 sessions each open 20 CONNECT tunnels at once (200 in all) and download `BENCH_TUNNEL_MB` (default 5)
//!   MiB through each. The upstream holds every response until all 200 requests have arrived, so the tunnels are
//!   open together; it reports the peak. The supervisor's CPU time (this process: runtime, proxies, journal) is
//!   reported per MiB moved.
//!
//! `BENCH_ITERS` sets the latency samples per kind (default 200).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use service_supervisor::{egress::Resolver, RuntimeOptions, ServiceHome, ServiceRuntime};

#[path = "common/stats.rs"]
mod stats;
use stats::{env_or, median};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Set in the child process that serves as the upstream; holds the number of big requests to wait for.
const UPSTREAM_ENV: &str = "BENCH_EGRESS_UPSTREAM";
const SESSIONS: usize = 10;
const TUNNELS_PER_SESSION: usize = 20;

fn cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000)
            };
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// The upstream: `/small` answers 2 bytes; `/big` answers the big body once `expected` big requests have arrived
/// (or after 20 s); `/peak` reports the most big requests open at once.
async fn upstream(expected: usize, big: Bytes) -> BenchResult<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("{}", listener.local_addr()?.port());
    let open = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let arrived = Arc::new(tokio::sync::Semaphore::new(0));
    loop {
        let (stream, _) = listener.accept().await?;
        let (open, peak, arrived, big) = (open.clone(), peak.clone(), arrived.clone(), big.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (open, peak, arrived, big) =
                    (open.clone(), peak.clone(), arrived.clone(), big.clone());
                async move {
                    let body = match req.uri().path() {
                        "/big" => {
                            let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            arrived.add_permits(1);
                            let all = arrived.acquire_many(expected as u32);
                            if let Ok(Ok(p)) =
                                tokio::time::timeout(Duration::from_secs(20), all).await
                            {
                                // Put them back, so every other waiter gets through too.
                                drop(p);
                            }
                            open.fetch_sub(1, Ordering::SeqCst);
                            big
                        }
                        "/peak" => Bytes::from(peak.load(Ordering::SeqCst).to_string()),
                        _ => Bytes::from_static(b"ok"),
                    };
                    Ok::<_, Infallible>(Response::new(Full::new(body)))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn write_bundle(dir: &Path, port: u16) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        format!(
            r#"{{ manifest_version: "service.bundle/v1", id: "egress-bench", version: "1.0.0", tools: ["Bash"],
                 sandbox: {{ mode: "workspace_write", permissions: {{ network: ["bench.test:{port}"] }},
                 resources: {{ memory_mb: 2048, cpu: 2 }} }} }}"#
        ),
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

/// `n` curl timings (`time_total`) of `args`, as a shell loop writing one number per line to `out`.
fn curl_loop(n: usize, args: &str, out: &str) -> String {
    format!(
        "for i in $(seq {n}); do curl -sS -o /dev/null -w '%{{time_total}}\\n' {args}; done > {out}"
    )
}

fn read_times(path: &Path) -> BenchResult<Vec<Duration>> {
    let text = std::fs::read_to_string(path)?;
    let times: Vec<Duration> = text
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .map(Duration::from_secs_f64)
        .collect();
    if times.is_empty() {
        return Err(format!("no timings in {}: {text}", path.display()).into());
    }
    Ok(times)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run_command(rt: &ServiceRuntime, id: &str, command: &str) -> BenchResult<()> {
    let outcome = rt.run_session_command(id, command).await?;
    if outcome.exit_code != Some(0) {
        return Err(format!("`{command}` exited with {:?}", outcome.exit_code).into());
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    let tunnel_mb: usize = env_or("BENCH_TUNNEL_MB", 5);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Ok(expected) = std::env::var(UPSTREAM_ENV) {
        let big = Bytes::from(vec![b'x'; tunnel_mb << 20]);
        return tokio.block_on(upstream(expected.parse()?, big));
    }
    let iters: usize = env_or("BENCH_ITERS", 200);

    let mut child = std::process::Command::new(std::env::current_exe()?)
        .env(UPSTREAM_ENV, (SESSIONS * TUNNELS_PER_SESSION).to_string())
        .env("BENCH_TUNNEL_MB", tunnel_mb.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let port: u16 = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().ok_or("no upstream stdout")?)
            .read_line(&mut line)?;
        line.trim().parse()?
    };
    let result = tokio.block_on(bench(iters, port, tunnel_mb));
    let _ = child.kill();
    let _ = child.wait();
    result
}

async fn bench(iters: usize, port: u16, tunnel_mb: usize) -> BenchResult<()> {
    let home = tempfile::TempDir::new()?;
    let bundle = tempfile::TempDir::new()?;
    write_bundle(bundle.path(), port)?;
    let reference = bundle.path().display().to_string();
    let mut options = RuntimeOptions::new(PathBuf::from(env!("CARGO_BIN_EXE_service-rs")));
    options.resolver = Arc::new(Resolver::from_entries(&[format!(
        "bench.test:{port}:127.0.0.1"
    )])?);
    let rt = ServiceRuntime::new(ServiceHome::new(home.path().to_path_buf()), options);

    // Latency, in alternating blocks of `block` samples per kind.
    let id = rt.create_session(&reference, None).await?.id;
    let workspace = PathBuf::from(rt.get_session(&id).await?.cwd);
    let url = format!("http://bench.test:{port}/small");
    let direct_url = format!("http://127.0.0.1:{port}/small");
    let block = 20.min(iters);
    let (mut plain, mut tunnel, mut direct) = (Vec::new(), Vec::new(), Vec::new());
    run_command(&rt, &id, &curl_loop(5, &url, "/dev/null")).await?;
    while direct.len() < iters {
        run_command(&rt, &id, &curl_loop(block, &url, "plain.txt")).await?;
        plain.extend(read_times(&workspace.join("plain.txt"))?);
        run_command(
            &rt,
            &id,
            &curl_loop(block, &format!("-p {url}"), "tunnel.txt"),
        )
        .await?;
        tunnel.extend(read_times(&workspace.join("tunnel.txt"))?);
        let out = home.path().join("direct.txt");
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(curl_loop(
                block,
                &format!("--noproxy '*' {direct_url}"),
                &out.display().to_string(),
            ))
            .status()?;
        if !status.success() {
            return Err("the direct curl loop failed".into());
        }
        direct.extend(read_times(&out)?);
    }
    let (plain, tunnel, direct) = (median(plain), median(tunnel), median(direct));
    println!("| request (curl time_total, median of {iters}) | time | over direct |");
    println!("|---|---|---|");
    println!(
        "| direct from the host to the upstream | {:.3} ms | |",
        ms(direct)
    );
    for (name, t) in [
        ("sandbox, through the proxy, absolute-form http://", plain),
        ("sandbox, through the proxy, CONNECT tunnel", tunnel),
    ] {
        println!(
            "| {name} | {:.3} ms | +{:.3} ms ({:.2}x) |",
            ms(t),
            ms(t) - ms(direct),
            t.as_secs_f64() / direct.as_secs_f64()
        );
    }

    // Load: 200 tunnels from 10 sessions.
    let mut ids = Vec::new();
    for _ in 0..SESSIONS {
        let id = rt.create_session(&reference, None).await?.id;
        run_command(&rt, &id, "true").await?;
        ids.push(id);
    }
    let big = format!(
        "for i in $(seq {TUNNELS_PER_SESSION}); do curl -sS -p -o /dev/null http://bench.test:{port}/big & done; wait"
    );
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let runs = ids.iter().map(|id| run_command(&rt, id, &big));
    for r in futures::future::join_all(runs).await {
        r?;
    }
    let wall = t0.elapsed();
    let cpu = cpu_time() - cpu0;
    let peak = {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let resp = sender
            .send_request(
                Request::get("/peak")
                    .header("host", "bench")
                    .body(http_body_util::Empty::<Bytes>::new())?,
            )
            .await?;
        use http_body_util::BodyExt;
        String::from_utf8(resp.into_body().collect().await?.to_bytes().to_vec())?
    };
    let mib = (SESSIONS * TUNNELS_PER_SESSION * tunnel_mb) as f64;
    println!();
    println!(
        "| {SESSIONS} sessions x {TUNNELS_PER_SESSION} tunnels, {tunnel_mb} MiB each | value |"
    );
    println!("|---|---|");
    println!("| tunnels open at once (upstream's peak) | {peak} |");
    println!("| MiB moved | {mib:.0} |");
    println!("| wall time | {:.2} s |", wall.as_secs_f64());
    println!("| supervisor CPU | {:.2} s |", cpu.as_secs_f64());
    println!("| supervisor CPU per MiB | {:.3} ms |", ms(cpu) / mib);
    rt.shutdown("bench done").await;
    Ok(())
}
