//! Calls whose cost is known only when they end (a completion's tokens, a download's bytes):
//! they take an estimate before they run, and settle the actual cost after ([`Usage`]).

use super::*;
use crate::pipeline::check::TakenPart;
use crate::pipeline::check::Taking;
use crate::pipeline::decide::Ask;

/// A call that took an estimate of its cost and settles the actual cost when it ends: what
/// [`check_estimate`](RateLimiter::check_estimate) and its kin return.
///
/// [`settle`](Usage::settle) gives back what the estimate took beyond the actual cost, or
/// takes what it fell short by, at once, in the same buckets (every instance sees it), below
/// empty if need be but never more than each limit's [debt bound](Limit::max_debt) below
/// it: the call that overdraws is served, and the calls after it wait for the debt to refill,
/// which their `retry_after` says. A `Usage` dropped unsettled (the call was cancelled, it
/// panicked, or its stream was dropped) keeps its estimate: nothing is lost, and nothing is
/// given back twice (`settle` takes the `Usage`).
///
/// It owns what it needs (a clone of the limiter, the bucket keys), so a streamed response
/// can carry it to the end of its stream.
///
/// ```
/// use ratelimit_core::{Limit, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ratelimit_core::Error> {
/// let limiter = RateLimiter::builder().memory().build().await?;
/// // 10,000 completion tokens a minute per API key, owing at most 2,000.
/// const TOKENS: Limit = Limit::per_minute(10_000).max_debt(2_000);
/// let usage = limiter.check_estimate("key:abc", &TOKENS, 1_000).await?;
/// assert!(usage.decision().allowed);
/// // ... the completion ran, and used 400 tokens: 600 go back.
/// let settled = usage.settle(400).await?;
/// assert_eq!((settled.given_back(), settled.taken()), (600, 0));
/// assert_eq!(limiter.peek("key:abc", &TOKENS).await?.remaining, 9_600);
/// # Ok(()) }
/// ```
#[must_use = "a Usage keeps its estimate unless it is settled"]
pub struct Usage {
    limiter: RateLimiter,
    decision: Decision,
    /// What each limit of the call took (its estimate), to settle (none when it was
    /// refused), and the name each is observed under.
    taken: Vec<(TakenPart, Option<String>)>,
}

/// What a [settlement](Usage::settle) did: per limit, in the order of the call's limits, the
/// tokens it took beyond the estimate and those it gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settlement {
    /// Each limit's `(taken, given_back)`; empty for a call that was refused (it took
    /// nothing, and settles nothing).
    pub each: Vec<(u64, u64)>,
}

impl Settlement {
    /// The tokens taken beyond the estimate, summed over the limits. Below what the actual
    /// cost asked when a limit's debt reached its bound.
    pub fn taken(&self) -> u64 {
        self.each.iter().map(|e| e.0).sum()
    }

    /// The tokens given back, summed over the limits. A bucket gains them floored at full, and
    /// a window only while it is the one the call took from.
    pub fn given_back(&self) -> u64 {
        self.each.iter().map(|e| e.1).sum()
    }
}

/// An integer an actual cost is computed as (`#[rate_limit(settle = ..)]`'s closure): any of
/// Rust's integers. A value that does not fit a `u32` settles as `u32::MAX` (the limit's
/// debt bound takes what it allows of it); a negative one as 0 (everything given back). The
/// macro's code reaches it through a trait of the user's crate, which says what to return.
pub trait IntoActual {
    /// The actual cost.
    fn into_actual(self) -> u32;
}

macro_rules! into_actual {
    ($($t:ty),*) => {$(
        impl IntoActual for $t {
            fn into_actual(self) -> u32 {
                #[allow(unused_comparisons)]
                let negative = self < 0;
                if negative { 0 } else { u32::try_from(self).unwrap_or(u32::MAX) }
            }
        }
    )*};
}

into_actual!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);

impl Usage {
    /// The decision of the estimate: when it refused, the call must not run (settling it
    /// does nothing).
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Settles the call at `actual` tokens under every limit it took from (a limit counting
    /// tokens per minute and another per month settle alike): the difference to the estimate
    /// is given back or taken, at once, in one step per store call (one script for the limits
    /// of one Redis node). A refused call settles nothing.
    ///
    /// # Errors
    /// The store's; the estimate then stays taken.
    pub async fn settle(self, actual: u32) -> Result<Settlement, Error> {
        let actual = vec![actual; self.taken.len()];
        self.settle_each(&actual).await
    }

    /// [`settle`](Usage::settle) with each limit's own actual cost, in the order of the
    /// call's limits (for limits that count different things).
    ///
    /// Any `u32` is an actual cost (what the debt bound does not allow is not taken).
    ///
    /// # Errors
    /// [`Error::SettleCount`] when `actual` does not name one cost per limit of an admitted
    /// call; otherwise the store's (the estimate then stays taken).
    pub async fn settle_each(mut self, actual: &[u32]) -> Result<Settlement, Error> {
        let taken = std::mem::take(&mut self.taken);
        if taken.is_empty() {
            return Ok(Settlement { each: Vec::new() });
        }
        if actual.len() != taken.len() {
            return Err(Error::SettleCount {
                limits: taken.len(),
                given: actual.len(),
            });
        }
        let checks: Vec<Check<'_>> = taken.iter().map(|(part, _)| part.check()).collect();
        let taking: Vec<Taking> = (taken.iter().zip(actual))
            .map(|((part, _), &actual)| part.taking(actual))
            .collect();
        let each = decide_checks(&self.limiter, &checks, Ask::Settle(&taking))
            .await?
            .settled;
        for ((_, name), &(took, gave)) in taken.iter().zip(&each) {
            crate::observe::settled(observed_name(name.as_deref()), took, gave);
        }
        Ok(Settlement { each })
    }
}

impl fmt::Debug for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Usage")
            .field("decision", &self.decision)
            .field("limits", &self.taken.len())
            .finish_non_exhaustive()
    }
}

impl RateLimiter {
    /// Takes an estimated `estimate` tokens from `key`'s bucket under `limit` for a call whose
    /// cost is known only when it ends, and returns the [`Usage`] that settles the actual
    /// cost then. The decision is [`check_n`](RateLimiter::check_n)'s, in the same buckets
    /// (a limit that may wait, waits).
    ///
    /// Settling needs a limit that can owe tokens: the token bucket (smooth refill), the
    /// leaky bucket, the fixed window (a [calendar quota](Limit::per_month) is one) or the
    /// sliding log.
    ///
    /// # Errors
    /// [`Error::CannotSettle`] for another limit, [`Error::SettleUnsupported`] on a custom
    /// store; otherwise as [`check_n`](RateLimiter::check_n).
    pub async fn check_estimate(
        &self,
        key: &str,
        limit: &Limit,
        estimate: u32,
    ) -> Result<Usage, Error> {
        self.check_estimates_by_name(&[(None, key, limit, estimate)])
            .await
    }

    /// [`check_estimate`](RateLimiter::check_estimate) in the bucket of `key` under the limit
    /// called `name` (a `#[rate_limit]` function's, or [`check_named`](RateLimiter::check_named)'s).
    ///
    /// # Errors
    /// As [`check_estimate`](RateLimiter::check_estimate).
    pub async fn check_estimate_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
        estimate: u32,
    ) -> Result<Usage, Error> {
        self.check_estimates_by_name(&[(Some(name), key, limit, estimate)])
            .await
    }

    /// Several limits of one call, each with its estimate, decided together, all or nothing
    /// (as [`check_all_named`](RateLimiter::check_all_named): `(name, key, limit, estimate)`),
    /// and settled together: a tokens-per-minute rate and a tokens-per-month quota on one API
    /// key.
    ///
    /// ```
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ratelimit_core::Error> {
    /// let limiter = RateLimiter::builder().memory().build().await?;
    /// const PER_MINUTE: Limit = Limit::per_minute(1_000);
    /// const PER_MONTH: Limit = Limit::per_month(50_000);
    /// let usage = limiter
    ///     .check_all_estimates(&[
    ///         ("llm::minute", "key:abc", &PER_MINUTE, 500),
    ///         ("llm::month", "key:abc", &PER_MONTH, 500),
    ///     ])
    ///     .await?;
    /// assert!(usage.decision().allowed);
    /// // The response was longer than estimated: 700 tokens, 200 more from each.
    /// let settled = usage.settle(700).await?;
    /// assert_eq!(settled.each, vec![(200, 0), (200, 0)]);
    /// let d = limiter.peek_named("llm::month", "key:abc", &PER_MONTH).await?;
    /// assert_eq!(d.remaining, 49_300);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check_all_named`](RateLimiter::check_all_named) and
    /// [`check_estimate`](RateLimiter::check_estimate).
    pub async fn check_all_estimates(
        &self,
        checks: &[(&str, &str, &Limit, u32)],
    ) -> Result<Usage, Error> {
        let named: Vec<(Option<&str>, &str, &Limit, u32)> = checks
            .iter()
            .map(|&(name, key, limit, estimate)| (Some(name), key, limit, estimate))
            .collect();
        self.check_estimates_by_name(&named).await
    }

    /// Takes `n` tokens from `key`'s bucket under `limit` whatever the bucket holds, into the
    /// limit's [debt bound](Limit::max_debt) below empty if need be: for usage that is known
    /// only after the fact and was not estimated (a response's size, counted when it ends).
    /// Never refused, it takes at most what the bound allows; the calls after it are refused
    /// until the debt has refilled, which their `retry_after` says. Every instance sees it.
    ///
    /// A charge is a settlement of a call that took no estimate (see [`Usage`]): the same
    /// limits can be charged (the token bucket with smooth refill, the leaky bucket, the fixed
    /// window, the sliding log), in the same step on Redis. A window is charged in its current
    /// window. While the store is failing (the bucket's circuit is open), the limit's failure
    /// policy takes it: the [fallback](crate::FailurePolicy::Fallback)'s bucket, or nothing
    /// under `allow` and `deny`.
    ///
    /// ```
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ratelimit_core::Error> {
    /// let limiter = RateLimiter::builder().memory().build().await?;
    /// // 1,000 bytes a minute per client, owing at most 500.
    /// const BYTES: Limit = Limit::per_minute(1_000).max_debt(500);
    /// assert_eq!(limiter.charge("client:7", &BYTES, 1_200).await?, 1_200);
    /// // In debt: the next call is refused until 200 bytes and its own have come back.
    /// assert!(!limiter.check("client:7", &BYTES).await?.allowed);
    /// // Never past the bound: 300 more of the 400 asked.
    /// assert_eq!(limiter.charge("client:7", &BYTES, 400).await?, 300);
    /// # Ok(()) }
    /// ```
    ///
    /// Answers the tokens taken: `n`, or less where the debt bound stopped it.
    ///
    /// # Errors
    /// [`Error::CannotSettle`] for a limit that cannot owe, [`Error::SettleUnsupported`] on a
    /// custom store, [`Error::NotEnabled`] before `enable_redis_rate_limit!`; otherwise the
    /// store's (nothing is then taken).
    pub async fn charge(&self, key: &str, limit: &Limit, n: u32) -> Result<u64, Error> {
        self.charge_by_name(None, key, limit, n).await
    }

    /// [`charge`](RateLimiter::charge) to the bucket of `key` under the limit called `name`
    /// (a `#[rate_limit]` function's, or [`check_named`](RateLimiter::check_named)'s).
    ///
    /// # Errors
    /// As [`charge`](RateLimiter::charge).
    pub async fn charge_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
        n: u32,
    ) -> Result<u64, Error> {
        self.charge_by_name(Some(name), key, limit, n).await
    }

    /// A charge: a check of no cost settled at `n`, by whoever decides the bucket now.
    async fn charge_by_name(
        &self,
        name: Option<&str>,
        key: &str,
        limit: &Limit,
        n: u32,
    ) -> Result<u64, Error> {
        self.can_settle(limit)?;
        let bucket = bucket_key(&self.inner.prefix, name, key);
        let source = self.source_now(&bucket, limit)?;
        if n == 0 {
            return Ok(0);
        }
        let check = Check::new(&bucket, limit, 0);
        let taking = Taking {
            actual: n,
            source,
            at: 0,
        };
        let settled = decide_checks(self, &[check], Ask::Settle(&[taking]))
            .await?
            .settled;
        let (took, gave) = settled.first().copied().unwrap_or_default();
        crate::observe::settled(observed_name(name), took, gave);
        Ok(took)
    }

    /// Whether `limit` can owe tokens on this limiter's store: what taking an estimate, and
    /// a charge, need.
    fn can_settle(&self, limit: &Limit) -> Result<(), Error> {
        if !limit.settles() {
            return Err(Error::CannotSettle(*limit));
        }
        match &self.inner.engine {
            Engine::Remote(Remote {
                store: RemoteStore::Custom(_),
                ..
            }) => Err(Error::SettleUnsupported),
            Engine::Unenabled => Err(Error::NotEnabled),
            Engine::Local(_) | Engine::Remote(_) => Ok(()),
        }
    }

    /// Every way to take an estimate: the checks decided as `check_named` / `check_all_named`
    /// decide them, and what each limit took kept, with the store's time of the take.
    async fn check_estimates_by_name(
        &self,
        checks: &[(Option<&str>, &str, &Limit, u32)],
    ) -> Result<Usage, Error> {
        for &(_, _, limit, _) in checks {
            self.can_settle(limit)?;
        }
        let decided = self.decide_named(checks.iter().copied(), Ask::Take).await?;
        let mut taken = Vec::new();
        if decided.parts.iter().all(|d| d.allowed) {
            for (part, &(name, key, limit, estimate)) in decided.parts.iter().zip(checks) {
                // A shadow limit's settles nothing: it may have taken nothing.
                if part.shadowed || limit.is_shadow() {
                    continue;
                }
                let part = TakenPart {
                    bucket: bucket_key(&self.inner.prefix, name, key),
                    limit: *limit,
                    cost: estimate,
                    source: part.source,
                    at: part.decided_at_us().unwrap_or(0),
                };
                taken.push((part, name.map(str::to_owned)));
            }
        }
        let (decision, _) = decided.combined();
        Ok(Usage {
            limiter: self.clone(),
            decision,
            taken,
        })
    }
}
