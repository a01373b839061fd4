//! `serve`'s options from a config file: the `[serve]` section of `$SERVICE_HOME/config.toml`, or of the file
//! `serve --config FILE` names, turned into the options they stand for and put before the command line's own, which
//! therefore win (a later option overrides an earlier one). Each key is checked against `serve`'s options, by the
//! definitions clap holds; a secret is refused, since a config file is not kept as one is.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{ArgAction, Args};

use super::serve::ServeArgs;

/// Options whose values are secrets, with the variable that names a file holding each.
const SECRETS: &[(&str, &str)] = &[
    ("token", "SERVICE_TOKEN_FILE"),
    ("cluster-token", "SERVICE_CLUSTER_TOKEN_FILE"),
    ("metrics-token", "SERVICE_METRICS_TOKEN_FILE"),
];

/// `serve`'s options as clap defines them.
pub fn definitions() -> clap::Command {
    ServeArgs::augment_args(clap::Command::new("serve"))
}

/// The file whose `[serve]` section applies: `--config FILE` among `args` (what follows `serve`), else the home's
/// config.toml. The flag says whether the file was named, and so must exist.
fn source(args: &[OsString], home: Option<&Path>) -> Option<(PathBuf, bool)> {
    let mut words = args.iter().filter_map(|a| a.to_str());
    while let Some(word) = words.next() {
        if word == "--config" {
            return words.next().map(|f| (PathBuf::from(f), true));
        }
        if let Some(f) = word.strip_prefix("--config=") {
            return Some((PathBuf::from(f), true));
        }
    }
    home.map(|h| (service_supervisor::config_file::path(h), false))
}

/// The `[serve]` section that applies to a `serve` whose arguments are `args`, or none.
pub fn section(
    args: &[OsString],
    home: Option<&Path>,
) -> anyhow::Result<Option<(PathBuf, toml::Table)>> {
    let Some((path, named)) = source(args, home) else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("--config {}", path.display())),
    };
    let mut doc: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
    match doc.remove("serve") {
        Some(toml::Value::Table(t)) => Ok(Some((path, t))),
        Some(_) => bail!("{}: serve must be a table: [serve]", path.display()),
        None if named => bail!(
            "{}: it has no [serve] section; write serve's options there, as `bind = \"0.0.0.0:8472\"`",
            path.display()
        ),
        None => Ok(None),
    }
}

/// The options `serve`'s config gives a command line whose arguments after `serve` are `args`, to go before them.
pub fn options(args: &[OsString], home: Option<&Path>) -> anyhow::Result<Vec<OsString>> {
    let Some((path, table)) = section(args, home)? else {
        return Ok(Vec::new());
    };
    let defs = definitions();
    let mut out = Vec::new();
    for (key, value) in table.iter() {
        let name = key.replace('_', "-");
        let at = || format!("{} [serve] {key}", path.display());
        if let Some((_, var)) = SECRETS.iter().find(|(s, _)| *s == name) {
            bail!(
                "{}: a secret is not kept in a config file; put it alone in a file of mode 0600 and name that \
                 file with {var}",
                at()
            );
        }
        if name == "config" {
            bail!("{}: a config file cannot name another", at());
        }
        let Some(arg) = defs
            .get_arguments()
            .find(|a| a.get_long() == Some(name.as_str()))
        else {
            bail!(
                "{}: serve has no option --{name} (see `service-rs serve --help`)",
                at()
            );
        };
        let flag = matches!(arg.get_action(), ArgAction::SetTrue);
        let repeatable = matches!(arg.get_action(), ArgAction::Append);
        let scalar = |v: &toml::Value| -> anyhow::Result<String> {
            match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(n) => Ok(n.to_string()),
                toml::Value::Float(n) => Ok(n.to_string()),
                _ => bail!("{}: takes a string or a number", at()),
            }
        };
        match value {
            toml::Value::Boolean(on) if flag => {
                if *on {
                    out.push(format!("--{name}").into());
                }
            }
            _ if flag => bail!("{}: is true or false", at()),
            toml::Value::Array(items) if repeatable => {
                for item in items {
                    out.push(format!("--{name}={}", scalar(item)?).into());
                }
            }
            toml::Value::Array(_) => bail!("{}: takes one value, not a list", at()),
            v => {
                let text = scalar(v)?;
                if name == "store" && has_password(&text) {
                    bail!(
                        "{}: the URL holds a password; put the URL alone in a file of mode 0600 and name that \
                         file with SERVICE_STORE_URL_FILE",
                        at()
                    );
                }
                out.push(format!("--{name}={text}").into());
            }
        }
    }
    Ok(out)
}

/// Whether a PostgreSQL URL carries a password (`postgres://user:secret@host/db`, or `password=` in its query).
pub fn has_password(url: &str) -> bool {
    let authority = url.split_once("://").map_or(url, |(_, rest)| rest);
    let userinfo = authority.split_once('@').map(|(u, _)| u);
    userinfo.is_some_and(|u| u.contains(':')) || url.contains("password=")
}
