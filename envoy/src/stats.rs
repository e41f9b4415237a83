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

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The most (`domain`, `key1`, `key2`) series kept; hits on more are counted in
/// `ratelimit_service_rate_limit_series_overflow`.
pub const MAX_SERIES: usize = 10_000;

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
        }
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
        out
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
}
