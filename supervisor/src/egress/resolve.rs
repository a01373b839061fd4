//! Name resolution for the egress proxy: the operator's `--resolve HOST:PORT:ADDR` entries first (curl's form),
//! then the host's resolver. The sandbox has no DNS of its own; the proxy resolves every name, so it also
//! decides which addresses a name may reach.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A malformed `--resolve` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--resolve {entry}: {problem}; expected HOST:PORT:ADDR[,ADDR...], e.g. pypi.test:443:127.0.0.1"
)]
pub struct ResolveError {
    entry: String,
    problem: String,
}

/// The operator's fixed names and the host resolver behind them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolver {
    fixed: HashMap<(String, u16), Vec<IpAddr>>,
}

fn parse_addr(text: &str) -> Option<IpAddr> {
    text.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

impl Resolver {
    /// Adds one `HOST:PORT:ADDR[,ADDR...]` entry.
    pub fn add(&mut self, entry: &str) -> Result<(), ResolveError> {
        let fail = |problem: &str| ResolveError {
            entry: entry.to_string(),
            problem: problem.to_string(),
        };
        let mut parts = entry.splitn(3, ':');
        let (Some(host), Some(port), Some(addrs)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(fail("it needs three parts"));
        };
        if host.is_empty() {
            return Err(fail("the host is empty"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| fail("the port must be a number from 0 to 65535"))?;
        let addrs = addrs
            .split(',')
            .map(|a| parse_addr(a).ok_or_else(|| fail(&format!("\"{a}\" is not an IP address"))))
            .collect::<Result<Vec<_>, _>>()?;
        self.fixed
            .insert((super::policy::normalise_host(host), port), addrs);
        Ok(())
    }

    /// A resolver with these entries.
    pub fn from_entries<S: AsRef<str>>(entries: &[S]) -> Result<Resolver, ResolveError> {
        let mut r = Resolver::default();
        for e in entries {
            r.add(e.as_ref())?;
        }
        Ok(r)
    }

    /// The addresses of `host:port` (a normalised host), fixed entries first.
    pub async fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        if let Some(addrs) = self.fixed.get(&(host.to_string(), port)) {
            return Ok(addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// True for addresses a wildcard or `*` may not reach: loopback, private, link-local (cloud metadata lives at
/// 169.254.169.254), carrier-grade NAT, unspecified, broadcast, multicast and their IPv6 counterparts.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal_v4(v4),
            None => internal_v6(v6),
        },
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_ranges_are_recognised_and_public_ones_are_not() {
        for ip in [
            "127.0.0.1",
            "127.8.9.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["1.1.1.1", "172.32.0.1", "151.101.0.223", "2606:4700::1111"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn fixed_entries_answer_before_the_host_resolver() {
        let r = Resolver::from_entries(&["Pypi.Test:443:127.0.0.1,[::1]"]).unwrap();
        let addrs = r.lookup("pypi.test", 443).await.unwrap();
        assert_eq!(
            addrs,
            vec![
                "127.0.0.1:443".parse().unwrap(),
                "[::1]:443".parse().unwrap()
            ]
        );
    }

    #[test]
    fn malformed_entries_are_refused_with_the_expected_form() {
        for bad in [
            "pypi.test",
            "pypi.test:x:127.0.0.1",
            "pypi.test:443:nowhere",
            ":1:1.1.1.1",
        ] {
            let err = Resolver::from_entries(&[bad]).unwrap_err().to_string();
            assert!(err.contains("HOST:PORT:ADDR"), "{err}");
        }
    }
}
