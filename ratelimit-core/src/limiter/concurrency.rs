//! Concurrency limits ([`Limit::concurrent`]): a slot taken when a call starts
//! ([`RateLimiter::enter`]) and given back when its guard ([`Slot`]) is dropped, however the
//! call ends; the guard (`slot`) renews the slot's lease while the call runs.
//!
//! A call's limits, rate limits beside its concurrency limits, are decided by the funnel
//! ([`decide::decide_checks`](crate::pipeline::decide::decide_checks)): all or nothing, in one script on Redis. The call's id (its
//! holder) rides in each check of a concurrency limit, so that every step sees it.

use super::*;
use crate::pipeline::decide::Ask;

/// What [`RateLimiter::enter`] answers: the call's decision and, when it is admitted, the
/// guard of its slots.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "an admitted call holds its slots until `slot` is dropped: keep it while the call runs"]
pub struct Entered {
    /// The call's decision (of all its limits, see [`Decision::parts`]).
    pub decision: Decision,
    /// The slots the call holds: `Some` when it is admitted. Dropping it gives them back.
    pub slot: Option<Slot>,
}

impl RateLimiter {
    /// Takes a slot of `key` under the concurrency limit `limit` for a call that starts now:
    /// admitted while fewer than its max calls of `key` are in flight on every instance.
    /// Keep the [`Slot`] while the call runs; dropping it gives the slot back. A full key
    /// refuses at once, or, for a limit with a [`wait`](Limit::wait), queues the call for a
    /// slot, served in arrival order across the fleet, until the wait ends.
    ///
    /// ```
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ratelimit_core::Error> {
    /// let limiter = RateLimiter::builder().memory().build().await?;
    /// const REPORTS: Limit = Limit::concurrent(1);
    /// let first = limiter.enter("tenant:7", &REPORTS).await?;
    /// assert!(first.decision.allowed);
    /// // One report of tenant 7 runs: a second is refused while the first holds its slot.
    /// let second = limiter.enter("tenant:7", &REPORTS).await?;
    /// assert!(!second.decision.allowed && second.slot.is_none());
    /// drop(first); // the call ended: its slot is back
    /// let third = limiter.enter("tenant:7", &REPORTS).await?;
    /// assert!(third.decision.allowed);
    /// if let Some(slot) = third.slot {
    ///     slot.release().await?; // the same as a drop, with the store's error if any
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] for a limit whose wait is longer than a day; otherwise the
    /// store's (as [`check_n`](RateLimiter::check_n)).
    pub async fn enter(&self, key: &str, limit: &Limit) -> Result<Entered, Error> {
        self.enter_by_name(&[(None, key, limit, 1)]).await
    }

    /// [`enter`](RateLimiter::enter) under the limit called `name`: each name has its own
    /// slots.
    ///
    /// # Errors
    /// As [`enter`](RateLimiter::enter).
    pub async fn enter_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
    ) -> Result<Entered, Error> {
        self.enter_by_name(&[(Some(name), key, limit, 1)]).await
    }

    /// Decides a call's limits together, all or nothing, as
    /// [`check_all`](RateLimiter::check_all) does, with concurrency limits among them: the
    /// call takes its slots (a cost of `n` takes `n`) and its rate limits' tokens only if
    /// every limit admits it. Keep the [`Slot`] while the call runs.
    ///
    /// ```
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ratelimit_core::Error> {
    /// let limiter = RateLimiter::builder().memory().build().await?;
    /// let in_flight = Limit::concurrent(2);
    /// let per_hour = Limit::per_hour(100);
    /// let call = [("export:in-flight", &in_flight, 1), ("export:hourly", &per_hour, 1)];
    /// let a = limiter.enter_all(&call).await?;
    /// let b = limiter.enter_all(&call).await?;
    /// let c = limiter.enter_all(&call).await?;
    /// assert!(a.decision.allowed && b.decision.allowed && !c.decision.allowed);
    /// // The refused call took no token of the hourly limit.
    /// assert_eq!(limiter.peek("export:hourly", &per_hour).await?.remaining, 98);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check_all`](RateLimiter::check_all) and [`enter`](RateLimiter::enter).
    pub async fn enter_all(&self, checks: &[(&str, &Limit, u32)]) -> Result<Entered, Error> {
        let named: Vec<_> = checks
            .iter()
            .map(|&(key, limit, cost)| (None, key, limit, cost))
            .collect();
        self.enter_by_name(&named).await
    }

    /// [`enter_all`](RateLimiter::enter_all) with each limit's name: `(name, key, limit,
    /// cost)`.
    ///
    /// # Errors
    /// As [`enter_all`](RateLimiter::enter_all).
    pub async fn enter_all_named(
        &self,
        checks: &[(&str, &str, &Limit, u32)],
    ) -> Result<Entered, Error> {
        let named: Vec<_> = checks
            .iter()
            .map(|&(name, key, limit, cost)| (Some(name), key, limit, cost))
            .collect();
        self.enter_by_name(&named).await
    }

    /// The `enter*` methods: their checks through the funnel. An admitted call gets a guard
    /// even where it had no concurrency limit (it holds nothing then).
    async fn enter_by_name(
        &self,
        checks: &[(Option<&str>, &str, &Limit, u32)],
    ) -> Result<Entered, Error> {
        let decided = self.decide_named(checks.iter().copied(), Ask::Hold).await?;
        let (decision, slot) = decided.combined();
        let slot = slot.or_else(|| decision.allowed.then_some(Slot { held: None }));
        Ok(Entered { decision, slot })
    }
}
