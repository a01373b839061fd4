//! Where a provider key may go. A key is the operator's: it is sent only to its provider's official endpoint or to a
//! base URL the operator configured, never to one named by a bundle or a request (a bundle pulled from a registry
//! could otherwise harvest keys).
//!
//! The operator configures endpoints with `OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL` (their keys in
//! `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`), or in `$SERVICE_HOME/config.toml`:
//!
//! ```toml
//! [providers.gpu-box]
//! type = "openai"                      # the wire format: openai or anthropic
//! base_url = "http://10.0.0.5:8000/v1"
//! api_key_env = "GPU_BOX_KEY"          # optional: the variable holding its key
//! ```
//!
//! A model whose `config.base_url` is one of these gets that endpoint's key; any other base URL gets no key, which
//! suits local servers that need none.

use std::path::Path;

pub use crate::config_file::{ConfigError, ConfiguredEndpoint};

/// The endpoints a key may be sent to, besides the official ones, and the host variables a bundle may receive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPolicy {
    endpoints: Vec<ConfiguredEndpoint>,
    /// The operator's allow list for `env_from_host` (`pass_env` in `config.toml`, `SERVICE_PASS_ENV`,
    /// `serve --pass-env`).
    pass_env: Vec<String>,
}

/// Environment variable listing, comma-separated, the host variables a bundle may receive (`env_from_host`).
pub const PASS_ENV: &str = "SERVICE_PASS_ENV";

/// Where one call goes and with which key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Base URL.
    pub base: String,
    /// The key's environment variable, when this base may receive one.
    pub key_env: Option<String>,
    /// True when the base URL came from the model's config (a bundle or a request), not from the operator.
    pub unvetted: bool,
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

impl KeyPolicy {
    /// The policy from `$SERVICE_HOME/config.toml` (absent: none) and the environment.
    pub fn load(home: &Path) -> Result<KeyPolicy, ConfigError> {
        let file = crate::config_file::load(home)?;
        let err = |message: String| ConfigError {
            path: crate::config_file::path(home).display().to_string(),
            message: format!(
                "{message}; see `providers` in docs/src/reference/config.md for the format"
            ),
        };
        let mut endpoints = Vec::new();
        for (name, ep) in file.providers {
            if !["openai", "anthropic"].contains(&ep.kind.as_str()) {
                return Err(err(format!(
                    "providers.{name}.type: unknown value \"{}\"; expected one of openai, anthropic",
                    ep.kind
                )));
            }
            if !(ep.base_url.starts_with("http://") || ep.base_url.starts_with("https://")) {
                return Err(err(format!(
                    "providers.{name}.base_url: \"{}\" is not an http(s) URL",
                    ep.base_url
                )));
            }
            endpoints.push(ep);
        }
        let mut policy = KeyPolicy {
            endpoints,
            pass_env: file.pass_env,
        };
        if let Ok(listed) = std::env::var(PASS_ENV) {
            policy.pass(listed.split(',').map(str::trim).filter(|n| !n.is_empty()));
        }
        Ok(policy)
    }

    /// Adds host variables a bundle may receive through `env_from_host` (`serve --pass-env`).
    pub fn pass<S: Into<String>>(&mut self, names: impl IntoIterator<Item = S>) {
        self.pass_env.extend(names.into_iter().map(Into::into));
    }

    /// Whether a bundle may receive the host's variable `name`: only when the operator listed it, and never a
    /// [`withheld`](Self::withheld) one, listed or not.
    pub fn passes(&self, name: &str) -> bool {
        self.pass_env.iter().any(|n| n == name) && !self.withheld(name)
    }

    /// Whether a bundle may not read the host's variable `name` (an MCP server's `env_from_host`): a provider key,
    /// the server's own settings and secrets (`SERVICE_*`: its token, the cluster token, the store's URL with its
    /// password), or PostgreSQL's password variables.
    pub fn withheld(&self, name: &str) -> bool {
        name.starts_with("SERVICE_")
            || ["PGPASSWORD", "PGPASSFILE"].contains(&name)
            || self.key_variables().iter().any(|v| v == name)
    }

    /// Every environment variable that may hold a provider key: the official ones and those `config.toml` names.
    pub fn key_variables(&self) -> Vec<String> {
        let mut vars: Vec<String> = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SERVICE_TOKEN"]
            .iter()
            .map(|v| v.to_string())
            .collect();
        vars.extend(self.endpoints.iter().filter_map(|e| e.api_key_env.clone()));
        vars
    }

    /// Resolves the target of a `kind` call: the model's `config.base_url` if given, else `$<PREFIX>_BASE_URL`, else
    /// the official `default_base`. The key variable is `$<PREFIX>_API_KEY` for the official and the environment's
    /// base URL, the configured variable for a `config.toml` endpoint, and none for any other URL.
    pub fn target(
        &self,
        kind: &str,
        env_prefix: &str,
        default_base: &str,
        requested: Option<&str>,
    ) -> Target {
        let key_var = format!("{env_prefix}_API_KEY");
        let env_base = std::env::var(format!("{env_prefix}_BASE_URL"))
            .ok()
            .filter(|v| !v.is_empty());
        let Some(url) = requested else {
            return Target {
                base: env_base.unwrap_or_else(|| default_base.to_string()),
                key_env: Some(key_var),
                unvetted: false,
            };
        };
        let operator_env = env_base.as_deref().is_some_and(|b| same_url(b, url));
        let key_env = if operator_env || same_url(url, default_base) {
            Some(key_var)
        } else {
            self.endpoints
                .iter()
                .find(|e| e.kind == kind && same_url(&e.base_url, url))
                .map(|e| e.api_key_env.clone())
                .unwrap_or(None)
        };
        let vetted = operator_env
            || same_url(url, default_base)
            || self
                .endpoints
                .iter()
                .any(|e| e.kind == kind && same_url(&e.base_url, url));
        Target {
            base: url.to_string(),
            key_env,
            unvetted: !vetted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> KeyPolicy {
        KeyPolicy {
            endpoints: vec![ConfiguredEndpoint {
                kind: "openai".into(),
                base_url: "http://10.0.0.5:8000/v1".into(),
                api_key_env: Some("GPU_KEY".into()),
            }],
            pass_env: Vec::new(),
        }
    }

    #[test]
    fn only_listed_host_variables_pass_and_secrets_never_do() {
        let mut p = policy();
        p.pass(["TEAM_TOKEN", "GPU_KEY", "SERVICE_TOKEN", "PGPASSWORD"]);
        assert!(p.passes("TEAM_TOKEN"));
        assert!(!p.passes("AWS_SECRET_ACCESS_KEY"), "not listed");
        for secret in ["GPU_KEY", "SERVICE_TOKEN", "PGPASSWORD", "OPENAI_API_KEY"] {
            assert!(!p.passes(secret), "{secret} is withheld even when listed");
        }
    }

    #[test]
    fn a_base_url_from_a_bundle_or_request_gets_no_key() {
        let t = policy().target(
            "openai",
            "SRS_TEST_A",
            "https://api.openai.com/v1",
            Some("http://evil.example/v1"),
        );
        assert_eq!(t.key_env, None);
        assert!(t.unvetted);
    }

    #[test]
    fn the_official_and_configured_endpoints_get_their_keys() {
        let p = policy();
        let official = p.target("openai", "SRS_TEST_B", "https://api.openai.com/v1", None);
        assert_eq!(official.key_env.as_deref(), Some("SRS_TEST_B_API_KEY"));
        assert_eq!(official.base, "https://api.openai.com/v1");
        let configured = p.target(
            "openai",
            "SRS_TEST_B",
            "https://api.openai.com/v1",
            Some("http://10.0.0.5:8000/v1/"),
        );
        assert_eq!(configured.key_env.as_deref(), Some("GPU_KEY"));
        let other_kind = p.target(
            "anthropic",
            "SRS_TEST_B",
            "https://api.anthropic.com",
            Some("http://10.0.0.5:8000/v1"),
        );
        assert_eq!(other_kind.key_env, None);
    }

    #[test]
    fn config_toml_with_an_unknown_type_is_an_error_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            "[providers.x]\ntype = \"gemini\"\nbase_url = \"http://h/v1\"\n",
        )
        .unwrap();
        let e = KeyPolicy::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("providers.x.type"), "{e}");
    }
}
