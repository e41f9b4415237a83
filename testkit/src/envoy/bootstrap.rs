//! Envoy's v3 YAML of one listener with the HTTP rate-limit filter ([`Bootstrap`]).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use super::{Ports, RATELIMIT_CLUSTER, UPSTREAM_CLUSTER};

/// An Envoy v3 bootstrap ([`yaml`](Bootstrap::yaml)): an admin interface and one HTTP
/// listener on 127.0.0.1, every request routed to the cluster [`UPSTREAM_CLUSTER`] (one
/// endpoint), optionally through the `envoy.filters.http.ratelimit` filter
/// ([`RateLimitFilter`]) with the route's `rate_limits` ([`RateLimitPolicy`]).
#[derive(Debug, Clone)]
pub struct Bootstrap {
    upstream: SocketAddr,
    filter: Option<RateLimitFilter>,
    route_rate_limits: Vec<RateLimitPolicy>,
}

impl Bootstrap {
    /// Everything routed to `upstream`, with no rate limiting.
    pub fn new(upstream: SocketAddr) -> Bootstrap {
        Bootstrap {
            upstream,
            filter: None,
            route_rate_limits: Vec::new(),
        }
    }

    /// The HTTP rate-limit filter, before the router.
    #[must_use]
    pub fn rate_limit_filter(mut self, filter: RateLimitFilter) -> Bootstrap {
        self.filter = Some(filter);
        self
    }

    /// One more entry of the route's `rate_limits` (route-level: the rate-limit filter asks
    /// for the descriptors of every entry of the route it routes to).
    #[must_use]
    pub fn route_rate_limit(mut self, policy: RateLimitPolicy) -> Bootstrap {
        self.route_rate_limits.push(policy);
        self
    }

    /// The YAML, on `ports`.
    pub fn yaml(&self, ports: Ports) -> String {
        let mut y = String::new();
        let w = &mut y;
        line(w, 0, "admin:");
        line(w, 2, "address:");
        socket_address(w, 4, "127.0.0.1", ports.admin);
        line(w, 0, "static_resources:");
        line(w, 2, "listeners:");
        line(w, 2, "- name: ingress");
        line(w, 4, "address:");
        socket_address(w, 6, "127.0.0.1", ports.listener);
        line(w, 4, "filter_chains:");
        line(w, 4, "- filters:");
        line(
            w,
            6,
            "- name: envoy.filters.network.http_connection_manager",
        );
        line(w, 8, "typed_config:");
        line(
            w,
            10,
            "\"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        );
        line(w, 10, "stat_prefix: ingress");
        line(w, 10, "codec_type: AUTO");
        line(w, 10, "route_config:");
        line(w, 12, "name: local");
        line(w, 12, "virtual_hosts:");
        line(w, 12, "- name: all");
        line(w, 14, "domains: [\"*\"]");
        line(w, 14, "routes:");
        line(w, 14, "- match: {prefix: \"/\"}");
        line(w, 16, "route:");
        line(w, 18, &format!("cluster: {UPSTREAM_CLUSTER}"));
        if !self.route_rate_limits.is_empty() {
            line(w, 18, "rate_limits:");
            for policy in &self.route_rate_limits {
                policy.write(w, 18);
            }
        }
        line(w, 10, "http_filters:");
        if let Some(filter) = &self.filter {
            filter.write(w, 10);
        }
        line(w, 10, "- name: envoy.filters.http.router");
        line(w, 12, "typed_config:");
        line(
            w,
            14,
            "\"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
        );
        line(w, 2, "clusters:");
        cluster(w, UPSTREAM_CLUSTER, &[self.upstream], false);
        if let Some(filter) = &self.filter {
            cluster(w, RATELIMIT_CLUSTER, &filter.services, true);
        }
        y
    }
}

/// The `envoy.filters.http.ratelimit` filter's configuration
/// (`envoy.extensions.filters.http.ratelimit.v3.RateLimit`), calling the rate-limit service
/// at one address or more (the cluster [`RATELIMIT_CLUSTER`], HTTP/2) over gRPC (`envoy_grpc`,
/// transport API V3). By default: `failure_mode_deny: false`, a timeout of 1 s, and none of
/// the optional headers.
#[derive(Debug, Clone)]
pub struct RateLimitFilter {
    domain: String,
    services: Vec<SocketAddr>,
    failure_mode_deny: bool,
    timeout: Duration,
    x_ratelimit_headers: bool,
    rate_limited_as_resource_exhausted: bool,
    retry_after_header: bool,
    stat_prefix: Option<String>,
    rate_limits: Vec<RateLimitPolicy>,
}

impl RateLimitFilter {
    /// The filter for `domain`, calling the service at `service`.
    pub fn new(domain: &str, service: SocketAddr) -> RateLimitFilter {
        RateLimitFilter {
            domain: domain.to_owned(),
            services: vec![service],
            failure_mode_deny: false,
            timeout: Duration::from_secs(1),
            x_ratelimit_headers: false,
            rate_limited_as_resource_exhausted: false,
            retry_after_header: false,
            stat_prefix: None,
            rate_limits: Vec::new(),
        }
    }

    /// One more endpoint of the service's cluster (Envoy balances its calls over them).
    #[must_use]
    pub fn and_service(mut self, service: SocketAddr) -> RateLimitFilter {
        self.services.push(service);
        self
    }

    /// `failure_mode_deny`: whether a request is refused when the service fails (errs, times
    /// out, is not there) instead of let through.
    #[must_use]
    pub fn failure_mode_deny(mut self, deny: bool) -> RateLimitFilter {
        self.failure_mode_deny = deny;
        self
    }

    /// `timeout`: how long Envoy waits for the service's answer.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> RateLimitFilter {
        self.timeout = timeout;
        self
    }

    /// `enable_x_ratelimit_headers: DRAFT_VERSION_03`: `X-RateLimit-Limit`, `-Remaining` and
    /// `-Reset` from the service's statuses.
    #[must_use]
    pub fn x_ratelimit_headers(mut self) -> RateLimitFilter {
        self.x_ratelimit_headers = true;
        self
    }

    /// `rate_limited_as_resource_exhausted: true`: a refused gRPC call gets
    /// `RESOURCE_EXHAUSTED`, not `UNAVAILABLE`.
    #[must_use]
    pub fn rate_limited_as_resource_exhausted(mut self) -> RateLimitFilter {
        self.rate_limited_as_resource_exhausted = true;
        self
    }

    /// `enable_retry_after_header: true`: a refusal carries `Retry-After`, from the
    /// service's `duration_until_reset`.
    #[must_use]
    pub fn retry_after_header(mut self) -> RateLimitFilter {
        self.retry_after_header = true;
        self
    }

    /// `stat_prefix`: the filter's stats are then `cluster.upstream.ratelimit.<prefix>.<stat>`
    /// (read them with [`Envoy::stat`]; [`Envoy::ratelimit_stat`] reads those without one).
    #[must_use]
    pub fn stat_prefix(mut self, prefix: &str) -> RateLimitFilter {
        self.stat_prefix = Some(prefix.to_owned());
        self
    }

    /// One more entry of the filter's own `rate_limits` (filter-level, Envoy 1.40: used in
    /// place of the route's). Envoy checks a `hits_addend` here when it loads the
    /// configuration (a `format` with exactly one substitution, not both `format` and
    /// `number`); at route level it takes any.
    #[must_use]
    pub fn rate_limit(mut self, policy: RateLimitPolicy) -> RateLimitFilter {
        self.rate_limits.push(policy);
        self
    }

    fn write(&self, w: &mut String, at: usize) {
        line(w, at, "- name: envoy.filters.http.ratelimit");
        line(w, at + 2, "typed_config:");
        let at = at + 4;
        line(
            w,
            at,
            "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
        );
        line(w, at, &format!("domain: {}", quote(&self.domain)));
        line(
            w,
            at,
            &format!("failure_mode_deny: {}", self.failure_mode_deny),
        );
        line(w, at, &format!("timeout: {}", duration(self.timeout)));
        if self.x_ratelimit_headers {
            line(w, at, "enable_x_ratelimit_headers: DRAFT_VERSION_03");
        }
        if self.rate_limited_as_resource_exhausted {
            line(w, at, "rate_limited_as_resource_exhausted: true");
        }
        if self.retry_after_header {
            line(w, at, "enable_retry_after_header: true");
        }
        if let Some(prefix) = &self.stat_prefix {
            line(w, at, &format!("stat_prefix: {}", quote(prefix)));
        }
        if !self.rate_limits.is_empty() {
            line(w, at, "rate_limits:");
            for policy in &self.rate_limits {
                policy.write(w, at);
            }
        }
        line(w, at, "rate_limit_service:");
        line(w, at + 2, "transport_api_version: V3");
        line(w, at + 2, "grpc_service:");
        line(
            w,
            at + 4,
            &format!("envoy_grpc: {{cluster_name: {RATELIMIT_CLUSTER}}}"),
        );
    }
}

/// One entry of a `rate_limits` list (`envoy.config.route.v3.RateLimit`): its actions make
/// one descriptor, one entry per action; the descriptor is left out of the call when an
/// action finds nothing (a missing header, a header match that fails).
#[derive(Debug, Clone)]
pub struct RateLimitPolicy {
    actions: Vec<Action>,
    hits_addend: Option<HitsAddend>,
    apply_on_stream_done: bool,
}

impl RateLimitPolicy {
    /// A descriptor of these actions' entries, in order.
    pub fn new(actions: impl IntoIterator<Item = Action>) -> RateLimitPolicy {
        RateLimitPolicy {
            actions: actions.into_iter().collect(),
            hits_addend: None,
            apply_on_stream_done: false,
        }
    }

    /// `hits_addend`: the descriptor's cost (its `hits_addend` in the call).
    #[must_use]
    pub fn hits_addend(mut self, hits: HitsAddend) -> RateLimitPolicy {
        self.hits_addend = Some(hits);
        self
    }

    /// `apply_on_stream_done: true`: the descriptor is sent when the stream ends, in a call
    /// of its own whose answer Envoy does not wait for, not on the request path.
    #[must_use]
    pub fn apply_on_stream_done(mut self) -> RateLimitPolicy {
        self.apply_on_stream_done = true;
        self
    }

    fn write(&self, w: &mut String, at: usize) {
        line(w, at, "- actions:");
        let at = at + 2;
        for action in &self.actions {
            action.write(w, at);
        }
        match &self.hits_addend {
            None => {}
            Some(HitsAddend::Number(n)) => line(w, at, &format!("hits_addend: {{number: {n}}}")),
            Some(HitsAddend::Format(f)) => {
                line(w, at, &format!("hits_addend: {{format: {}}}", quote(f)));
            }
        }
        if self.apply_on_stream_done {
            line(w, at, "apply_on_stream_done: true");
        }
    }
}

/// A descriptor's `hits_addend` (`envoy.config.route.v3.RateLimit.HitsAddend`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HitsAddend {
    /// `number`: a fixed cost (0: a check that takes nothing).
    Number(u64),
    /// `format`: a substitution format with one command, read when the descriptor is sent:
    /// `%REQ(x-cost)%`, or `%RESP(x-tokens-used)%` on a descriptor sent at stream end.
    Format(String),
}

/// One action of a [`RateLimitPolicy`] (`envoy.config.route.v3.RateLimit.Action`): one entry
/// of the descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `request_headers`: the entry `descriptor_key` = the header's value; no descriptor
    /// when the request lacks the header.
    RequestHeaders {
        /// The request header read.
        header_name: String,
        /// The entry's key.
        descriptor_key: String,
    },
    /// `remote_address`: the entry `remote_address` = the client's address.
    RemoteAddress,
    /// `generic_key`: the entry `descriptor_key` (`generic_key` when `None`) =
    /// `descriptor_value`.
    GenericKey {
        /// The entry's value.
        descriptor_value: String,
        /// The entry's key (`generic_key` when `None`).
        descriptor_key: Option<String>,
    },
    /// `header_value_match`: the entry `header_match` = `descriptor_value` when the request's
    /// headers match all of `headers` (`expect_match`), or match not all of them (not
    /// `expect_match`); no descriptor otherwise.
    HeaderValueMatch {
        /// The entry's value.
        descriptor_value: String,
        /// What the request's headers are matched against (all of them).
        headers: Vec<HeaderMatcher>,
        /// Whether the entry is made when they match (`true`) or when they do not.
        expect_match: bool,
    },
}

impl Action {
    /// `request_headers` of `header_name`, as the entry `descriptor_key`.
    pub fn request_headers(header_name: &str, descriptor_key: &str) -> Action {
        Action::RequestHeaders {
            header_name: header_name.to_owned(),
            descriptor_key: descriptor_key.to_owned(),
        }
    }

    /// `remote_address`.
    pub fn remote_address() -> Action {
        Action::RemoteAddress
    }

    /// `generic_key`: the entry `generic_key` = `value`.
    pub fn generic_key(value: &str) -> Action {
        Action::GenericKey {
            descriptor_value: value.to_owned(),
            descriptor_key: None,
        }
    }

    /// `generic_key` with a `descriptor_key`: the entry `key` = `value`.
    pub fn generic_key_as(key: &str, value: &str) -> Action {
        Action::GenericKey {
            descriptor_value: value.to_owned(),
            descriptor_key: Some(key.to_owned()),
        }
    }

    /// `header_value_match`: the entry `header_match` = `value` when the request's headers
    /// match all of `headers` (`expect_match`) or do not (`!expect_match`).
    pub fn header_value_match(
        value: &str,
        headers: impl IntoIterator<Item = HeaderMatcher>,
        expect_match: bool,
    ) -> Action {
        Action::HeaderValueMatch {
            descriptor_value: value.to_owned(),
            headers: headers.into_iter().collect(),
            expect_match,
        }
    }

    fn write(&self, w: &mut String, at: usize) {
        match self {
            Action::RequestHeaders {
                header_name,
                descriptor_key,
            } => line(
                w,
                at,
                &format!(
                    "- request_headers: {{header_name: {}, descriptor_key: {}}}",
                    quote(header_name),
                    quote(descriptor_key)
                ),
            ),
            Action::RemoteAddress => line(w, at, "- remote_address: {}"),
            Action::GenericKey {
                descriptor_value,
                descriptor_key,
            } => {
                let key = descriptor_key
                    .as_ref()
                    .map(|k| format!(", descriptor_key: {}", quote(k)))
                    .unwrap_or_default();
                line(
                    w,
                    at,
                    &format!(
                        "- generic_key: {{descriptor_value: {}{key}}}",
                        quote(descriptor_value)
                    ),
                );
            }
            Action::HeaderValueMatch {
                descriptor_value,
                headers,
                expect_match,
            } => {
                line(w, at, "- header_value_match:");
                line(
                    w,
                    at + 4,
                    &format!("descriptor_value: {}", quote(descriptor_value)),
                );
                line(w, at + 4, &format!("expect_match: {expect_match}"));
                line(w, at + 4, "headers:");
                for header in headers {
                    header.write(w, at + 4);
                }
            }
        }
    }
}

/// A header matcher (`envoy.config.route.v3.HeaderMatcher`) of a `header_value_match` action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderMatcher {
    /// The header has exactly this value (`string_match: {exact: ..}`).
    Exact {
        /// The header's name.
        name: String,
        /// Its value.
        value: String,
    },
    /// The header's value starts with this (`string_match: {prefix: ..}`).
    Prefix {
        /// The header's name.
        name: String,
        /// The start of its value.
        prefix: String,
    },
    /// The header is there (`present_match: true`).
    Present {
        /// The header's name.
        name: String,
    },
}

impl HeaderMatcher {
    /// The header `name` is exactly `value`.
    pub fn exact(name: &str, value: &str) -> HeaderMatcher {
        HeaderMatcher::Exact {
            name: name.to_owned(),
            value: value.to_owned(),
        }
    }

    /// The header `name` starts with `prefix`.
    pub fn prefix(name: &str, prefix: &str) -> HeaderMatcher {
        HeaderMatcher::Prefix {
            name: name.to_owned(),
            prefix: prefix.to_owned(),
        }
    }

    /// The header `name` is there.
    pub fn present(name: &str) -> HeaderMatcher {
        HeaderMatcher::Present {
            name: name.to_owned(),
        }
    }

    fn write(&self, w: &mut String, at: usize) {
        let entry = match self {
            HeaderMatcher::Exact { name, value } => format!(
                "- {{name: {}, string_match: {{exact: {}}}}}",
                quote(name),
                quote(value)
            ),
            HeaderMatcher::Prefix { name, prefix } => format!(
                "- {{name: {}, string_match: {{prefix: {}}}}}",
                quote(name),
                quote(prefix)
            ),
            HeaderMatcher::Present { name } => {
                format!("- {{name: {}, present_match: true}}", quote(name))
            }
        };
        line(w, at, &entry);
    }
}

/// A line of YAML, indented by `at`.
fn line(w: &mut String, at: usize, text: &str) {
    let _ = writeln!(w, "{:at$}{text}", "");
}

fn socket_address(w: &mut String, at: usize, host: &str, port: u16) {
    line(
        w,
        at,
        &format!("socket_address: {{address: {host}, port_value: {port}}}"),
    );
}

/// A STATIC cluster of `endpoints`; `http2`: spoken to in HTTP/2 (gRPC).
fn cluster(w: &mut String, name: &str, endpoints: &[SocketAddr], http2: bool) {
    line(w, 2, &format!("- name: {name}"));
    line(w, 4, "type: STATIC");
    line(w, 4, "connect_timeout: 1s");
    if http2 {
        line(w, 4, "typed_extension_protocol_options:");
        line(
            w,
            6,
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions:",
        );
        line(
            w,
            8,
            "\"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        );
        line(w, 8, "explicit_http_config:");
        line(w, 10, "http2_protocol_options: {}");
    }
    line(w, 4, "load_assignment:");
    line(w, 6, &format!("cluster_name: {name}"));
    line(w, 6, "endpoints:");
    line(w, 6, "- lb_endpoints:");
    for endpoint in endpoints {
        line(w, 8, "- endpoint:");
        line(w, 12, "address:");
        socket_address(w, 14, &endpoint.ip().to_string(), endpoint.port());
    }
}

/// A YAML double-quoted scalar (JSON's escapes, which YAML's double quotes accept).
pub(super) fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(q, "\\u{:04x}", u32::from(c));
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A protobuf `Duration` in its JSON form: `1.500000000s`.
fn duration(d: Duration) -> String {
    format!("{}.{:09}s", d.as_secs(), d.subsec_nanos())
}
