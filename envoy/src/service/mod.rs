//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, served from this library's
//! limits: [`Service`].
//!
//! # One request
//!
//! - **Bounds**: a request carries at most [`MAX_DESCRIPTORS`] descriptors of at most
//!   [`MAX_ENTRIES`] entries each, and its domain and every entry's key and value hold at most
//!   [`MAX_VALUE_BYTES`] bytes; beyond, and for an empty domain or no descriptor at all (as the
//!   reference), the answer is `INVALID_ARGUMENT` and nothing is charged.
//! - **Unknown domain**: as the reference (`GetLimit` counts `domain_not_found` and applies no
//!   limit), every descriptor is answered `OK` with no `current_limit`: an unknown domain is
//!   not an error there, and a gateway pointed at the wrong domain keeps serving.
//! - **Cost**: the descriptor's own `hits_addend` when set (0 included), else the request's
//!   `hits_addend`, where 0 (protobuf's "unset") means 1: the reference's `GetHitsAddends`.
//! - **All or nothing**: every descriptor whose rule has a limit and a cost ≥ 1 is decided in
//!   one call of [`RateLimiter::check_all_named`] (one script on Redis): a refused request
//!   charges none of its buckets. Two descriptors that fall in one bucket are one check with
//!   the sum of their costs, and both report its status.
//! - **Cost 0** ("check only"): the bucket is peeked ([`RateLimiter::peek_named`], would one
//!   more hit pass?) *before* the others are charged, and a check-only descriptor that is
//!   over refuses the request without charging anything. The peek and the charge are two
//!   steps, not one: a check-only descriptor is not atomic with the charged ones.
//! - **Rules**: `unlimited` answers `OK` with `limit_remaining` `u32::MAX` and no limit (as the
//!   reference); `requests_per_unit: 0` answers `OVER_LIMIT`; no rule answers `OK` with no
//!   `current_limit`; a rule named in another applying rule's `replaces` is dropped (as the
//!   reference). A cost beyond a limit's burst can never pass: `OVER_LIMIT` without asking
//!   Redis.
//! - **Statuses**: every `DescriptorStatus` is filled: `current_limit` (the rule's `name`,
//!   `requests_per_unit` and `unit` as written; a rule with this library's `period` reports
//!   the unit its period is exactly, else `UNKNOWN`), `limit_remaining` (the bucket's whole
//!   tokens after the decision; of a refused request, what is left since nothing was taken),
//!   `duration_until_reset`: when refused (or shadow-refused), the decision's `retry_after`,
//!   the exact wait after which the same hit passes; when admitted, its `reset_after`, until
//!   the bucket is full again (a fixed window's end, as the reference). Both are rounded *up*
//!   to whole seconds: Envoy builds `Retry-After` and `X-RateLimit-Reset` from the seconds, so
//!   a `Retry-After` is never early.
//! - **Shadow**: a rule's `shadow_mode` limit is decided and charged like the others, never
//!   refuses, and reports `OK` (as the reference); under the global `SHADOW_MODE` every limit is
//!   a shadow one, its descriptor reports `OVER_LIMIT` when it would have refused, and
//!   `overall_code` is `OK` (as the reference).
//! - **Redis failing**: each limit's failure policy decides (the rule's `failure_policy`, else
//!   the limiter's): `fallback` enforces this instance's share, `deny` answers `OVER_LIMIT`,
//!   `allow` answers `OK` (fail open, logged by the limiter). With
//!   [`StoreFailure::Unavailable`] a decision the failure policy took for a limit without a
//!   policy of its own is answered gRPC `UNAVAILABLE` instead, so that Envoy's
//!   `failure_mode_deny` applies. An error of the limiter is `UNAVAILABLE` too: never a
//!   silent `OK`.
//! - **Stream-done charges**: a descriptor with a `ratelimit.stream_done` entry (the
//!   convention of [`crate::usage`], which says what Envoy sends at stream end) is looked up
//!   without that entry, never refuses, and charges its own `hits_addend` (less the estimate
//!   the entry names) into its rule's bounded debt once the request's other descriptors are
//!   decided and admitted; without a `hits_addend` of its own it charges nothing.
//! - **Response headers** ([`ResponseHeaders::Draft11`], off by default as in the reference):
//!   the IETF draft-11 `RateLimit-Policy` and `RateLimit` in `response_headers_to_add`, which
//!   Envoy adds to the response (the 429 of a refused request included), rendered by
//!   ratelimit-core's [`set_call_headers`](ratelimit_core::headers::set_call_headers). One item per bucket the request was decided in,
//!   in the order of the descriptors (two descriptors in one bucket are one item), named by
//!   the rule's `name`, else its statistics key (`domain.key_value.key`; a name that repeats
//!   an earlier one gets `#n`, its position). Each item is that bucket's decision as the
//!   statuses report it: of a refused request, what is left since nothing was taken; a
//!   shadow rule's bucket as it is, spent included (as the library describes a limit in
//!   shadow mode). `t` is the time until the bucket is full again and `w` the limit's
//!   refill time, both rounded up. A rule with no quota (`unlimited`,
//!   `requests_per_unit: 0`) and a descriptor with no rule are left out; a cost no burst holds, and a decision by the
//!   failure policy without a bucket, list the policy alone (no `RateLimit` item).
//! - **A descriptor's `limit` override** (Envoy's, from dynamic metadata): as the
//!   reference's `GetLimit`, in a domain of the configuration whatever its rules, a fixed
//!   window of its `requests_per_unit` per `unit`, no name, no shadow mode, in a bucket of its
//!   own per unit ([`Config::override_of`]); no limit in an unknown domain;
//!   `INVALID_ARGUMENT` without a unit.
//! - **Not yet**: `is_negative_hits` is answered `UNIMPLEMENTED` (rather than ignored, which
//!   would change what the request means); `quota_mode` is not applied.

use std::sync::{Arc, PoisonError, RwLock};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelimit_core::{Decision, FailurePolicy, Limit, RateLimiter, Source};
use tonic::{Request, Response, Status};

use crate::config::{Action, Bucket, Config, Found, Lookup, Rule};
use crate::stats::{CallEnd, Hit, Stats};
use crate::usage::{self, STREAM_DONE_KEY};

mod plan;
mod request;
mod status;

use plan::{Group, Plan, StreamDone, is_in};
pub use request::{MAX_DESCRIPTORS, MAX_ENTRIES, MAX_VALUE_BYTES};
use request::{cost_of, override_unit, stream_done_estimates, validate};
use status::{draft11_headers, status};

/// What the service answers when Redis fails and a failure policy decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StoreFailure {
    /// The failure policy's decision is the answer (default).
    #[default]
    Policy,
    /// A decision the limiter's own failure policy took (for a limit without a
    /// `failure_policy` of its own) is answered gRPC `UNAVAILABLE`, so that Envoy's
    /// `failure_mode_deny` decides. A rule's own `failure_policy` still answers.
    Unavailable,
}

/// Which rate-limit headers the service asks Envoy to add to the response to the client
/// (`response_headers_to_add`), besides those Envoy builds itself from the statuses
/// (`enable_x_ratelimit_headers`, `enable_retry_after_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ResponseHeaders {
    /// None (default, as the reference).
    #[default]
    Off,
    /// The IETF draft-11 `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11):
    /// `RateLimit-Policy: "name";q=quota;w=window` and `RateLimit: "name";r=remaining;t=reset`,
    /// one item per bucket of the request.
    Draft11,
}

impl std::str::FromStr for ResponseHeaders {
    type Err = String;

    /// `off` (or `none`) and `draft11`, any case.
    fn from_str(word: &str) -> Result<ResponseHeaders, String> {
        match word.to_ascii_lowercase().as_str() {
            "off" | "none" => Ok(ResponseHeaders::Off),
            "draft11" => Ok(ResponseHeaders::Draft11),
            _ => Err(format!("`{word}`: expected `off` or `draft11`")),
        }
    }
}

/// The rate-limit service: a limiter and the configuration in force, swapped whole.
#[derive(Debug)]
pub struct Service {
    limiter: RateLimiter,
    config: RwLock<Arc<Config>>,
    global_shadow: bool,
    store_failure: StoreFailure,
    response_headers: ResponseHeaders,
    stats: Arc<Stats>,
}

impl Service {
    /// A service deciding in `limiter` under `config`.
    pub fn new(limiter: RateLimiter, config: Config) -> Service {
        Service {
            limiter,
            config: RwLock::new(Arc::new(config)),
            global_shadow: false,
            store_failure: StoreFailure::default(),
            response_headers: ResponseHeaders::default(),
            stats: Arc::new(Stats::default()),
        }
    }

    /// The rate-limit headers to add to the response to the client ([`ResponseHeaders`]).
    #[must_use]
    pub fn response_headers(mut self, headers: ResponseHeaders) -> Service {
        self.response_headers = headers;
        self
    }

    /// The global `SHADOW_MODE`: every limit decided and charged, none refusing.
    #[must_use]
    pub fn global_shadow(mut self, shadow: bool) -> Service {
        self.global_shadow = shadow;
        self
    }

    /// What to answer when Redis fails ([`StoreFailure`]).
    #[must_use]
    pub fn store_failure(mut self, failure: StoreFailure) -> Service {
        self.store_failure = failure;
        self
    }

    /// Where the decisions are counted ([`Stats`]; by default counters of the service's own).
    #[must_use]
    pub fn stats(mut self, stats: Arc<Stats>) -> Service {
        self.stats = stats;
        self
    }

    /// The counters the decisions are counted in.
    pub fn counters(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `config` in force for the requests that start from now on.
    pub fn set_config(&self, config: Config) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
    }

    /// The limiter.
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// The tonic service to add to a server.
    pub fn into_server(self) -> RateLimitServiceServer<Service> {
        RateLimitServiceServer::new(self)
    }

    /// Decides one request (see the [module](self)'s documentation).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a request out of bounds, `UNIMPLEMENTED` for what is not
    /// supported yet, `UNAVAILABLE` when the limiter fails (see [`StoreFailure`]).
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        validate(request)?;
        let config = self.config();
        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut plans = Vec::with_capacity(request.descriptors.len());
        let mut found = Vec::with_capacity(request.descriptors.len());
        let estimates = stream_done_estimates(request)?;
        // Envoy's per-descriptor `limit` overrides, each a rule of its own (the reference's
        // `GetLimit`), made before any descriptor borrows them; none, and nothing allocated,
        // for a request without one.
        let overrides: Vec<Option<(Rule, Bucket)>> =
            if request.descriptors.iter().any(|d| d.limit.is_some()) {
                request
                    .descriptors
                    .iter()
                    .map(|d| {
                        let limit = d.limit.as_ref()?;
                        let unit = override_unit(limit.unit)?;
                        config.override_of(
                            &request.domain,
                            entries_of(d),
                            limit.requests_per_unit,
                            unit,
                        )
                    })
                    .collect()
            } else {
                Vec::new()
            };
        for (at, descriptor) in request.descriptors.iter().enumerate() {
            let overridden = overrides.get(at).and_then(Option::as_ref);
            found.push(if let Some((rule, bucket)) = overridden {
                Some(Found {
                    rule,
                    bucket: bucket.clone(),
                    metric_key: rule.stats_key().to_owned(),
                })
            } else if descriptor.limit.is_some() {
                // An override in an unknown domain: no limit, as the reference.
                None
            } else {
                match config.lookup(&request.domain, entries_of(descriptor)) {
                    Lookup::Rule(found) => Some(found),
                    _ => None,
                }
            });
        }
        // The reference's `replaces`: every applying rule's, unlimited ones included.
        let replaced: Vec<&str> = found
            .iter()
            .flatten()
            .flat_map(|f| f.rule().replaces())
            .map(String::as_str)
            .collect();
        for ((descriptor, found), estimate) in
            request.descriptors.iter().zip(&found).zip(&estimates)
        {
            let Some(found) = found else {
                plans.push(Plan::Free);
                continue;
            };
            let rule = found.rule();
            let is_replaced = |rule: &Rule| rule.name().is_some_and(|n| replaced.contains(&n));
            let plan = match rule.action() {
                Action::Unlimited => Plan::Unlimited,
                _ if is_replaced(rule) => Plan::Free,
                Action::Limit(limit) if estimate.is_some() => Plan::StreamDone(StreamDone {
                    rule,
                    limit: *limit,
                    name: found.bucket().name(),
                    key: found.bucket().key(),
                    estimate: estimate.unwrap_or(0),
                    actual: descriptor.hits_addend.map(|h| h.value),
                    charged: None,
                }),
                // The request ran: a stream-done charge under a rule that refuses everything
                // has nothing to refuse.
                Action::Block if estimate.is_some() => Plan::Free,
                Action::Block => Plan::Refused(rule, None),
                Action::Limit(limit) => {
                    let limit = limit.with_shadow(limit.is_shadow() || self.global_shadow);
                    let cost = cost_of(request, descriptor);
                    if cost > u64::from(limit.burst_capacity()) {
                        Plan::Refused(rule, Some(limit))
                    } else {
                        // Two descriptors in one bucket are one check: found among the
                        // request's few buckets (at most MAX_DESCRIPTORS) without a map.
                        let bucket = found.bucket();
                        let same = |g: &Group<'_>| g.name == bucket.name() && g.key == bucket.key();
                        let at = match groups.iter().position(same) {
                            Some(at) => at,
                            None => {
                                groups.push(Group {
                                    name: bucket.name(),
                                    key: bucket.key(),
                                    limit,
                                    cost: 0,
                                    decision: None,
                                });
                                groups.len() - 1
                            }
                        };
                        groups[at].cost += cost;
                        Plan::Bucket(rule, limit, at)
                    }
                }
            };
            plans.push(plan);
        }
        // A merged bucket's summed cost may pass its burst: refused like a single one.
        for plan in &mut plans {
            if let Plan::Bucket(rule, limit, at) = *plan
                && groups[at].cost > u64::from(limit.burst_capacity())
            {
                *plan = Plan::Refused(rule, Some(limit));
            }
        }
        // Whether an enforced descriptor refuses before any bucket is asked.
        let refused_early = plans.iter().any(|p| match p {
            Plan::Refused(rule, _) => !rule.shadow_mode() && !self.global_shadow,
            _ => false,
        });
        let charged: Vec<usize> = (0..groups.len())
            .filter(|&at| groups[at].cost > 0 && plans.iter().any(|p| is_in(p, at)))
            .collect();
        // Check-only buckets first: one of them over refuses the request before anything is
        // taken.
        let mut refused = refused_early;
        for (at, g) in groups.iter_mut().enumerate() {
            if g.cost == 0 && plans.iter().any(|p| is_in(p, at)) {
                let d = self.peek(g.name, g.key, &g.limit).await?;
                refused |= !d.allowed && !d.limit.is_shadow();
                g.decision = Some(d);
            }
        }
        if refused {
            // Nothing is charged: the charged buckets are only looked at, for their statuses.
            for &at in &charged {
                let g = &groups[at];
                let d = self.peek(g.name, g.key, &g.limit).await?;
                groups[at].decision = Some(d);
            }
        } else if !charged.is_empty() {
            let mut checks = Vec::with_capacity(charged.len());
            for &at in &charged {
                let g = &groups[at];
                let cost = u32::try_from(g.cost).unwrap_or(u32::MAX);
                checks.push((g.name, g.key, &g.limit, cost));
            }
            let decision = self
                .limiter
                .check_all_named(&checks)
                .await
                .map_err(|e| unavailable(&e))?;
            for (&at, part) in charged.iter().zip(decision.parts()) {
                self.answerable(part)?;
                groups[at].decision = Some(part.clone());
            }
        }
        if !refused {
            self.charge_stream_done(&mut plans).await?;
        }
        let statuses: Vec<DescriptorStatus> =
            plans.iter().map(|plan| status(plan, &groups)).collect();
        let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
        self.count(request, &found, &plans, &groups, refused, over);
        let overall = if over && !self.global_shadow {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let response_headers_to_add = match self.response_headers {
            ResponseHeaders::Off => Vec::new(),
            ResponseHeaders::Draft11 => draft11_headers(request, &plans, &groups),
        };
        Ok(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add,
            ..RateLimitResponse::default()
        })
    }

    /// Counts each descriptor's hits in [`Stats`], under its rule's metric key.
    fn count(
        &self,
        request: &RateLimitRequest,
        found: &[Option<Found<'_>>],
        plans: &[Plan<'_>],
        groups: &[Group<'_>],
        refused: bool,
        over: bool,
    ) {
        for ((descriptor, found), plan) in request.descriptors.iter().zip(found).zip(plans) {
            let Some(found) = found else { continue };
            let cost = cost_of(request, descriptor);
            let hit = match *plan {
                Plan::Free | Plan::Unlimited => continue,
                // A stream-done charge never refuses: its hits are counted as they were
                // charged (none when it charged nothing), within the limit; its bucket's
                // level is not read again for `near_limit` (a second round trip).
                Plan::StreamDone(ref done) => {
                    if done.charged.is_none() {
                        continue;
                    }
                    Hit {
                        cost: done.actual.unwrap_or(0),
                        over: false,
                        shadow: done.rule.shadow_mode(),
                        capacity: u64::from(done.limit.burst_capacity()),
                        remaining: u64::from(done.limit.burst_capacity()),
                        charged: true,
                    }
                }
                Plan::Refused(rule, limit) => Hit {
                    cost,
                    over: true,
                    shadow: rule.shadow_mode(),
                    capacity: limit.map_or(0, |l| u64::from(l.burst_capacity())),
                    remaining: 0,
                    charged: false,
                },
                Plan::Bucket(rule, limit, at) => {
                    let Some(d) = &groups[at].decision else {
                        continue;
                    };
                    Hit {
                        cost,
                        over: !d.allowed || d.shadowed,
                        shadow: rule.shadow_mode(),
                        capacity: u64::from(limit.burst_capacity()),
                        remaining: d.remaining,
                        charged: !refused && groups[at].cost > 0,
                    }
                }
            };
            self.stats.record(found.metric_key(), hit);
        }
        if over && self.global_shadow {
            self.stats.record_global_shadow();
        }
    }

    /// Charges the request's stream-done descriptors ([`crate::usage`]), one after another.
    async fn charge_stream_done(&self, plans: &mut [Plan<'_>]) -> Result<(), Status> {
        for plan in plans {
            let Plan::StreamDone(done) = plan else {
                continue;
            };
            let Some(actual) = done.actual else {
                tracing::debug!(
                    rule = done.rule.name().unwrap_or_default(),
                    "a stream-done descriptor without its own hits_addend charges nothing \
                     (route-level rate_limits: Envoy does not apply their hits_addend)"
                );
                continue;
            };
            match usage::charge(
                &self.limiter,
                done.name,
                done.key,
                &done.limit,
                done.estimate,
                actual,
            )
            .await
            {
                Ok(charged) => done.charged = Some(charged),
                Err(e @ ratelimit_core::Error::CannotSettle(_)) => {
                    // A configuration that cannot be applied: said, not refused (the request
                    // ran, and Envoy does not read this answer).
                    tracing::error!(
                        error = %e,
                        rule = done.rule.name().unwrap_or_default(),
                        "a stream-done charge under a limit that cannot owe tokens"
                    );
                }
                Err(e) => return Err(unavailable(&e)),
            }
        }
        Ok(())
    }

    /// A peek at a bucket, answerable or `UNAVAILABLE`.
    async fn peek(&self, name: &str, key: &str, limit: &Limit) -> Result<Decision, Status> {
        let d = self
            .limiter
            .peek_named(name, key, limit)
            .await
            .map_err(|e| unavailable(&e))?;
        self.answerable(&d)?;
        Ok(d)
    }

    /// `UNAVAILABLE` for a decision the limiter's failure policy took, when the service is to
    /// leave those to Envoy.
    fn answerable(&self, d: &Decision) -> Result<(), Status> {
        let by_policy = matches!(
            d.source,
            Source::Fallback | Source::FailOpen | Source::FailClosed
        );
        if self.store_failure == StoreFailure::Unavailable
            && by_policy
            && d.limit.failure_policy().is_none()
        {
            return Err(Status::unavailable(
                "the rate-limit store (Redis) is failing; no failure policy applies",
            ));
        }
        Ok(())
    }
}

/// A limiter's error, as gRPC answers it: Envoy's `failure_mode_deny` decides.
fn unavailable(e: &ratelimit_core::Error) -> Status {
    tracing::error!(error = %e, "ShouldRateLimit: the limiter failed");
    Status::unavailable(format!("the rate limiter failed: {e}"))
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let start = std::time::Instant::now();
        let answer = self.decide(request.get_ref()).await;
        let end = match &answer {
            Ok(_) => CallEnd::Answered,
            Err(status) if status.code() == tonic::Code::Unavailable => CallEnd::StoreError,
            Err(_) => CallEnd::ServiceError,
        };
        self.stats.record_call(start.elapsed(), end);
        answer.map(Response::new)
    }
}

/// The failure policies' names, for the limiter's default (`fallback`, `allow`, `deny`) and
/// `unavailable` ([`StoreFailure::Unavailable`], with `deny` under it).
///
/// # Errors
/// Any other word.
pub fn parse_failure(word: &str) -> Result<(FailurePolicy, StoreFailure), String> {
    match word {
        "unavailable" => Ok((FailurePolicy::Deny, StoreFailure::Unavailable)),
        other => other
            .parse::<FailurePolicy>()
            .map(|p| (p, StoreFailure::Policy))
            .map_err(|_| format!("`{other}`: expected fallback, allow, deny or unavailable")),
    }
}

/// A descriptor's entries as the configuration looks them up: without the stream-done mark.
fn entries_of(descriptor: &RateLimitDescriptor) -> impl Iterator<Item = (&str, &str)> {
    descriptor
        .entries
        .iter()
        .filter(|e| e.key != STREAM_DONE_KEY)
        .map(|e| (e.key.as_str(), e.value.as_str()))
}
