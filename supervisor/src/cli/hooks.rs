//! `hooks list` and `hooks trust`: what would run in a session here, from where, and whether it is trusted.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use service_supervisor::bundle;
use service_supervisor::home::ServiceHome;
use service_supervisor::hooks::{self, ProjectHooks};

use super::complete;

/// Arguments of `hooks`.
#[derive(Debug, clap::Args)]
pub struct HooksArgs {
    #[command(subcommand)]
    command: HooksCommand,
}

#[derive(Debug, clap::Subcommand)]
enum HooksCommand {
    /// Show the hooks a session of BUNDLE in the directory would run: the operator's (config.toml), the
    /// bundle's, then the project's `.service/hooks.json`, and whether that file is trusted.
    List {
        /// Bundle reference (default: default_bundle, else the built-in coding agent).
        #[arg(add = complete::bundles())]
        bundle_ref: Option<String>,
        /// The project directory (default: this one).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Trust the project's `.service/hooks.json` as it is now; a later change turns its hooks off until it is
    /// trusted again.
    Trust {
        /// The project directory (default: this one).
        #[arg(long)]
        cwd: Option<PathBuf>,
    },
}

pub fn run(home: &ServiceHome, args: HooksArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        HooksCommand::List {
            bundle_ref,
            cwd,
            json,
        } => list(home, bundle_ref, &dir(cwd)?, json),
        HooksCommand::Trust { cwd } => trust(home, &dir(cwd)?),
    }
}

fn dir(cwd: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match cwd {
        Some(d) => d,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    std::fs::canonicalize(&dir).with_context(|| format!("--cwd {}: not a directory", dir.display()))
}

fn list(
    home: &ServiceHome,
    bundle_ref: Option<String>,
    dir: &Path,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let reference = match bundle_ref {
        Some(r) => r,
        None => service_supervisor::config_file::load(home.root())?
            .default_bundle
            .unwrap_or_else(|| bundle::builtin::DEFAULT.to_string()),
    };
    let bundle = bundle::resolve(home, &reference)?;
    let own = bundle::hooks::specs(&bundle.agent.hooks, service_ipc::HookSource::Bundle);
    let project = hooks::project(home, dir);
    let hooks::Operator {
        sandbox: operator,
        host,
        only,
    } = hooks::operator(home);
    if json {
        let project_json = project.as_ref().map(|p| {
            serde_json::json!({
                "path": p.path,
                "digest": p.digest,
                "trusted": p.trusted,
                "hooks": p.hooks.as_ref().ok().map(|h| h.iter().map(spec_json).collect::<Vec<_>>()),
                "error": p.hooks.as_ref().err(),
            })
        });
        let value = serde_json::json!({
            "operator": operator.iter().map(spec_json).collect::<Vec<_>>(),
            "operator_on_host": host.iter().map(spec_json).collect::<Vec<_>>(),
            "operator_hooks_only": only,
            "bundle": bundle.reference(),
            "hooks": own.iter().map(spec_json).collect::<Vec<_>>(),
            "project": project_json,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    if !operator.is_empty() || !host.is_empty() || only {
        println!("operator (config.toml):");
        for h in &operator {
            println!("  {}", line(h));
        }
        for h in &host {
            println!("  {}, on the host", line(h));
        }
    }
    if only {
        println!(
            "operator_hooks_only is set: the bundle's and the project's hooks below do not run"
        );
    }
    println!("bundle {}:", bundle.reference());
    if own.is_empty() {
        println!("  no hooks");
    }
    for h in &own {
        println!("  {}", line(h));
    }
    match project {
        None => println!("project {}: no {}", dir.display(), hooks::PROJECT_FILE),
        Some(ProjectHooks {
            path,
            hooks: Err(e),
            ..
        }) => {
            println!("project {}: not read: {e}", path.display())
        }
        Some(ProjectHooks {
            path,
            hooks: Ok(list),
            trusted,
            ..
        }) => {
            let state = if trusted {
                "trusted, runs".to_string()
            } else {
                format!(
                    "not trusted, does not run (`service-rs hooks trust --cwd {}` trusts it as it is now)",
                    dir.display()
                )
            };
            println!("project {}: {state}", path.display());
            for h in &list {
                println!("  {}", line(h));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn line(h: &service_ipc::HookSpec) -> String {
    let matcher = h
        .matcher
        .as_deref()
        .map(|m| format!(" [{m}]"))
        .unwrap_or_default();
    let closed = if h.fail_closed { ", fail closed" } else { "" };
    format!(
        "{}{matcher}: {} ({} s{closed})",
        h.event,
        h.command,
        h.timeout_ms as f64 / 1000.0
    )
}

fn spec_json(h: &service_ipc::HookSpec) -> serde_json::Value {
    serde_json::json!({
        "event": h.event,
        "matcher": h.matcher,
        "command": h.command,
        "timeout_ms": h.timeout_ms,
        "fail_closed": h.fail_closed,
        "source": h.source,
    })
}

fn trust(home: &ServiceHome, dir: &Path) -> anyhow::Result<ExitCode> {
    let project = hooks::project(home, dir).with_context(|| {
        format!(
            "{} has no {}; write one first (the format is Claude Code's hooks settings)",
            dir.display(),
            hooks::PROJECT_FILE
        )
    })?;
    let list = project.hooks.map_err(anyhow::Error::msg)?;
    hooks::trust::trust(home, dir, &project.digest)
        .with_context(|| format!("cannot write the trust file in {}", home.root().display()))?;
    println!(
        "trusted {} ({} hooks, {}); sessions started in {} from now on run them",
        project.path.display(),
        list.len(),
        project.digest,
        dir.display()
    );
    for h in &list {
        println!("  {}", line(h));
    }
    Ok(ExitCode::SUCCESS)
}
