//! The service's counters, under the Prometheus names envoyproxy/ratelimit exposes (its
//! Prometheus sink maps its statsd names with `src/stats/prom/default_mapper.yaml`), so that a
//! dashboard or an alert written for it reads this service unchanged: [`Stats`], rendered in
//! the Prometheus text format by [`Stats::render`].
//!
//! # Per rule
//!
//! The reference counts `ratelimit.service.rate_limit.<key>.<stat>` where `<key>` is the
//! rule's statistics key ([`Found::metric_key`](crate::config::Found::metric_key):
//! `domain.key_value.key`, per value with `detailed_metric`), sanitized as its
//! `SanitizeStatName` does (`:` and `|` become `_`, as do the dots of an IPv4 address). Its
//! mapper splits that key at its dots: the first part is the `domain` label, the second
//! `key1`, the third (when there is one) `key2`; deeper parts are dropped. Each is a counter of
//! *hits* (a descriptor's cost, its `hits_addend`), not of requests:
//!
//! | Prometheus name | counts |
//! |---|---|
//! | `ratelimit_service_rate_limit_total_hits` | every hit on a rule with a limit |
//! | `ratelimit_service_rate_limit_within_limit` | hits admitted (the descriptor answered `OK`) |
//! | `ratelimit_service_rate_limit_near_limit` | admitted hits past `NEAR_LIMIT_RATIO` (0.8) of the limit |
//! | `ratelimit_service_rate_limit_over_limit` | hits over the limit |
//! | `ratelimit_service_rate_limit_shadow_mode` | hits over a `shadow_mode` rule's limit, let through |
//!
//! Near the limit is the reference's arithmetic: with `used` the bucket's tokens taken after
//! the hit (its capacity less `limit_remaining`) and `threshold = floor(capacity × ratio)`,
//! the hits past the threshold count (`used − max(threshold, used − cost)`). One difference, by
//! design: this service charges nothing of a refused request, so every hit of a refused
//! descriptor counts as `over_limit`, where the reference (which charged it) splits it.
//!
//! A descriptor of a request refused by *another* descriptor counts as its own status says
//! (`within_limit` when it alone would have passed), as it is reported to Envoy.
//!
//! # Per service
//!
//! - `ratelimit_service_config_load_success`, `ratelimit_service_config_load_error`: each
//!   load of the configuration directory (the first one and every reload) that succeeded, or
//!   failed and kept the configuration in force;
//! - `ratelimit_service_global_shadow_mode`: requests `SHADOW_MODE` let through that would
//!   have been refused (unmapped in the reference's mapper, so named as the statsd exporter
//!   names unmapped counters);
//! - `ratelimit_service_rate_limit_series_overflow`: this service's own: hits on a
//!   (`domain`, `key1`, `key2`) past the first [`MAX_SERIES`], counted here instead of in a
//!   series of their own, so that `detailed_metric` on a key with unbounded values cannot
//!   grow the exposition without bound.
//!
//! # Per gRPC call
//!
//! Counted by the gRPC entrance ([`Stats::record_call`]), as the reference's server
//! interceptor counts `ratelimit_server.ShouldRateLimit.*` and its mapper names them:
//!
//! | Prometheus name | kind | counts |
//! |---|---|---|
//! | `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}` | counter | every `ShouldRateLimit` call |
//! | `ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}` | histogram | its time, from the request decoded to the answer made ([`RESPONSE_TIME_BUCKETS`]) |
//! | `ratelimit_service_should_rate_limit_error{err_type}` | counter | calls answered with an error: `redis_error` (`UNAVAILABLE`: the store failed and no policy answered), `service_error` (a request refused as invalid or unsupported) |
//!
//! # The library's own
//!
//! The binary installs a [`metrics`](https://docs.rs/metrics) recorder and appends what it
//! renders ([`Stats::also_render`]): ratelimit-core's `ratelimit_decisions_total` (labelled
//! by the bucket name, `envoy:<domain>` or a `shared` name, never a descriptor's value),
//! `ratelimit_store_seconds`, `ratelimit_degraded`, `ratelimit_deny_cache_hits_total` and
//! `ratelimit_settled_tokens_total`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// The most (`domain`, `key1`, `key2`) series kept; hits on more are counted in
/// `ratelimit_service_rate_limit_series_overflow`.
pub const MAX_SERIES: usize = 10_000;

/// The upper bounds, in seconds, of `ratelimit_service_response_time_seconds`' buckets: the
/// statsd exporter's defaults (5 ms to 10 s, the buckets the reference's histogram has), below
/// them the sub-millisecond ones a decision on one Redis round trip falls in.
pub const RESPONSE_TIME_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How a gRPC call ended, for [`Stats::record_call`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallEnd {
    /// Answered (`OK` or `OVER_LIMIT`).
    Answered,
    /// `UNAVAILABLE`: the store failed (`err_type="redis_error"`).
    StoreError,
    /// Refused as invalid or unsupported (`err_type="service_error"`).
    ServiceError,
}

/// The gRPC calls' counters: a count, the errors by kind, and the response time's histogram.
#[derive(Debug, Default)]
struct Calls {
    total: AtomicU64,
    store_errors: AtomicU64,
    service_errors: AtomicU64,
    /// Calls at or under each of [`RESPONSE_TIME_BUCKETS`] (not cumulative; summed when
    /// rendered), and the last one past every bound.
    buckets: [AtomicU64; RESPONSE_TIME_BUCKETS.len() + 1],
    /// The sum of the response times, in nanoseconds.
    sum_nanos: AtomicU64,
}

/// What else the metrics endpoint renders (the library's own, by the binary's recorder).
struct Also(Box<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for Also {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Also(..)")
    }
}

/// What one descriptor of a request came to, for its rule's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// The descriptor's cost (its hits).
    pub cost: u64,
    /// Whether the bucket refused it (a shadow rule's included, though it reports `OK`).
    pub over: bool,
    /// Whether its rule is in shadow mode (a `shadow_mode` rule, or the global one).
    pub shadow: bool,
    /// The bucket's capacity (the limit's burst: `requests_per_unit` for a reference rule).
    pub capacity: u64,
    /// Tokens left in the bucket after the decision.
    pub remaining: u64,
    /// Whether the hit was taken (false when the request was refused and only looked at).
    pub charged: bool,
}

/// One series' counters.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    total_hits: u64,
    within_limit: u64,
    near_limit: u64,
    over_limit: u64,
    shadow_mode: u64,
}

/// The counters, shared by the service, the configuration watcher and the metrics endpoint.
#[derive(Debug)]
pub struct Stats {
    near_limit_permille: u16,
    series: Mutex<HashMap<Labels, Counts>>,
    overflow: AtomicU64,
    load_success: AtomicU64,
    load_error: AtomicU64,
    global_shadow: AtomicU64,
    loads: tokio::sync::watch::Sender<u64>,
    calls: Calls,
    also: OnceLock<Also>,
}

/// A per-rule counter's name, help and value.
type PerRule = (&'static str, &'static str, fn(&Counts) -> u64);

/// `domain`, `key1`, `key2` (empty when the key has no third part).
type Labels = (String, String, String);

impl Default for Stats {
    fn default() -> Stats {
        Stats::new(800)
    }
}

impl Stats {
    /// Counters with `near_limit` past `near_limit_permille` thousandths of a limit
    /// (`NEAR_LIMIT_RATIO`, 0.8 by default:
    /// [`Settings::near_limit_permille`](crate::settings::Settings::near_limit_permille)).
    pub fn new(near_limit_permille: u16) -> Stats {
        Stats {
            near_limit_permille: near_limit_permille.min(1000),
            series: Mutex::new(HashMap::new()),
            overflow: AtomicU64::new(0),
            load_success: AtomicU64::new(0),
            load_error: AtomicU64::new(0),
            global_shadow: AtomicU64::new(0),
            loads: tokio::sync::watch::Sender::new(0),
            calls: Calls::default(),
            also: OnceLock::new(),
        }
    }

    /// Appends what `render` returns to every exposition (the binary: its `metrics`
    /// recorder's, the library's own counters). Only the first call counts: `false` when one
    /// was set already.
    pub fn also_render(&self, render: impl Fn() -> String + Send + Sync + 'static) -> bool {
        self.also.set(Also(Box::new(render))).is_ok()
    }

    /// Counts one `ShouldRateLimit` call, how it ended, and its time.
    pub fn record_call(&self, took: Duration, end: CallEnd) {
        let calls = &self.calls;
        calls.total.fetch_add(1, Ordering::Relaxed);
        match end {
            CallEnd::Answered => {}
            CallEnd::StoreError => {
                calls.store_errors.fetch_add(1, Ordering::Relaxed);
            }
            CallEnd::ServiceError => {
                calls.service_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let seconds = took.as_secs_f64();
        let at = RESPONSE_TIME_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(RESPONSE_TIME_BUCKETS.len());
        calls.buckets[at].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let _ = calls
            .sum_nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(nanos))
            });
    }

    /// `ShouldRateLimit` calls counted so far.
    pub fn calls(&self) -> u64 {
        self.calls.total.load(Ordering::Relaxed)
    }

    /// Counts one descriptor's hits under its rule's `metric_key`.
    pub fn record(&self, metric_key: &str, hit: Hit) {
        let counts = self.counts(hit);
        let labels = labels(metric_key);
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = series.get_mut(&labels) {
            add(c, counts);
        } else if series.len() < MAX_SERIES {
            series.insert(labels, counts);
        } else {
            // Stops at `u64::MAX`, as a series' counters do.
            let _ = self
                .overflow
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_add(counts.total_hits))
                });
        }
    }

    /// Counts one request the global shadow mode let through.
    pub fn record_global_shadow(&self) {
        self.global_shadow.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one load of the configuration: `ok` or kept the old one.
    pub fn record_load(&self, ok: bool) {
        if ok {
            self.load_success.fetch_add(1, Ordering::Relaxed);
        } else {
            self.load_error.fetch_add(1, Ordering::Relaxed);
        }
        self.loads.send_modify(|n| *n += 1);
    }

    /// Loads that succeeded.
    pub fn load_successes(&self) -> u64 {
        self.load_success.load(Ordering::Relaxed)
    }

    /// Loads that failed.
    pub fn load_errors(&self) -> u64 {
        self.load_error.load(Ordering::Relaxed)
    }

    /// Every load so far, successful or not, as a channel that changes on each: what a test
    /// (or anything else) waits on for a reload to have happened.
    pub fn loads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.loads.subscribe()
    }

    /// `(total_hits, within_limit, near_limit, over_limit, shadow_mode)` of a rule's key.
    pub fn counts_of(&self, metric_key: &str) -> Option<[u64; 5]> {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        series.get(&labels(metric_key)).map(|c| {
            [
                c.total_hits,
                c.within_limit,
                c.near_limit,
                c.over_limit,
                c.shadow_mode,
            ]
        })
    }

    fn counts(&self, hit: Hit) -> Counts {
        let mut c = Counts {
            total_hits: hit.cost,
            ..Counts::default()
        };
        if hit.over {
            c.over_limit = hit.cost;
            if hit.shadow {
                c.shadow_mode = hit.cost;
            }
            return c;
        }
        c.within_limit = hit.cost;
        let threshold = hit.capacity * u64::from(self.near_limit_permille) / 1000;
        let mut used = hit.capacity.saturating_sub(hit.remaining);
        if !hit.charged {
            used = used.saturating_add(hit.cost);
        }
        let before = used.saturating_sub(hit.cost);
        if used > threshold {
            c.near_limit = used - threshold.max(before);
        }
        c
    }

    /// Every counter in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let series: Vec<(Labels, Counts)> = {
            let map = self.series.lock().unwrap_or_else(PoisonError::into_inner);
            let mut v: Vec<_> = map.iter().map(|(l, c)| (l.clone(), *c)).collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        let per_rule: [PerRule; 5] = [
            ("total_hits", "Hits on a rule with a limit.", |c| {
                c.total_hits
            }),
            ("over_limit", "Hits over the limit.", |c| c.over_limit),
            (
                "near_limit",
                "Admitted hits past NEAR_LIMIT_RATIO of the limit.",
                |c| c.near_limit,
            ),
            ("within_limit", "Hits admitted.", |c| c.within_limit),
            (
                "shadow_mode",
                "Hits over a shadow_mode rule's limit, let through.",
                |c| c.shadow_mode,
            ),
        ];
        for (stat, help, get) in per_rule {
            let name = format!("ratelimit_service_rate_limit_{stat}");
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for ((domain, key1, key2), c) in &series {
                let _ = write!(
                    out,
                    "{name}{{domain=\"{}\",key1=\"{}\"",
                    escape(domain),
                    escape(key1)
                );
                if !key2.is_empty() {
                    let _ = write!(out, ",key2=\"{}\"", escape(key2));
                }
                let _ = writeln!(out, "}} {}", get(c));
            }
        }
        let service: [(&str, &str, u64); 4] = [
            (
                "ratelimit_service_config_load_success",
                "Loads of the configuration that succeeded.",
                self.load_successes(),
            ),
            (
                "ratelimit_service_config_load_error",
                "Loads of the configuration that failed (the previous one kept).",
                self.load_errors(),
            ),
            (
                "ratelimit_service_global_shadow_mode",
                "Requests SHADOW_MODE let through that would have been refused.",
                self.global_shadow.load(Ordering::Relaxed),
            ),
            (
                "ratelimit_service_rate_limit_series_overflow",
                "Hits on rule keys past the series bound, not counted per key.",
                self.overflow.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, value) in service {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        self.render_calls(&mut out);
        if let Some(also) = self.also.get() {
            out.push_str(&(also.0)());
        }
        out
    }

    /// The gRPC calls' counters and histogram.
    fn render_calls(&self, out: &mut String) {
        const METHOD: &str = "grpc_method=\"ShouldRateLimit\"";
        let calls = &self.calls;
        let total = calls.total.load(Ordering::Relaxed);
        let name = "ratelimit_service_total_requests";
        let _ = writeln!(
            out,
            "# HELP {name} gRPC calls.\n# TYPE {name} counter\n{name}{{{METHOD}}} {total}"
        );
        let name = "ratelimit_service_should_rate_limit_error";
        let _ = writeln!(
            out,
            "# HELP {name} ShouldRateLimit calls answered with an error.\n# TYPE {name} counter"
        );
        for (kind, n) in [
            ("redis_error", &calls.store_errors),
            ("service_error", &calls.service_errors),
        ] {
            let _ = writeln!(
                out,
                "{name}{{err_type=\"{kind}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        let name = "ratelimit_service_response_time_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} ShouldRateLimit's time, decoded request to answer.\n# TYPE {name} histogram"
        );
        let mut below = 0u64;
        for (le, n) in RESPONSE_TIME_BUCKETS.iter().zip(&calls.buckets) {
            below = below.saturating_add(n.load(Ordering::Relaxed));
            let _ = writeln!(out, "{name}_bucket{{{METHOD},le=\"{le}\"}} {below}");
        }
        let count = below
            .saturating_add(calls.buckets[RESPONSE_TIME_BUCKETS.len()].load(Ordering::Relaxed));
        let sum = Duration::from_nanos(calls.sum_nanos.load(Ordering::Relaxed)).as_secs_f64();
        let _ = writeln!(out, "{name}_bucket{{{METHOD},le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum{{{METHOD}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{METHOD}}} {count}");
    }
}

/// Adds `c` to `into`, each counter stopping at `u64::MAX`: a request may carry any
/// `hits_addend`, and a counter that wrapped (or panicked, in a debug build) would be worse
/// than one that stops.
fn add(into: &mut Counts, c: Counts) {
    into.total_hits = into.total_hits.saturating_add(c.total_hits);
    into.within_limit = into.within_limit.saturating_add(c.within_limit);
    into.near_limit = into.near_limit.saturating_add(c.near_limit);
    into.over_limit = into.over_limit.saturating_add(c.over_limit);
    into.shadow_mode = into.shadow_mode.saturating_add(c.shadow_mode);
}

/// The reference's labels of a statistics key: sanitized, then split at its dots.
fn labels(metric_key: &str) -> Labels {
    let sanitized = sanitize(metric_key);
    let mut parts = sanitized.split('.');
    let domain = parts.next().unwrap_or_default().to_owned();
    let key1 = parts.next().unwrap_or_default().to_owned();
    let key2 = parts.next().unwrap_or_default().to_owned();
    (domain, key1, key2)
}

/// The reference's `SanitizeStatName`: `:` and `|` to `_`, and the dots of every IPv4
/// address (`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`, leftmost first, not overlapping) to `_`.
pub fn sanitize(key: &str) -> String {
    let mut bytes: Vec<u8> = key
        .bytes()
        .map(|b| if b == b':' || b == b'|' { b'_' } else { b })
        .collect();
    let mut i = 0;
    while i < bytes.len() {
        match ipv4_at(&bytes, i) {
            Some(end) => {
                for b in &mut bytes[i..end] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes.
    String::from_utf8(bytes).unwrap_or_default()
}

/// The end of the leftmost-longest `\d{1,3}(\.\d{1,3}){3}` starting at `start`, as Go's
/// leftmost-first regexp finds it (greedy digits, backtracking to fewer when needed).
fn ipv4_at(b: &[u8], start: usize) -> Option<usize> {
    fn group(b: &[u8], at: usize, left: usize) -> Option<usize> {
        // Greedy: try 3 digits, then 2, then 1.
        for n in (1..=3).rev() {
            if at + n <= b.len() && b[at..at + n].iter().all(u8::is_ascii_digit) {
                if left == 0 {
                    return Some(at + n);
                }
                if b.get(at + n) == Some(&b'.')
                    && let Some(end) = group(b, at + n + 1, left - 1)
                {
                    return Some(end);
                }
            }
        }
        None
    }
    group(b, start, 3)
}

/// A label value, escaped as the text format wants.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sanitized_and_split_as_the_references_mapper_does() {
        assert_eq!(
            sanitize("d.remote_address_10.0.0.1"),
            "d.remote_address_10_0_0_1"
        );
        assert_eq!(sanitize("d.k_a:b|c"), "d.k_a_b_c");
        assert_eq!(
            labels("edge.remote_address_192.168.1.20.path"),
            (
                "edge".into(),
                "remote_address_192_168_1_20".into(),
                "path".into()
            )
        );
        assert_eq!(
            labels("api.user"),
            ("api".into(), "user".into(), String::new())
        );
        assert_eq!(labels("a.b.c.d.e"), ("a".into(), "b".into(), "c".into()));
    }

    #[test]
    fn near_limit_counts_the_hits_past_the_threshold() {
        let stats = Stats::new(800);
        let hit = |remaining, cost| Hit {
            cost,
            over: false,
            shadow: false,
            capacity: 10,
            remaining,
            charged: true,
        };
        // 10 × 0.8 = 8: the 9th and 10th hits are near.
        for remaining in (0..10).rev() {
            stats.record("d.k", hit(remaining, 1));
        }
        assert_eq!(stats.counts_of("d.k"), Some([10, 10, 2, 0, 0]));
        // One hit of 3 from 6 used to 9: 1 past the threshold.
        stats.record("d.j", hit(1, 3));
        assert_eq!(stats.counts_of("d.j"), Some([3, 3, 1, 0, 0]));
        stats.record(
            "d.j",
            Hit {
                over: true,
                shadow: true,
                ..hit(1, 2)
            },
        );
        assert_eq!(stats.counts_of("d.j"), Some([5, 3, 1, 2, 2]));
    }

    #[test]
    fn counters_stop_at_their_largest_value() {
        // A request may carry any `hits_addend`: two of u64::MAX hits neither wrap nor panic.
        let stats = Stats::new(800);
        let refused = Hit {
            cost: u64::MAX,
            over: true,
            shadow: false,
            capacity: 10,
            remaining: 0,
            charged: false,
        };
        stats.record("d.k", refused);
        stats.record("d.k", refused);
        assert_eq!(stats.counts_of("d.k"), Some([u64::MAX, 0, 0, u64::MAX, 0]));
    }

    #[test]
    fn series_are_bounded_and_the_rest_counted_once() {
        let stats = Stats::new(800);
        let hit = Hit {
            cost: 1,
            over: false,
            shadow: false,
            capacity: 100,
            remaining: 99,
            charged: true,
        };
        for i in 0..MAX_SERIES + 5 {
            stats.record(&format!("d.user_{i}"), hit);
        }
        let text = stats.render();
        assert!(text.contains("ratelimit_service_rate_limit_series_overflow 5\n"));
        assert_eq!(
            text.matches("ratelimit_service_rate_limit_total_hits{")
                .count(),
            MAX_SERIES
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let stats = Stats::default();
        stats.record(
            "d.k_a\"b\\c",
            Hit {
                cost: 1,
                over: true,
                shadow: false,
                capacity: 1,
                remaining: 0,
                charged: false,
            },
        );
        assert!(stats.render().contains(
            "ratelimit_service_rate_limit_over_limit{domain=\"d\",key1=\"k_a\\\"b\\\\c\"} 1\n"
        ));
    }

    #[test]
    fn calls_are_counted_with_their_errors_and_times_in_cumulative_buckets() {
        let stats = Stats::default();
        stats.record_call(Duration::from_micros(80), CallEnd::Answered);
        stats.record_call(Duration::from_micros(300), CallEnd::Answered);
        stats.record_call(Duration::from_millis(3), CallEnd::StoreError);
        stats.record_call(Duration::from_secs(20), CallEnd::ServiceError);
        let text = stats.render();
        for line in [
            "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 4",
            "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 1",
            "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 1",
            "# TYPE ratelimit_service_response_time_seconds histogram",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.0001\"} 1",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.00025\"} 1",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.0005\"} 2",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.005\"} 3",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"10\"} 3",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"+Inf\"} 4",
            "ratelimit_service_response_time_seconds_sum{grpc_method=\"ShouldRateLimit\"} 20.00338",
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 4",
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line} in:\n{text}");
        }
        assert_eq!(stats.calls(), 4);
    }

    #[test]
    fn what_else_is_rendered_follows_the_services_own_and_is_set_once() {
        let stats = Stats::default();
        assert!(stats.also_render(|| "library_metric 7\n".to_owned()));
        assert!(!stats.also_render(|| "another 1\n".to_owned()));
        let text = stats.render();
        assert!(text.ends_with("library_metric 7\n"), "{text}");
        assert!(!text.contains("another"));
    }
}
