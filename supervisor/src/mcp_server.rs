//! service-rs as an MCP server (`service-rs mcp serve`, stdio): any MCP client can list the installed bundles and
//! run one on a prompt. A run is an ordinary session and turn of the runtime, confined as its bundle says. Nobody
//! is there to answer a permission request, so each is denied unless the server was started with `--approve`, and
//! the answer says which were denied and why.

use std::sync::Arc;

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use service_ipc::{ApprovalDecision, Task, TurnOverrides, TurnStatus};

use crate::runtime::ServiceRuntime;

/// The MCP server over a runtime.
#[derive(Clone)]
pub struct BundleServer {
    rt: ServiceRuntime,
    approve: bool,
}

impl BundleServer {
    /// Serves `rt`'s bundles; `approve` allows every permission request of the runs (once each).
    pub fn new(rt: ServiceRuntime, approve: bool) -> BundleServer {
        BundleServer { rt, approve }
    }

    fn list_bundles(&self) -> CallToolResult {
        let mut bundles = Vec::new();
        let mut skipped = 0;
        for loaded in crate::bundle::store::list(self.rt.home()).unwrap_or_default() {
            match loaded {
                Ok(b) => {
                    let info = b.info();
                    bundles.push(json!({
                        "reference": info.reference,
                        "name": info.name,
                        "description": info.description,
                        "model": format!("{}/{}", info.model.provider, info.model.name),
                    }))
                }
                Err(_) => skipped += 1,
            }
        }
        let text = if bundles.is_empty() {
            "No bundles are installed; install one with `service-rs build <dir>`.".to_string()
        } else {
            bundles
                .iter()
                .map(|b| {
                    format!(
                        "{} ({}): {}",
                        b["reference"].as_str().unwrap_or_default(),
                        b["model"].as_str().unwrap_or_default(),
                        b["description"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content =
            Some(json!({"bundles": bundles, "damaged_installs_skipped": skipped}));
        result
    }

    async fn run_bundle(&self, args: &Value) -> CallToolResult {
        let (Some(bundle), Some(prompt)) = (args["bundle"].as_str(), args["prompt"].as_str())
        else {
            return error(
                "run_bundle needs \"bundle\" (a reference from list_bundles) and \"prompt\"",
            );
        };
        // The directory the session works in: absolute, as the client's own working directory means nothing here.
        let cwd = match args["cwd"].as_str() {
            None => None,
            Some(dir) if std::path::Path::new(dir).is_absolute() => {
                Some(std::path::PathBuf::from(dir))
            }
            Some(dir) => {
                return error(format!(
                    "cwd must be an absolute directory path, e.g. /home/me/project; got \"{dir}\""
                ))
            }
        };
        if cwd.is_some() && args["session_id"].is_string() {
            return error("cwd applies to a new session; a continued one keeps its own directory");
        }
        let session_id = match args["session_id"].as_str() {
            Some(id) => match self.rt.get_session(id).await {
                Ok(record) => record.id,
                Err(e) => return error(format!("{e}")),
            },
            None => match self.rt.create_session(bundle, cwd.as_deref()).await {
                Ok(record) => record.id,
                Err(e) => return error(format!("{e}")),
            },
        };
        let mut events = match self.rt.subscribe_session(&session_id).await {
            Ok(events) => events,
            Err(e) => return error(format!("{e}")),
        };
        let pending = match self
            .rt
            .start_turn(&session_id, Task::new(prompt), TurnOverrides::default())
            .await
        {
            Ok(p) => p,
            Err(e) => return error(format!("{e}")),
        };
        let turn_id = pending.turn_id.clone();
        let decision = if self.approve {
            ApprovalDecision::AllowOnce
        } else {
            ApprovalDecision::Deny
        };
        let mut denied = Vec::new();
        while let Some(msg) = events.next().await {
            if let Some(asked) = crate::runtime::approvals::asked(&msg.payload) {
                if !self.approve {
                    denied.push(format!("{} {}", asked.tool, asked.summary));
                }
                let _ = self.rt.resolve_approval(&asked.request_id, decision).await;
            }
            if msg.payload.ends_turn() && msg.payload.turn_id() == Some(turn_id.as_str()) {
                break;
            }
        }
        let Ok(outcome) = pending.outcome.await else {
            return error("the turn ended without an outcome");
        };
        let note = if denied.is_empty() {
            String::new()
        } else {
            format!(
                "\n\n[denied: {}; nobody can approve requests here, start `service-rs mcp serve --approve` to allow them]",
                denied.join("; ")
            )
        };
        let structured = json!({
            "session_id": session_id,
            "turn_id": outcome.turn_id,
            "status": outcome.status,
            "denied": denied,
        });
        let mut result = match outcome.status {
            TurnStatus::Completed => CallToolResult::success(vec![ContentBlock::text(format!(
                "{}{note}",
                outcome.final_message
            ))]),
            _ => {
                let (code, message) = outcome
                    .error
                    .unwrap_or_else(|| ("failed".into(), "the turn failed".into()));
                CallToolResult::error(vec![ContentBlock::text(format!(
                    "the run failed ({code}): {message}{note}"
                ))])
            }
        };
        result.structured_content = Some(structured);
        result
    }
}

fn error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn tool(name: &str, description: &str, schema: Value) -> Tool {
    let schema = match schema {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    Tool::new(name.to_string(), description.to_string(), Arc::new(schema))
}

impl ServerHandler for BundleServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::default();
        info.capabilities = ServerCapabilities::builder().enable_tools().build();
        info.server_info.name = "service-rs".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        info.instructions = Some(
            "Run agent bundles installed in service-rs: list_bundles, then run_bundle with a reference and a prompt. \
             Pass the returned session_id to continue a conversation."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool("list_bundles", "List the agent bundles installed in service-rs.", json!({"type": "object", "properties": {}})),
            tool(
                "run_bundle",
                "Run an installed agent bundle on a prompt, in a sandboxed session, and return its answer.",
                json!({"type": "object", "properties": {
                    "bundle": {"type": "string", "description": "Bundle reference, as list_bundles gives it"},
                    "prompt": {"type": "string"},
                    "session_id": {"type": "string", "description": "Continue this session instead of starting one"},
                    "cwd": {"type": "string", "description": "Absolute path of the directory a new session works in (its sandbox sees it as /workspace); default: an empty directory of its own"}},
                    "required": ["bundle", "prompt"]}),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match request.name.as_ref() {
            "list_bundles" => self.list_bundles(),
            "run_bundle" => self.run_bundle(&args).await,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool named {other}; the tools are list_bundles and run_bundle"),
                    None,
                ))
            }
        };
        Ok(CallToolResponse::Complete(result))
    }
}
