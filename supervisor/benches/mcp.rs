//! MCP benchmarks: `cargo bench -p service-supervisor --bench mcp`.
//!
//! The bench binary is its own MCP server (an rmcp stdio server with one `echo` tool, when started with
//! `BENCH_MCP_SERVER=1`), copied into the session workspace so a sandboxed worker can start it.
//!
//! - Round trip: a scripted turn makes `BENCH_CALLS` (default 300) calls of `mcp__b__echo`, one after another, in
//!   a `workspace_write` sandbox; each call's time is measured from its `tool_call_started` to its
//!   `tool_call_finished` event as a subscriber of the session receives them. The baseline is the same server
//!   driven directly by an rmcp client on the host, the same number of calls: the server's own time, JSON-RPC
//!   over pipes included. Reported: both medians and their difference, the cost service-rs adds.
//! - Start: the time from a worker start to `mcp_server_started` (the event's `startup_ms`), and a session's
//!   worker start with and without the server, over `BENCH_STARTS` (default 15) sessions each.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use service_ipc::{EventPayload, Task, TurnOverrides};
use service_supervisor::{RuntimeOptions, ServiceHome, ServiceRuntime};

#[path = "common/stats.rs"]
mod stats;
use stats::median;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const SERVER_ENV: &str = "BENCH_MCP_SERVER";

#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::default();
        info.capabilities = ServerCapabilities::builder().enable_tools().build();
        info
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema =
            serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "Echo",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request
            .arguments
            .and_then(|a| a.get("text").cloned())
            .unwrap_or_default();
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text.to_string()),
        ])))
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn write_bundle(dir: &Path, calls: usize, with_server: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "mcp-bench", version: "1.0.0", tools: [], sandbox: { mode: "workspace_write" } }"#,
    )?;
    let servers = if with_server {
        format!("mcp_servers: {{ b: {{ command: /workspace/mcp-bench-server, env: {{ {SERVER_ENV}: \"1\" }} }} }}\n")
    } else {
        String::new()
    };
    std::fs::write(
        dir.join("agent.yaml"),
        format!("model: {{ provider: scripted, name: bench, config: {{ script: resources/script.json5 }} }}\n{servers}"),
    )?;
    let calls: Vec<serde_json::Value> = (0..calls)
        .map(|i| serde_json::json!({"name": "mcp__b__echo", "arguments": {"text": format!("call {i}")}}))
        .collect();
    let script =
        serde_json::json!({"turns": [{"replies": [{"tool_calls": calls}, {"text": "done"}]}]});
    std::fs::write(dir.join("resources/script.json5"), script.to_string())
}

/// Per-call times of one turn of `calls` MCP calls in a sandbox, from the events a subscriber sees.
async fn confined(rt: &ServiceRuntime, bundle: &str, ws: &Path) -> BenchResult<Vec<Duration>> {
    let id = rt.create_session(bundle, Some(ws)).await?.id;
    let mut events = rt.subscribe_session(&id).await?;
    let pending = rt
        .start_turn(&id, Task::new("go"), TurnOverrides::default())
        .await?;
    let mut started: Option<Instant> = None;
    let mut times = Vec::new();
    while let Some(msg) = events.next().await {
        match &msg.payload {
            EventPayload::ToolCallStarted { .. } => started = Some(Instant::now()),
            EventPayload::ToolCallFinished { status, output, .. } => {
                if *status != service_ipc::ToolCallStatus::Ok {
                    return Err(format!("an MCP call failed: {output}").into());
                }
                if let Some(s) = started.take() {
                    times.push(s.elapsed());
                }
            }
            EventPayload::McpServerFailed {
                message,
                stderr_tail,
                ..
            } => return Err(format!("the bench server failed: {message} {stderr_tail}").into()),
            p if p.ends_turn() => break,
            _ => {}
        }
    }
    pending.outcome.await?;
    rt.delete_session(&id).await?;
    Ok(times)
}

/// Per-call times of the same server driven directly by an rmcp client on the host.
async fn direct(server: &Path, calls: usize) -> BenchResult<Vec<Duration>> {
    let mut cmd = tokio::process::Command::new(server);
    cmd.env(SERVER_ENV, "1");
    let client = ().serve(rmcp::transport::TokioChildProcess::new(cmd)?).await?;
    let mut times = Vec::new();
    for i in 0..calls {
        let mut p = CallToolRequestParams::new("echo");
        p.arguments = serde_json::json!({"text": format!("call {i}")})
            .as_object()
            .cloned();
        let t = Instant::now();
        client.call_tool(p).await?;
        times.push(t.elapsed());
    }
    client.cancel().await?;
    Ok(times)
}

/// Times from a worker start to its readiness, with the MCP server's own `startup_ms`.
async fn starts(
    rt: &ServiceRuntime,
    bundle: &str,
    ws: &Path,
    with_server: bool,
) -> BenchResult<(Duration, Option<Duration>)> {
    let id = rt.create_session(bundle, Some(ws)).await?.id;
    let mut events = rt.subscribe_session(&id).await?;
    let t = Instant::now();
    rt.start_worker(&id).await?;
    let mut startup = None;
    let elapsed = if with_server {
        loop {
            match events.next().await.map(|m| m.payload) {
                Some(EventPayload::McpServerStarted { startup_ms, .. }) => {
                    startup = Some(Duration::from_millis(startup_ms));
                    break t.elapsed();
                }
                Some(EventPayload::McpServerFailed { message, .. }) => return Err(message.into()),
                Some(_) => {}
                None => return Err("the event stream ended".into()),
            }
        }
    } else {
        t.elapsed()
    };
    rt.delete_session(&id).await?;
    Ok((elapsed, startup))
}

async fn bench() -> BenchResult<()> {
    let calls = env_usize("BENCH_CALLS", 300);
    let runs = env_usize("BENCH_STARTS", 15);
    let tmp = tempfile::tempdir()?;
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws)?;
    let server = ws.join("mcp-bench-server");
    std::fs::copy(std::env::current_exe()?, &server)?;
    let (with, without) = (tmp.path().join("with"), tmp.path().join("without"));
    write_bundle(&with, calls, true)?;
    write_bundle(&without, 0, false)?;
    let mut options =
        RuntimeOptions::new(std::path::PathBuf::from(env!("CARGO_BIN_EXE_service-rs")));
    options.prestart_sandboxes = false;
    let rt = ServiceRuntime::new(ServiceHome::new(tmp.path().join("home")), options);

    // One warm-up turn, so the first spawn's page cache misses are not counted.
    confined(&rt, with.to_str().unwrap_or_default(), &ws).await?;
    let sandboxed = confined(&rt, with.to_str().unwrap_or_default(), &ws).await?;
    let baseline = direct(&server, calls).await?;
    let (c, d) = (median(sandboxed.clone()), median(baseline.clone()));
    println!("MCP tool call round trip, {calls} calls each");
    println!(
        "  confined, through service-rs (event to event)  median {:.3} ms",
        ms(c)
    );
    println!(
        "  direct rmcp client on the host                 median {:.3} ms",
        ms(d)
    );
    println!(
        "  added by service-rs                            {:.3} ms",
        ms(c.saturating_sub(d))
    );

    let mut plain = Vec::new();
    let mut served = Vec::new();
    let mut startup = Vec::new();
    for _ in 0..runs {
        plain.push(
            starts(&rt, without.to_str().unwrap_or_default(), &ws, false)
                .await?
                .0,
        );
        let (t, s) = starts(&rt, with.to_str().unwrap_or_default(), &ws, true).await?;
        served.push(t);
        startup.extend(s);
    }
    println!("Worker start, {runs} sessions each");
    println!(
        "  without MCP servers                            median {:.2} ms",
        ms(median(plain.clone()))
    );
    println!(
        "  with one stdio server, until its tools listed   median {:.2} ms",
        ms(median(served.clone()))
    );
    println!(
        "  the server's startup_ms (spawn to tool list)   median {:.2} ms",
        ms(median(startup))
    );
    rt.shutdown("bench done").await;
    Ok(())
}

fn main() -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if std::env::var_os(SERVER_ENV).is_some() {
        return runtime.block_on(async {
            let server = Echo.serve(rmcp::transport::stdio()).await?;
            server.waiting().await?;
            Ok(())
        });
    }
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    runtime.block_on(bench())
}
