//! `service-rs usage`: what tenants spent (tokens, turns, tool calls, time and, with prices in config.toml, cost),
//! from the local store's ledger or over `--remote`.

use std::process::ExitCode;

use anyhow::Context;
use service_supervisor::tenancy::usage::{self, GroupBy, UsageReport, Window};
use service_supervisor::ServiceHome;

use super::remote::{encode, Remote};
use super::tokens::StoreArgs;

/// Arguments of `usage`.
#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// Only this tenant (default: every tenant; over --remote a tenant's token reads its own).
    #[arg(long)]
    tenant: Option<String>,
    /// The first UTC day: 7d for seven days ago, or YYYY-MM-DD.
    #[arg(long, default_value = "30d")]
    since: String,
    /// The last UTC day, YYYY-MM-DD (default: today).
    #[arg(long)]
    until: Option<String>,
    /// A row per tenant, and per day, model or bundle (comma-separated for several).
    #[arg(long, default_value = "tenant")]
    group_by: String,
    /// Print JSON: {"rows": [...]}, as GET /usage answers.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

impl UsageArgs {
    /// Checks the days and the grouping before anything is read.
    fn window(&self) -> anyhow::Result<Window> {
        Window::parse(
            Some(&self.since),
            self.until.as_deref(),
            Some(&self.group_by),
        )
        .map_err(anyhow::Error::msg)
    }
}

/// Reports from the local store's ledger, priced by its config.toml.
pub fn run(home: ServiceHome, args: UsageArgs) -> anyhow::Result<ExitCode> {
    let window = args.window()?;
    let prices = service_supervisor::config_file::load(home.root())?.prices;
    let report = super::tokio()?.block_on(async {
        let dir = super::tokens::local(&home, &args.store).await?;
        let report = usage::read_report(&*dir, &window, args.tenant.as_deref(), &prices).await?;
        anyhow::Ok(report)
    })?;
    print(&report, &window.by, args.json)
}

/// Reports from a server's ledger.
pub fn run_remote(remote: Remote, args: UsageArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.store.store.is_none(),
        "--store names a database on this machine's side; with --remote the server uses its own store"
    );
    let window = args.window()?;
    let mut path = format!(
        "/usage?since={}&group_by={}",
        encode(&args.since),
        encode(&args.group_by)
    );
    if let Some(until) = &args.until {
        path.push_str(&format!("&until={}", encode(until)));
    }
    if let Some(tenant) = &args.tenant {
        path.push_str(&format!("&tenant={}", encode(tenant)));
    }
    let report: UsageReport = super::tokio()?.block_on(async {
        let answer = remote
            .call(reqwest::Method::GET, &path, None)
            .await
            .context("reading the usage ledger")?;
        anyhow::Ok(serde_json::from_value(answer)?)
    })?;
    print(&report, &window.by, args.json)
}

fn print(report: &UsageReport, by: &[GroupBy], json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
        return Ok(ExitCode::SUCCESS);
    }
    if report.rows.is_empty() {
        eprintln!("no usage recorded in those days");
        return Ok(ExitCode::SUCCESS);
    }
    let costs = report.rows.iter().any(|r| r.cost_usd.is_some());
    let mut head = vec!["TENANT"];
    for (g, name) in [
        (GroupBy::Day, "DAY"),
        (GroupBy::Model, "MODEL"),
        (GroupBy::Bundle, "BUNDLE"),
    ] {
        if by.contains(&g) {
            head.push(name);
        }
    }
    let keys = head.len();
    head.extend([
        "INPUT",
        "OUTPUT",
        "CACHED",
        "REASONING",
        "CALLS",
        "TURNS",
        "TOOLS",
        "WALL_S",
        "CPU_S",
    ]);
    if costs {
        head.push("COST_USD");
    }
    let mut lines = vec![head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for r in &report.rows {
        let s = &r.spent;
        let mut line = vec![r.tenant.clone()];
        line.extend([&r.day, &r.model, &r.bundle].into_iter().flatten().cloned());
        line.extend(
            [
                s.input_tokens,
                s.output_tokens,
                s.cached_tokens,
                s.reasoning_tokens,
                s.model_calls,
                s.turns,
                s.tool_calls,
            ]
            .map(|n| n.to_string()),
        );
        line.push(format!("{:.1}", s.wall_ms as f64 / 1000.0));
        line.push(format!("{:.1}", s.sandbox_cpu_ms as f64 / 1000.0));
        if costs {
            line.push(r.cost_usd.map_or("-".into(), |c| format!("{c:.4}")));
        }
        lines.push(line);
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    for line in lines {
        let cells: Vec<String> = line
            .iter()
            .enumerate()
            .map(|(i, c)| match i < keys {
                true => format!("{c:<w$}", w = widths[i]),
                false => format!("{c:>w$}", w = widths[i]),
            })
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
    Ok(ExitCode::SUCCESS)
}
