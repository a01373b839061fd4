//! `service-rs acp`: an Agent Client Protocol agent on stdin and stdout, over the local runtime or, with
//! `--remote`, over a server. stdout carries protocol frames only; logs go to stderr.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use service_ipc::{ApprovalDecision, EventMsg, Task, TurnOverrides};
use service_supervisor::bundle::mcp::McpServerSpec;
use service_supervisor::bundle::BundleInfo;
use service_supervisor::facade::acp::{self, AcpOptions};
use service_supervisor::facade::sessions::Result;
use service_supervisor::facade::{FacadeError, Sessions};
use service_supervisor::runtime::{EventStream, SessionRecord};
use service_supervisor::ServiceHome;

use super::backend::Backend;
use super::remote::Remote;

/// `service-rs acp` options.
#[derive(Debug, clap::Args)]
pub struct AcpArgs {
    /// The bundle every new session runs; default: `default_bundle` of $SERVICE_HOME/config.toml, else builtin/coder.
    #[arg(long, value_name = "REF", add = super::complete::bundles())]
    bundle: Option<String>,
    /// Run every worker on the host, without confinement.
    #[arg(long)]
    dangerous_sandbox_mode: bool,
}

/// Serves ACP over the runtime in this process.
pub fn run(home: ServiceHome, args: AcpArgs) -> anyhow::Result<ExitCode> {
    let options = options(Some(&home), args.bundle)?;
    let rt = super::runtime(home, args.dangerous_sandbox_mode, true, &[], None)?;
    super::tokio()?.block_on(serve(std::sync::Arc::new(rt), options))
}

/// Serves ACP over a server's sessions.
pub fn run_remote(remote: Remote, args: AcpArgs) -> anyhow::Result<ExitCode> {
    if args.dangerous_sandbox_mode {
        anyhow::bail!("--dangerous-sandbox-mode applies to local workers; the server decides how it confines its own");
    }
    let home = ServiceHome::from_env();
    let options = options(home.as_ref(), args.bundle)?;
    super::tokio()?.block_on(serve(
        std::sync::Arc::new(RemoteSessions(Backend::Remote(remote))),
        options,
    ))
}

fn options(home: Option<&ServiceHome>, bundle: Option<String>) -> anyhow::Result<AcpOptions> {
    let config = match home {
        Some(home) => service_supervisor::config_file::load(home.root())?,
        None => Default::default(),
    };
    Ok(AcpOptions {
        bundle: bundle
            .or(config.default_bundle)
            .or_else(|| Some(service_supervisor::bundle::builtin::DEFAULT.to_string())),
        approvals: config.approvals,
    })
}

async fn serve(
    sessions: std::sync::Arc<dyn Sessions>,
    options: AcpOptions,
) -> anyhow::Result<ExitCode> {
    acp::serve(sessions, options, agent_client_protocol::Stdio::new())
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))
        .context("the ACP connection on stdio failed")?;
    Ok(ExitCode::SUCCESS)
}

/// A server's sessions, through the same client as `--remote run`.
struct RemoteSessions(Backend);

fn remote_error(e: anyhow::Error) -> FacadeError {
    FacadeError::new("remote", format!("{e:#}"))
}

#[async_trait::async_trait]
impl Sessions for RemoteSessions {
    async fn create(
        &self,
        bundle_ref: &str,
        cwd: &Path,
        extra_mcp: BTreeMap<String, McpServerSpec>,
    ) -> Result<SessionRecord> {
        if !extra_mcp.is_empty() {
            return Err(FacadeError::new(
                "invalid_request",
                "a client's MCP servers join local sessions only; run `service-rs acp` without --remote to use them",
            ));
        }
        self.0
            .create_session(bundle_ref, Some(cwd))
            .await
            .map_err(remote_error)
    }

    async fn record(&self, id: &str) -> Result<SessionRecord> {
        self.0.session(id).await.map_err(remote_error)
    }

    async fn list(&self) -> Result<Vec<SessionRecord>> {
        self.0.sessions().await.map_err(remote_error)
    }

    async fn bundle(&self, reference: &str) -> Result<BundleInfo> {
        self.0.bundle(reference).await.map_err(remote_error)
    }

    async fn journal(&self, id: &str) -> Result<Vec<EventMsg>> {
        self.0.journal(id).await.map_err(remote_error)
    }

    async fn live_events(&self, id: &str) -> Result<EventStream> {
        self.0.events_after(id, None).await.map_err(remote_error)
    }

    async fn start_turn(&self, id: &str, task: Task) -> Result<String> {
        self.0
            .start_turn(id, task, TurnOverrides::default())
            .await
            .map_err(remote_error)
    }

    async fn resolve(&self, request_id: &str, decision: ApprovalDecision) -> Result<()> {
        self.0
            .resolve(request_id, decision)
            .await
            .map_err(remote_error)
    }

    async fn interrupt(&self, id: &str) -> Result<()> {
        self.0.interrupt(id).await.map_err(remote_error)
    }

    async fn discard_unused(&self, made: &[String]) {
        for id in made {
            let unused = self
                .0
                .find_session(id)
                .await
                .is_ok_and(|r| r.turn_count == 0 && r.active_turn.is_none());
            if unused {
                let _ = self.0.delete(id).await;
            }
        }
    }

    /// The sessions stay on the server; their workers are the server's to stop when idle.
    async fn shutdown(&self, _reason: &str) {}
}
