//! What the library tells the people who run it: the `rate_limit` span of every decision
//! (`tracing`), and with the `metrics` feature the counters, histogram and gauge of the
//! [`metrics`](https://docs.rs/metrics) facade, for whatever exporter the application
//! installs. Their labels are the limit's name and the outcome, never a key: their number is
//! bounded by the declared limits.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `ratelimit_decisions_total` | counter | `limit`, `outcome` ([`Decision::outcome`]); and `tier` for a call given a [`Tier`](crate::Tier) |
//! | `ratelimit_store_seconds` | histogram | (none): each call to a remote store, success or not |
//! | `ratelimit_degraded` | gauge | `limiter`: 1 while the store is failing, else 0 (from `build` on, for a remote store) |
//! | `ratelimit_deny_cache_hits_total` | counter | (none): refusals the deny cache answered |
//! | `ratelimit_settled_tokens_total` | counter | `limit`, `direction` (`taken`: beyond an estimate, `given_back`): tokens a [settlement](crate::Usage::settle) moved |

use crate::decision::Decision;
use crate::limit::TierName;

/// The target of every span and event of this library: what operators filter by
/// (`RUST_LOG=redis_ratelimit=info`). Events are made by [`log!`], never by `tracing`'s
/// macros directly, so that none is left without it.
pub(crate) const TARGET: &str = "redis_ratelimit";

/// One of `tracing`'s event macros under [`TARGET`]: `log!(warn, error = %e, "...")`.
macro_rules! log {
    ($level:ident, $($event:tt)+) => {
        ::tracing::$level!(target: $crate::observe::TARGET, $($event)+)
    };
}
pub(crate) use log;

/// The name a decision without a limit name (`RateLimiter::check`) is counted under.
pub(crate) const UNNAMED: &str = "-";

/// A limit's name as a decision is described under: a declared limit's lives as long as the
/// program, and labels it without a copy; so does a tier's, a literal or shared.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Name<'a> {
    /// `RateLimiter::check`: no name.
    None,
    /// A `#[rate_limit]` function's.
    Declared(&'static str),
    /// A `#[rate_limit]` function's, for a call given a [tier](crate::Tier): counted with a
    /// `tier` label.
    Tiered(&'static str, &'a TierName),
    /// Given to `check_named` and the like.
    Given(&'a str),
}

impl Name<'_> {
    fn as_str(&self) -> &str {
        match self {
            Name::None => UNNAMED,
            Name::Declared(name) | Name::Tiered(name, _) => name,
            Name::Given(name) => name,
        }
    }

    #[cfg(feature = "metrics")]
    fn label(&self) -> metrics::SharedString {
        match self {
            Name::None => metrics::SharedString::const_str(UNNAMED),
            Name::Declared(name) | Name::Tiered(name, _) => metrics::SharedString::const_str(name),
            Name::Given(name) => metrics::SharedString::from((*name).to_owned()),
        }
    }
}

impl Decision {
    /// Describes the decision: in a `rate_limit` span (DEBUG, target `redis_ratelimit`) with
    /// the limit's name (and the tier of a call given one), the outcome, the tokens left and
    /// who decided, and one event (the bucket's key, which may be personal data, only at
    /// TRACE); and with the `metrics` feature, one count of `ratelimit_decisions_total`.
    ///
    /// Inlined as far as the test of whether anyone listens (every decision of the memory
    /// limiter's hot path comes here, and a call of its own was a fiftieth of one); the span
    /// and the events are out of line.
    #[inline]
    pub(crate) fn observe(&self, name: Name<'_>, bucket: Option<&str>) {
        #[cfg(feature = "metrics")]
        self.count(name);
        if tracing::enabled!(target: TARGET, tracing::Level::DEBUG) {
            self.describe(name, bucket);
        }
    }

    /// [`observe`](Decision::observe) of a decision whose bucket key was not written out (the
    /// memory limiter's, named on the stack): `bucket` writes it, only where the TRACE event
    /// that shows it is enabled.
    #[inline]
    pub(crate) fn observe_unwritten(&self, name: Name<'_>, bucket: impl FnOnce() -> String) {
        #[cfg(feature = "metrics")]
        self.count(name);
        if tracing::enabled!(target: TARGET, tracing::Level::DEBUG) {
            let bucket = tracing::enabled!(target: TARGET, tracing::Level::TRACE).then(bucket);
            self.describe(name, bucket.as_deref());
        }
    }

    /// One count of `ratelimit_decisions_total`.
    #[cfg(feature = "metrics")]
    fn count(&self, name: Name<'_>) {
        match name {
            Name::Tiered(_, tier) => metrics::counter!(
                "ratelimit_decisions_total",
                "limit" => name.label(),
                "tier" => tier.label(),
                "outcome" => self.outcome(),
            )
            .increment(1),
            _ => metrics::counter!(
                "ratelimit_decisions_total",
                "limit" => name.label(),
                "outcome" => self.outcome(),
            )
            .increment(1),
        }
    }

    /// The span and events of [`observe`](Decision::observe), where someone listens.
    #[cold]
    #[inline(never)]
    fn describe(&self, name: Name<'_>, bucket: Option<&str>) {
        let span = tracing::debug_span!(
            target: TARGET,
            "rate_limit",
            limit = name.as_str(),
            outcome = self.outcome(),
            remaining = self.remaining,
            source = ?self.source,
            tier = tracing::field::Empty,
        );
        if let Name::Tiered(_, tier) = name {
            span.record("tier", tier.as_str());
        }
        let _in = span.enter();
        if self.allowed && !self.shadowed {
            log!(debug, "decided");
        } else {
            log!(debug, retry_after = ?self.retry_after, "decided");
        }
        if let Some(bucket) = bucket {
            log!(trace, bucket, "bucket");
        }
    }
}

/// How long one call to a remote store took, success or not.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn store_call(took: std::time::Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("ratelimit_store_seconds").record(took.as_secs_f64());
}

/// The store of `limiter` started failing (`true`) or is back (`false`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn degraded(limiter: &str, degraded: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("ratelimit_degraded", "limiter" => limiter.to_owned()).set(if degraded {
        1.0
    } else {
        0.0
    });
}

/// A call that took an estimate settled under the limit `name`: `taken` tokens beyond its
/// estimate, `given` back.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn settled(name: Name<'_>, taken: u64, given: u64) {
    #[cfg(feature = "metrics")]
    {
        if taken > 0 {
            metrics::counter!(
                "ratelimit_settled_tokens_total",
                "limit" => name.label(),
                "direction" => "taken",
            )
            .increment(taken);
        }
        if given > 0 {
            metrics::counter!(
                "ratelimit_settled_tokens_total",
                "limit" => name.label(),
                "direction" => "given_back",
            )
            .increment(given);
        }
    }
    log!(
        debug,
        limit = name.as_str(),
        taken,
        given_back = given,
        "settled"
    );
}

/// The deny cache answered a call.
pub(crate) fn deny_cache_hit() {
    #[cfg(feature = "metrics")]
    metrics::counter!("ratelimit_deny_cache_hits_total").increment(1);
}

/// The name a decision is observed under: `check_named`'s, or none (`check`).
pub(crate) fn observed_name(name: Option<&str>) -> Name<'_> {
    match name {
        Some(name) => Name::Given(name),
        None => Name::None,
    }
}

impl crate::decision::Label {
    /// The name the decision is observed under (the tier is a label of its own).
    pub(crate) fn observed(&self) -> Name<'_> {
        match &self.tier {
            None => Name::Declared(self.name),
            Some(tier) => Name::Tiered(self.name, tier),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// Every event of the library carries [`super::TARGET`]: none is made by `tracing`'s own
    /// macros, whose default target (the module's path) a filter on `redis_ratelimit` misses.
    #[test]
    fn every_event_is_made_by_log() {
        let mut dirs = vec![PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
        let mut untargeted = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for (n, line) in text.lines().enumerate() {
                        let made = ["trace", "debug", "info", "warn", "error", "event"]
                            .iter()
                            .any(|m| line.contains(&format!("tracing::{m}!(")));
                        if made {
                            untargeted.push(format!("{}:{}", path.display(), n + 1));
                        }
                    }
                }
            }
        }
        assert!(untargeted.is_empty(), "use observe::log!: {untargeted:#?}");
    }
}
