//! The wait for a concurrency limit's slots: a call whose checks include a concurrency limit
//! is held by an id of its own (its holder), asks for every limit together, all or nothing,
//! and, where its limit may wait, asks again as slots are given back, until it is admitted or
//! its wait ends. The funnel ([`decide`](super::decide)) takes this step for a slice of checks
//! that holds a slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::decision::Decision;
use crate::decision::Source;
use crate::errors::Error;
use crate::fleet::waiters::Listener;
use crate::limiter::inner::Engine;
use crate::limiter::inner::RateLimiter;
use crate::limiter::inner::Remote;
use crate::limiter::inner::RemoteStore;
use crate::limiter::inner::on_tokio;
use crate::limiter::slot::Slot;
use crate::limiter::slot::{Held, Part};
use crate::pipeline::check::{Check, OwnedCheck, validate_all};

/// Decides `checks` together, all or nothing, the concurrency limits among them taking
/// their slots for one holder, and queues the call for them where its limit may wait:
/// the funnel's step for a slice of checks that holds a slot.
pub(super) async fn take_slots(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
) -> Result<(Vec<Decision>, Option<Slot>), Error> {
    if matches!(
        limiter.inner.engine,
        Engine::Remote(Remote {
            store: RemoteStore::Custom(_),
            ..
        })
    ) {
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
    let local = matches!(limiter.inner.engine, Engine::Local(_));
    let mut slot = Slot {
        held: Some(Held {
            limiter: limiter.clone(),
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
    let listener = deadline.and_then(|_| slot.parts().first().map(|p| Listener::new(&p.bucket)));
    let mut backoff = MIN_BACKOFF;
    loop {
        let mut woken = listener.as_ref().map(|l| Box::pin(l.notified()));
        if let Some(w) = &mut woken {
            w.as_mut().enable();
        }
        slot.asking(!local);
        let mut parts = super::remote::decide_all(limiter, &checks_v).await?;
        slot.note_sources(&parts, &checks_v);
        if !local && parts.iter().all(|d| d.allowed) {
            count_here(limiter, &checks_v, &mut parts, &mut slot);
        }
        if parts.iter().all(|d| d.allowed) {
            slot.renew_in_background();
            return Ok((parts, Some(slot)));
        }
        let queued = deadline.is_some()
            && parts.iter().all(|d| {
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
            return Ok((parts, None));
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
fn count_here(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
    parts: &mut [Decision],
    slot: &mut Slot,
) {
    let resilience = &limiter.inner.resilience;
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
                limiter: limiter.clone(),
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
        super::waiting::give_back(limiter, taken);
    }
    for (i, d) in at.into_iter().zip(here) {
        parts[i] = d.with_source(Source::Fallback);
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
