//! `a2a_agents` of agent.yaml: remote agents the bundle calls over A2A, each as a tool `a2a__<name>`. The worker
//! makes the calls from inside the sandbox, through the egress proxy, so the manifest's network list must name
//! each agent's host; `build` warns when it does not.

use serde::{Deserialize, Serialize};

/// Time one call may take unless the entry says otherwise: 5 minutes, since a remote agent runs a whole task.
pub const DEFAULT_TOOL_MS: u64 = 300_000;

/// One entry of `a2a_agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct A2aAgentSpec {
    /// Its name; the tool is `a2a__<name>`.
    pub name: String,
    /// Its base URL; the agent card is at `<url>/.well-known/agent-card.json`.
    pub url: String,
    /// A host variable holding the bearer token to send; passed only when the operator lists it
    /// (`SERVICE_PASS_ENV`, `serve --pass-env`), as `env_from_host` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// Time allowed for one call, in milliseconds; past it the remote task is cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
}

impl A2aAgentSpec {
    /// Checks entry `i`; the error is (key under `a2a_agents[i]`, message).
    pub fn validate(&self, i: usize) -> Result<(), (String, String)> {
        let key = |k: &str| format!("a2a_agents[{i}].{k}");
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 48
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err((
                key("name"),
                format!(
                    "\"{}\" is not a name; use 1 to 48 letters, digits, _ or -",
                    self.name
                ),
            ));
        }
        match reqwest::Url::parse(&self.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
            _ => {
                return Err((
                    key("url"),
                    format!(
                        "\"{}\" is not an http(s) URL; give the agent's base URL, e.g. https://agents.example.com/a2a/helper",
                        self.url
                    ),
                ))
            }
        }
        if let Some(var) = &self.token_env {
            let ok = !var.is_empty()
                && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !var.as_bytes()[0].is_ascii_digit();
            if !ok {
                return Err((
                    key("token_env"),
                    format!("\"{var}\" is not an environment variable name"),
                ));
            }
        }
        if self.tool_timeout_ms == Some(0) {
            return Err((key("tool_timeout_ms"), "must be above 0".into()));
        }
        Ok(())
    }

    /// The agent's `host` and `port`, as the egress proxy sees a connection to it.
    pub fn authority(&self) -> Option<(String, u16)> {
        let u = reqwest::Url::parse(&self.url).ok()?;
        Some((u.host_str()?.to_string(), u.port_or_known_default()?))
    }

    /// The worker's form, with the token read by `host` (None when the operator does not pass the variable).
    pub fn to_worker(&self, host: impl Fn(&str) -> Option<String>) -> service_ipc::A2aAgent {
        service_ipc::A2aAgent {
            name: self.name.clone(),
            url: self.url.trim_end_matches('/').to_string(),
            token: self.token_env.as_deref().and_then(host),
            tool_timeout_ms: self.tool_timeout_ms.unwrap_or(DEFAULT_TOOL_MS),
        }
    }
}

/// The entries of `agents` whose host the manifest's `network` list does not allow, with why.
pub fn unreachable(agents: &[A2aAgentSpec], network: &[String]) -> Vec<String> {
    let patterns = crate::egress::policy::parse_all(network).unwrap_or_default();
    agents
        .iter()
        .filter_map(|a| {
            let (host, port) = a.authority()?;
            crate::egress::policy::matching(&patterns, &host, port)
                .is_none()
                .then(|| {
                    format!(
                        "a2a_agents \"{}\": {host}:{port} is not in service.bundle.json5 sandbox.permissions.network, \
                         so the egress proxy will refuse its calls; add \"{host}:{port}\"",
                        a.name
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, url: &str) -> A2aAgentSpec {
        A2aAgentSpec {
            name: name.into(),
            url: url.into(),
            token_env: None,
            tool_timeout_ms: None,
        }
    }

    #[test]
    fn names_urls_and_variables_are_checked() {
        assert!(spec("peer", "http://peer.test:9000/a2a/x")
            .validate(0)
            .is_ok());
        assert_eq!(
            spec("a b", "http://x").validate(2).unwrap_err().0,
            "a2a_agents[2].name"
        );
        assert_eq!(
            spec("p", "file:///etc").validate(0).unwrap_err().0,
            "a2a_agents[0].url"
        );
        let mut s = spec("p", "https://x.test");
        s.token_env = Some("1BAD".into());
        assert_eq!(s.validate(0).unwrap_err().0, "a2a_agents[0].token_env");
    }

    #[test]
    fn an_agent_whose_host_is_not_listed_is_named() {
        let agents = [
            spec("listed", "http://peer.test:9000/a2a/x"),
            spec("other", "https://else.test/a2a/y"),
        ];
        let missing = unreachable(&agents, &["peer.test:9000".into()]);
        assert_eq!(missing.len(), 1);
        assert!(missing[0].contains("else.test:443"), "{missing:?}");
    }
}
