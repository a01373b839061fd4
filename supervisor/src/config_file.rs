//! `$SERVICE_HOME/config.toml`: the operator's settings (provider endpoints, `pass_env`) and the user's defaults
//! (`default_bundle`, `default_model`, `approvals`). `service-rs config` reads and edits it, keeping its comments.
//!
//! ```toml
//! default_bundle = "hello"          # what `service-rs "a prompt"` and `run` without a bundle run
//! default_model = "openai/gpt-4o"   # a --model for every run and TUI session that names none
//! approvals = "auto-edit"           # ask (default), auto-edit or deny
//! turn_flush = "background"         # turn (default) or background: when a turn's end is flushed to disk
//! sandbox_user = "root"             # a root supervisor's sandbox user where root owns the directory (containers)
//! sandbox_backend = "auto"          # bwrap, landlock or auto (bubblewrap where it can start, else Landlock)
//! notify = "osc9"                   # bell (default), osc9 or off: how the TUI calls you back
//! checkpoint_ignore = ["*.log"]      # left out of checkpoints besides .gitignore and .serviceignore
//!
//! [providers.gpu-box]
//! type = "openai"
//! base_url = "http://10.0.0.5:8000/v1"
//! api_key_env = "GPU_BOX_KEY"
//!
//! [prices."openai/gpt-4o"]         # US dollars per million tokens, for `service-rs usage` and `GET /usage`
//! input = 2.5
//! output = 10.0
//! cached_input = 1.25
//!
//! [[hooks.PreToolUse]]             # operator hooks, as hooks.json spells them; scripts in $SERVICE_HOME/hooks
//! matcher = "Bash"
//! hooks = [{ type = "command", command = "python3 $SERVICE_OPERATOR_HOOKS_DIR/policy.py" }]
//! ```
//!
//! `operator_hooks_only = true` runs the operator's hooks and no bundle's or project's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::runtime::store::TurnFlush;

/// The file's name in the store.
pub const FILE: &str = "config.toml";

/// One provider endpoint the operator configured (see `providers::keys`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfiguredEndpoint {
    /// Wire format: `openai` or `anthropic`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its base URL.
    pub base_url: String,
    /// The environment variable that holds its key, if it needs one.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

/// How `run` and the TUI answer permission requests when the command line says nothing.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Approvals {
    /// Ask on the terminal (deny where there is none).
    #[default]
    Ask,
    /// Allow Write and Edit inside the workspace; ask for everything else.
    AutoEdit,
    /// Deny every request.
    Deny,
}

/// How the TUI calls the user back when an approval waits or a long turn ends.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Notify {
    /// The terminal bell.
    #[default]
    Bell,
    /// A desktop notification through OSC 9 (iTerm2, kitty, WezTerm, Ghostty, Windows Terminal).
    Osc9,
    /// Nothing.
    Off,
}

/// The parsed file. Its fields' doc comments are the manual's config reference (`service-rs reference config`).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Host variables a bundle's MCP servers may receive through `env_from_host`.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Provider endpoints keys may be sent to, by name.
    #[serde(default)]
    pub providers: BTreeMap<String, ConfiguredEndpoint>,
    /// The bundle `run` and `service-rs "prompt"` use when none is named.
    #[serde(default)]
    pub default_bundle: Option<String>,
    /// The model override (provider/name) of runs and TUI sessions that name none.
    #[serde(default)]
    pub default_model: Option<String>,
    /// How permission requests are answered by default.
    #[serde(default)]
    pub approvals: Approvals,
    /// MiB of workspace checkpoints a session keeps (512 when unset); 0 turns checkpoints off.
    #[serde(default)]
    pub checkpoint_max_mb: Option<u64>,
    /// Patterns (gitignore syntax) checkpoints leave out besides the project's `.gitignore` and `.serviceignore`.
    #[serde(default)]
    pub checkpoint_ignore: Vec<String>,
    /// How deep subagents may nest (2 when unset); 0 turns them off.
    #[serde(default)]
    pub max_subagent_depth: Option<u32>,
    /// When the store flushes a turn's end to disk (see [`TurnFlush`]).
    #[serde(default)]
    pub turn_flush: TurnFlush,
    /// The user a root supervisor's sandboxes run as where root owns the session's directory (default `nobody`;
    /// `root` in a container where everything is root's). `--sandbox-user` and `SERVICE_SANDBOX_USER` come first.
    #[serde(default)]
    pub sandbox_user: Option<String>,
    /// What confines sandboxes: `bwrap`, `landlock` or `auto` (bubblewrap where it starts, else Landlock).
    /// `--sandbox-backend` and `SERVICE_SANDBOX_BACKEND` come first.
    #[serde(default)]
    pub sandbox_backend: Option<String>,
    /// Model prices by `provider/name`, in US dollars per million tokens: usage reports gain a cost.
    #[serde(default)]
    pub prices: BTreeMap<String, crate::tenancy::usage::Price>,
    /// How the TUI calls the user back.
    #[serde(default)]
    pub notify: Notify,
    /// The operator's hooks, by event, as `hooks.json` spells them: every session runs them, and no bundle or
    /// project can turn them off.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Vec<serde_json::Value>>")]
    pub hooks: crate::bundle::hooks::HookMap,
    /// Only the operator's hooks run; bundles' and projects' hooks are ignored.
    #[serde(default)]
    pub operator_hooks_only: bool,
    /// `serve`'s options, by their long names (`bind = "0.0.0.0:8472"`, `allow-path = ["/srv"]`, `retention =
    /// "30d"`, `migrate = true`): what `serve` takes when its command line does not say; the command line and the
    /// options' environment variables come first. Secrets are never here: `SERVICE_TOKEN_FILE` and its like name
    /// files holding them. `serve --config FILE` reads the section of FILE instead.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub serve: toml::Table,
}

/// Why `config.toml` could not be read or changed.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong, and what to do.
    pub message: String,
}

/// The keys `service-rs config` reads and sets, with what each takes.
pub const KEYS: &[(&str, &str)] = &[
    (
        "default_bundle",
        "a bundle reference, e.g. hello or local/hello:0.1.0",
    ),
    (
        "default_model",
        "provider/name, e.g. anthropic/claude-sonnet-4-5",
    ),
    ("approvals", "ask, auto-edit or deny"),
    (
        "notify",
        "bell (default), osc9 or off: how the TUI says an approval waits or a long turn ended",
    ),
    (
        "pass_env",
        "host variables MCP servers may receive, comma-separated",
    ),
    (
        "checkpoint_max_mb",
        "MiB of workspace checkpoints a session keeps (default 512; 0 turns them off)",
    ),
    (
        "checkpoint_ignore",
        "patterns checkpoints leave out besides .gitignore and .serviceignore, comma-separated (e.g. *.log,tmp/)",
    ),
    (
        "max_subagent_depth",
        "how deep subagents may nest (default 2; 0 turns them off)",
    ),
    (
        "turn_flush",
        "turn (default: a turn's end is on disk before it is reported) or background (flushed within 20 ms)",
    ),
    (
        "sandbox_user",
        "when running as root: the user sandboxes run as where root owns the directory (default nobody; root in a \
         container where everything is root's, which gives sandboxes root's rights over what they see)",
    ),
];

/// The config file of the store at `home`.
pub fn path(home: &Path) -> PathBuf {
    home.join(FILE)
}

/// The parsed file of the store at `home`; an absent file is the defaults.
pub fn load(home: &Path) -> Result<ConfigFile, ConfigError> {
    let path = path(home);
    let err = |message: String| ConfigError {
        path: path.display().to_string(),
        message: format!("{message}; fix it, or change it with `service-rs config set KEY VALUE`"),
    };
    let file: ConfigFile = match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).map_err(|e| err(e.to_string()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ConfigFile::default(),
        Err(e) => return Err(err(e.to_string())),
    };
    if let Some(model) = &file.default_model {
        check_model(model).map_err(err)?;
    }
    crate::bundle::hooks::validate(&file.hooks, true)
        .map_err(|(key, why)| err(format!("hooks.{key}: {why}")))?;
    Ok(file)
}

fn check_model(model: &str) -> Result<(), String> {
    match model.split_once('/') {
        Some((p, n)) if !p.is_empty() && !n.is_empty() => Ok(()),
        _ => Err(format!(
            "default_model: \"{model}\" is not provider/name (e.g. anthropic/claude-sonnet-4-5)"
        )),
    }
}

/// The value of `key` as `config get` prints it; None when it is not set.
pub fn get(home: &Path, key: &str) -> Result<Option<String>, ConfigError> {
    known(home, key)?;
    let file = load(home)?;
    Ok(match key {
        "default_bundle" => file.default_bundle,
        "default_model" => file.default_model,
        "approvals" => Some(
            match file.approvals {
                Approvals::Ask => "ask",
                Approvals::AutoEdit => "auto-edit",
                Approvals::Deny => "deny",
            }
            .to_string(),
        ),
        "checkpoint_max_mb" => file.checkpoint_max_mb.map(|m| m.to_string()),
        "max_subagent_depth" => file.max_subagent_depth.map(|m| m.to_string()),
        "turn_flush" => Some(file.turn_flush.as_str().to_string()),
        "sandbox_user" => file.sandbox_user,
        "checkpoint_ignore" => Some(file.checkpoint_ignore.join(",")).filter(|v| !v.is_empty()),
        "notify" => Some(
            match file.notify {
                Notify::Bell => "bell",
                Notify::Osc9 => "osc9",
                Notify::Off => "off",
            }
            .to_string(),
        ),
        _ => Some(file.pass_env.join(",")).filter(|v| !v.is_empty()),
    })
}

/// Sets `key` to `value` (None removes it), keeping the rest of the file as it was written. The result is checked
/// as [`load`] checks it before it replaces the file, atomically.
pub fn set(home: &Path, key: &str, value: Option<&str>) -> Result<(), ConfigError> {
    known(home, key)?;
    let path = path(home);
    let err = |message: String| ConfigError {
        path: path.display().to_string(),
        message,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(err(e.to_string())),
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| err(format!("{e}; fix the file by hand first")))?;
    match value {
        None => {
            doc.remove(key);
        }
        Some(v) if key == "pass_env" || key == "checkpoint_ignore" => {
            let list: toml_edit::Array = v
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .collect();
            doc[key] = toml_edit::value(list);
        }
        Some(v) => {
            match key {
                "approvals" if !["ask", "auto-edit", "deny"].contains(&v) => {
                    return Err(err(format!(
                        "approvals: \"{v}\" is not one of ask, auto-edit, deny"
                    )))
                }
                "notify" if !["bell", "osc9", "off"].contains(&v) => {
                    return Err(err(format!(
                        "notify: \"{v}\" is not one of bell, osc9, off"
                    )))
                }
                "turn_flush" if !["turn", "background"].contains(&v) => {
                    return Err(err(format!(
                        "turn_flush: \"{v}\" is not one of turn, background"
                    )))
                }
                "default_model" => check_model(v).map_err(err)?,
                "sandbox_user" => {
                    crate::sandbox::identity::SandboxUser::named(v)
                        .map_err(|e| err(format!("sandbox_user: {e}")))?;
                }
                "checkpoint_max_mb" | "max_subagent_depth" => {
                    let n: i64 = v
                        .parse()
                        .ok()
                        .filter(|n| *n >= 0)
                        .ok_or_else(|| err(format!("{key}: \"{v}\" is not a whole number")))?;
                    doc[key] = toml_edit::value(n);
                }
                _ => {}
            }
            if !["checkpoint_max_mb", "max_subagent_depth"].contains(&key) {
                doc[key] = toml_edit::value(v);
            }
        }
    }
    let text = doc.to_string();
    toml::from_str::<ConfigFile>(&text).map_err(|e| err(e.to_string()))?;
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, &text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| err(format!("cannot write it: {e}")))
}

fn known(home: &Path, key: &str) -> Result<(), ConfigError> {
    if KEYS.iter().any(|(k, _)| *k == key) {
        return Ok(());
    }
    let names: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
    Err(ConfigError {
        path: path(home).display().to_string(),
        message: format!(
            "unknown key \"{key}\"; `service-rs config` reads and sets {} (provider endpoints are edited in the \
             file itself)",
            names.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_keeps_comments_and_other_keys_and_checks_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            path(dir.path()),
            "# my settings\npass_env = [\"A\"]\n\n[providers.box]\ntype = \"openai\"\nbase_url = \"http://h/v1\"\n",
        )
        .unwrap();
        set(dir.path(), "default_bundle", Some("hello")).unwrap();
        set(dir.path(), "approvals", Some("auto-edit")).unwrap();
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(text.starts_with("# my settings\n"), "{text}");
        assert!(text.contains("[providers.box]"), "{text}");
        let file = load(dir.path()).unwrap();
        assert_eq!(file.default_bundle.as_deref(), Some("hello"));
        assert_eq!(file.approvals, Approvals::AutoEdit);
        assert_eq!(file.pass_env, ["A"]);

        let bad = set(dir.path(), "approvals", Some("sometimes")).unwrap_err();
        assert!(bad.message.contains("ask, auto-edit, deny"), "{bad}");
        let bad = set(dir.path(), "default_model", Some("gpt")).unwrap_err();
        assert!(bad.message.contains("provider/name"), "{bad}");
        let bad = set(dir.path(), "turn_flush", Some("sometimes")).unwrap_err();
        assert!(bad.message.contains("turn, background"), "{bad}");
        assert_eq!(load(dir.path()).unwrap().turn_flush, TurnFlush::Turn);
        set(dir.path(), "turn_flush", Some("background")).unwrap();
        assert_eq!(load(dir.path()).unwrap().turn_flush, TurnFlush::Background);
        assert_eq!(
            get(dir.path(), "turn_flush").unwrap().as_deref(),
            Some("background")
        );
        let bad = set(dir.path(), "colour", Some("red")).unwrap_err();
        assert!(bad.message.contains("unknown key \"colour\""), "{bad}");
        set(dir.path(), "default_bundle", None).unwrap();
        assert_eq!(get(dir.path(), "default_bundle").unwrap(), None);
        assert_eq!(
            get(dir.path(), "approvals").unwrap().as_deref(),
            Some("auto-edit")
        );
    }
}
