//! `service-rs migrate`: the command that brings a shared database's schema to this release's, or with
//! `--status` says where it is and with `--dry-run` prints what it would apply, without writing. Other commands
//! that open the database never change its schema (`serve` only with `--migrate`).

use std::path::PathBuf;
use std::process::ExitCode;

use service_supervisor::runtime::store::postgres::{self, Schema};

/// `service-rs migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The PostgreSQL database shared by the `serve` nodes (SERVICE_STORE_URL_FILE names a file holding it).
    #[arg(
        long,
        env = "SERVICE_STORE_URL",
        value_name = "postgres://USER@HOST:PORT/DB",
        hide_env_values = true
    )]
    store: String,
    /// A PEM file of the CA that signed the database's certificate.
    #[arg(long, env = "SERVICE_STORE_CA", value_name = "PEM")]
    store_ca: Option<PathBuf>,
    /// Say which versions are applied and which this release would apply, and change nothing: exit 0 when none is
    /// pending, 1 otherwise.
    #[arg(long, conflicts_with = "dry_run")]
    status: bool,
    /// Print the SQL of the migrations this release would apply, and change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Runs `migrate`.
pub fn run(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    super::tokio()?.block_on(async move {
        let writes = !(args.status || args.dry_run);
        let schema = if writes { Schema::Migrate } else { Schema::Leave };
        let store =
            super::store_open::open("migrate", &args.store, args.store_ca.as_deref(), schema)
                .await?;
        let status = store.schema_status().await?;
        let at = status.applied.iter().max().copied().unwrap_or(0);
        let known = status.known;
        if writes {
            match at > known {
                true => println!(
                    "the schema is at version {at}, newer than this release's ({known}), and still serves it: \
                     nothing to apply"
                ),
                false => println!("the schema is at version {at}, this release's"),
            }
            return Ok(ExitCode::SUCCESS);
        }
        if args.dry_run {
            for v in &status.pending {
                println!(
                    "-- schema version {v}\n{}",
                    postgres::sql_of(*v).unwrap_or_default().trim_end()
                );
            }
            if status.pending.is_empty() {
                println!("-- the schema is at version {at}: nothing to apply");
            }
            return Ok(ExitCode::SUCCESS);
        }
        if at > known {
            return Ok(match &status.runs_here {
                Ok(()) => {
                    println!(
                        "the schema is at version {at}, newer than this release's ({known}), and still serves it: \
                         nothing to apply"
                    );
                    ExitCode::SUCCESS
                }
                Err(why) => {
                    println!("{why}");
                    ExitCode::FAILURE
                }
            });
        }
        if status.pending.is_empty() {
            println!("the schema is at version {at}, this release's: nothing to apply");
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "the schema is at version {at}; this release would apply {}: run `service-rs migrate` without --status",
            status
                .pending
                .iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(ExitCode::FAILURE)
    })
}
