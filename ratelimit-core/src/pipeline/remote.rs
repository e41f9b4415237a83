//! How a decision is made: in memory at once, or through the deny cache, the circuit, the
//! deadline and the store, with the failure policy when the store fails.

use crate::decision::Decision;
use crate::decision::Source;
use crate::deny_cache::DenyCache;
use crate::errors::Error;
use crate::limit::Limit;
use crate::limiter::inner::Engine;
use crate::limiter::inner::RateLimiter;
use crate::limiter::inner::Remote;
use crate::limiter::inner::RemoteStore;
use crate::limiter::inner::on_tokio;
use crate::naming::key_slot;
use crate::pipeline::check::{Check, OwnedCheck};
use crate::policy::{Gate, Resilience};
use crate::store::Store as _;

use super::waiting::{BoxedAnswer, must_wait};

/// Decides one call, and waits for its turn when it reserved (see [`Limit::wait`]).
///
/// Every await here holds one box at most: the memory path is a call of this future, so
/// what it carries for the others (the store's call, the deadline, a wait, the several
/// limits' path) must not make it larger.
pub(crate) async fn decide(limiter: &RateLimiter, check: Check<'_>) -> Result<Decision, Error> {
    // The decision's scope ends before the wait: the future then does not keep room for
    // it beside the wait's box.
    let waiting = {
        let mut decision = match &limiter.inner.engine {
            Engine::Local(s) => s.check_share(check, 1, None),
            Engine::Unenabled => limiter.inner.resilience.decide(check, None),
            Engine::Remote(remote) => {
                // A call that may wait is not refused from the deny cache (the refusal it
                // remembers was for a call that could not wait), and is asked by a task of
                // its own.
                if check.limit.reserves() {
                    return decide_reserving(limiter, check).await;
                }
                match remote
                    .deny_cache
                    .as_ref()
                    .and_then(|c| c.check(check.bucket, check.limit, check.cost))
                {
                    Some(refused) => {
                        crate::observe::deny_cache_hit();
                        refused
                    }
                    None => ask_store(limiter, remote, check).await?,
                }
            }
        };
        // Finished in one place, whoever decided: shadow mode, then a reservation's wait
        // (the memory store's, or the failure policy's fallback's).
        if !must_wait(std::slice::from_mut(&mut decision)) {
            return Ok(decision);
        }
        super::waiting::wait_one(limiter, check, decision)
    };
    waiting.await
}

/// A call that may wait, on a remote store: [`decide_all`]'s path for
/// one limit, boxed.
fn decide_reserving<'a>(limiter: &'a RateLimiter, check: Check<'a>) -> BoxedAnswer<'a, Decision> {
    Box::pin(async move {
        decide_together(limiter, &[check])
            .await?
            .pop()
            .ok_or_else(|| Error::BadReply("no decision".to_owned()))
    })
}

/// One call's question to the remote store, through the circuit and the deadline.
///
/// Boxed: awaited inline, the store's call and the deadline's timer make every check's
/// future several times larger, even on a memory limiter, and moving it dominated the
/// memory path (benches/results/history.md 7.3). One small allocation beside a network round trip
/// is the cheaper side.
fn ask_store<'a>(
    limiter: &'a RateLimiter,
    remote: &'a Remote,
    check: Check<'a>,
) -> BoxedAnswer<'a, Decision> {
    Box::pin(through_store(
        limiter,
        remote,
        check.bucket,
        move |store| store.decide(check),
        move |cache, decision, sent, now| remember(limiter, cache, check, decision, sent, now),
        move |guard| guard.decide(check, remote.deny_cache.as_deref()),
    ))
}

/// [`decide`] for several buckets at once, all or nothing; a call that
/// reserved under any of its limits waits for the latest of them.
pub(crate) async fn decide_all(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
) -> Result<Vec<Decision>, Error> {
    if let [check] = checks {
        return Ok(vec![decide(limiter, *check).await?]);
    }
    decide_together(limiter, checks).await
}

/// Several limits' decisions in one question, finished in one place: shadow mode, then
/// the wait of a call that reserved under any of them.
pub(super) async fn decide_together(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
) -> Result<Vec<Decision>, Error> {
    let mut parts = decide_all_now(limiter, checks).await?;
    if must_wait(&mut parts) {
        Box::pin(super::waiting::wait_turn(limiter, checks, &mut parts)).await?;
    }
    Ok(parts)
}

async fn decide_all_now(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
) -> Result<Vec<Decision>, Error> {
    let remote = match &limiter.inner.engine {
        Engine::Local(s) => return Ok(s.check_all_shared(checks, 1, false, None)),
        Engine::Remote(remote) => remote,
        Engine::Unenabled => return Ok(limiter.inner.resilience.decide_all(checks, None)),
    };
    // The deny cache is not asked: it knows a refusal of one limit, and a combined answer
    // needs every limit's. It still learns from the refusals below. One circuit for the
    // call: the first bucket's (on a cluster, its slot's).
    // Boxed, as in `decide`.
    let reserving = checks.iter().any(|c| c.limit.reserves());
    let asked: BoxedAnswer<'_, _> = Box::pin(through_store(
        limiter,
        remote,
        checks[0].bucket,
        |store| async move {
            if reserving {
                return ask_detached(limiter, checks).await;
            }
            store.decide_all(checks).await
        },
        |cache, parts: &Vec<Decision>, sent, now| {
            for (part, check) in parts.iter().zip(checks) {
                remember(limiter, cache, *check, part, sent, now);
            }
        },
        |guard| guard.decide_all(checks, remote.deny_cache.as_deref()),
    ));
    asked.await
}

/// What this instance learns from the store's answer to `check`: a refusal to repeat, and
/// what the bucket (or the concurrency limit's set) had left, for the fallback.
fn remember(
    limiter: &RateLimiter,
    cache: &DenyCache,
    check: Check<'_>,
    decision: &Decision,
    sent: std::time::Instant,
    received: std::time::Instant,
) {
    if check.limit.is_concurrent() {
        // The slots this answer grants are this instance's too, and not among the free
        // ones it reports; their copies are counted in the fallback only after it.
        let granted = if decision.allowed && !decision.shadowed {
            u64::from(check.cost)
        } else {
            0
        };
        let here = limiter
            .inner
            .resilience
            .held_here(check.bucket, check.limit)
            + granted;
        cache.remember_slots(check.bucket, decision, received, here);
    } else {
        cache.remember(check.bucket, decision, sent, received);
    }
}

/// Asks the remote store for a call that may reserve, from a task of its own: should the
/// caller give up before the answer comes (a timeout around it, the deadline, a client
/// gone), the request may still reach the store and reserve; the task then gives back what
/// it took, which an abandoned request could not.
///
/// Both the task and the answer are boxed as trait objects: their types (the store's
/// whole call) would otherwise be part of every caller's future, deep enough that proving
/// a spawned caller `Send` exceeds the compiler's default recursion limit.
pub(super) fn ask_detached(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
) -> std::pin::Pin<Box<dyn Future<Output = Result<Vec<Decision>, Error>> + Send + 'static>> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let limiter = limiter.clone();
    let owned: Vec<OwnedCheck> = checks.iter().map(|c| c.into_owned()).collect();
    let task = async move {
        let Engine::Remote(remote) = &limiter.inner.engine else {
            return;
        };
        let refs: Vec<Check<'_>> = owned.iter().map(OwnedCheck::as_check).collect();
        let decided = remote.store.decide_all(&refs).await;
        if let Err(Ok(parts)) = answer.send(decided)
            && parts.iter().all(|d| d.allowed)
        {
            super::waiting::give_back(
                &limiter,
                owned.into_iter().map(|c| (c, Source::Store)).collect(),
            );
        }
    };
    let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(task);
    let spawned = tokio::runtime::Handle::try_current().map(|runtime| runtime.spawn(task));
    Box::pin(async move {
        spawned.map_err(|_| Error::NoRuntime)?;
        answered.await.unwrap_or_else(|_| {
            Err(Error::BadReply(
                "the store's call ended without an answer".to_owned(),
            ))
        })
    })
}

/// Asks the store (`ask`) through the circuit of `first`'s bucket, within the deadline;
/// the failure policy (`by_policy`) answers while the circuit is open or when the store
/// fails, and the deny cache learns from what the store answers (`remember`). The one
/// path of a decision on a remote store, for one limit or several.
pub(super) async fn through_store<'a, T, F>(
    limiter: &RateLimiter,
    remote: &'a Remote,
    first: &str,
    ask: impl FnOnce(&'a RemoteStore) -> F,
    remember: impl FnOnce(&DenyCache, &T, std::time::Instant, std::time::Instant),
    by_policy: impl FnOnce(&Resilience) -> T,
) -> Result<T, Error>
where
    F: std::future::Future<Output = Result<T, Error>>,
{
    let guard = &limiter.inner.resilience;
    // The Redis client and the deadline need Tokio's reactor and timers: polled from
    // another executor, say so instead of panicking inside them.
    on_tokio()?;
    let circuit = guard.circuit_of(|| key_slot(first.as_bytes()));
    let unreachable = guard.unreachable_count(circuit);
    let gate = guard.gate(circuit);
    if gate == Gate::Open {
        // Decided at once, in memory: a caller that loops (a worker draining a queue)
        // would otherwise never yield, and starve the task that probes the store, whose
        // answer ends the outage, for as long as it loops.
        tokio::task::consume_budget().await;
        return Ok(by_policy(guard));
    }
    let sent = std::time::Instant::now();
    let answer = guard.call(circuit, ask(&remote.store)).await;
    crate::observe::store_call(sent.elapsed());
    match answer {
        Ok(answer) => {
            guard.succeeded(gate, circuit, unreachable);
            if let Some(cache) = &remote.deny_cache {
                remember(cache, &answer, sent, std::time::Instant::now());
            }
            Ok(answer)
        }
        Err(e) if e.is_store_failure() => {
            guard.failed(gate, circuit, &e);
            Ok(by_policy(guard))
        }
        Err(e) => {
            // Not the store's fault (a misuse): the circuit stays as it was.
            if gate == Gate::Probe {
                guard.failed(gate, circuit, &e);
            }
            Err(e)
        }
    }
}

/// The one place a remote store's kind is dispatched on: a decision, several together, a
/// peek and a reset. (What only Redis does, concurrency slots and refunds, is Redis's own.)
impl RemoteStore {
    /// Decides one check.
    async fn decide(&self, check: Check<'_>) -> Result<Decision, Error> {
        match self {
            RemoteStore::Redis(s) => s.check_one(check).await,
            RemoteStore::Custom(s) => s.check_dyn(check.bucket, check.limit, check.cost).await,
        }
    }

    /// Decides several checks together, all or nothing. A store of the user's own takes the
    /// public `(key, limit, cost)` form: it holds no concurrency slots, so no holder.
    async fn decide_all(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, Error> {
        match self {
            RemoteStore::Redis(s) => s.decide_all(checks).await,
            RemoteStore::Custom(s) => {
                s.check_all_dyn(&crate::pipeline::check::to_tuples(checks))
                    .await
            }
        }
    }

    /// What `bucket` holds for a call of `cost` under `limit`, taking nothing. Boxed, as
    /// the administrative calls' answers are: inline, the store's future one level deeper made
    /// `RateLimiter::peek`'s future too deep for the compiler to lay out in a spawned task
    /// (`tests/ui/pass/spawned_calls.rs`).
    pub(crate) fn peek<'a>(
        &'a self,
        bucket: &'a str,
        limit: &'a Limit,
        cost: u32,
    ) -> BoxedAnswer<'a, Decision> {
        match self {
            RemoteStore::Redis(s) => Box::pin(s.peek(bucket, limit, cost)),
            RemoteStore::Custom(s) => s.peek_dyn(bucket, limit, cost),
        }
    }

    /// Deletes `bucket` (a missing bucket is a full one); on Redis, then tells the other
    /// instances on `channel`, so that each forgets what its deny cache knew of it. Boxed, as
    /// [`peek`](Self::peek).
    pub(crate) fn reset<'a>(&'a self, bucket: &'a str, channel: &'a str) -> BoxedAnswer<'a, ()> {
        match self {
            RemoteStore::Redis(s) => Box::pin(async move {
                on_tokio()?;
                s.reset(bucket).await?;
                // After the bucket is gone, so that an instance that hears of the reset and
                // asks again finds it full.
                s.publish(channel, bucket).await
            }),
            RemoteStore::Custom(s) => s.reset_dyn(bucket),
        }
    }
}
