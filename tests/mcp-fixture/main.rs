//! An MCP server on stdio, built on rmcp, for the failure cases a third-party server rarely shows on demand. The
//! first argument picks the behaviour:
//! - `ok`: tools `echo {text}`, `whoami` (uid, cwd, environment names), `die` (exits mid-call), `sleep {ms}`,
//!   `huge` (20 MB of text), `grow` (adds the tool `late` and says so with `notifications/tools/list_changed`),
//!   `rich` (text, an image and structured content);
//! - `crash`: writes a line to stderr and exits before the handshake;
//! - `silent`: never answers the handshake;
//! - `http`: the `ok` tools over streamable HTTP on 127.0.0.1 at `/mcp`; prints the port on stdout.

// A test fixture: it panics on a broken set-up by design; the workspace lint is for library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};

#[derive(Clone, Default)]
struct Fixture {
    grown: Arc<AtomicBool>,
}

fn tool(name: &str, description: &str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    Tool::new(name.to_string(), description.to_string(), schema)
}

fn text(t: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResponse::Complete(CallToolResult::success(vec![
        ContentBlock::text(t.into()),
    ])))
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::default();
        info.capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let obj = json!({"type": "object", "properties": {}});
        let mut tools = vec![
            tool(
                "echo",
                "Echo the text back",
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            ),
            tool("whoami", "Where the server runs", obj.clone()),
            tool("die", "Exit in the middle of the call", obj.clone()),
            tool(
                "sleep",
                "Wait ms milliseconds",
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
            ),
            tool("huge", "20 MB of text", obj.clone()),
            tool("grow", "Add the tool late", obj.clone()),
            tool("rich", "Text, an image and structured content", obj.clone()),
            tool(
                "probe",
                "Try to reach the host's loopback port, the other processes and their keys",
                json!({"type": "object", "properties": {"port": {"type": "integer"}}}),
            ),
        ];
        if self.grown.load(Ordering::SeqCst) {
            tools.push(tool("late", "Added by grow", obj));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        match request.name.as_ref() {
            "echo" => text(format!(
                "echo: {}",
                args["text"].as_str().unwrap_or_default()
            )),
            "whoami" => {
                let env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
                let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                let field = |name: &str| {
                    status
                        .lines()
                        .find(|l| l.starts_with(name))
                        .unwrap_or_default()
                        .to_string()
                };
                text(
                    json!({
                        "uid": field("Uid:"),
                        "seccomp": field("Seccomp:"),
                        "pid": std::process::id(),
                        "cwd": std::env::current_dir().unwrap().display().to_string(),
                        "env": env,
                        "home_visible": std::path::Path::new("/root").exists(),
                    })
                    .to_string(),
                )
            }
            "die" => {
                eprintln!("fixture: dying mid-call as asked");
                std::process::exit(3)
            }
            "sleep" => {
                tokio::time::sleep(std::time::Duration::from_millis(
                    args["ms"].as_u64().unwrap_or(0),
                ))
                .await;
                text("slept")
            }
            "huge" => text("x".repeat(20 * 1024 * 1024)),
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("grown")
            }
            "late" => text("late tool here"),
            "probe" => {
                // What a hostile server would try: the host's loopback (the API, databases), the worker and the
                // supervisor (their descriptors, their environments with keys).
                let port = args["port"].as_u64().unwrap_or(0) as u16;
                let loopback = std::net::TcpStream::connect_timeout(
                    &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                    std::time::Duration::from_secs(2),
                )
                .is_ok();
                // /proc is the sandbox's, so the worker's pid is listed; what matters is whether it can be entered.
                let me: u32 = std::fs::read_link("/proc/self")
                    .ok()
                    .and_then(|p| p.to_str()?.parse().ok())
                    .unwrap_or(0);
                let others: Vec<u32> = std::fs::read_dir("/proc")
                    .map(|d| {
                        d.flatten()
                            .filter_map(|e| e.file_name().to_str()?.parse().ok())
                            .filter(|p| *p != me)
                            .collect()
                    })
                    .unwrap_or_default();
                // The worker (and the reapers forked from it) as the escape suite finds it: by its command line,
                // `<binary> worker --ipc-fd ...` (bwrap's `/run/service/worker`, or the host's binary under
                // Landlock).
                let workers: Vec<u32> = others
                    .iter()
                    .copied()
                    .filter(|p| {
                        std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                            let mut args = c.split(|b| *b == 0).skip(1);
                            args.next() == Some(b"worker") && args.next() == Some(b"--ipc-fd")
                        })
                    })
                    .collect();
                let fds: Vec<u32> = workers
                    .iter()
                    .copied()
                    .filter(|p| std::fs::read_link(format!("/proc/{p}/fd/0")).is_ok())
                    .collect();
                let secret = others.iter().chain([me].iter()).any(|p| {
                    std::fs::read(format!("/proc/{p}/environ"))
                        .is_ok_and(|e| String::from_utf8_lossy(&e).contains("sk-probe-secret"))
                });
                text(
                    json!({"loopback_connected": loopback, "workers": workers, "worker_fds_read": fds, "secret_found": secret})
                        .to_string(),
                )
            }
            "rich" => {
                let mut result = CallToolResult::success(vec![
                    ContentBlock::text("a chart:".to_string()),
                    ContentBlock::image("aGVsbG8=".to_string(), "image/png".to_string()),
                ]);
                result.structured_content = Some(json!({"points": [1, 2, 3]}));
                Ok(CallToolResponse::Complete(result))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    match std::env::args().nth(1).as_deref().unwrap_or("ok") {
        "crash" => {
            eprintln!("fixture: cannot start: missing configuration file /etc/fixture.toml");
            std::process::exit(2);
        }
        "silent" => loop {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        },
        "http" => {
            use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
            use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
            let service = StreamableHttpService::new(
                || Ok(Fixture::default()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a port");
            println!("{}", listener.local_addr().expect("its address").port());
            axum::serve(listener, router).await.expect("serving");
            return;
        }
        _ => {}
    }
    let server = Fixture::default()
        .serve(rmcp::transport::stdio())
        .await
        .expect("the MCP handshake");
    let _ = server.waiting().await;
}
