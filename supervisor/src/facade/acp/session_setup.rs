//! Opening sessions: `session/new` (a session of the chosen bundle in the editor's directory), `session/load` (a
//! journaled session replayed), `session/resume`, `session/list`, `session/close`, and the modes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    AvailableCommand, AvailableCommandsUpdate, CloseSessionRequest, CloseSessionResponse,
    CurrentModeUpdate, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, McpServer, NewSessionRequest, NewSessionResponse, ResumeSessionRequest,
    ResumeSessionResponse, SessionInfo, SessionMode, SessionModeState, SessionNotification,
    SessionUpdate, SetSessionModeRequest, SetSessionModeResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::Client;

use super::updates::Replay;
use super::{invalid_params, lock, rpc_error, Acp, Mode, Open, OpenState};
use crate::bundle::mcp::McpServerSpec;
use crate::runtime::SessionRecord;

type Reply = Result<(), agent_client_protocol::Error>;

impl Acp {
    pub(super) async fn new_session(
        self: &Arc<Self>,
        req: NewSessionRequest,
        responder: Responder<NewSessionResponse>,
        cx: ConnectionTo<Client>,
    ) -> Reply {
        let cwd = match checked_cwd(&req.cwd) {
            Ok(cwd) => cwd,
            Err(e) => return responder.respond_with_error(e),
        };
        let Some(bundle) = self.options.bundle.clone() else {
            return responder.respond_with_error(invalid_params(
                "no bundle to run: start the agent as `service-rs acp --bundle REF`, or set a default with \
                 `service-rs config set default_bundle REF`",
            ));
        };
        let servers = match client_servers(&req.mcp_servers) {
            Ok(s) => s,
            Err(e) => return responder.respond_with_error(e),
        };
        let record = match self.sessions.create(&bundle, &cwd, servers).await {
            Ok(r) => r,
            Err(e) => return responder.respond_with_error(rpc_error(e)),
        };
        let mode = Mode::from(self.options.approvals);
        self.keep_open(&record, mode);
        super::lock(&self.made).push(record.id.clone());
        responder.respond(NewSessionResponse::new(record.id.clone()).modes(modes(mode)))?;
        self.announce_commands(&record, &cx).await
    }

    pub(super) async fn load_session(
        self: &Arc<Self>,
        req: LoadSessionRequest,
        responder: Responder<LoadSessionResponse>,
        cx: ConnectionTo<Client>,
    ) -> Reply {
        let id = req.session_id.0.to_string();
        let record = match self.sessions.record(&id).await {
            Ok(r) => r,
            Err(e) => return responder.respond_with_error(rpc_error(e)),
        };
        if let Err(e) = same_project(&record, &req.cwd) {
            return responder.respond_with_error(e);
        }
        let events = match self.sessions.journal(&id).await {
            Ok(e) => e,
            Err(e) => return responder.respond_with_error(rpc_error(e)),
        };
        if !req.mcp_servers.is_empty() {
            tracing::info!(session = %id, "a loaded session keeps the MCP servers it was created with");
        }
        // The replay is sent before the response, as the protocol asks.
        let mut replay = Replay::new(PathBuf::from(&record.cwd));
        for msg in &events {
            for update in replay.updates(&msg.payload) {
                cx.send_notification(SessionNotification::new(id.clone(), update))?;
            }
        }
        let mode = Mode::from(self.options.approvals);
        self.keep_open(&record, mode);
        responder.respond(LoadSessionResponse::new().modes(modes(mode)))?;
        self.announce_commands(&record, &cx).await
    }

    pub(super) async fn resume_session(
        self: &Arc<Self>,
        req: ResumeSessionRequest,
        responder: Responder<ResumeSessionResponse>,
        cx: ConnectionTo<Client>,
    ) -> Reply {
        let record = match self.sessions.record(&req.session_id.0).await {
            Ok(r) => r,
            Err(e) => return responder.respond_with_error(rpc_error(e)),
        };
        if let Err(e) = same_project(&record, &req.cwd) {
            return responder.respond_with_error(e);
        }
        let mode = Mode::from(self.options.approvals);
        self.keep_open(&record, mode);
        responder.respond(ResumeSessionResponse::new().modes(modes(mode)))?;
        self.announce_commands(&record, &cx).await
    }

    pub(super) async fn list_sessions(
        &self,
        req: ListSessionsRequest,
        responder: Responder<ListSessionsResponse>,
    ) -> Reply {
        let records = match self.sessions.list().await {
            Ok(r) => r,
            Err(e) => return responder.respond_with_error(rpc_error(e)),
        };
        let sessions = records
            .into_iter()
            .filter(|r| req.cwd.as_deref().is_none_or(|c| Path::new(&r.cwd) == c))
            .map(|r| {
                SessionInfo::new(r.id, r.cwd)
                    .title(r.title)
                    .updated_at(r.updated_at)
            })
            .collect();
        responder.respond(ListSessionsResponse::new(sessions))
    }

    pub(super) async fn close_session(
        &self,
        req: CloseSessionRequest,
        responder: Responder<CloseSessionResponse>,
    ) -> Reply {
        let id = req.session_id.0.to_string();
        if let Err(e) = self.opened(&id) {
            return responder.respond_with_error(e);
        }
        self.cancel(&id).await;
        lock(&self.open).remove(&id);
        responder.respond(CloseSessionResponse::new())
    }

    pub(super) fn set_mode(
        &self,
        req: SetSessionModeRequest,
        responder: Responder<SetSessionModeResponse>,
        cx: ConnectionTo<Client>,
    ) -> Reply {
        let open = match self.opened(&req.session_id.0) {
            Ok(o) => o,
            Err(e) => return responder.respond_with_error(e),
        };
        let Some(mode) = Mode::parse(&req.mode_id.0) else {
            return responder.respond_with_error(invalid_params(format!(
                "no mode \"{}\"; the modes are ask, auto-edit and read-only",
                req.mode_id.0
            )));
        };
        lock(&open.state).mode = mode;
        cx.send_notification(SessionNotification::new(
            req.session_id,
            SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.id())),
        ))?;
        responder.respond(SetSessionModeResponse::new())
    }

    fn keep_open(&self, record: &SessionRecord, mode: Mode) {
        let open = Arc::new(Open {
            host_cwd: PathBuf::from(&record.cwd),
            state: std::sync::Mutex::new(OpenState {
                mode,
                ..OpenState::default()
            }),
        });
        lock(&self.open).entry(record.id.clone()).or_insert(open);
    }

    /// The bundle's skills, as slash commands: `/name` asks the agent to use that skill.
    async fn announce_commands(&self, record: &SessionRecord, cx: &ConnectionTo<Client>) -> Reply {
        let Ok(info) = self.sessions.bundle(&record.bundle_ref).await else {
            return Ok(());
        };
        if let Ok(open) = self.opened(&record.id) {
            lock(&open.state).skills = info.skills.clone();
        }
        let commands = info
            .skills
            .iter()
            .map(|skill| AvailableCommand::new(skill.clone(), format!("Use the {skill} skill")))
            .collect();
        cx.send_notification(SessionNotification::new(
            record.id.clone(),
            SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands)),
        ))
    }
}

/// The modes, with `current` selected.
fn modes(current: Mode) -> SessionModeState {
    let describe = |m: Mode| match m {
        Mode::Ask => "Ask before each action the bundle's rules mark `ask`",
        Mode::AutoEdit => "Allow writes and edits inside the workspace; ask for the rest",
        Mode::ReadOnly => {
            "Refuse every action that would ask; what the bundle allows outright still runs"
        }
    };
    SessionModeState::new(
        current.id(),
        Mode::ALL
            .into_iter()
            .map(|m| SessionMode::new(m.id(), m.id()).description(describe(m).to_string()))
            .collect(),
    )
}

/// Refuses to load or resume a session made in another directory than the editor's `cwd`: an editor open on one
/// project must not replay, or run turns in, another project's session.
fn same_project(
    record: &crate::runtime::record::SessionRecord,
    cwd: &Path,
) -> Result<(), agent_client_protocol::Error> {
    let given = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    if Path::new(&record.cwd) == given {
        return Ok(());
    }
    Err(invalid_params(format!(
        "session {} works in {}, not in {}; open that project to load it, or start a new session here",
        record.id,
        record.cwd,
        cwd.display()
    )))
}

/// The editor's `cwd`, checked: absolute, an existing directory, neither `/` nor the home directory.
fn checked_cwd(cwd: &Path) -> Result<PathBuf, agent_client_protocol::Error> {
    if !cwd.is_absolute() {
        return Err(invalid_params(format!(
            "cwd \"{}\" is not an absolute path; send the project's absolute directory",
            cwd.display()
        )));
    }
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => {
            let real = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
            match crate::sandbox::host_dir::too_broad(&real) {
                Some(what) => Err(invalid_params(format!(
                    "cwd \"{}\" is {what}: a session there would see all of it; open a project directory instead",
                    cwd.display()
                ))),
                None => Ok(cwd.to_path_buf()),
            }
        }
        Ok(_) => Err(invalid_params(format!(
            "cwd \"{}\" is not a directory",
            cwd.display()
        ))),
        Err(e) => Err(invalid_params(format!(
            "cwd \"{}\" cannot be used: {e}",
            cwd.display()
        ))),
    }
}

/// The client's MCP servers as agent.yaml entries; they then run in the session's sandbox like the bundle's own.
fn client_servers(
    servers: &[McpServer],
) -> Result<BTreeMap<String, McpServerSpec>, agent_client_protocol::Error> {
    let mut specs = BTreeMap::new();
    for server in servers {
        let (name, spec) =
            match server {
                McpServer::Stdio(s) => (
                    s.name.clone(),
                    McpServerSpec {
                        command: Some(s.command.display().to_string()),
                        args: s.args.clone(),
                        env: s
                            .env
                            .iter()
                            .map(|v| (v.name.clone(), v.value.clone()))
                            .collect(),
                        ..McpServerSpec::default()
                    },
                ),
                McpServer::Http(h) => (
                    h.name.clone(),
                    McpServerSpec {
                        url: Some(h.url.clone()),
                        headers: h
                            .headers
                            .iter()
                            .map(|v| (v.name.clone(), v.value.clone()))
                            .collect(),
                        ..McpServerSpec::default()
                    },
                ),
                _ => return Err(invalid_params(
                    "only stdio and HTTP MCP servers are supported (mcpCapabilities.sse is false)",
                )),
            };
        if specs.insert(name.clone(), spec).is_some() {
            return Err(invalid_params(format!(
                "two MCP servers are named \"{name}\""
            )));
        }
    }
    Ok(specs)
}
