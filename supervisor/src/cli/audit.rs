//! `service-rs audit`: the audit log of changes to tokens, quotas and grants, from the local store (its files, or
//! `--store` a cluster's database) or over `--remote` with an operator's token.

use std::process::ExitCode;

use anyhow::Context;
use service_supervisor::tenancy::audit::AuditEntry;
use service_supervisor::ServiceHome;

use super::remote::Remote;
use super::tokens::StoreArgs;

/// Arguments of `audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// How many of the last entries.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
    limit: u16,
    /// Print JSON: the entries, oldest first, as GET /audit answers.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

/// Reads the local store's audit log.
pub fn run(home: ServiceHome, args: AuditArgs) -> anyhow::Result<ExitCode> {
    let entries = super::tokio()?.block_on(async {
        let dir = super::tokens::local(&home, &args.store).await?;
        anyhow::Ok(dir.audit_tail(usize::from(args.limit)).await?)
    })?;
    print(&entries, args.json)
}

/// Reads a server's audit log.
pub fn run_remote(remote: Remote, args: AuditArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.store.store.is_none(),
        "--store names a database on this machine's side; with --remote the server uses its own store"
    );
    let entries: Vec<AuditEntry> = super::tokio()?.block_on(async {
        let answer = remote
            .call(
                reqwest::Method::GET,
                &format!("/audit?limit={}", args.limit),
                None,
            )
            .await
            .context("reading the audit log")?;
        anyhow::Ok(serde_json::from_value(answer)?)
    })?;
    print(&entries, args.json)
}

fn print(entries: &[AuditEntry], json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(entries)?);
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        eprintln!("the audit log is empty: no token, quota or grant has changed");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<24} {:<16} {:<12} {:<18} {:<27} DETAIL",
        "AT", "ACTION", "OBJECT", "ACTOR", "CLIENT"
    );
    for e in entries {
        let actor = format!(
            "{}/{}",
            e.actor_tenant.as_deref().unwrap_or("-"),
            e.actor_token.as_deref().unwrap_or("-")
        );
        println!(
            "{:<24} {:<16} {:<12} {:<18} {:<27} {}",
            e.at,
            e.action,
            e.object,
            actor,
            e.client.as_deref().unwrap_or("-"),
            e.detail
        );
    }
    Ok(ExitCode::SUCCESS)
}
