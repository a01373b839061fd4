//! ACP benchmark: `cargo bench -p service-supervisor --bench acp`.
//!
//! The time from `session/prompt` to the first `agent_message_chunk`, and to the prompt's response, as an editor
//! sees them: `service-rs acp` runs as its own process and is spoken to over its stdin and stdout with JSON-RPC
//! lines. The baseline is the same turn of the same scripted bundle run in-process on a `ServiceRuntime` over the
//! same store, from `start_turn` to the first `agent_message_delta` and to the turn's end as a subscriber sees
//! them. Both sessions keep a warm sandboxed worker; their turns are interleaved, `BENCH_TURNS` (default 200) each.
//! Reported: the medians and the difference, which is what the ACP front end adds.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{EventPayload, Task, TurnOverrides};
use service_supervisor::{RuntimeOptions, ServiceHome, ServiceRuntime};

#[path = "common/stats.rs"]
mod stats;
use stats::env_or;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const BIN: &str = env!("CARGO_BIN_EXE_service-rs");

fn write_bundle(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("resources"))?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "acp-bench", version: "1.0.0", tools: ["Bash"], sandbox: { mode: "workspace_write" } }"#,
    )?;
    std::fs::write(
        dir.join("agent.yaml"),
        "model: { provider: scripted, name: bench, config: { script: resources/script.json5 } }\n",
    )?;
    std::fs::write(
        dir.join("resources/script.json5"),
        r#"{turns: [{replies: [{text: "the answer is ok"}]}]}"#,
    )
}

/// `service-rs acp` on pipes.
struct Agent {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl Agent {
    fn start(home: &Path, ws: &Path) -> BenchResult<Agent> {
        let mut child = Command::new(BIN)
            .args(["acp", "--bundle", "local/acp-bench:1.0.0"])
            .env("SERVICE_HOME", home)
            .current_dir(ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Agent {
            child,
            out,
            next_id: 0,
        })
    }

    fn send(&mut self, method: &str, params: Value) -> BenchResult<u64> {
        self.next_id += 1;
        let stdin = self.child.stdin.as_mut().ok_or("no stdin")?;
        let frame =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        writeln!(stdin, "{frame}")?;
        stdin.flush()?;
        Ok(self.next_id)
    }

    fn frame(&mut self) -> BenchResult<Value> {
        let mut line = String::new();
        if self.out.read_line(&mut line)? == 0 {
            return Err("the agent closed its stdout".into());
        }
        Ok(serde_json::from_str(&line)?)
    }

    fn call(&mut self, method: &str, params: Value) -> BenchResult<Value> {
        let id = self.send(method, params)?;
        loop {
            let frame = self.frame()?;
            if frame["id"] == id {
                return Ok(frame);
            }
        }
    }

    /// One prompt: (to the first answer chunk, to the response).
    fn turn(&mut self, session: &str) -> BenchResult<(Duration, Duration)> {
        let began = Instant::now();
        let id = self.send(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
        )?;
        let mut first = None;
        loop {
            let frame = self.frame()?;
            if first.is_none()
                && frame["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            {
                first = Some(began.elapsed());
            }
            if frame["id"] == id {
                if frame["result"]["stopReason"] != "end_turn" {
                    return Err(format!("the prompt ended {frame}").into());
                }
                return Ok((first.ok_or("no answer chunk")?, began.elapsed()));
            }
        }
    }
}

/// The same turn in-process: (to the first delta, to the turn's end).
async fn in_process(rt: &ServiceRuntime, id: &str) -> BenchResult<(Duration, Duration)> {
    let mut events = rt.subscribe_session(id).await?;
    let began = Instant::now();
    let pending = rt
        .start_turn(id, Task::new("go"), TurnOverrides::default())
        .await?;
    let mut first = None;
    while let Some(msg) = events.next().await {
        if first.is_none() && matches!(msg.payload, EventPayload::AgentMessageDelta { .. }) {
            first = Some(began.elapsed());
        }
        if msg.payload.ends_turn() && msg.payload.turn_id() == Some(pending.turn_id.as_str()) {
            break;
        }
    }
    Ok((first.ok_or("no answer delta")?, began.elapsed()))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn bench() -> BenchResult<()> {
    let turns: usize = env_or("BENCH_TURNS", 200);
    let tmp = tempfile::tempdir()?;
    let (home, ws, src) = (
        tmp.path().join("home"),
        tmp.path().join("ws"),
        tmp.path().join("bundle"),
    );
    std::fs::create_dir_all(&ws)?;
    write_bundle(&src)?;
    let built = Command::new(BIN)
        .args(["build", src.to_str().unwrap_or_default()])
        .env("SERVICE_HOME", &home)
        .output()?;
    if !built.status.success() {
        return Err(String::from_utf8_lossy(&built.stderr).into_owned().into());
    }
    let mut agent = Agent::start(&home, &ws)?;
    agent.call("initialize", json!({"protocolVersion": 1}))?;
    let new = agent.call("session/new", json!({"cwd": ws, "mcpServers": []}))?;
    let session = new["result"]["sessionId"]
        .as_str()
        .ok_or_else(|| format!("no session: {new}"))?
        .to_string();
    let rt = ServiceRuntime::new(ServiceHome::new(&home), RuntimeOptions::new(BIN.into()));
    let id = rt
        .create_session("local/acp-bench:1.0.0", Some(&ws))
        .await?
        .id;
    // Warm-up: both workers started, the page cache warm.
    for _ in 0..3 {
        agent.turn(&session)?;
        in_process(&rt, &id).await?;
    }
    let (mut acp_first, mut acp_all, mut rt_first, mut rt_all) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..turns {
        let (f, a) = agent.turn(&session)?;
        acp_first.push(f);
        acp_all.push(a);
        let (f, a) = in_process(&rt, &id).await?;
        rt_first.push(f);
        rt_all.push(a);
    }
    drop(agent.child.stdin.take());
    agent.child.wait()?;
    rt.shutdown("bench done").await;
    let (af, aa, rf, ra) = (
        median(acp_first),
        median(acp_all),
        median(rt_first),
        median(rt_all),
    );
    println!("ACP prompt of a scripted bundle in a sandbox, {turns} turns each, interleaved");
    println!("                                 first answer chunk   whole turn");
    println!(
        "  service-rs acp (JSON-RPC, stdio)   median {:.3} ms   {:.3} ms",
        ms(af),
        ms(aa)
    );
    println!(
        "  in-process ServiceRuntime          median {:.3} ms   {:.3} ms",
        ms(rf),
        ms(ra)
    );
    println!(
        "  added by ACP                              {:.3} ms   {:.3} ms",
        ms(af) - ms(rf),
        ms(aa) - ms(ra)
    );
    Ok(())
}

fn main() -> BenchResult<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(bench())
}
