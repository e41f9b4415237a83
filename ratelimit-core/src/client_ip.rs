//! Who the client is, behind proxies: the peer address, unless the peer is a trusted proxy,
//! then the right-most address of the one header that proxy writes that is not itself a
//! trusted proxy.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use crate::errors::Error;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// Single-address headers of well-known proxies, accepted by name by
/// [`ClientIpHeader::from_str`].
const WELL_KNOWN: [&str; 4] = [
    "cf-connecting-ip",
    "fly-client-ip",
    "true-client-ip",
    "x-envoy-external-address",
];

/// The one header in which the trusted proxies write the client's address: the only
/// forwarding header [`TrustedProxies`] reads. Pick the one your proxy writes; a client can
/// send every other one, so none is ever a fallback for another.
///
/// | variant | header | written by |
/// |---|---|---|
/// | `XForwardedFor` (default) | `X-Forwarded-For` | nginx (`$proxy_add_x_forwarded_for`), HAProxy, AWS ALB, Google Cloud LB, most CDNs |
/// | `Forwarded` | RFC 7239 `Forwarded` (its `for=`) | proxies configured for RFC 7239 |
/// | `XRealIp` | `X-Real-IP` | nginx (`proxy_set_header X-Real-IP $remote_addr`) |
/// | `Custom(name)` | a header holding one address | Cloudflare (`CF-Connecting-IP`), Fly.io (`Fly-Client-IP`), Akamai (`True-Client-IP`) |
///
/// From an environment variable or a config file, parse it: `"forwarded".parse()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientIpHeader {
    /// `X-Forwarded-For`: each proxy appends the address it received the request from.
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239): each proxy appends an element; its `for=` is the address.
    Forwarded,
    /// `X-Real-IP`: the proxy sets the address it received the request from.
    XRealIp,
    /// Another header in which the proxy sets the client's address (`1.2.3.4`,
    /// `1.2.3.4:5678`, `2001:db8::1` or `[2001:db8::1]:5678`).
    Custom(HeaderName),
}

impl ClientIpHeader {
    /// The header's name.
    pub fn name(&self) -> &HeaderName {
        match self {
            ClientIpHeader::XForwardedFor => &X_FORWARDED_FOR,
            ClientIpHeader::Forwarded => &http::header::FORWARDED,
            ClientIpHeader::XRealIp => &X_REAL_IP,
            ClientIpHeader::Custom(name) => name,
        }
    }

    /// `Custom` naming a header that has a variant of its own is that variant (so that
    /// `Custom("forwarded")` reads `for=` like `Forwarded` does).
    fn normalized(self) -> ClientIpHeader {
        match self {
            ClientIpHeader::Custom(name) if name == X_FORWARDED_FOR => {
                ClientIpHeader::XForwardedFor
            }
            ClientIpHeader::Custom(name) if name == http::header::FORWARDED => {
                ClientIpHeader::Forwarded
            }
            ClientIpHeader::Custom(name) if name == X_REAL_IP => ClientIpHeader::XRealIp,
            other => other,
        }
    }
}

impl fmt::Display for ClientIpHeader {
    /// The header's name, as [`FromStr`] reads it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientIpHeader::Custom(name) if !WELL_KNOWN.contains(&name.as_str()) => {
                write!(f, "custom:{name}")
            }
            other => f.write_str(other.name().as_str()),
        }
    }
}

impl FromStr for ClientIpHeader {
    type Err = Error;

    /// `x-forwarded-for`, `forwarded`, `x-real-ip`, `cf-connecting-ip`, `fly-client-ip`,
    /// `true-client-ip`, `x-envoy-external-address` (any case), or `custom:<header-name>` for
    /// another single-address header. Any other value is an error, so that a misspelt header
    /// is not silently read as a header no proxy sends.
    ///
    /// ```
    /// use ratelimit_core::ClientIpHeader;
    ///
    /// assert_eq!("Forwarded".parse::<ClientIpHeader>()?, ClientIpHeader::Forwarded);
    /// let custom: ClientIpHeader = "custom:X-Client-Address".parse()?;
    /// assert_eq!(custom.name(), "x-client-address");
    /// assert!("x-forwarded-four".parse::<ClientIpHeader>().is_err());
    /// # Ok::<(), ratelimit_core::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<ClientIpHeader, Error> {
        let s = s.trim();
        let header = |name: &str| {
            HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                Error::Config(format!("client IP header `{name}` is not a header name"))
            })
        };
        let lower = s.to_ascii_lowercase();
        if let Some(custom) = lower.strip_prefix("custom:") {
            return Ok(ClientIpHeader::Custom(header(custom)?).normalized());
        }
        match lower.as_str() {
            "x-forwarded-for" => Ok(ClientIpHeader::XForwardedFor),
            "forwarded" => Ok(ClientIpHeader::Forwarded),
            "x-real-ip" => Ok(ClientIpHeader::XRealIp),
            known if WELL_KNOWN.contains(&known) => Ok(ClientIpHeader::Custom(header(known)?)),
            _ => Err(Error::Config(format!(
                "unknown client IP header `{s}`; expected one of `x-forwarded-for`, \
                 `forwarded`, `x-real-ip`, `{}`, or `custom:<header-name>` for another header \
                 your proxy sets",
                WELL_KNOWN.join("`, `")
            ))),
        }
    }
}

/// The proxies whose forwarding header is believed, and that header. Empty by default: then
/// only the peer address counts, and no header changes anything.
///
/// From a peer in the trusted networks, and only then, the client is read from the one
/// [`ClientIpHeader`] chosen with [`header`](TrustedProxies::header) (`X-Forwarded-For` by
/// default); every other forwarding header is ignored, whatever it says. The header's
/// entries (all its lines, in order) are walked from the right, the entry the nearest proxy
/// wrote: the first address that is not a trusted proxy is the client. Everything left of
/// it is what the client sent, and never read. The walk also stops at an entry that is not
/// an address (`unknown`, an obfuscated `_id`, garbage, a `Forwarded` element without
/// `for=`) and at the left end; then the client is the last address reached: the trusted
/// proxy that wrote that entry, or the peer itself when the header is absent. So a request
/// from a trusted proxy always has a client address, never "no key".
///
/// Addresses inside the trusted networks are believed as proxies: trust your proxies'
/// addresses, not whole networks your clients live in.
///
/// ```
/// use ratelimit_core::{ClientIpHeader, TrustedProxies};
/// use http::HeaderMap;
///
/// let proxies = TrustedProxies::new(["10.0.0.0/8", "fd00::/8"])?;
/// let mut headers = HeaderMap::new();
/// headers.insert("x-forwarded-for", "203.0.113.7, 10.1.2.3".parse()?);
/// headers.insert("forwarded", "for=198.51.100.99".parse()?); // sent by the client: ignored
/// // The peer is our load balancer; it appended the client, behind another proxy of ours.
/// let client = proxies.client_ip("10.0.0.2".parse()?, &headers);
/// assert_eq!(client, "203.0.113.7".parse::<std::net::IpAddr>()?);
/// // From an untrusted peer, the header is ignored.
/// let client = proxies.client_ip("198.51.100.1".parse()?, &headers);
/// assert_eq!(client, "198.51.100.1".parse::<std::net::IpAddr>()?);
///
/// // Behind Cloudflare, only the header it sets counts.
/// let cloudflare = TrustedProxies::new(["173.245.48.0/20", "103.21.244.0/22"])?
///     .header(ClientIpHeader::Custom("cf-connecting-ip".parse()?));
/// headers.insert("cf-connecting-ip", "192.0.2.44".parse()?);
/// let client = cloudflare.client_ip("173.245.48.1".parse()?, &headers);
/// assert_eq!(client, "192.0.2.44".parse::<std::net::IpAddr>()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    header: ClientIpHeader,
}

impl TrustedProxies {
    /// Trust these networks (CIDRs like `10.0.0.0/8`, or single addresses), reading
    /// `X-Forwarded-For` from them (see [`header`](TrustedProxies::header)).
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
        Ok(TrustedProxies {
            nets,
            header: ClientIpHeader::default(),
        })
    }

    /// Trust no proxy (the default).
    pub fn none() -> TrustedProxies {
        TrustedProxies::default()
    }

    /// From the environment: `TRUSTED_PROXIES`, comma-separated CIDRs or addresses (unset or
    /// empty: none), and `TRUSTED_PROXY_HEADER`, the header they write the client in (unset
    /// or empty: `x-forwarded-for`; the values are [`ClientIpHeader`]'s
    /// [`from_str`](ClientIpHeader::from_str)).
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable and its entry that is not valid.
    pub fn from_env() -> Result<TrustedProxies, Error> {
        let var = |name: &str| match std::env::var(name) {
            Ok(value) => Ok(Some(value)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(Error::Config(format!("{name} is not valid UTF-8")))
            }
        };
        TrustedProxies::from_values(
            var("TRUSTED_PROXIES")?.as_deref(),
            var("TRUSTED_PROXY_HEADER")?.as_deref(),
        )
    }

    /// [`from_env`](TrustedProxies::from_env) on the variables' values.
    fn from_values(proxies: Option<&str>, header: Option<&str>) -> Result<TrustedProxies, Error> {
        let in_var = |name: &'static str| move |e: Error| Error::Config(format!("{name}: {e}"));
        let cidrs = proxies.unwrap_or_default().split(',');
        let trusted = TrustedProxies::new(cidrs.filter(|c| !c.trim().is_empty()))
            .map_err(in_var("TRUSTED_PROXIES"))?;
        match header.filter(|h| !h.trim().is_empty()) {
            Some(h) => Ok(trusted.header(h.parse().map_err(in_var("TRUSTED_PROXY_HEADER"))?)),
            None => Ok(trusted),
        }
    }

    /// Read the client from this header of the trusted proxies, and from no other
    /// (`X-Forwarded-For` by default).
    #[must_use]
    pub fn header(mut self, header: ClientIpHeader) -> TrustedProxies {
        self.header = header.normalized();
        self
    }

    /// The header the client is read from.
    pub fn client_ip_header(&self) -> &ClientIpHeader {
        &self.header
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The client's address for a request from `peer` with `headers`: the peer, unless it
    /// is a trusted proxy; then the right-most address in the chosen header that is not a
    /// trusted proxy, or the last trusted hop that can be attributed (the type's docs give
    /// the rule). Never absent: a proxy that forwards `unknown` is the client itself.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = canonical(peer);
        if !self.contains(client) {
            return client;
        }
        for hop in self.hops_from_the_right(headers) {
            // Not an address: the proxy that wrote it vouches for nothing further left.
            let Some(ip) = hop else { break };
            client = canonical(ip);
            if !self.contains(client) {
                break;
            }
        }
        client
    }

    /// The chosen header's entries, the nearest proxy's first; `None` for an entry that is
    /// not an address. Raw bytes, so that what a client put left of an entry (non-ASCII
    /// bytes, stray quotes) cannot spoil it.
    fn hops_from_the_right<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> impl Iterator<Item = Option<IpAddr>> + 'a {
        let forwarded = self.header == ClientIpHeader::Forwarded;
        headers
            .get_all(self.header.name())
            .iter()
            .rev()
            .flat_map(|line| line.as_bytes().rsplit(|b| *b == b','))
            .map(move |entry| {
                if forwarded {
                    forwarded_for(entry)
                } else {
                    parse_node(entry)
                }
            })
    }
}

/// IPv4-mapped IPv6 addresses are the IPv4 client.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// The address in the `for=` parameter of one RFC 7239 `Forwarded` element.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    element.split(|b| *b == b';').find_map(|pair| {
        let eq = pair.iter().position(|b| *b == b'=')?;
        let (key, value) = (pair[..eq].trim_ascii(), &pair[eq + 1..]);
        if !key.eq_ignore_ascii_case(b"for") {
            return None;
        }
        let value = value.trim_ascii();
        let unquoted = value
            .strip_prefix(b"\"")
            .and_then(|v| v.strip_suffix(b"\""))
            .unwrap_or(value);
        parse_node(unquoted)
    })
}

/// An address as proxies write it: `1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]:80`, `2001:db8::1`.
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let node = std::str::from_utf8(node.trim_ascii()).ok()?;
    if let Ok(ip) = IpAddr::from_str(node) {
        return Some(ip);
    }
    if let Ok(sock) = SocketAddr::from_str(node) {
        return Some(sock.ip());
    }
    let inner = node.strip_prefix('[')?.strip_suffix(']')?;
    IpAddr::from_str(inner).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use http::HeaderValue;
    use proptest::prelude::*;

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

    /// Our proxies are in 10.0.0.0/8.
    fn ours() -> TrustedProxies {
        TrustedProxies::new(["10.0.0.0/8"]).unwrap()
    }

    #[test]
    fn untrusted_peers_cannot_spoof() {
        let none = TrustedProxies::none();
        let h = headers(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("forwarded", "for=2.2.2.2"),
            ("x-real-ip", "3.3.3.3"),
        ]);
        assert_eq!(none.client_ip(ip("198.51.100.9"), &h), ip("198.51.100.9"));
        let some = ours();
        assert_eq!(some.client_ip(ip("198.51.100.9"), &h), ip("198.51.100.9"));
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        let p = TrustedProxies::new(["10.0.0.0/8", "192.168.1.1"]).unwrap();
        // The client forged "6.6.6.6"; our proxies appended the real address 203.0.113.5.
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 203.0.113.5, 10.0.0.7")]);
        assert_eq!(p.client_ip(ip("192.168.1.1"), &h), ip("203.0.113.5"));
        // Several header lines are one list.
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "203.0.113.5"),
        ]);
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), ip("203.0.113.5"));
        // Every hop is ours: the left-most is as close to the client as we can know.
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 10.0.0.7")]);
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), ip("10.9.9.9"));
    }

    /// The issue's bypass: the proxy appends to `X-Forwarded-For` and passes the client's
    /// own `Forwarded` through; only the chosen header counts.
    #[test]
    fn only_the_chosen_header_is_read() {
        let xff = TrustedProxies::new(["127.0.0.0/8"]).unwrap();
        let h = headers(&[
            ("forwarded", "for=1.1.1.1"),
            ("x-real-ip", "2.2.2.2"),
            ("x-forwarded-for", "8.8.4.4"),
        ]);
        assert_eq!(xff.client_ip(ip("127.0.0.1"), &h), ip("8.8.4.4"));
        let fwd = xff.clone().header(ClientIpHeader::Forwarded);
        assert_eq!(fwd.client_ip(ip("127.0.0.1"), &h), ip("1.1.1.1"));
        let real = xff.clone().header(ClientIpHeader::XRealIp);
        assert_eq!(real.client_ip(ip("127.0.0.1"), &h), ip("2.2.2.2"));
        // The chosen header absent: the others are not a fallback, the proxy is the client.
        let cf = xff.header("cf-connecting-ip".parse().unwrap());
        assert_eq!(cf.client_ip(ip("127.0.0.1"), &h), ip("127.0.0.1"));
    }

    #[test]
    fn forwarded_is_parsed() {
        let p = ours().header(ClientIpHeader::Forwarded);
        let h = headers(&[(
            "forwarded",
            "for=192.0.2.60;proto=http;by=203.0.113.43, For=\"[2001:db8:cafe::17]:4711\"",
        )]);
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), ip("2001:db8:cafe::17"));
        let h = headers(&[("forwarded", "proto=https;for=192.0.2.61:8080")]);
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), ip("192.0.2.61"));
    }

    /// An entry that is not an address stops the walk at the trusted hop that wrote it:
    /// never "no key", and never an address further left, which the client wrote.
    #[test]
    fn an_entry_that_is_not_an_address_is_its_proxy() {
        let p = ours().header(ClientIpHeader::Forwarded);
        for value in [
            "for=unknown",
            "for=_hidden",
            "for=1.1.1.1, for=unknown",
            "for=1.1.1.1, proto=https",
            "for=1.1.1.1, for=\"\"",
            "for=1.1.1.1, garbage",
        ] {
            let h = headers(&[("forwarded", value)]);
            assert_eq!(p.client_ip(ip("10.0.0.1"), &h), ip("10.0.0.1"), "{value}");
        }
        let h = headers(&[("forwarded", "for=1.1.1.1, for=unknown, for=10.0.0.9")]);
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), ip("10.0.0.9"));
        let xff = ours();
        let h = headers(&[("x-forwarded-for", "1.1.1.1, unknown")]);
        assert_eq!(xff.client_ip(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        // No header at all: the proxy itself is the client we can see.
        assert_eq!(
            xff.client_ip(ip("10.0.0.1"), &HeaderMap::new()),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn what_the_client_wrote_left_of_the_proxy_cannot_spoil_it() {
        let p = ours();
        let mut h = HeaderMap::new();
        let mut bytes = b"\xff\xfe 6.6.6.6 \"".to_vec();
        bytes.extend_from_slice(b", 203.0.113.5");
        h.append("x-forwarded-for", HeaderValue::from_bytes(&bytes).unwrap());
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), ip("203.0.113.5"));
        let p = p.header(ClientIpHeader::Forwarded);
        let mut h = HeaderMap::new();
        h.append(
            "forwarded",
            HeaderValue::from_bytes(b"for=\"6.6.6.6, for=\xff\", for=203.0.113.5").unwrap(),
        );
        assert_eq!(p.client_ip(ip("10.0.0.1"), &h), ip("203.0.113.5"));
    }

    #[test]
    fn ipv4_mapped_addresses_are_ipv4() {
        let p = ours();
        let h = headers(&[("x-forwarded-for", "::ffff:192.0.2.1")]);
        assert_eq!(p.client_ip(ip("::ffff:10.0.0.1"), &h), ip("192.0.2.1"));
    }

    #[test]
    fn header_names_parse_and_misspellings_are_errors() {
        assert_eq!(
            "X-Forwarded-For".parse::<ClientIpHeader>().unwrap(),
            ClientIpHeader::XForwardedFor
        );
        assert_eq!(
            " x-real-ip ".parse::<ClientIpHeader>().unwrap(),
            ClientIpHeader::XRealIp
        );
        let fly: ClientIpHeader = "Fly-Client-IP".parse().unwrap();
        assert_eq!(fly.name(), "fly-client-ip");
        assert_eq!(fly.to_string(), "fly-client-ip");
        let custom: ClientIpHeader = "custom:X-Client".parse().unwrap();
        assert_eq!(custom.to_string(), "custom:x-client");
        assert_eq!(
            custom.to_string().parse::<ClientIpHeader>().unwrap(),
            custom
        );
        assert_eq!(
            "custom:forwarded".parse::<ClientIpHeader>().unwrap(),
            ClientIpHeader::Forwarded
        );
        let e = "x-forwarded-four"
            .parse::<ClientIpHeader>()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`x-forwarded-four`") && e.contains("custom:"),
            "{e}"
        );
        let e = "custom:bad header"
            .parse::<ClientIpHeader>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a header name"), "{e}");
    }

    #[test]
    fn the_environment_names_its_variable() {
        let p = TrustedProxies::from_values(None, None).unwrap();
        assert_eq!(p, TrustedProxies::none());
        let p = TrustedProxies::from_values(Some("10.0.0.0/8, ,127.0.0.1"), Some(" ")).unwrap();
        assert!(p.contains(ip("127.0.0.1")) && p.contains(ip("10.2.3.4")));
        assert_eq!(p.client_ip_header(), &ClientIpHeader::XForwardedFor);
        let p = TrustedProxies::from_values(Some("10.0.0.0/8"), Some("forwarded")).unwrap();
        assert_eq!(p.client_ip_header(), &ClientIpHeader::Forwarded);
        let e = TrustedProxies::from_values(Some("ten"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("TRUSTED_PROXIES") && e.contains("`ten`"), "{e}");
        let e = TrustedProxies::from_values(Some("10.0.0.0/8"), Some("xff"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("TRUSTED_PROXY_HEADER") && e.contains("`xff`"),
            "{e}"
        );
    }

    #[test]
    fn bad_cidrs_are_named() {
        let e = TrustedProxies::new(["10.0.0.0/8", "ten"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`ten`"), "{e}");
    }

    /// Anything a client can send, in any forwarding header.
    fn client_value() -> impl Strategy<Value = Vec<u8>> {
        let address = prop_oneof![
            any::<IpAddr>().prop_map(|a| a.to_string()),
            any::<std::net::SocketAddr>().prop_map(|a| a.to_string()),
        ];
        let entry = prop_oneof![
            address.clone(),
            address.clone().prop_map(|a| format!("for={a}")),
            address.prop_map(|a| format!("for=\"{a}\";proto=https")),
            Just("unknown".to_owned()),
            Just("for=unknown".to_owned()),
            Just("\"".to_owned()),
            Just("10.0.0.3".to_owned()),
            "[ -~]{0,12}",
        ];
        prop_oneof![
            prop::collection::vec(entry, 0..4).prop_map(|e| e.join(", ").into_bytes()),
            prop::collection::vec(any::<u8>(), 0..24).prop_map(|mut bytes| {
                // A header value holds no control bytes but tab.
                bytes.retain(|b| *b == b'\t' || (*b >= 0x20 && *b != 0x7f));
                bytes
            }),
        ]
    }

    const NAMES: [&str; 5] = [
        "x-forwarded-for",
        "forwarded",
        "x-real-ip",
        "cf-connecting-ip",
        "x-client",
    ];

    fn source() -> impl Strategy<Value = ClientIpHeader> {
        prop_oneof![
            Just(ClientIpHeader::XForwardedFor),
            Just(ClientIpHeader::Forwarded),
            Just(ClientIpHeader::XRealIp),
            Just(ClientIpHeader::Custom(HeaderName::from_static(
                "cf-connecting-ip"
            ))),
            Just(ClientIpHeader::Custom(HeaderName::from_static("x-client"))),
        ]
    }

    /// How the proxy writes the address it received the request from into its header.
    fn proxy_entry(header: &ClientIpHeader, client: IpAddr) -> String {
        match (header, client) {
            (ClientIpHeader::Forwarded, IpAddr::V6(v6)) => format!("for=\"[{v6}]\""),
            (ClientIpHeader::Forwarded, v4) => format!("for={v4}"),
            (_, any) => any.to_string(),
        }
    }

    proptest! {
        /// Whatever a client writes in any forwarding header, before and after its own
        /// lines, the client is the address the trusted proxy appended: an untrusted client
        /// never chooses its bucket.
        #[test]
        fn a_client_never_chooses_its_address(
            header in source(),
            sent in prop::collection::vec((0..NAMES.len(), client_value(), any::<bool>()), 0..8),
            real in any::<IpAddr>().prop_filter("an untrusted client", |a| {
                !ours().contains(*a)
            }),
            joined in any::<bool>(),
            second_proxy in any::<bool>(),
        ) {
            let proxies = ours().header(header.clone());
            let mut h = HeaderMap::new();
            for (which, value, _) in &sent {
                h.append(NAMES[*which], HeaderValue::from_bytes(value).unwrap());
            }
            // The proxy appends the peer it saw: to the client's last line of its header
            // (`, ` joined, as nginx does) or as a line of its own; maybe a second trusted
            // proxy appends the first.
            let mut entry = proxy_entry(&header, real);
            if second_proxy {
                entry = format!("{entry}, {}", proxy_entry(&header, "10.0.0.7".parse().unwrap()));
            }
            let name = header.name().clone();
            let mut lines: Vec<Vec<u8>> =
                h.get_all(&name).iter().map(|v| v.as_bytes().to_vec()).collect();
            h.remove(&name);
            match lines.last_mut() {
                Some(line) if joined => line.extend_from_slice(format!(", {entry}").as_bytes()),
                _ => lines.push(entry.into_bytes()),
            }
            for line in lines {
                h.append(&name, HeaderValue::from_bytes(&line).unwrap());
            }
            // Headers the client sent after the proxy's line would be a proxy bug; the
            // client's other headers may come in any order.
            for (which, value, after) in &sent {
                if *after && NAMES[*which] != name.as_str() {
                    h.append(NAMES[*which], HeaderValue::from_bytes(value).unwrap());
                }
            }
            let peer: IpAddr = "10.0.0.1".parse().unwrap();
            prop_assert_eq!(proxies.client_ip(peer, &h), canonical(real));
        }
    }
}
