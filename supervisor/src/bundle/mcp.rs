//! `mcp_servers` of agent.yaml: the MCP servers a session runs, by name. A server is a stdio process (`command`,
//! run by the worker inside the session's sandbox) or a streamable-HTTP endpoint (`url`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use service_ipc::McpServer;

/// Start-up and tool-list time allowed when agent.yaml gives none.
pub const DEFAULT_STARTUP_MS: u64 = 30_000;
/// Time allowed for one tool call when agent.yaml gives none.
pub const DEFAULT_TOOL_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;

/// One entry of `mcp_servers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    /// Program of a stdio server, looked up on the sandbox's PATH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables set for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Host variables passed in by name, read by the supervisor when the worker starts; nothing else of the host
    /// environment enters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from_host: Vec<String>,
    /// Working directory, relative to the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Time allowed for start-up and the tool list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_ms: Option<u64>,
    /// Time allowed for one tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    /// Endpoint of a streamable-HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Its extra request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// A server name: a letter, then letters, digits, `-` or single `_`, at most 32 characters (it becomes part of
/// `mcp__<server>__<tool>`, so `__` would make the name ambiguous).
pub fn valid_name(name: &str) -> bool {
    name.len() <= 32
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains("__")
}

fn valid_var(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl McpServerSpec {
    /// Checks the entry `name`; the error is (key under `mcp_servers.<name>`, message).
    pub fn validate(&self, name: &str) -> Result<(), (String, String)> {
        let key = |k: &str| {
            if k.is_empty() {
                format!("mcp_servers.{name}")
            } else {
                format!("mcp_servers.{name}.{k}")
            }
        };
        let bad = |k: &str, m: String| Err((key(k), m));
        if !valid_name(name) {
            return bad(
                "",
                "a server name is a letter followed by letters, digits, - or _ (no __), at most 32 characters, \
                 e.g. git or time-zone"
                    .into(),
            );
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => return bad("url", "give either command (a stdio server) or url (an HTTP server), not both".into()),
            (None, None) => {
                return bad(
                    "command",
                    "missing: give the program of a stdio server (e.g. command: uvx, args: [mcp-server-time]) or \
                     the url of a streamable-HTTP server"
                        .into(),
                )
            }
            (Some(c), None) if c.trim().is_empty() => return bad("command", "must not be empty".into()),
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return bad("url", format!("\"{url}\" is not an http(s) URL"));
                }
                let stdio_only = [
                    ("args", !self.args.is_empty()),
                    ("env", !self.env.is_empty()),
                    ("env_from_host", !self.env_from_host.is_empty()),
                    ("cwd", self.cwd.is_some()),
                ];
                if let Some((k, _)) = stdio_only.iter().find(|(_, set)| *set) {
                    return bad(k, "applies to stdio servers (command) only".into());
                }
            }
            (Some(_), None) => {
                if !self.headers.is_empty() {
                    return bad("headers", "applies to HTTP servers (url) only".into());
                }
            }
        }
        if let Some(k) = self
            .env
            .keys()
            .chain(&self.env_from_host)
            .find(|k| !valid_var(k))
        {
            return bad("env", format!("\"{k}\" is not a variable name"));
        }
        if let Some(cwd) = &self.cwd {
            if !super::parse::is_safe_relative(cwd) {
                return bad(
                    "cwd",
                    format!("\"{cwd}\" must be a relative path inside the workspace"),
                );
            }
        }
        for (k, v) in [
            ("startup_timeout_ms", self.startup_timeout_ms),
            ("tool_timeout_ms", self.tool_timeout_ms),
        ] {
            if let Some(ms) = v.filter(|ms| !(1..=MAX_TIMEOUT_MS).contains(ms)) {
                return bad(k, format!("{ms} is out of range 1..={MAX_TIMEOUT_MS}"));
            }
        }
        Ok(())
    }

    /// The worker's form, with `env_from_host` read from `host` (a variable that is not set is left out).
    pub fn to_worker(&self, host: impl Fn(&str) -> Option<String>) -> McpServer {
        let startup_timeout_ms = self.startup_timeout_ms.unwrap_or(DEFAULT_STARTUP_MS);
        let tool_timeout_ms = self.tool_timeout_ms.unwrap_or(DEFAULT_TOOL_MS);
        match (&self.command, &self.url) {
            (Some(command), _) => {
                let mut env = self.env.clone();
                for name in &self.env_from_host {
                    if let Some(v) = host(name) {
                        env.insert(name.clone(), v);
                    }
                }
                McpServer::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env,
                    cwd: self.cwd.clone(),
                    startup_timeout_ms,
                    tool_timeout_ms,
                }
            }
            (None, url) => McpServer::Http {
                url: url.clone().unwrap_or_default(),
                headers: self.headers.clone(),
                startup_timeout_ms,
                tool_timeout_ms,
            },
        }
    }

    /// One line for `inspect`: `git: stdio uvx mcp-server-git` or `docs: http https://...`.
    pub fn summary(&self) -> String {
        match (&self.command, &self.url) {
            (Some(c), _) => format!(
                "stdio {}",
                std::iter::once(c.as_str())
                    .chain(self.args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            (None, Some(u)) => format!("http {u}"),
            (None, None) => "invalid".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(command: &str) -> McpServerSpec {
        McpServerSpec {
            command: Some(command.into()),
            args: vec![],
            env: BTreeMap::new(),
            env_from_host: vec![],
            cwd: None,
            startup_timeout_ms: None,
            tool_timeout_ms: None,
            url: None,
            headers: BTreeMap::new(),
        }
    }

    #[test]
    fn names_that_would_make_tool_names_ambiguous_are_refused() {
        assert!(valid_name("git") && valid_name("time-zone") && valid_name("a_b"));
        assert!(
            !valid_name("a__b") && !valid_name("1git") && !valid_name("") && !valid_name("g.it")
        );
        let e = stdio("x").validate("bad name").unwrap_err();
        assert_eq!(e.0, "mcp_servers.bad name");
    }

    #[test]
    fn a_server_needs_exactly_one_of_command_and_url() {
        let mut s = stdio("x");
        s.command = None;
        assert_eq!(s.validate("git").unwrap_err().0, "mcp_servers.git.command");
        s.url = Some("http://127.0.0.1:1/mcp".into());
        assert!(s.validate("git").is_ok());
        s.args = vec!["a".into()];
        assert_eq!(s.validate("git").unwrap_err().0, "mcp_servers.git.args");
    }

    #[test]
    fn env_from_host_passes_only_the_named_variables() {
        let mut s = stdio("srv");
        s.env_from_host = vec!["TOKEN".into(), "UNSET".into()];
        let host = |k: &str| (k == "TOKEN").then(|| "t".to_string());
        let McpServer::Stdio { env, .. } = s.to_worker(host) else {
            panic!()
        };
        assert_eq!(env, [("TOKEN".to_string(), "t".to_string())].into());
    }
}
