//! Rate-limit response headers: the IETF draft (draft-ietf-httpapi-ratelimit-headers-11),
//! Spring Cloud Gateway's `X-RateLimit-*`, and `Retry-After`.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::decision::Decision;
use crate::decision::Source;
use crate::pipeline::verdict::RateLimited;

/// Which header families to send; all by default. Build one from [`ALL`](Self::ALL) or
/// [`NONE`](Self::NONE) (the struct is `non_exhaustive`, so literals do not compile outside
/// this crate):
///
/// ```
/// use ratelimit_core::headers::HeaderFamilies;
///
/// let families = HeaderFamilies::ALL.without_spring();
/// assert!(families.ietf && !families.spring && families.retry_after);
/// assert_eq!(HeaderFamilies::NONE.with_ietf().with_retry_after(), families);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct HeaderFamilies {
    /// `RateLimit-Policy: "<name>";q=<burst>;w=<seconds>` and
    /// `RateLimit: "<name>";r=<remaining>;t=<seconds>`.
    pub ietf: bool,
    /// Spring Cloud Gateway's `X-RateLimit-Remaining`, `-Burst-Capacity`,
    /// `-Requested-Tokens`, and `-Replenish-Rate` (tokens per second, as Spring means it;
    /// left out when the rate is not a whole number per second).
    pub spring: bool,
    /// `Retry-After` on rejections (whole seconds, rounded up).
    pub retry_after: bool,
}

impl HeaderFamilies {
    /// Every family.
    pub const ALL: HeaderFamilies = HeaderFamilies {
        ietf: true,
        spring: true,
        retry_after: true,
    };
    /// None at all.
    pub const NONE: HeaderFamilies = HeaderFamilies {
        ietf: false,
        spring: false,
        retry_after: false,
    };

    /// These families and the IETF `RateLimit` / `RateLimit-Policy` headers.
    #[must_use]
    pub const fn with_ietf(mut self) -> HeaderFamilies {
        self.ietf = true;
        self
    }

    /// These families without the IETF headers.
    #[must_use]
    pub const fn without_ietf(mut self) -> HeaderFamilies {
        self.ietf = false;
        self
    }

    /// These families and Spring Cloud Gateway's `X-RateLimit-*` headers.
    #[must_use]
    pub const fn with_spring(mut self) -> HeaderFamilies {
        self.spring = true;
        self
    }

    /// These families without Spring's headers: `HeaderFamilies::ALL.without_spring()`.
    #[must_use]
    pub const fn without_spring(mut self) -> HeaderFamilies {
        self.spring = false;
        self
    }

    /// These families and `Retry-After` on rejections.
    #[must_use]
    pub const fn with_retry_after(mut self) -> HeaderFamilies {
        self.retry_after = true;
        self
    }

    /// These families without `Retry-After`.
    #[must_use]
    pub const fn without_retry_after(mut self) -> HeaderFamilies {
        self.retry_after = false;
        self
    }
}

impl Default for HeaderFamilies {
    fn default() -> Self {
        HeaderFamilies::ALL
    }
}

/// `RateLimit-Policy`.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Remaining`.
pub static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Replenish-Rate`.
pub static X_REPLENISH_RATE: HeaderName = HeaderName::from_static("x-ratelimit-replenish-rate");
/// `X-RateLimit-Burst-Capacity`.
pub static X_BURST_CAPACITY: HeaderName = HeaderName::from_static("x-ratelimit-burst-capacity");
/// `X-RateLimit-Requested-Tokens`.
pub static X_REQUESTED_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-requested-tokens");

/// Whole seconds, rounded up: a client that waits this long is never early.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Sets the headers of `decision` taken under the limit `name` on `headers` (replacing any
/// already there, so a response is never sent two values).
///
/// A decision of [several limits](Decision::parts) is described by the limit `name` alone;
/// [`set_call_headers`] describes each of them by its own name.
pub fn set_headers(headers: &mut HeaderMap, name: &str, d: &Decision, families: HeaderFamilies) {
    let part = &d.parts()[d.tightest()];
    set_call_headers(headers, [(name, part)], d, families);
}

/// The headers of a request's `verdict` (the limits its layers decided first, and the last
/// limited call made in its scope), when it has one, added to its response's: what the HTTP
/// integrations render once the handler returns.
#[cfg(feature = "http-framework")]
pub(crate) fn render_verdict(
    verdict: crate::pipeline::verdict::Described,
    headers: &mut HeaderMap,
    families: HeaderFamilies,
) {
    let (first, last) = match (verdict.last, verdict.first.split_last()) {
        (Some(last), _) => (&verdict.first[..], last),
        (None, Some((last, first))) => (first, last.clone()),
        (None, None) => return,
    };
    set_headers_after(headers, first, last.shown_parts(), &last.decision, families);
}

/// [`set_call_headers`] of a call whose request had limits decided `first`, before it (by the
/// layers serving it, on a route they had not learned yet): one list, those first, as one
/// decision of them all would be described.
#[cfg(feature = "http-framework")]
pub(crate) fn set_headers_after<'a>(
    headers: &mut HeaderMap,
    first: &'a [crate::pipeline::verdict::Recorded],
    parts: impl Iterator<Item = (Cow<'a, str>, &'a Decision)>,
    combined: &'a Decision,
    families: HeaderFamilies,
) {
    if first.is_empty() {
        return set_call_headers(headers, parts, combined, families);
    }
    let all: Vec<_> = first
        .iter()
        .flat_map(crate::pipeline::verdict::Recorded::shown_parts)
        .chain(parts)
        .collect();
    let combined = Decision::combined(all.iter().map(|&(_, d)| d.clone()).collect());
    set_call_headers(headers, all, &combined, families);
}

/// Sets the headers of a call decided under one or several limits: `parts` names each limit's
/// own decision (in the order of [`Decision::parts`]), `combined` is the call's decision.
///
/// - The IETF `RateLimit-Policy` and `RateLimit` list one item per limit, in order (a name
///   that repeats an earlier one gets `#n`, its position from 1, so that items stay distinct).
/// - Spring's single-valued `X-RateLimit-*` describe the [tightest](Decision::tightest) limit
///   by its own decision: the refusing one with the longest wait, else the one with the
///   fewest tokens left.
/// - `Retry-After` is the combined decision's: the longest wait of the refusing limits.
///
/// Limits that had no bucket (no key) or no limit (disabled, exempt) describe no quota and are
/// left out. A limit whose bucket was not asked describes its policy alone, never a state it
/// does not know: a call that cost nothing or more than the burst holds, and a decision by the
/// failure policy (the store, or the key's async resolver, failed) list the limit in
/// `RateLimit-Policy` (and Spring's burst, rate and cost) but not in `RateLimit` nor
/// `X-RateLimit-Remaining`. Headers already there are replaced, so a response never carries
/// two values.
pub fn set_call_headers<'n, 'd, N: Into<Cow<'n, str>>>(
    headers: &mut HeaderMap,
    parts: impl IntoIterator<Item = (N, &'d Decision)>,
    combined: &Decision,
    families: HeaderFamilies,
) {
    let parts = distinct_names(parts);
    let spring = parts.get(combined.tightest()).map(|&(_, d)| d);
    let mut policy = String::new();
    let mut state = String::new();
    for (name, d) in &parts {
        if !describes_policy(d) || !families.ietf {
            continue;
        }
        let sf_name = sf_string(name);
        if !policy.is_empty() {
            policy.push_str(", ");
        }
        let stateful = describes_state(d);
        if stateful && !state.is_empty() {
            state.push_str(", ");
        }
        if let Some(max) = d.limit.max_in_flight() {
            // A concurrency limit: a quota of calls in flight, with no window (the IETF
            // draft's quota unit), and no reset time (a slot comes back when a call ends).
            let _ = write!(policy, "{sf_name};q={max};qu=\"concurrent-requests\"");
            if stateful {
                let _ = write!(state, "{sf_name};r={}", d.remaining);
            }
            continue;
        }
        let window = ceil_secs(d.limit.refill_time()).max(1);
        let _ = write!(
            policy,
            "{sf_name};q={};w={window}",
            d.limit.burst_capacity()
        );
        if stateful {
            let _ = write!(
                state,
                "{sf_name};r={};t={}",
                d.remaining,
                ceil_secs(d.reset_after)
            );
        }
    }
    if !policy.is_empty() {
        insert(headers, &RATELIMIT_POLICY, &policy);
    }
    if !state.is_empty() {
        insert(headers, &RATELIMIT, &state);
    }
    if let Some(d) = spring.filter(|d| families.spring && describes_policy(d)) {
        if describes_state(d) {
            headers.insert(X_REMAINING.clone(), HeaderValue::from(d.remaining));
        }
        if let Some(rate) = whole_tokens_per_second(&d.limit) {
            headers.insert(X_REPLENISH_RATE.clone(), HeaderValue::from(rate));
        }
        headers.insert(
            X_BURST_CAPACITY.clone(),
            HeaderValue::from(d.limit.burst_capacity()),
        );
        headers.insert(X_REQUESTED_TOKENS.clone(), HeaderValue::from(d.cost));
    }
    if families.retry_after
        && describes_state(combined)
        && !combined.allowed
        && combined.retry_after > Duration::ZERO
    {
        headers.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from(ceil_secs(combined.retry_after)),
        );
    }
}

/// Whether `d` names a quota to describe: not for a call that had no key (no bucket), nor one
/// under a disabled limit or exempt from it (no limit applied).
fn describes_policy(d: &Decision) -> bool {
    !matches!(d.source, Source::NoKey | Source::Disabled | Source::Exempt)
}

/// Whether `d` knows its bucket's state (tokens left, time to full): a store's answer, the
/// deny cache's memory of one, or the fallback's own bucket. A call that cost nothing or more
/// than the burst holds asked no bucket, and the failure policy decides without one: its
/// `remaining` of 0 is no bucket's.
fn describes_state(d: &Decision) -> bool {
    describes_policy(d)
        && !matches!(
            d.source,
            Source::Free | Source::CostExceedsBurst | Source::FailOpen | Source::FailClosed
        )
}

/// The limits' names, each distinct: one that repeats an earlier one gets `#n`, its position
/// from 1 (limits checked without names are all `rate-limit`).
fn distinct_names<'n, 'd, N: Into<Cow<'n, str>>>(
    parts: impl IntoIterator<Item = (N, &'d Decision)>,
) -> Vec<(Cow<'n, str>, &'d Decision)> {
    let mut out: Vec<(Cow<'n, str>, &'d Decision)> = Vec::new();
    for (i, (name, d)) in parts.into_iter().enumerate() {
        let name = name.into();
        let name = if out.iter().any(|(n, _)| *n == name) {
            Cow::Owned(format!("{name}#{}", i + 1))
        } else {
            name
        };
        out.push((name, d));
    }
    out
}

/// Spring Cloud Gateway's `replenishRate` is an integer number of tokens per second. A rate
/// that is not one (3 per minute is 0.05 per second) has no honest value in that header, so it
/// is left out; `RateLimit-Policy` describes every rate exactly.
fn whole_tokens_per_second(limit: &crate::limit::Limit) -> Option<u64> {
    // A concurrency limit has no rate.
    if limit.is_concurrent() {
        return None;
    }
    let per_unit = u128::from(limit.replenish()) * 1_000_000;
    let unit = u128::from(limit.period_micros());
    if per_unit % unit == 0 {
        u64::try_from(per_unit / unit).ok()
    } else {
        None
    }
}

fn insert(headers: &mut HeaderMap, name: &HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name.clone(), v);
    }
}

/// A structured-field string (RFC 8941): printable ASCII, `"` and `\` escaped.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

/// The problem type of the IETF draft for an exhausted quota.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

impl RateLimited {
    /// The HTTP status of this rejection: 429 when the quota is exhausted (or the status its
    /// limit chose with `limited_status`, such as 402 or 403 for a monthly quota), 403 when
    /// the call had no key (waiting will not help; or the status its limit chose with
    /// `empty_key_status`), 413 when it costs more than the burst holds (it never will
    /// pass), 503 when the limiter could not decide and its policy refuses.
    pub fn status(&self) -> StatusCode {
        match self.decision().source {
            Source::NoKey => self
                .empty_key_status()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .unwrap_or(StatusCode::FORBIDDEN),
            Source::CostExceedsBurst => StatusCode::PAYLOAD_TOO_LARGE,
            Source::FailClosed => StatusCode::SERVICE_UNAVAILABLE,
            _ => self
                .limited_status()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .unwrap_or(StatusCode::TOO_MANY_REQUESTS),
        }
    }

    /// An RFC 9457 `application/problem+json` body describing this rejection.
    pub fn problem_json(&self) -> String {
        let d = self.decision();
        let mut out = String::with_capacity(256);
        let (kind, title) = match d.source {
            Source::NoKey => ("about:blank", "Request has no rate-limit key"),
            Source::CostExceedsBurst => ("about:blank", "Request costs more than the limit holds"),
            Source::FailClosed => ("about:blank", "Rate limiter unavailable"),
            _ => (
                QUOTA_EXCEEDED,
                "Request cannot be satisfied as assigned quota has been exceeded",
            ),
        };
        out.push_str("{\"type\":");
        json_string(&mut out, kind);
        out.push_str(",\"title\":");
        json_string(&mut out, title);
        let _ = write!(out, ",\"status\":{}", self.status().as_u16());
        out.push_str(",\"violated-policies\":[");
        let refusing = distinct_names(self.shown_parts())
            .into_iter()
            .filter(|(_, d)| !d.allowed);
        for (i, (name, _)) in refusing.enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_string(&mut out, &name);
        }
        out.push(']');
        if !d.allowed && d.retry_after > Duration::ZERO {
            let _ = write!(out, ",\"retry-after\":{}", ceil_secs(d.retry_after));
        }
        // A limit that answers its refusals with a status of its own (a quota used up) says
        // which quota, and when it comes back.
        if self.limited_status().is_some() && kind == QUOTA_EXCEEDED {
            let refusing = d.parts().get(d.tightest()).unwrap_or(d);
            let detail = format!(
                "the quota of {} is used up; it resets in {} s",
                refusing.limit,
                ceil_secs(refusing.retry_after)
            );
            out.push_str(",\"detail\":");
            json_string(&mut out, &detail);
        }
        out.push('}');
        out
    }

    /// The headers of this rejection (`Retry-After` and the configured families).
    pub fn headers(&self, families: HeaderFamilies) -> HeaderMap {
        let mut headers = HeaderMap::new();
        set_call_headers(&mut headers, self.shown_parts(), self.decision(), families);
        problem_type(&mut headers);
        headers
    }
}

pub(crate) fn problem_type(headers: &mut HeaderMap) {
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Label;
    use crate::limit::Limit;

    fn decision(allowed: bool) -> Decision {
        Decision::new(
            allowed,
            if allowed { 4 } else { 0 },
            Limit::per_minute(3).burst(5),
            1,
            if allowed {
                Duration::ZERO
            } else {
                Duration::from_millis(19_001)
            },
            Duration::from_millis(33_400),
        )
    }

    #[test]
    fn a_disabled_limit_describes_no_quota() {
        let mut h = HeaderMap::new();
        let unlimited = decision(true).with_source(Source::Disabled);
        set_headers(&mut h, "shop::orders", &unlimited, HeaderFamilies::ALL);
        assert!(h.is_empty(), "{h:?}");
    }

    /// A limit whose bucket nobody asked describes its policy, never a state: a call that
    /// costs more than the burst (413: `q` tells the client the burst), one that costs
    /// nothing, and a decision by the failure policy (a store or key resolver that failed).
    #[test]
    fn a_limit_whose_bucket_was_not_asked_describes_its_policy_alone() {
        let limit = Limit::per_minute(3).burst(5);
        let cases = [
            Decision::cost_exceeds_burst(limit, 9),
            Decision::free(limit),
            crate::pipeline::without_store::fail_closed(&limit, 1),
            decision(true).with_source(Source::FailOpen),
        ];
        for d in cases {
            let mut h = HeaderMap::new();
            set_headers(&mut h, "upload", &d, HeaderFamilies::ALL);
            assert_eq!(h["ratelimit-policy"], "\"upload\";q=5;w=100", "{d:?}");
            assert_eq!(h["x-ratelimit-burst-capacity"], "5", "{d:?}");
            assert_eq!(
                h["x-ratelimit-requested-tokens"],
                d.cost.to_string(),
                "{d:?}"
            );
            for absent in ["ratelimit", "x-ratelimit-remaining", "retry-after"] {
                assert!(h.get(absent).is_none(), "{absent}: {d:?}");
            }
        }
        // Beside a limit whose bucket answered: both policies, that one's state alone.
        let free = Decision::free(limit);
        let asked = decision(true);
        let combined = Decision::combined(vec![asked.clone(), free.clone()]);
        let mut h = HeaderMap::new();
        set_call_headers(
            &mut h,
            [("orders", &asked), ("upload", &free)],
            &combined,
            HeaderFamilies::ALL,
        );
        assert_eq!(
            h["ratelimit-policy"],
            "\"orders\";q=5;w=100, \"upload\";q=5;w=100"
        );
        assert_eq!(h["ratelimit"], "\"orders\";r=4;t=34");
        assert_eq!(h["x-ratelimit-remaining"], "4");
    }

    #[test]
    fn every_family_on_a_rejection() {
        let mut h = HeaderMap::new();
        set_headers(
            &mut h,
            "shop::orders",
            &decision(false),
            HeaderFamilies::ALL,
        );
        assert_eq!(h["ratelimit-policy"], "\"shop::orders\";q=5;w=100");
        assert_eq!(h["ratelimit"], "\"shop::orders\";r=0;t=34");
        assert_eq!(h["retry-after"], "20");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        // 3 per minute is no whole number per second.
        assert!(h.get("x-ratelimit-replenish-rate").is_none());
        assert_eq!(h["x-ratelimit-burst-capacity"], "5");
        assert_eq!(h["x-ratelimit-requested-tokens"], "1");
    }

    #[test]
    fn families_are_optional_and_allowed_calls_have_no_retry_after() {
        let mut h = HeaderMap::new();
        let families = HeaderFamilies::ALL.without_spring();
        assert_eq!(
            families,
            HeaderFamilies::NONE.with_ietf().with_retry_after()
        );
        assert_eq!(
            HeaderFamilies::ALL,
            HeaderFamilies::NONE
                .with_spring()
                .with_ietf()
                .with_retry_after()
        );
        assert_eq!(
            HeaderFamilies::NONE,
            HeaderFamilies::ALL
                .without_spring()
                .without_ietf()
                .without_retry_after()
        );
        set_headers(&mut h, "n", &decision(true), families);
        assert!(h.get("x-ratelimit-remaining").is_none());
        assert!(h.get("retry-after").is_none());
        assert_eq!(h["ratelimit"], "\"n\";r=4;t=34");
    }

    #[test]
    fn spring_replenish_rate_is_whole_tokens_per_second_or_absent() {
        let rate = |limit: Limit| {
            let mut h = HeaderMap::new();
            let d = Decision::new(true, 1, limit, 1, Duration::ZERO, Duration::ZERO);
            set_headers(&mut h, "n", &d, HeaderFamilies::ALL);
            assert!(h.get("x-ratelimit-burst-capacity").is_some());
            h.get("x-ratelimit-replenish-rate")
                .map(|v| v.to_str().unwrap_or_default().to_owned())
        };
        assert_eq!(rate(Limit::per_second(7)).as_deref(), Some("7"));
        assert_eq!(rate(Limit::per_minute(120)).as_deref(), Some("2"));
        assert_eq!(rate(Limit::per_hour(7200)).as_deref(), Some("2"));
        // 3 per minute is 0.05 per second: Spring's integer header cannot say it.
        assert_eq!(rate(Limit::per_minute(3)), None);
        assert_eq!(rate(Limit::per_minute(90)), None);
    }

    /// Login: 3 a minute per client (refused) and 300 a day in all (would admit, 297 left).
    fn login_parts() -> (Decision, Decision) {
        let per_client = decision(false);
        let daily = Decision::new(
            true,
            297,
            Limit::per_day(300),
            1,
            Duration::ZERO,
            Duration::from_secs(864),
        );
        (per_client, daily)
    }

    #[test]
    fn a_concurrency_limit_is_a_quota_of_concurrent_requests() {
        let in_flight = Decision::new(
            true,
            2,
            Limit::concurrent(3),
            1,
            Duration::ZERO,
            Duration::from_secs(30),
        );
        let (per_client, _) = login_parts();
        let per_client = Decision::new(
            true,
            4,
            per_client.limit,
            1,
            Duration::ZERO,
            Duration::from_secs(20),
        );
        let combined = Decision::combined(vec![in_flight.clone(), per_client.clone()]);
        let mut h = HeaderMap::new();
        set_call_headers(
            &mut h,
            [("exports", &in_flight), ("login", &per_client)],
            &combined,
            HeaderFamilies::ALL,
        );
        assert_eq!(
            h["ratelimit-policy"],
            "\"exports\";q=3;qu=\"concurrent-requests\", \"login\";q=5;w=100"
        );
        assert_eq!(h["ratelimit"], "\"exports\";r=2, \"login\";r=4;t=20");
        // Spring's headers describe the tightest: here the one with the fewest left, with no
        // replenish rate for a concurrency limit.
        let mut h = HeaderMap::new();
        set_headers(&mut h, "exports", &in_flight, HeaderFamilies::ALL);
        assert_eq!(h["x-ratelimit-burst-capacity"], "3");
        assert!(h.get("x-ratelimit-replenish-rate").is_none());
    }

    #[test]
    fn several_limits_are_each_listed_and_the_tightest_is_springs() {
        let (per_client, daily) = login_parts();
        let combined = Decision::combined(vec![daily.clone(), per_client.clone()]);
        assert_eq!(combined.tightest(), 1);
        let mut h = HeaderMap::new();
        set_call_headers(
            &mut h,
            [("shop::login#2", &daily), ("shop::login", &per_client)],
            &combined,
            HeaderFamilies::ALL,
        );
        assert_eq!(
            h["ratelimit-policy"],
            "\"shop::login#2\";q=300;w=86400, \"shop::login\";q=5;w=100"
        );
        assert_eq!(
            h["ratelimit"],
            "\"shop::login#2\";r=297;t=864, \"shop::login\";r=0;t=34"
        );
        // Spring's headers: the refusing limit's own.
        assert_eq!(h["x-ratelimit-burst-capacity"], "5");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["retry-after"], "20");

        // Admitted by both: Spring describes the one with the fewest tokens left.
        let plenty = decision(true);
        let combined = Decision::combined(vec![daily.clone(), plenty.clone()]);
        let mut h = HeaderMap::new();
        set_call_headers(
            &mut h,
            [("d", &daily), ("c", &plenty)],
            &combined,
            HeaderFamilies::ALL.without_ietf(),
        );
        assert_eq!(h["x-ratelimit-remaining"], "4");
        assert_eq!(h["x-ratelimit-burst-capacity"], "5");
        assert!(h.get("ratelimit").is_none() && h.get("retry-after").is_none());
    }

    #[test]
    fn a_limit_without_a_bucket_is_left_out_of_the_list() {
        let (_, daily) = login_parts();
        let keyless = decision(true).with_source(Source::Disabled);
        let combined = Decision::combined(vec![keyless.clone(), daily.clone()]);
        let mut h = HeaderMap::new();
        set_call_headers(
            &mut h,
            [("off", &keyless), ("day", &daily)],
            &combined,
            HeaderFamilies::ALL,
        );
        assert_eq!(h["ratelimit-policy"], "\"day\";q=300;w=86400");
    }

    #[test]
    fn a_rejection_names_every_refusing_limit_once() {
        let (per_client, daily) = login_parts();
        let also_refusing = Decision::new(
            false,
            0,
            Limit::per_second(1),
            1,
            Duration::from_millis(500),
            Duration::from_secs(1),
        );
        let parts = vec![per_client, daily, also_refusing];
        let combined = Decision::combined(parts.clone());
        // Without names (`RateLimiter::check_all`), items are told apart by position.
        let r = RateLimited::new(combined, "k");
        assert!(
            r.problem_json().contains(
                "\"violated-policies\":[\"rate-limit\",\"rate-limit#3\"],\"retry-after\":20"
            ),
            "{}",
            r.problem_json()
        );
        let h = r.headers(HeaderFamilies::ALL);
        assert_eq!(
            h["ratelimit"],
            "\"rate-limit\";r=0;t=34, \"rate-limit#2\";r=297;t=864, \"rate-limit#3\";r=0;t=1"
        );
        assert_eq!(h["retry-after"], "20");
        let verdict = crate::pipeline::verdict::Recorded::several(
            ["a", "b", "c"]
                .map(Label::of)
                .into_iter()
                .zip(parts)
                .collect(),
        );
        let named = RateLimited::refused(verdict, "k".into(), Default::default());
        assert_eq!(named.name(), Some("a"), "the tightest names the rejection");
        assert!(named.problem_json().contains("[\"a\",\"c\"]"));
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(sf_string("a\"b\\c é"), "\"a\\\"b\\\\c _\"");
    }

    #[test]
    fn problem_body() {
        let r = RateLimited::new(decision(false), "k").with_name("shop::\"x\"");
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            r.problem_json(),
            format!(
                "{{\"type\":\"{QUOTA_EXCEEDED}\",\"title\":\"Request cannot be satisfied as assigned quota has been exceeded\",\"status\":429,\"violated-policies\":[\"shop::\\\"x\\\"\"],\"retry-after\":20}}"
            )
        );
    }
}
