//! Waiting for reserved tokens, and giving them back when a caller gives up.

use std::time::Duration;

use crate::decision::Decision;
use crate::decision::Source;
use crate::errors::Error;
use crate::limiter::inner::Engine;
use crate::limiter::inner::RateLimiter;
use crate::limiter::inner::Remote;
use crate::limiter::inner::RemoteStore;
use crate::limiter::inner::on_tokio;
use crate::pipeline::check::{Check, OwnedCheck};

/// [`wait_turn`] for a call under one limit, boxed: only a call that
/// waits carries the sleep's future, and the decision moves into the box.
pub(crate) fn wait_one<'a>(
    limiter: &'a RateLimiter,
    check: Check<'a>,
    mut decision: Decision,
) -> BoxedAnswer<'a, Decision> {
    Box::pin(async move {
        wait_turn(limiter, &[check], std::slice::from_mut(&mut decision)).await?;
        Ok(decision)
    })
}

/// Sleeps until the tokens a call reserved are due (the longest wait of its limits), then
/// says it waits no more. Dropped first (the caller went away, a timeout), or unable to
/// sleep, it gives every limit's tokens back.
pub(super) async fn wait_turn(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
    decisions: &mut [Decision],
) -> Result<(), Error> {
    // Lengthened by the limits' jitter (the most any of them asks): later, never earlier.
    let jitter = checks
        .iter()
        .filter_map(|c| c.limit.max_jitter())
        .max()
        .map_or(Duration::ZERO, spread);
    let wait = reserved(decisions).unwrap_or_default() + jitter;
    let mut guard = GiveBack {
        limiter,
        parts: checks
            .iter()
            .zip(decisions.iter())
            .map(|(check, d)| (check.into_owned(), d.source))
            .collect(),
    };
    on_tokio()?;
    tokio::time::sleep(wait).await;
    guard.parts.clear();
    for d in decisions.iter_mut().filter(|d| !d.shadowed) {
        d.retry_after = Duration::ZERO;
    }
    Ok(())
}

/// Returns the tokens of calls that gave up waiting: at once in memory, by a task on
/// Redis (a dropped future cannot await; best effort, logged when it fails) through
/// [`give_back_remote`](RateLimiter::give_back_remote), as a refund. A custom store cannot be
/// asked to give back: its tokens stay taken.
pub(crate) fn give_back(limiter: &RateLimiter, parts: Vec<(OwnedCheck, Source)>) {
    let mut remote = Vec::new();
    for (check, source) in parts {
        let OwnedCheck {
            bucket,
            limit,
            cost,
            ..
        } = check;
        match (source, &limiter.inner.engine) {
            (Source::Store, Engine::Local(s)) => s.give_back(&bucket, &limit, cost, 1),
            (Source::Fallback, _) => limiter.inner.resilience.give_back(&bucket, &limit, cost),
            (Source::Store, Engine::Remote(_)) => remote.push((bucket, limit, cost)),
            _ => {}
        }
    }
    let Engine::Remote(Remote {
        store: RemoteStore::Redis(_),
        ..
    }) = &limiter.inner.engine
    else {
        return;
    };
    if remote.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        crate::observe::log!(
            warn,
            calls = remote.len(),
            "redis-ratelimit could not give back the tokens of calls that gave up waiting: no Tokio runtime to reach Redis"
        );
        return;
    };
    let limiter = limiter.clone();
    runtime.spawn(async move {
        for (bucket, limit, cost) in remote {
            if let Err(e) = super::give::give_back_remote(&limiter, &bucket, &limit, cost).await {
                crate::observe::log!(warn, error = %e, "redis-ratelimit could not give back the tokens of a call that gave up waiting");
            }
        }
    });
}

/// A random duration from zero to `max`, in whole microseconds.
fn spread(max: Duration) -> Duration {
    use std::hash::BuildHasher as _;
    thread_local! {
        static DRAWS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    // A hasher seeded at random for the process, over a per-thread count: a different draw
    // each time, without a generator to keep or a dependency to carry.
    static SEED: std::sync::LazyLock<std::collections::hash_map::RandomState> =
        std::sync::LazyLock::new(std::collections::hash_map::RandomState::new);
    let draw = DRAWS.with(|n| {
        n.set(n.get().wrapping_add(1));
        n.get()
    });
    let random = SEED.hash_one((draw, std::thread::current().id()));
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(random % max_us.saturating_add(1))
}

/// What every decision goes through once made: a refusal by a limit in shadow mode is let
/// through; then whether the call reserved its tokens and must wait for them.
#[inline]
pub(super) fn must_wait(decisions: &mut [Decision]) -> bool {
    decisions.iter_mut().for_each(Decision::let_shadow_through);
    reserved(decisions).is_some()
}

/// How long a call admitted under `decisions` must wait for its reserved tokens: `None` when
/// it was refused or goes at once.
#[inline]
pub(super) fn reserved(decisions: &[Decision]) -> Option<Duration> {
    if !decisions.iter().all(|d| d.allowed) {
        return None;
    }
    // A shadowed part's `retry_after` is when it would have admitted the call, not a wait.
    decisions
        .iter()
        .filter(|d| !d.shadowed)
        .map(|d| d.retry_after)
        .max()
        .filter(|w| !w.is_zero())
}

/// The tokens a waiting call reserved, given back unless it was served.
pub(super) struct GiveBack<'a> {
    limiter: &'a RateLimiter,
    parts: Vec<(OwnedCheck, Source)>,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        if !self.parts.is_empty() {
            give_back(self.limiter, std::mem::take(&mut self.parts));
        }
    }
}

/// A remote store's answer on its way, as a trait object: its type (the store's whole call)
/// would otherwise be part of every caller's future, deep enough that proving a spawned
/// caller `Send` exceeds the compiler's default recursion limit.
pub(crate) type BoxedAnswer<'a, T> =
    std::pin::Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;
