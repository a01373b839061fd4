//! `service-rs mcp`: the MCP servers of a bundle (`tools`), and service-rs as an MCP server (`serve`).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use futures::StreamExt;
use service_ipc::EventPayload;
use service_supervisor::ServiceHome;

/// The `mcp` subcommands.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start a bundle's MCP servers in its sandbox and list the tools they offer.
    Tools {
        /// Bundle reference.
        #[arg(add = super::complete::bundles())]
        bundle_ref: String,
        /// Print the tools with their JSON Schemas as JSON.
        #[arg(long)]
        json: bool,
        /// The session's workspace, as `run --cwd` takes it.
        #[arg(long)]
        cwd: Option<std::path::PathBuf>,
        /// Run the worker and its servers on the host, without confinement.
        #[arg(long)]
        dangerous_sandbox_mode: bool,
    },
    /// Serve the installed bundles as MCP tools (list_bundles, run_bundle) on stdin and stdout.
    Serve {
        /// Allow every permission request of a run (once each); without it they are denied.
        #[arg(long)]
        approve: bool,
        /// Run every worker on the host, without confinement.
        #[arg(long)]
        dangerous_sandbox_mode: bool,
    },
}

/// Runs an `mcp` subcommand.
pub fn run(home: ServiceHome, command: McpCommand) -> anyhow::Result<ExitCode> {
    match command {
        McpCommand::Tools {
            bundle_ref,
            json,
            cwd,
            dangerous_sandbox_mode,
        } => {
            let rt = super::runtime(home, dangerous_sandbox_mode, false, &[], None)?;
            super::tokio()?.block_on(tools(rt, &bundle_ref, cwd.as_deref(), json))
        }
        McpCommand::Serve {
            approve,
            dangerous_sandbox_mode,
        } => {
            let rt = super::runtime(home, dangerous_sandbox_mode, true, &[], None)?;
            super::tokio()?.block_on(serve(rt, approve))
        }
    }
}

async fn tools(
    rt: service_supervisor::ServiceRuntime,
    bundle_ref: &str,
    cwd: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let record = rt.create_session(bundle_ref, cwd).await?;
    let bundle = rt.session_bundle(&record.id).await?;
    let declared = bundle.agent.mcp_servers.clone();
    if declared.is_empty() {
        rt.delete_session(&record.id).await?;
        eprintln!(
            "bundle {} declares no MCP servers (agent.yaml mcp_servers)",
            bundle.manifest.id
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut events = rt.subscribe_session(&record.id).await?;
    rt.start_worker(&record.id).await?;
    let wait = declared
        .values()
        .map(|s| {
            s.startup_timeout_ms
                .unwrap_or(service_supervisor::bundle::mcp::DEFAULT_STARTUP_MS)
        })
        .max()
        .unwrap_or(0);
    let mut reports: BTreeMap<String, Result<Vec<service_ipc::ToolSpec>, String>> = BTreeMap::new();
    let deadline = tokio::time::sleep(Duration::from_millis(wait + 5000));
    tokio::pin!(deadline);
    while reports.len() < declared.len() {
        let msg = tokio::select! {
            _ = &mut deadline => break,
            msg = events.next() => match msg { Some(m) => m, None => break },
        };
        match msg.payload {
            EventPayload::McpServerStarted { server, tools, .. } => {
                reports.insert(server, Ok(tools));
            }
            EventPayload::McpServerFailed {
                server,
                message,
                stderr_tail,
            } => {
                let tail = if stderr_tail.is_empty() {
                    String::new()
                } else {
                    format!("\n    stderr: {}", stderr_tail.replace('\n', "\n    "))
                };
                reports.insert(server, Err(format!("{message}{tail}")));
            }
            _ => {}
        }
    }
    rt.delete_session(&record.id)
        .await
        .context("removing the session the servers ran in")?;
    rt.shutdown("mcp tools done").await;
    let failed = reports.values().any(Result::is_err) || reports.len() < declared.len();
    if json {
        let out: BTreeMap<&String, serde_json::Value> = declared
            .keys()
            .map(|name| {
                let v = match reports.get(name) {
                    Some(Ok(tools)) => serde_json::json!({"tools": tools}),
                    Some(Err(e)) => serde_json::json!({"error": e}),
                    None => serde_json::json!({"error": "no report before the time-out"}),
                };
                (name, v)
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for name in declared.keys() {
            match reports.get(name) {
                Some(Ok(tools)) => {
                    println!("{name}: {} tools", tools.len());
                    for t in tools {
                        println!(
                            "  {}  {}",
                            t.name,
                            t.description.lines().next().unwrap_or("")
                        );
                    }
                }
                Some(Err(e)) => println!("{name}: failed: {e}"),
                None => println!("{name}: no report before the time-out"),
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn serve(rt: service_supervisor::ServiceRuntime, approve: bool) -> anyhow::Result<ExitCode> {
    use rmcp::ServiceExt;
    eprintln!(
        "service-rs: serving the installed bundles as MCP tools on stdio (permission requests: {})",
        if approve { "allowed" } else { "denied" }
    );
    let server = service_supervisor::mcp_server::BundleServer::new(rt.clone(), approve)
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP handshake on stdio failed")?;
    let _ = server.waiting().await;
    rt.shutdown("mcp client gone").await;
    Ok(ExitCode::SUCCESS)
}
