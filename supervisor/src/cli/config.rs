//! `service-rs config`: reads and edits the user's defaults in `$SERVICE_HOME/config.toml`.

use std::process::ExitCode;

use service_supervisor::config_file::{self, KEYS};
use service_supervisor::ServiceHome;

/// `config` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Print every key with its value (or `(unset)`) and what it takes.
    List,
    /// As `list`; with --effective, also every `serve` option as a node started here would take it, and from where
    /// (its environment variable, the [serve] section, or its default), secrets masked.
    Show {
        /// Add `serve`'s options in force.
        #[arg(long)]
        effective: bool,
        /// The file whose [serve] section `serve --config FILE` would read.
        #[arg(long, value_name = "FILE", requires = "effective")]
        config: Option<std::path::PathBuf>,
    },
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
        ConfigCommand::List => list(root)?,
        ConfigCommand::Show { effective, config } => {
            list(root)?;
            if effective {
                serve_options(root, config)?;
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

/// Every key of config.toml with its value and what it takes.
fn list(root: &std::path::Path) -> anyhow::Result<()> {
    println!("# {}", config_file::path(root).display());
    for (key, takes) in KEYS {
        let value = config_file::get(root, key)?.unwrap_or_else(|| "(unset)".into());
        println!("{key} = {value}    # {takes}");
    }
    Ok(())
}

/// Every `serve` option as a node started here would take it without options of its own, and from where.
fn serve_options(root: &std::path::Path, config: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let args: Vec<std::ffi::OsString> = config
        .map(|c| vec!["--config".into(), c.into_os_string()])
        .unwrap_or_default();
    let section = super::serve_config::section(&args, Some(root))?;
    // Checked as `serve` would check it.
    super::serve_config::options(&args, Some(root))?;
    let (file, table) = match section {
        Some((file, table)) => (file.display().to_string(), table),
        None => ("config.toml".into(), toml::Table::new()),
    };
    println!("\n[serve]    # in force for `serve` here: its environment variables, then {file}, then defaults");
    for arg in super::serve_config::definitions().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if long == "config" || long == "help" {
            continue;
        }
        let secret = matches!(long, "token" | "cluster-token" | "metrics-token");
        let from_env = arg.get_env().and_then(|var| {
            std::env::var(var)
                .ok()
                .map(|v| (var.to_string_lossy().into_owned(), v))
        });
        let in_file = table
            .get(long)
            .or_else(|| table.get(&long.replace('-', "_")))
            .map(toml_text);
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let (value, source) = match (from_env, in_file) {
            (Some((var, value)), _) => (value, format!("env {var}")),
            (None, Some(value)) => (value, file.clone()),
            (None, None) if !default.is_empty() => (default.join(", "), "default".into()),
            (None, None) => ("(unset)".into(), "default".into()),
        };
        let shown = if secret && value != "(unset)" {
            "(set, not shown)".to_string()
        } else if long == "store" && super::serve_config::has_password(&value) {
            "(set, holds a password, not shown)".to_string()
        } else {
            value
        };
        println!("{long} = {shown}    # {source}");
    }
    Ok(())
}

/// A `[serve]` value as its option takes it: a list's items comma-separated.
fn toml_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(n) => n.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => items.iter().map(toml_text).collect::<Vec<_>>().join(", "),
        _ => "(a table)".into(),
    }
}
