//! Concurrency limits ([`Limit::concurrent`]): a slot taken when a call starts
//! ([`RateLimiter::enter`]) and given back when its guard ([`Slot`]) is dropped, however the
//! call ends; the guard (`slot`) renews the slot's lease while the call runs.
//!
//! A call's limits, rate limits beside its concurrency limits, are decided on the one pipeline
//! (`decide_all`): all or nothing, in one script on Redis. The call's id (its holder) rides in
//! its concurrency limits ([`Limit::holder`]) so that every stage sees it.

use std::sync::atomic::AtomicU64;

use super::*;
use crate::check::{OwnedCheck, validate_all};
use crate::fleet::waiters::Listener;

mod slot;

pub use slot::Slot;
use slot::{Held, Part};

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

    async fn enter_by_name(
        &self,
        checks: &[(Option<&str>, &str, &Limit, u32)],
    ) -> Result<Entered, Error> {
        let named = Named::new(&self.inner.prefix, checks.iter().copied());
        let entered = self.enter_buckets(&named.checks()).await?;
        named.observe(entered.decision.parts());
        Ok(entered)
    }

    /// Decides already-named buckets together, all or nothing, concurrency limits among them
    /// taking their slots: what [`enter_all`](RateLimiter::enter_all) and the macro's path
    /// (`pipeline::decide_all`) share. The caller describes the decision (span, metrics).
    pub(crate) async fn enter_buckets(&self, checks: &[Check<'_>]) -> Result<Entered, Error> {
        if matches!(
            self.inner.engine,
            Engine::Remote(Remote {
                store: RemoteStore::Custom(_),
                ..
            })
        ) && checks.iter().any(|c| c.limit.is_concurrent())
        {
            return Err(Error::ConcurrencyUnsupported);
        }
        let holder = next_holder();
        // Every concurrency limit of the call is held by it.
        let checks_v: Vec<Check<'_>> = checks.iter().map(|c| c.held_by(holder)).collect();
        validate_all(&checks_v)?;
        // The longest wait of the call's concurrency limits: how long it queues for a slot.
        let wait = checks_v
            .iter()
            .filter(|c| c.limit.is_concurrent())
            .filter_map(|c| c.limit.max_wait())
            .max()
            .filter(|w| !w.is_zero());
        let local = matches!(self.inner.engine, Engine::Local(_));
        let mut slot = Slot {
            held: Some(Held {
                limiter: self.clone(),
                holder,
                parts: checks_v
                    .iter()
                    .filter(|c| c.limit.is_concurrent())
                    .map(|c| Part {
                        bucket: c.bucket.into(),
                        cost: u64::from(c.cost),
                        lease_us: c
                            .limit
                            .lease_time()
                            .map_or(0, |l| u64::try_from(l.as_micros()).unwrap_or(u64::MAX)),
                        in_store: false,
                        answered: false,
                        in_fallback: false,
                        told_store: Arc::default(),
                    })
                    .collect(),
                renewal: None,
            }),
        };
        let deadline = match wait {
            Some(wait) => {
                on_tokio()?;
                Some(tokio::time::Instant::now() + wait)
            }
            None => None,
        };
        // Woken by releases of the call's first concurrency bucket: this process's, and other
        // instances' through the fleet's channel (Redis); asking again at most every
        // `MAX_BACKOFF` covers a message lost and leases that end.
        let listener =
            deadline.and_then(|_| slot.parts().first().map(|p| Listener::new(&p.bucket)));
        let mut backoff = MIN_BACKOFF;
        loop {
            let mut woken = listener.as_ref().map(|l| Box::pin(l.notified()));
            if let Some(w) = &mut woken {
                w.as_mut().enable();
            }
            slot.asking(!local);
            let mut parts = self.decide_all(&checks_v).await?;
            slot.note_sources(&parts, &checks_v);
            if !local && parts.iter().all(|d| d.allowed) {
                self.count_here(&checks_v, &mut parts, &mut slot);
            }
            let decision = Decision::combined(parts);
            if decision.allowed {
                slot.renew_in_background();
                return Ok(Entered {
                    decision,
                    slot: Some(slot),
                });
            }
            let queued = deadline.is_some()
                && decision.parts().iter().all(|d| {
                    d.allowed
                        || d.shadowed
                        || (d.limit.is_concurrent()
                            && d.limit.max_wait().is_some_and(|w| !w.is_zero())
                            && matches!(d.source, Source::Store | Source::Fallback))
                });
            let now = tokio::time::Instant::now();
            let left = deadline.map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
            if !queued || left.is_zero() {
                if deadline.is_none() {
                    // Refused at once: nothing was written, nothing to give back.
                    slot.disarm();
                }
                return Ok(Entered {
                    decision,
                    slot: None,
                });
            }
            let pause = backoff.min(left);
            backoff = (backoff * 2).min(MAX_BACKOFF.min(slot.shortest_lease() / 3));
            match woken {
                Some(woken) => {
                    tokio::select! {
                        () = woken => {}
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                None => tokio::time::sleep(pause).await,
            }
        }
    }

    /// Counts a call the store admitted in this process's fallback too, where it holds its
    /// slots' copies while it runs: a fallback that takes over then counts the calls this
    /// process still runs under slots the store granted. Held here to the whole max (to the
    /// instance's share while the store has just come back: see
    /// [`Recovery`](crate::policy::Recovery)), the copies also refuse a call that a store
    /// which lost its slots, or never had those the fallback granted, would let in beside
    /// the calls this process runs; the call then gives back what it took.
    fn count_here(&self, checks: &[Check<'_>], parts: &mut [Decision], slot: &mut Slot) {
        let resilience = &self.inner.resilience;
        let holding_off = resilience
            .recovery
            .as_ref()
            .is_some_and(|r| r.holding_off());
        let (mut counted, mut at): (Vec<Check<'_>>, Vec<usize>) = (vec![], vec![]);
        for (i, (check, part)) in checks.iter().zip(parts.iter()).enumerate() {
            if check.limit.is_concurrent() && part.source == Source::Store && !part.shadowed {
                counted.push(*check);
                at.push(i);
            }
        }
        if counted.is_empty() {
            return;
        }
        let here = resilience.count_slots(&counted, holding_off);
        for part in slot.parts_mut() {
            if counted.iter().any(|c| *c.bucket == *part.bucket) {
                part.in_fallback = true;
            }
        }
        if here.iter().all(|d| d.allowed) {
            return;
        }
        // Refused here: the slots the store granted are given back now (a guard of their own,
        // dropped: the caller's may ask again under the same holder), and so are the tokens
        // the call's other limits took in the store.
        if let Some(held) = &slot.held {
            drop(Slot {
                held: Some(Held {
                    limiter: self.clone(),
                    holder: held.holder,
                    parts: held.parts.iter().cloned().collect(),
                    renewal: None,
                }),
            });
        }
        let taken: Vec<(OwnedCheck, Source)> = checks
            .iter()
            .zip(parts.iter())
            .filter(|(c, d)| !c.limit.is_concurrent() && d.source == Source::Store)
            .map(|(c, _)| (c.into_owned(), Source::Store))
            .collect();
        if !taken.is_empty() {
            self.give_back(taken);
        }
        for (i, d) in at.into_iter().zip(here) {
            parts[i] = d.with_source(Source::Fallback);
        }
    }
}

/// The first pause of a waiter before it asks again, and the longest (also at most a third
/// of the lease, so that its ticket stays live).
const MIN_BACKOFF: Duration = Duration::from_millis(2);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// A call's id, unique across the fleet: a hash of a process-wide count under keys drawn at
/// random for the process (two processes, or two calls, collide with odds of 2^-64).
fn next_holder() -> u64 {
    use std::hash::BuildHasher as _;
    static SEED: std::sync::LazyLock<std::collections::hash_map::RandomState> =
        std::sync::LazyLock::new(std::collections::hash_map::RandomState::new);
    static COUNT: AtomicU64 = AtomicU64::new(0);
    SEED.hash_one(COUNT.fetch_add(1, Ordering::Relaxed)).max(1)
}
