//! What a node admits: the host names a request may address (against DNS rebinding) and how many event streams
//! one client address may hold. Plain data that `state::AppState` keeps and `guard` and the event routes consult.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The host names a request may address: the bound address, the loopback names when bound to loopback, and the
/// names the operator allowed with `--allowed-host`.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// Lower-case `host` or `host:port` entries.
    names: Vec<String>,
    port: u16,
}

impl AllowedHosts {
    /// The hosts of a server bound at `bound`, plus `extra` (each `name` or `name:port`).
    pub fn new(bound: SocketAddr, extra: &[String]) -> AllowedHosts {
        let port = bound.port();
        let mut names = vec![match bound {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        }];
        if bound.ip().is_loopback() || bound.ip().is_unspecified() {
            names.extend(["localhost", "127.0.0.1", "[::1]"].map(String::from));
        }
        names.extend(extra.iter().map(|h| h.to_ascii_lowercase()));
        AllowedHosts { names, port }
    }

    /// True when `host` (a `Host` header value or an origin's authority) names this server.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let Some((name, port)) = split_authority(&host) else {
            return false;
        };
        self.names.iter().any(|allowed| {
            *allowed == host || (*allowed == name && port.is_none_or(|p| p == self.port))
        })
    }
}

/// `name[:port]` or `[v6][:port]` into its name and port; None when the port is not a number.
fn split_authority(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, rest) = match host.strip_prefix('[') {
        Some(v6) => {
            let end = v6.find(']')? + 2;
            (&host[..end], &host[end..])
        }
        None => match host.split_once(':') {
            Some((n, p)) => (n, &host[n.len()..][..p.len() + 1]),
            None => (host, ""),
        },
    };
    match rest.strip_prefix(':') {
        None if rest.is_empty() => Some((name, None)),
        None => None,
        Some(p) => canonical_port(p).map(|p| (name, Some(p))),
    }
}

/// A port written as a browser or a client writes it: digits only, no sign and no leading zero. `u16::from_str`
/// alone takes `+8472` and `08472`, which name the same port in another spelling.
fn canonical_port(text: &str) -> Option<u16> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let padded = text.len() > 1 && text.starts_with('0');
    (digits && !padded).then(|| text.parse().ok()).flatten()
}

/// The hops a request came through, as its proxies wrote them: the `for=` of each element of `Forwarded`
/// (RFC 7239) when it has that header, else the `X-Forwarded-For` entries, earliest first. An element with no
/// address (`unknown`, an obfuscated name, no `for=`, or one that does not parse) becomes an entry that is not
/// an address, which stops [`client_address`]'s walk there.
pub fn forwarded_hops(headers: &axum::http::HeaderMap) -> Vec<String> {
    let values = |name| {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("-"))
            .collect::<Vec<_>>()
    };
    let standard = values("forwarded");
    if !standard.is_empty() {
        return standard
            .iter()
            .flat_map(|v| rfc7239::parse(v))
            .map(|element| {
                let ip = element.ok().and_then(|e| e.forwarded_for?.ip().copied());
                ip.map_or_else(|| "-".into(), |ip| ip.to_string())
            })
            .collect();
    }
    values("x-forwarded-for")
        .iter()
        .flat_map(|v| v.split(','))
        .map(|hop| hop.trim().to_string())
        .collect()
}

/// The client's address: `peer` itself, or, when `peer` is a trusted proxy, the right-most of the `hops` (see
/// [`forwarded_hops`]) that is not a trusted proxy (the left ones are whatever the client wrote). An entry that is
/// not an address stops the walk at the last proxy that could be trusted.
pub fn client_address(peer: IpAddr, hops: &[String], trusted: &[ipnet::IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let mut client = peer;
    for hop in hops.iter().rev() {
        let parsed = hop
            .parse::<IpAddr>()
            .ok()
            .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()));
        let Some(ip) = parsed else {
            return client;
        };
        client = ip;
        if !is_trusted(&ip) {
            return ip;
        }
    }
    client
}

/// Whose event streams are counted: a client address's, or a tenant's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StreamKey {
    /// A client address.
    Client(std::net::IpAddr),
    /// A tenant, whatever addresses its clients have.
    Tenant(String),
}

/// Counts the event streams each client address and each tenant holds, to cap them.
#[derive(Debug, Default)]
pub struct StreamCounts(std::sync::Mutex<std::collections::HashMap<StreamKey, usize>>);

/// One open event stream; dropping it gives the slot back.
pub struct StreamSlot {
    counts: Arc<StreamCounts>,
    key: StreamKey,
}

impl StreamCounts {
    /// Takes a slot for `key`, or None when it already holds `max`.
    pub fn take(self: &Arc<Self>, key: StreamKey, max: usize) -> Option<StreamSlot> {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = counts.entry(key.clone()).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            counts: self.clone(),
            key,
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_the_bound_port_are_allowed_and_others_are_not() {
        let hosts = AllowedHosts::new("127.0.0.1:8472".parse().unwrap(), &["box.lan".into()]);
        for ok in [
            "127.0.0.1:8472",
            "localhost:8472",
            "LOCALHOST",
            "[::1]:8472",
            "box.lan:8472",
            "box.lan",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example:8472",
            "127.0.0.1:9999",
            "localhost.evil.example",
            "",
            "box.lan:1",
            "localhost:+8472",
            "localhost:08472",
            "127.0.0.1:8472 ",
            "[::1]:+8472",
        ] {
            assert!(!hosts.allows(bad), "{bad}");
        }
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client_and_the_right_most_untrusted_hop_is_it() {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let proxy: IpAddr = "10.1.2.3".parse().unwrap();
        let outsider: IpAddr = "198.51.100.9".parse().unwrap();
        let at = |s: &str| s.parse::<IpAddr>().unwrap();
        let xff = |values: &[&str]| {
            let mut headers = axum::http::HeaderMap::new();
            for v in values {
                headers.append("x-forwarded-for", v.parse().unwrap());
            }
            forwarded_hops(&headers)
        };
        // From a client, the header is the client's own writing.
        assert_eq!(
            client_address(outsider, &xff(&["203.0.113.1"]), &trusted),
            outsider
        );
        // Through proxies: the client's forged entries on the left are skipped.
        assert_eq!(
            client_address(proxy, &xff(&["1.2.3.4, 203.0.113.1, 10.9.9.9"]), &trusted),
            at("203.0.113.1")
        );
        assert_eq!(
            client_address(proxy, &xff(&["203.0.113.1", "10.9.9.9"]), &trusted),
            at("203.0.113.1")
        );
        assert_eq!(
            client_address(proxy, &xff(&["[2001:db8::1]:443"]), &trusted),
            at("2001:db8::1")
        );
        // Garbage stops the walk at the last proxy; no header leaves the proxy itself.
        assert_eq!(
            client_address(proxy, &xff(&["evil, 10.9.9.9"]), &trusted),
            at("10.9.9.9")
        );
        assert_eq!(client_address(proxy, &xff(&[]), &trusted), proxy);
    }

    #[test]
    fn the_standard_forwarded_header_names_the_client_and_wins_over_x_forwarded_for() {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let proxy: IpAddr = "10.1.2.3".parse().unwrap();
        let hops = |forwarded: &[&str], xff: Option<&str>| {
            let mut headers = axum::http::HeaderMap::new();
            for v in forwarded {
                headers.append("forwarded", v.parse().unwrap());
            }
            if let Some(x) = xff {
                headers.append("x-forwarded-for", x.parse().unwrap());
            }
            client_address(proxy, &forwarded_hops(&headers), &trusted).to_string()
        };
        assert_eq!(
            hops(
                &["for=192.0.2.60;proto=https;by=10.1.2.3"],
                Some("198.51.100.1")
            ),
            "192.0.2.60"
        );
        assert_eq!(
            hops(
                &["for=1.2.3.4, for=\"[2001:db8::7]:4711\", for=10.9.9.9"],
                None
            ),
            "2001:db8::7"
        );
        assert_eq!(
            hops(&["for=1.2.3.4", "for=203.0.113.5"], None),
            "203.0.113.5"
        );
        // An unknown or obfuscated hop, or an element without for=, stops the walk at the last trusted proxy.
        assert_eq!(
            hops(&["for=203.0.113.5, for=unknown, for=10.9.9.9"], None),
            "10.9.9.9"
        );
        assert_eq!(hops(&["for=203.0.113.5, for=_hidden"], None), "10.1.2.3");
        assert_eq!(hops(&["for=203.0.113.5, proto=https"], None), "10.1.2.3");
        assert_eq!(hops(&["for=\"not an address"], None), "10.1.2.3");
    }

    #[test]
    fn stream_slots_are_capped_per_address_and_per_tenant_and_given_back() {
        let counts = Arc::new(StreamCounts::default());
        let ip = StreamKey::Client(std::net::IpAddr::from([127, 0, 0, 1]));
        let a = counts.take(ip.clone(), 2).unwrap();
        let _b = counts.take(ip.clone(), 2).unwrap();
        assert!(counts.take(ip.clone(), 2).is_none());
        drop(a);
        assert!(counts.take(ip, 2).is_some());
        let acme = StreamKey::Tenant("acme".into());
        let _c = counts.take(acme.clone(), 1).unwrap();
        assert!(counts.take(acme, 1).is_none());
        assert!(counts.take(StreamKey::Tenant("beta".into()), 1).is_some());
    }
}
