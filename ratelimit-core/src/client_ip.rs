//! Who the client is, behind proxies: the peer address, unless the peer is a trusted proxy,
//! then the right-most address in the forwarding headers that is not a trusted proxy.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use http::HeaderMap;
use ipnet::IpNet;

use crate::Error;

/// The networks whose forwarding headers (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`) are
/// believed. Empty by default: then only the peer address counts, and a spoofed header changes
/// nothing.
///
/// ```
/// use ratelimit_core::TrustedProxies;
/// use http::HeaderMap;
///
/// let proxies = TrustedProxies::new(["10.0.0.0/8", "fd00::/8"]).unwrap();
/// let mut headers = HeaderMap::new();
/// headers.insert("x-forwarded-for", "203.0.113.7, 10.1.2.3".parse().unwrap());
/// // The peer is our load balancer; it appended the client, behind another proxy of ours.
/// let client = proxies.client_ip("10.0.0.2".parse().unwrap(), &headers);
/// assert_eq!(client, Some("203.0.113.7".parse().unwrap()));
/// // From an untrusted peer, the header is ignored.
/// let client = proxies.client_ip("198.51.100.1".parse().unwrap(), &headers);
/// assert_eq!(client, Some("198.51.100.1".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// Trust these networks (CIDRs like `10.0.0.0/8`, or single addresses).
    ///
    /// # Errors
    /// [`Error::Config`] naming the entry that is neither a CIDR nor an address.
    pub fn new<I, S>(cidrs: I) -> Result<TrustedProxies, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nets = cidrs
            .into_iter()
            .map(|c| {
                let c = c.as_ref().trim();
                IpNet::from_str(c)
                    .or_else(|_| IpAddr::from_str(c).map(IpNet::from))
                    .map_err(|_| {
                        Error::Config(format!(
                            "trusted proxy `{c}` is neither a CIDR (10.0.0.0/8) nor an IP address"
                        ))
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies { nets })
    }

    /// Trust no proxy (the default).
    pub fn none() -> TrustedProxies {
        TrustedProxies::default()
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The client's address for a request from `peer` with `headers`; `None` when a trusted
    /// proxy forwarded something that is not an address (`unknown`, an obfuscated id): such a
    /// request has no client key.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = canonical(peer);
        if !self.contains(peer) {
            return Some(peer);
        }
        let hops = forwarded_hops(headers);
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop {
                Some(ip) => {
                    client = canonical(*ip);
                    if !self.contains(client) {
                        return Some(client);
                    }
                }
                None => return None,
            }
        }
        // Every hop is ours: the left-most one is as close to the client as we can know.
        Some(client)
    }
}

/// IPv4-mapped IPv6 addresses are the IPv4 client.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// The forwarding chain, left (client side) to right (nearest proxy), from `Forwarded`, else
/// `X-Forwarded-For`, else `X-Real-IP`. `None` marks an entry that is not an address.
fn forwarded_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let forwarded: Vec<Option<IpAddr>> = headers
        .get_all(http::header::FORWARDED)
        .iter()
        .flat_map(|v| v.to_str().map_or_else(|_| vec![None], parse_forwarded))
        .collect();
    if !forwarded.is_empty() {
        return forwarded;
    }
    let xff: Vec<Option<IpAddr>> = headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|v| match v.to_str() {
            Ok(s) => s.split(',').map(|h| parse_node(h.trim())).collect(),
            Err(_) => vec![None],
        })
        .collect();
    if !xff.is_empty() {
        return xff;
    }
    headers
        .get("x-real-ip")
        .map(|v| vec![v.to_str().ok().and_then(|s| parse_node(s.trim()))])
        .unwrap_or_default()
}

/// The `for=` nodes of an RFC 7239 `Forwarded` value.
fn parse_forwarded(value: &str) -> Vec<Option<IpAddr>> {
    value
        .split(',')
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                k.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| parse_node(v.trim().trim_matches('"')))
            })
        })
        .collect()
}

/// An address as proxies write it: `1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]:80`, `2001:db8::1`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = IpAddr::from_str(node) {
        return Some(ip);
    }
    if let Ok(sock) = SocketAddr::from_str(node) {
        return Some(sock.ip());
    }
    let inner = node.strip_prefix('[')?.split(']').next()?;
    IpAddr::from_str(inner).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peers_cannot_spoof() {
        let none = TrustedProxies::none();
        let h = headers(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("forwarded", "for=2.2.2.2"),
            ("x-real-ip", "3.3.3.3"),
        ]);
        assert_eq!(
            none.client_ip(ip("198.51.100.9"), &h),
            Some(ip("198.51.100.9"))
        );
        let some = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        assert_eq!(
            some.client_ip(ip("198.51.100.9"), &h),
            Some(ip("198.51.100.9"))
        );
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        let p = TrustedProxies::new(["10.0.0.0/8", "192.168.1.1"]).unwrap();
        // The client forged "6.6.6.6"; our proxies appended the real address 203.0.113.5.
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 203.0.113.5, 10.0.0.7")]);
        assert_eq!(p.client_ip(ip("192.168.1.1"), &h), Some(ip("203.0.113.5")));
        // Several header lines are one list.
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "203.0.113.5"),
        ]);
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), Some(ip("203.0.113.5")));
    }

    #[test]
    fn forwarded_wins_and_is_parsed() {
        let p = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let h = headers(&[
            (
                "forwarded",
                "for=192.0.2.60;proto=http;by=203.0.113.43, for=\"[2001:db8:cafe::17]:4711\"",
            ),
            ("x-forwarded-for", "9.9.9.9"),
        ]);
        assert_eq!(
            p.client_ip(ip("10.0.0.1"), &h),
            Some(ip("2001:db8:cafe::17"))
        );
        let h = headers(&[("x-real-ip", "192.0.2.1")]);
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), Some(ip("192.0.2.1")));
    }

    #[test]
    fn garbage_from_a_trusted_proxy_gives_no_client() {
        let p = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let h = headers(&[("forwarded", "for=unknown")]);
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), None);
        // No header at all: the proxy itself is the client we can see.
        assert_eq!(
            p.client_ip(ip("10.0.0.1"), &HeaderMap::new()),
            Some(ip("10.0.0.1"))
        );
    }

    #[test]
    fn bad_cidrs_are_named() {
        let e = TrustedProxies::new(["10.0.0.0/8", "ten"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`ten`"), "{e}");
    }
}
