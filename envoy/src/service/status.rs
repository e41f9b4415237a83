//! What a request's answer says of each descriptor: its status, and the draft-11 headers.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue as PbHeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use ratelimit_core::headers::{HeaderFamilies, RATELIMIT, RATELIMIT_POLICY, set_call_headers};
use ratelimit_core::{Decision, Limit, Source};

use crate::config::{ReferenceUnit, Rule};

use super::plan::{Group, Plan};
use super::request::cost_of;

/// One descriptor's status. A shadow rule's is `OK` whatever its bucket says (as the
/// reference); under the global shadow mode alone, `OVER_LIMIT` when it would have refused.
pub(super) fn status(plan: &Plan<'_>, groups: &[Group<'_>]) -> DescriptorStatus {
    match *plan {
        Plan::Free => DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        },
        // Envoy does not read this answer (the call is fire-and-forget): the limit alone.
        Plan::StreamDone(ref done) => DescriptorStatus {
            code: Code::Ok as i32,
            current_limit: Some(current_limit(done.rule, Some(&done.limit))),
            ..DescriptorStatus::default()
        },
        Plan::Unlimited => DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..DescriptorStatus::default()
        },
        Plan::Refused(rule, limit) => DescriptorStatus {
            code: code(true, rule.shadow_mode()) as i32,
            current_limit: Some(current_limit(rule, limit.as_ref())),
            ..DescriptorStatus::default()
        },
        Plan::Bucket(rule, limit, at) => {
            let Some(d) = &groups[at].decision else {
                return DescriptorStatus {
                    code: Code::Ok as i32,
                    current_limit: Some(current_limit(rule, Some(&limit))),
                    ..DescriptorStatus::default()
                };
            };
            // Of a charged bucket in a request refused before it was asked, a peek: whether
            // one more hit would pass. A check-only one is over when not one hit passes.
            let over = !d.allowed || d.shadowed;
            let wait = if over { d.retry_after } else { d.reset_after };
            DescriptorStatus {
                code: code(over, rule.shadow_mode()) as i32,
                current_limit: Some(current_limit(rule, Some(&limit))),
                limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(whole_seconds_up(wait)),
                ..DescriptorStatus::default()
            }
        }
    }
}

/// The draft-11 `RateLimit-Policy` and `RateLimit` of a decided request (see the
/// [module](self)'s documentation), rendered by ratelimit-core: one part per bucket, each
/// with its rule's name (else its statistics key) and the bucket's decision.
pub(super) fn draft11_headers(
    request: &RateLimitRequest,
    plans: &[Plan<'_>],
    groups: &[Group<'_>],
) -> Vec<PbHeaderValue> {
    let mut shown = Vec::new();
    let mut parts: Vec<(&str, Decision)> = Vec::new();
    for (descriptor, plan) in request.descriptors.iter().zip(plans) {
        match *plan {
            Plan::Bucket(rule, limit, at) => {
                if shown.contains(&at) {
                    continue;
                }
                shown.push(at);
                let d = groups[at].decision.clone().unwrap_or_else(|| {
                    // Never asked (not reached): the policy alone.
                    policy_only(limit, groups[at].cost, Source::Free)
                });
                parts.push((label(rule), d));
            }
            // A cost no burst holds: refused without asking, the policy alone (its `q` says
            // what the burst holds).
            Plan::Refused(rule, Some(limit)) => {
                let cost = cost_of(request, descriptor);
                parts.push((
                    label(rule),
                    policy_only(limit, cost, Source::CostExceedsBurst),
                ));
            }
            // No quota to describe: no rule, `unlimited`, `requests_per_unit: 0`, and a
            // stream-done charge, whose answer Envoy does not read.
            Plan::Free | Plan::Unlimited | Plan::Refused(_, None) | Plan::StreamDone(_) => {}
        }
    }
    if parts.is_empty() {
        return Vec::new();
    }
    let combined = Decision::combined(parts.iter().map(|(_, d)| d.clone()).collect());
    let mut headers = ::http::HeaderMap::new();
    set_call_headers(
        &mut headers,
        parts.iter().map(|(name, d)| (*name, d)),
        &combined,
        HeaderFamilies::NONE.with_ietf(),
    );
    [&RATELIMIT_POLICY, &RATELIMIT]
        .into_iter()
        .filter_map(|name| {
            let value = headers.get(name)?.to_str().ok()?;
            Some(PbHeaderValue {
                key: name.as_str().to_owned(),
                value: value.to_owned(),
                ..PbHeaderValue::default()
            })
        })
        .collect()
}

/// How a rule's limit is named to clients: its `name`, else its statistics key.
pub(super) fn label(rule: &Rule) -> &str {
    rule.name().unwrap_or(rule.stats_key())
}

/// A decision under `limit` whose bucket was not asked, by `source`: it describes the policy
/// alone.
pub(super) fn policy_only(limit: Limit, cost: u64, source: Source) -> Decision {
    let cost = u32::try_from(cost).unwrap_or(u32::MAX);
    let allowed = source != Source::CostExceedsBurst;
    let mut d = Decision::new(allowed, 0, limit, cost, Duration::ZERO, Duration::ZERO);
    d.source = source;
    d
}

/// `OVER_LIMIT` when over, unless a shadow rule lets it through (`OK`, as the reference).
pub(super) fn code(over: bool, shadow_rule: bool) -> Code {
    if over && !shadow_rule {
        Code::OverLimit
    } else {
        Code::Ok
    }
}

/// `current_limit` of a rule: as written, or what its limit's period is.
pub(super) fn current_limit(rule: &Rule, limit: Option<&Limit>) -> PbRateLimit {
    let (unit, requests) = match (rule.unit(), limit) {
        (Some(unit), _) => (pb_unit(unit), rule.requests_per_unit()),
        (None, Some(limit)) => {
            let unit = match limit.period().as_secs() {
                _ if limit.period().subsec_nanos() != 0 => PbUnit::Unknown,
                1 => PbUnit::Second,
                60 => PbUnit::Minute,
                3600 => PbUnit::Hour,
                86_400 => PbUnit::Day,
                _ => PbUnit::Unknown,
            };
            (unit, limit.replenish())
        }
        (None, None) => (PbUnit::Unknown, rule.requests_per_unit()),
    };
    PbRateLimit {
        name: rule.name().unwrap_or_default().to_owned(),
        requests_per_unit: requests,
        unit: unit as i32,
    }
}

pub(super) fn pb_unit(unit: ReferenceUnit) -> PbUnit {
    match unit {
        ReferenceUnit::Second => PbUnit::Second,
        ReferenceUnit::Minute => PbUnit::Minute,
        ReferenceUnit::Hour => PbUnit::Hour,
        ReferenceUnit::Day => PbUnit::Day,
        ReferenceUnit::Week => PbUnit::Week,
        ReferenceUnit::Month => PbUnit::Month,
        ReferenceUnit::Year => PbUnit::Year,
    }
}

/// `d` rounded up to whole seconds: Envoy reads the seconds.
pub(super) fn whole_seconds_up(d: Duration) -> envoy_types::pb::google::protobuf::Duration {
    let seconds = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    envoy_types::pb::google::protobuf::Duration {
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        nanos: 0,
    }
}
