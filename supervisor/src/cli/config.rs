//! `service-rs config`: reads and edits the user's defaults in `$SERVICE_HOME/config.toml`.

use std::process::ExitCode;

use service_supervisor::config_file::{self, KEYS};
use service_supervisor::ServiceHome;

/// `config` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Print every key with its value (or `(unset)`) and what it takes.
    List,
    /// Print one key's value; exit 1 when it is not set.
    Get {
        /// default_bundle, default_model, approvals or pass_env.
        key: String,
    },
    /// Set a key, keeping the file's comments and other settings.
    Set {
        /// default_bundle, default_model, approvals or pass_env.
        key: String,
        /// The value (pass_env: comma-separated names).
        value: String,
    },
    /// Remove a key, so that its default applies.
    Unset {
        /// default_bundle, default_model, approvals or pass_env.
        key: String,
    },
}

pub fn run(home: &ServiceHome, command: ConfigCommand) -> anyhow::Result<ExitCode> {
    let root = home.root();
    match command {
        ConfigCommand::List => {
            println!("# {}", config_file::path(root).display());
            for (key, takes) in KEYS {
                let value = config_file::get(root, key)?.unwrap_or_else(|| "(unset)".into());
                println!("{key} = {value}    # {takes}");
            }
        }
        ConfigCommand::Get { key } => match config_file::get(root, &key)? {
            Some(value) => println!("{value}"),
            None => return Ok(ExitCode::FAILURE),
        },
        ConfigCommand::Set { key, value } => {
            config_file::set(root, &key, Some(&value))?;
            println!("{key} = {value}");
        }
        ConfigCommand::Unset { key } => {
            config_file::set(root, &key, None)?;
            println!("{key} unset");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The user's defaults for `run` and `tui`: a store without a readable file has none, with a warning.
pub(super) fn defaults(home: &ServiceHome) -> anyhow::Result<config_file::ConfigFile> {
    Ok(config_file::load(home.root())?)
}
