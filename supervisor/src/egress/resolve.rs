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

/// The IPv4 address an IPv6 address stands for, when it embeds one: v4-mapped (`::ffff:a.b.c.d`), v4-compatible
/// (`::a.b.c.d`, deprecated but still routed by some stacks), NAT64 (`64:ff9b::/96`, which a NAT64 gateway
/// forwards to that IPv4 address) and 6to4 (`2002:AABB:CCDD::/16`); any other address as it is. Every check of an
/// address works on this form, so that another spelling of an address cannot pass where the address is refused.
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded =
        |hi: u16, lo: u16| IpAddr::V4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
    match s {
        // `::` and `::1` are IPv6's own unspecified and loopback addresses, not v4-compatible ones.
        [0, 0, 0, 0, 0, 0, 0, 0] | [0, 0, 0, 0, 0, 0, 0, 1] => ip,
        [0, 0, 0, 0, 0, 0, hi, lo] => embedded(hi, lo),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => embedded(hi, lo),
        [0x2002, hi, lo, ..] => embedded(hi, lo),
        _ => ip,
    }
}

/// True for addresses a wildcard or `*` may not reach: loopback, private, link-local (cloud metadata lives at
/// 169.254.169.254), carrier-grade NAT, unspecified, broadcast, multicast and their IPv6 counterparts, in any
/// spelling (see [`canonical`]).
pub fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

/// Whether a connection to `target` would reach the listener at `own`, whatever the spelling: the same port, and
/// the same address once [`canonical`], or any loopback address for a loopback listener, or any internal address
/// for a listener on every address (`0.0.0.0`, `::`), which the host's own interfaces answer for.
pub fn reaches(own: &SocketAddr, target: &SocketAddr) -> bool {
    if own.port() != target.port() {
        return false;
    }
    let (own_ip, ip) = (canonical(own.ip()), canonical(target.ip()));
    own_ip == ip
        || (own_ip.is_loopback() && ip.is_loopback())
        || (own_ip.is_unspecified() && (is_internal(ip) || ip.is_loopback()))
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

    #[test]
    fn ipv6_spellings_of_internal_ipv4_addresses_are_internal() {
        for ip in [
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::127.0.0.1",
            "2002:c0a8:0101::1",
            "2002:7f00:0001::",
            "::ffff:192.168.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        assert_eq!(
            canonical("64:ff9b::1.1.1.1".parse().unwrap()),
            "1.1.1.1".parse::<IpAddr>().unwrap()
        );
        assert!(!is_internal("64:ff9b::1.1.1.1".parse().unwrap()));
        assert!(!is_internal("2002:0101:0101::1".parse().unwrap()));
    }

    #[test]
    fn a_listener_is_reached_by_every_spelling_of_its_address() {
        let own: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        for target in [
            "127.0.0.1:5432",
            "[::ffff:127.0.0.1]:5432",
            "[::1]:5432",
            "[::127.0.0.1]:5432",
            "127.0.0.2:5432",
            "[64:ff9b::7f00:1]:5432",
        ] {
            assert!(reaches(&own, &target.parse().unwrap()), "{target}");
        }
        assert!(!reaches(&own, &"127.0.0.1:5433".parse().unwrap()));
        assert!(!reaches(&own, &"1.1.1.1:5432".parse().unwrap()));
        let any: SocketAddr = "0.0.0.0:8472".parse().unwrap();
        assert!(reaches(&any, &"[::1]:8472".parse().unwrap()));
        assert!(reaches(&any, &"10.1.2.3:8472".parse().unwrap()));
        assert!(!reaches(&any, &"1.1.1.1:8472".parse().unwrap()));
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
