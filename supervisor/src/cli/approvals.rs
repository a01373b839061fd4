//! `service-rs approvals`: the approvals kept "always in this project" (see `runtime::project_rules`), listed and
//! removed per project directory, for the local commands (the default tenant).

use std::path::PathBuf;
use std::process::ExitCode;

use service_supervisor::runtime::project_rules;
use service_supervisor::tenancy::DEFAULT_TENANT;
use service_supervisor::ServiceHome;

/// Arguments of `approvals`; without a subcommand it lists them.
#[derive(Debug, clap::Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    command: Option<ApprovalsCommand>,
    /// The project directory (default: the current one).
    #[arg(long, global = true, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Print JSON instead of lines.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum ApprovalsCommand {
    /// List the project's kept approvals, numbered.
    List,
    /// Remove the kept approval numbered N (as `list` numbers them).
    Remove {
        /// Its number.
        n: usize,
    },
    /// Remove every kept approval of the project.
    Clear,
}

pub fn run(home: &ServiceHome, args: ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let dir = match &args.cwd {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let dir = std::fs::canonicalize(&dir)
        .map_err(|e| anyhow::anyhow!("--cwd {}: not a directory ({e})", dir.display()))?;
    match args.command.unwrap_or(ApprovalsCommand::List) {
        ApprovalsCommand::List => {
            let kept = project_rules::load(home, DEFAULT_TENANT, &dir)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&kept.rules)?);
            } else if kept.rules.is_empty() {
                println!(
                    "No approvals are kept for {}; answer a question with \"always in this project\" to keep one.",
                    dir.display()
                );
            } else {
                for (i, r) in kept.rules.iter().enumerate() {
                    println!("{:>3}  {}  (kept {})", i + 1, r.rule, r.added_at);
                }
            }
        }
        ApprovalsCommand::Remove { n } => {
            let removed = project_rules::change(home, DEFAULT_TENANT, &dir, |rules| {
                (n >= 1 && n <= rules.len()).then(|| rules.remove(n - 1))
            })?;
            match removed {
                Some(r) => println!("removed {} from {}", r.rule, dir.display()),
                None => anyhow::bail!(
                    "no approval numbered {n} is kept for {}; `service-rs approvals` lists them",
                    dir.display()
                ),
            }
        }
        ApprovalsCommand::Clear => {
            let count = project_rules::change(home, DEFAULT_TENANT, &dir, |rules| {
                std::mem::take(rules).len()
            })?;
            println!("removed {count} approvals kept for {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
