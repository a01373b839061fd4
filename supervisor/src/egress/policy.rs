//! Host patterns of `sandbox.permissions.network` and the decision they make for one connection.
//!
//! Forms: `"*"` (any public host, any port), `"pypi.org"` (that host), `"*.pythonhosted.org"` (its subdomains, not
//! the apex), each with an optional `:port` (without one, ports 80 and 443; `*` alone means every port). IP literals (`"10.0.0.5"`,
//! `"[fd00::1]:8080"`) and `localhost` are exact entries only. Names are compared in lowercase.

use std::fmt;
use std::net::IpAddr;

/// An example shown in every validation error.
const EXAMPLE: &str = r#"e.g. ["pypi.org", "*.pythonhosted.org", "api.github.com:443"]"#;

/// Which hosts a pattern covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hosts {
    /// `*`: every host (public addresses only).
    Any,
    /// One name or IP literal.
    Exact(String),
    /// `*.suffix`: names ending in `.suffix`.
    Subdomains(String),
}

/// One entry of `sandbox.permissions.network`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    hosts: Hosts,
    port: Option<u16>,
    text: String,
}

/// A malformed entry, with what is wrong and a valid example.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{entry}\" is not a host pattern: {problem}; {EXAMPLE}")]
pub struct PatternError {
    entry: String,
    problem: &'static str,
}

fn label_ok(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

fn name_ok(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(label_ok)
}

/// Splits `host[:port]`, with IPv6 literals in brackets.
fn split_port(entry: &str) -> Result<(&str, Option<&str>), &'static str> {
    if let Some(rest) = entry.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or("an IPv6 literal needs its closing ']'")?;
        return match after {
            "" => Ok((ip, None)),
            p => Ok((
                ip,
                Some(p.strip_prefix(':').ok_or("expected ':port' after ']'")?),
            )),
        };
    }
    match entry.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => {
            Err("write an IPv6 literal in brackets, like \"[fd00::1]:443\"")
        }
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((entry, None)),
    }
}

fn parse_port(text: &str) -> Result<u16, &'static str> {
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err("the port must be a number from 1 to 65535"),
        Ok(n) => Ok(n),
    }
}

impl HostPattern {
    /// Parses one manifest entry.
    pub fn parse(entry: &str) -> Result<HostPattern, PatternError> {
        let fail = |problem| PatternError {
            entry: entry.to_string(),
            problem,
        };
        if let Some(port) = entry
            .strip_prefix('*')
            .filter(|rest| rest.is_empty() || rest.starts_with(':'))
        {
            let port = match port.strip_prefix(':') {
                None => None,
                Some(p) => Some(parse_port(p).map_err(fail)?),
            };
            return Ok(HostPattern {
                hosts: Hosts::Any,
                port,
                text: entry.into(),
            });
        }
        if entry.contains("://") {
            return Err(fail("write the host without a scheme"));
        }
        if entry.contains('/') {
            return Err(fail("write the host without a path"));
        }
        let (host, port) = split_port(entry).map_err(fail)?;
        let port = port.map(parse_port).transpose().map_err(fail)?;
        let host = host.to_ascii_lowercase();
        let hosts = if let Ok(ip) = host.parse::<IpAddr>() {
            Hosts::Exact(ip.to_string())
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err(fail(
                    "'*' may only be the whole first label, as in \"*.example.com\"",
                ));
            }
            if suffix == "localhost" || !suffix.contains('.') || !name_ok(suffix) {
                return Err(fail(
                    "a wildcard needs a domain of at least two labels, as in \"*.example.com\"",
                ));
            }
            Hosts::Subdomains(suffix.to_string())
        } else if host.contains('*') {
            return Err(fail(
                "'*' may only be the whole first label, as in \"*.example.com\"",
            ));
        } else if !name_ok(&host) {
            return Err(fail(
                "a host name has labels of letters, digits and '-', separated by dots",
            ));
        } else {
            Hosts::Exact(host)
        };
        Ok(HostPattern {
            hosts,
            port,
            text: entry.to_string(),
        })
    }

    /// The entry as written in the manifest.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when this pattern names `host` exactly (not through `*` or a wildcard): only then may the host
    /// resolve to a loopback, private or link-local address.
    pub fn is_exact(&self) -> bool {
        matches!(self.hosts, Hosts::Exact(_))
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        let port_ok = match (self.port, &self.hosts) {
            (Some(p), _) => p == port,
            // `*` stands for the whole public internet, as full network access did before host lists.
            (None, Hosts::Any) => true,
            (None, _) => port == 80 || port == 443,
        };
        port_ok
            && match &self.hosts {
                Hosts::Any => true,
                Hosts::Exact(h) => h == host,
                Hosts::Subdomains(suffix) => host
                    .strip_suffix(suffix.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Parses every entry; the error names the index of the first bad one.
pub fn parse_all(entries: &[String]) -> Result<Vec<HostPattern>, (usize, PatternError)> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| HostPattern::parse(e).map_err(|err| (i, err)))
        .collect()
}

/// Normalises a host as a client named it, for matching: lowercase, no brackets, no trailing dot.
pub fn normalise_host(host: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host);
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host.to_ascii_lowercase(),
    }
}

/// The manifest's list: which entry, if any, lets `host:port` through. Exact entries win over wildcards, so a
/// host listed exactly keeps its right to a private address even when `*` is listed too.
pub fn matching<'a>(patterns: &'a [HostPattern], host: &str, port: u16) -> Option<&'a HostPattern> {
    patterns
        .iter()
        .filter(|p| p.matches(host, port))
        .max_by_key(|p| p.is_exact())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap()
    }

    #[test]
    fn exact_hosts_match_themselves_on_default_ports_only() {
        let pats = [p("pypi.org")];
        assert!(matching(&pats, "pypi.org", 443).is_some());
        assert!(matching(&pats, "pypi.org", 80).is_some());
        assert!(matching(&pats, "pypi.org", 22).is_none());
        assert!(matching(&pats, "files.pypi.org", 443).is_none());
        assert!(matching(&pats, "pypi.org.evil.com", 443).is_none());
    }

    #[test]
    fn wildcards_match_subdomains_but_not_the_apex_or_lookalikes() {
        let pats = [p("*.pythonhosted.org")];
        assert!(matching(&pats, "files.pythonhosted.org", 443).is_some());
        assert!(matching(&pats, "a.b.pythonhosted.org", 443).is_some());
        assert!(matching(&pats, "pythonhosted.org", 443).is_none());
        assert!(matching(&pats, "evilpythonhosted.org", 443).is_none());
        assert!(!pats[0].is_exact());
    }

    #[test]
    fn star_alone_means_every_port_and_star_with_a_port_that_port() {
        assert!(matching(&[p("*")], "example.com", 22).is_some());
        assert!(matching(&[p("*:443")], "example.com", 443).is_some());
        assert!(matching(&[p("*:443")], "example.com", 80).is_none());
        assert!(HostPattern::parse("*:0").is_err());
    }

    #[test]
    fn an_explicit_port_is_the_only_port() {
        let pats = [p("api.github.com:8443")];
        assert!(matching(&pats, "api.github.com", 8443).is_some());
        assert!(matching(&pats, "api.github.com", 443).is_none());
    }

    #[test]
    fn ip_literals_and_localhost_are_exact_entries() {
        assert!(p("127.0.0.1:8080").is_exact());
        assert!(p("[::1]:8080").is_exact());
        assert!(p("localhost").is_exact());
        let pats = [p("[::1]:8080")];
        assert!(matching(&pats, &normalise_host("[::1]"), 8080).is_some());
    }

    #[test]
    fn an_exact_entry_wins_over_star() {
        let pats = [p("*"), p("db.internal:5432"), p("db.internal")];
        assert_eq!(
            matching(&pats, "db.internal", 443).map(|p| p.as_str()),
            Some("db.internal")
        );
        assert_eq!(
            matching(&pats, "example.com", 443).map(|p| p.as_str()),
            Some("*")
        );
    }

    #[test]
    fn malformed_entries_say_what_is_wrong_and_show_an_example() {
        for (entry, words) in [
            ("https://pypi.org", "scheme"),
            ("pypi.org/simple", "path"),
            ("pypi.*.org", "first label"),
            ("*pypi.org", "first label"),
            ("*.org", "two labels"),
            ("*.localhost", "two labels"),
            ("pypi.org:0", "port"),
            ("pypi.org:http", "port"),
            ("::1", "brackets"),
            ("under_score.org", "labels"),
            ("", "labels"),
        ] {
            let err = HostPattern::parse(entry).unwrap_err().to_string();
            assert!(err.contains(words), "{entry}: {err}");
            assert!(err.contains("*.pythonhosted.org"), "{err}");
        }
    }

    #[test]
    fn client_hosts_are_normalised() {
        assert_eq!(normalise_host("PyPI.org."), "pypi.org");
        assert_eq!(normalise_host("[0:0::1]"), "::1");
    }
}
