//! service-rs as an Agent Client Protocol agent (`service-rs acp`): an editor runs any installed bundle in a
//! confined session over stdio, protocol version 1, through the `agent-client-protocol` crate.
//!
//! - [`session_setup`]: `session/new`, `load`, `resume`, `list`, `close` and the modes;
//! - [`turn`]: `session/prompt` and `session/cancel`, with permission questions;
//! - [`updates`]: journaled events as `session/update`s, for a live turn and for a replay alike.
//!
//! Tools always run in the sandbox. The client's file system and terminal capabilities are read but not used:
//! reading the editor's unsaved buffers or running commands in its terminal would step outside the sandbox.

mod session_setup;
mod turn;
mod updates;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthenticateRequest, AuthenticateResponse, CancelNotification,
    CloseSessionRequest, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, LoadSessionRequest, McpCapabilities, NewSessionRequest,
    PromptCapabilities, PromptRequest, ResumeSessionRequest, SessionCapabilities,
    SessionCloseCapabilities, SessionListCapabilities, SessionResumeCapabilities,
    SetSessionModeRequest,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Client, ConnectTo, ErrorCode};

use super::{FacadeError, Sessions};
use crate::config_file::Approvals;

/// JSON-RPC code of a failed turn or operation; the runtime's own code is in the error's `data.code`.
const RUNTIME_ERROR: i32 = -32099;

/// How `service-rs acp` was started.
#[derive(Debug, Clone, Default)]
pub struct AcpOptions {
    /// The bundle new sessions run (`--bundle`, else the configured default); None: `session/new` says how to set
    /// one.
    pub bundle: Option<String>,
    /// The mode new sessions start in, from the configured approvals.
    pub approvals: Approvals,
}

/// How permission questions of a session are answered: the ACP session modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every question goes to the client.
    #[default]
    Ask,
    /// Writes and edits inside the workspace are allowed; the rest goes to the client.
    AutoEdit,
    /// Every question is answered no without asking.
    ReadOnly,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Ask, Mode::AutoEdit, Mode::ReadOnly];

    fn id(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::AutoEdit => "auto-edit",
            Mode::ReadOnly => "read-only",
        }
    }

    fn parse(id: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.id() == id)
    }
}

impl From<Approvals> for Mode {
    fn from(a: Approvals) -> Mode {
        match a {
            Approvals::Ask => Mode::Ask,
            Approvals::AutoEdit => Mode::AutoEdit,
            Approvals::Deny => Mode::ReadOnly,
        }
    }
}

/// A session this connection opened (new, load or resume).
struct Open {
    /// The session's workspace on the host, where the editor has the files.
    host_cwd: PathBuf,
    state: Mutex<OpenState>,
}

#[derive(Default)]
struct OpenState {
    mode: Mode,
    /// Tools (or `network host`) the client rejected for the rest of the session.
    rejected: HashSet<String>,
    /// The bundle's skills, offered as slash commands.
    skills: Vec<String>,
    /// Wakes the running prompt's task when the client cancels it; None while no prompt runs.
    cancel: Option<Arc<tokio::sync::Notify>>,
}

/// The agent's state, shared by its handlers.
struct Acp {
    sessions: Arc<dyn Sessions>,
    options: AcpOptions,
    open: Mutex<HashMap<String, Arc<Open>>>,
    /// The sessions `session/new` made on this connection: those that never ran a turn go with it.
    made: Mutex<Vec<String>>,
}

impl Acp {
    fn opened(&self, id: &str) -> Result<Arc<Open>, agent_client_protocol::Error> {
        lock(&self.open).get(id).cloned().ok_or_else(|| {
            let mut e: agent_client_protocol::Error =
                agent_client_protocol::v1::schema::Error::session_not_found(id.to_string()).into();
            e.message = format!(
                "session \"{id}\" is not open on this connection; open it with session/new, session/load or \
                 session/resume"
            );
            e
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A runtime failure as a JSON-RPC error: the message says what to do, `data.code` is the runtime's code.
fn rpc_error(e: FacadeError) -> agent_client_protocol::Error {
    let code = match e.code.as_str() {
        "invalid_request" | "cwd_not_found" | "cwd_outside_workspace" | "invalid_bundle_ref" => {
            ErrorCode::INVALID_PARAMS
        }
        _ => ErrorCode::from(RUNTIME_ERROR),
    };
    agent_client_protocol::Error::new(code, e.message).data(serde_json::json!({"code": e.code}))
}

fn invalid_params(message: impl Into<String>) -> agent_client_protocol::Error {
    agent_client_protocol::Error::new(ErrorCode::INVALID_PARAMS, message.into())
}

/// Serves the ACP agent on `transport` until the client closes it, then stops every worker it started.
pub async fn serve(
    sessions: Arc<dyn Sessions>,
    options: AcpOptions,
    transport: impl ConnectTo<agent_client_protocol::Agent> + 'static,
) -> Result<(), agent_client_protocol::Error> {
    let acp = Arc::new(Acp {
        sessions: sessions.clone(),
        options,
        open: Mutex::new(HashMap::new()),
        made: Mutex::new(Vec::new()),
    });
    // Each handler holds its own handle on the state.
    let on = || acp.clone();
    let served = agent_client_protocol::Agent
        .v1()
        .name("service-rs")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx: ConnectionTo<Client>| {
                // Read, not used: tools stay in the sandbox (see the module doc).
                tracing::debug!(
                    fs_read = req.client_capabilities.fs.read_text_file,
                    fs_write = req.client_capabilities.fs.write_text_file,
                    terminal = req.client_capabilities.terminal,
                    "acp client capabilities"
                );
                responder.respond(initialize_response())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: AuthenticateRequest, responder, _cx: ConnectionTo<Client>| {
                // Local sessions need no authentication; a remote server's token comes from the usual places.
                responder.respond(AuthenticateResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let acp = on();
                async move |req: NewSessionRequest, responder, cx: ConnectionTo<Client>| {
                    acp.new_session(req, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let acp = on();
                async move |req: LoadSessionRequest, responder, cx: ConnectionTo<Client>| {
                    acp.load_session(req, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let acp = on();
                async move |req: ResumeSessionRequest, responder, cx: ConnectionTo<Client>| {
                    acp.resume_session(req, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let acp = on();
                async move |req: ListSessionsRequest, responder, _cx: ConnectionTo<Client>| {
                    acp.list_sessions(req, responder).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let acp = on();
                async move |req: CloseSessionRequest, responder, _cx: ConnectionTo<Client>| {
                    acp.close_session(req, responder).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let acp = on();
                async move |req: SetSessionModeRequest, responder, cx: ConnectionTo<Client>| {
                    acp.set_mode(req, responder, cx)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let acp = on();
                async move |req: PromptRequest, responder, cx: ConnectionTo<Client>| {
                    acp.prompt(req, responder, cx)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            {
                let acp = on();
                async move |note: CancelNotification, _cx: ConnectionTo<Client>| {
                    acp.cancel(&note.session_id.0).await;
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await;
    // The client has gone: no turn it started may outlive it, here or on a server.
    let running: Vec<String> = lock(&acp.open)
        .iter()
        .filter(|(_, open)| lock(&open.state).cancel.is_some())
        .map(|(id, _)| id.clone())
        .collect();
    for id in running {
        if let Err(e) = sessions.interrupt(&id).await {
            tracing::debug!(session = %id, "interrupt at exit: {e}");
        }
    }
    let made = std::mem::take(&mut *lock(&acp.made));
    sessions.discard_unused(&made).await;
    sessions.shutdown("acp client gone").await;
    served
}

fn initialize_response() -> InitializeResponse {
    InitializeResponse::new(agent_client_protocol::schema::ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
                .mcp_capabilities(McpCapabilities::new().http(true))
                .session_capabilities(
                    SessionCapabilities::new()
                        .list(SessionListCapabilities::new())
                        .resume(SessionResumeCapabilities::new())
                        .close(SessionCloseCapabilities::new()),
                ),
        )
        .agent_info(Implementation::new("service-rs", env!("CARGO_PKG_VERSION")))
}
