//! Decisions taken without asking the store: a call without a key (the empty-key policy), a
//! call whose key could not be found out, and a limit that could not be checked at all.

use std::time::Duration;

use crate::decision::Decision;
use crate::decision::Source;
use crate::limit::Limit;
use crate::limit::{EmptyKeyPolicy, FailurePolicy};
use crate::limiter::inner::RateLimiter;

/// The decision for a call that has no key, per the empty-key policy.
pub(crate) fn decide_without_key(
    limiter: &RateLimiter,
    policy: Option<EmptyKeyPolicy>,
    limit: &Limit,
    cost: u32,
) -> Decision {
    let policy = policy.unwrap_or(limiter.inner.empty_key);
    decide_by(policy == EmptyKeyPolicy::Allow, limit, cost, Source::NoKey)
}

/// The decision for a call whose key could not be found out (an async resolver failed or
/// ran past the deadline): the limit's failure policy, as when the store fails, except that
/// the fallback, with no key to keep a bucket of, refuses.
pub(crate) fn decide_unresolved(limiter: &RateLimiter, limit: &Limit, cost: u32) -> Decision {
    match limit
        .failure_policy()
        .unwrap_or(limiter.inner.resilience.policy)
    {
        FailurePolicy::Allow => decide_by(true, limit, cost, Source::FailOpen),
        _ => decide_by(false, limit, cost, Source::FailClosed),
    }
}

/// The refusal of a call whose limit could not be checked: by nobody's policy but
/// its own, never admitted (a limit in shadow mode lets it through).
pub(crate) fn fail_closed(limit: &Limit, cost: u32) -> Decision {
    decide_by(false, limit, cost, Source::FailClosed)
}

/// A decision taken without a store: `allowed` or not, by `source`, a limit in shadow mode
/// letting a refusal through.
fn decide_by(allowed: bool, limit: &Limit, cost: u32, source: Source) -> Decision {
    let mut decision =
        Decision::new(allowed, 0, *limit, cost, Duration::ZERO, Duration::ZERO).with_source(source);
    decision.let_shadow_through();
    decision
}
