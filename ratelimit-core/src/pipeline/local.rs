//! The local stage: a memory store decides in the call's first poll, with nothing in a
//! future; what it did not decide (a store elsewhere, a reservation to wait for) goes on, boxed,
//! to the remote stage or the wait. The public one-limit methods (`check`, `check_named`,
//! `acquire*`) and the several-limit ones meet the pipeline here.

use crate::algorithm::Outcome;
use crate::decision::Decision;
use crate::errors::Error;
use crate::limit::Limit;
use crate::limiter::inner::Engine;
use crate::limiter::inner::RateLimiter;
use crate::naming::{bucket_key, with_bucket_key};
use crate::observe::observed_name;
use crate::pipeline::check::{Check, validate};
use crate::store::MemoryStore;

use super::waiting::BoxedAnswer;
use std::task::Poll;

/// [`check_n`](RateLimiter::check_n) and [`check_named`](RateLimiter::check_named): on a memory store,
/// decided in the first poll with nothing else in the future (a few references; an
/// `async fn` carried and moved a state machine for every path); otherwise, and for a call
/// that waits, through [`decide_by_name`]'s box. Nothing is decided
/// before the first poll.
pub(crate) fn check_by_name(
    limiter: &RateLimiter,
    name: Option<&str>,
    key: &str,
    limit: &Limit,
    cost: u32,
) -> impl Future<Output = Result<Decision, Error>> + Send {
    let mut rest: Option<BoxedAnswer<'static, Decision>> = None;
    std::future::poll_fn(move |cx| {
        if let Some(rest) = &mut rest {
            return rest.as_mut().poll(cx);
        }
        if let Err(e) = validate(&Check::new("", limit, cost)) {
            return Poll::Ready(Err(e));
        }
        let prefix = &*limiter.inner.prefix;
        let reserved = match decide_locally(limiter, limit, |store| {
            with_bucket_key(prefix, name, key, |bucket| {
                store.check_bytes(bucket, limit, cost)
            })
        }) {
            Some(local) if !local.waits => {
                let decision = local.decision(*limit, cost);
                observe_locally(&decision, prefix, name, key);
                return Poll::Ready(Ok(decision));
            }
            Some(local) => Some(local.decision(*limit, cost)),
            None => None,
        };
        rest.insert(decide_by_name(limiter, name, key, limit, cost, reserved))
            .as_mut()
            .poll(cx)
    })
}

/// The rest of [`check_n`](RateLimiter::check_n) and [`check_named`](RateLimiter::check_named) when
/// their first poll did not decide: the wait of a call that `reserved` its tokens, or the
/// remote store.
/// Boxed, and owning what it needs (a clone of the limiter, the key): inline, these paths
/// made the memory path's future and its poll's stack frame (8 kB) several times larger
/// (benches/results/history.md 4.6); a copy of the key is nothing beside a round trip or a wait.
fn decide_by_name(
    limiter: &RateLimiter,
    name: Option<&str>,
    key: &str,
    limit: &Limit,
    cost: u32,
    reserved: Option<Decision>,
) -> BoxedAnswer<'static, Decision> {
    let limiter = limiter.clone();
    let name = name.map(str::to_owned);
    let key = key.to_owned();
    let limit = *limit;
    Box::pin(async move {
        let bucket = bucket_key(&limiter.inner.prefix, name.as_deref(), &key);
        let check = Check::new(&bucket, &limit, cost);
        let decision = decide_later(&limiter, check, reserved).await?;
        decision.observe(observed_name(name.as_deref()), Some(&bucket));
        Ok(decision)
    })
}

/// What a one-limit call's first poll ([`decide_locally`]) left to
/// later: the wait of a call that `reserved` its tokens in memory, or the store (the deny
/// cache, the circuit, the deadline, the failure policy). The public methods and the
/// attribute's calls of one limit end here.
pub(crate) async fn decide_later(
    limiter: &RateLimiter,
    check: Check<'_>,
    reserved: Option<Decision>,
) -> Result<Decision, Error> {
    match reserved {
        Some(reserved) => super::waiting::wait_one(limiter, check, reserved).await,
        None => super::remote::decide(limiter, check).await,
    }
}

/// The pipeline's local stage: a memory store decides in the call's first poll, with
/// nothing in a future; `None` for any other store (the remote stage decides). `check` asks
/// the store for its small outcome on a bucket key the caller names (built on the stack, or
/// remembered). The caller builds the decision from it ([`Local::decision`]) where it uses it:
/// built here and moved out in an enum, a decision was copied twice more, and the copies'
/// wide loads stalled on its narrow stores (a twentieth of a memory check).
#[inline]
pub(crate) fn decide_locally(
    limiter: &RateLimiter,
    limit: &Limit,
    check: impl FnOnce(&MemoryStore) -> Outcome<u64>,
) -> Option<Local> {
    let Engine::Local(store) = &limiter.inner.engine else {
        return None;
    };
    let outcome = check(store);
    Some(Local {
        waits: waits(&outcome, limit),
        outcome,
    })
}

/// Whether a call decided by the memory store as `outcome` under `limit` must wait for the
/// tokens it reserved: [`must_wait`](super::waiting::must_wait) of its decision, asked of the outcome before the decision
/// is built (admitted with a wait, and not in shadow mode, which lets it go at once).
#[inline]
fn waits(outcome: &Outcome<u64>, limit: &Limit) -> bool {
    outcome.allowed && outcome.retry_after_us > 0 && !limit.is_shadow()
}

/// What the memory store decided in a call's first poll ([`decide_locally`]).
pub(crate) struct Local {
    outcome: Outcome<u64>,
    /// The call reserved its tokens and waits for them
    /// ([`waiting::wait_one`](crate::pipeline::waiting::wait_one), with its decision):
    /// it is decided later. Otherwise it goes, or is refused, now.
    pub(crate) waits: bool,
}

impl Local {
    /// The call's decision under `limit`, finished ([`must_wait`](super::waiting::must_wait)'s step: a refusal or a wait
    /// by a limit in shadow mode let through).
    #[inline]
    pub(crate) fn decision(&self, limit: Limit, cost: u32) -> Decision {
        let mut decision = Decision::from_store_outcome(&self.outcome, limit, cost);
        decision.let_shadow_through();
        decision
    }
}

/// Observes a decision of the memory store made on the stack-built bucket key, which is
/// shown only at TRACE: only then is it built again, as a string.
#[inline]
fn observe_locally(decision: &Decision, prefix: &str, name: Option<&str>, key: &str) {
    decision.observe_unwritten(observed_name(name), || bucket_key(prefix, name, key));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::waiting::must_wait;

    /// The first poll asks [`waits`] of the outcome where [`must_wait`] asks it of the
    /// decision: they agree on every outcome (admitted or refused, with a wait or none) under a
    /// limit in shadow mode or not.
    #[test]
    fn waits_answers_as_must_wait_does() {
        let limit = Limit::per_second(10).burst(5);
        for limit in [limit, limit.shadow()] {
            for allowed in [true, false] {
                for retry_after_us in [0, 1, 250_000] {
                    let outcome = Outcome {
                        allowed,
                        remaining: 0,
                        retry_after_us,
                        reset_after_us: 500_000,
                        new_state: Some(7),
                    };
                    let mut decision = Decision::from_store_outcome(&outcome, limit, 1);
                    assert_eq!(
                        waits(&outcome, &limit),
                        must_wait(std::slice::from_mut(&mut decision)),
                        "{outcome:?} shadow {}",
                        limit.is_shadow()
                    );
                }
            }
        }
    }
}
