//! The funnel's steps for tokens a call already took: settling them at the call's actual cost
//! ([`Ask::Settle`](super::decide::Ask::Settle)) and giving them back
//! ([`Ask::Refund`](super::decide::Ask::Refund)). Each goes back where it was taken (the
//! store's to the store, the fallback's to the fallback; a call no bucket decided took
//! nothing), and on Redis every instance then forgets a refusal it remembers of the bucket.
//! `Usage::settle*`, `refund*`, and the attribute's `settle = ..` and `count = ..` build the
//! checks of what the call took and end here, through
//! [`decide_checks`](super::decide::decide_checks).

use crate::decision::Source;
use crate::errors::Error;
use crate::fleet;
use crate::limit::Limit;
use crate::limiter::inner::on_tokio;
use crate::limiter::inner::{Engine, RateLimiter, Remote, RemoteStore};
use crate::pipeline::check::{Check, Taking, validate};
use crate::store::RedisStore;

/// Settles each check (its cost, the estimate it took) at its `taken` actual cost where its
/// tokens were taken: the store's in the store (one call per Redis node and time of take),
/// the fallback's in the fallback; a part no bucket decided took nothing. Answers each
/// check's `(taken, given_back)`.
pub(super) async fn settle(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
    taken: &[Taking],
) -> Result<Vec<(u64, u64)>, Error> {
    if checks.len() != taken.len() {
        return Err(Error::SettleCount {
            limits: checks.len(),
            given: taken.len(),
        });
    }
    let mut each = vec![(0, 0); checks.len()];
    let mut by_store: Vec<usize> = Vec::new();
    for (i, (check, taking)) in checks.iter().zip(taken).enumerate() {
        let settle = (check.cost, taking.actual);
        match (taking.source, &limiter.inner.engine) {
            (Source::Store, Engine::Local(store)) => {
                each[i] = store.settle(check.bucket, check.limit, 1, settle, taking.at);
            }
            (Source::Store, Engine::Remote(_)) => by_store.push(i),
            (Source::Fallback, _) => {
                each[i] = limiter
                    .inner
                    .resilience
                    .settle(check.bucket, check.limit, settle);
            }
            _ => {}
        }
    }
    if by_store.is_empty() {
        return Ok(each);
    }
    let Engine::Remote(remote) = &limiter.inner.engine else {
        return Err(Error::NotEnabled);
    };
    let RemoteStore::Redis(store) = &remote.store else {
        return Err(Error::SettleUnsupported);
    };
    on_tokio()?;
    // One call for the parts taken together: one node, one server time (on a cluster, a
    // call's limits on several masters were each decided at their own); a part whose
    // time is unknown goes alone.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in by_store {
        let at = taken[i].at;
        let node = store.node_of(checks[i].bucket);
        match groups
            .iter_mut()
            .find(|g| at != 0 && taken[g[0]].at == at && store.node_of(checks[g[0]].bucket) == node)
        {
            Some(group) => group.push(i),
            None => groups.push(vec![i]),
        }
    }
    for group in groups {
        let grouped: Vec<Check<'_>> = group.iter().map(|&i| checks[i]).collect();
        let settle: Vec<(u64, u64)> = group
            .iter()
            .map(|&i| {
                let bound = checks[i].limit.debt_bound();
                (u64::from(taken[i].actual), u64::from(bound))
            })
            .collect();
        let settled = store
            .settle_group(&grouped, taken[group[0]].at, &settle)
            .await?;
        for (&i, &s) in group.iter().zip(&settled) {
            each[i] = s;
            if s.1 > 0 {
                tell_fuller(limiter, remote, store, checks[i].bucket);
            }
        }
    }
    Ok(each)
}

/// Gives each check's cost back to its bucket where `sources` says it was taken
/// ([`Decision::source`](crate::Decision::source)): the store's to the store, the fallback's
/// to the fallback; a call no bucket decided (fail-open, fail-closed, no key, the deny cache,
/// disabled) took nothing, and nothing is given back. Every check is given back; the first
/// error, if any, is the answer.
pub(super) async fn refund(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
    sources: &[Source],
) -> Result<(), Error> {
    let mut first_error = None;
    for (check, &source) in checks.iter().zip(sources) {
        if let Err(e) = refund_one(limiter, *check, source).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// [`refund`] of one check.
async fn refund_one(limiter: &RateLimiter, check: Check<'_>, source: Source) -> Result<(), Error> {
    validate(&check)?;
    let Check {
        bucket,
        limit,
        cost,
        ..
    } = check;
    if limit.algorithm_kind().is_window() {
        return Err(Error::RefundNeedsBucket(*limit));
    }
    match (source, &limiter.inner.engine) {
        (Source::Store, Engine::Local(s)) => {
            s.give_back(bucket, limit, cost, 1);
            Ok(())
        }
        (Source::Store, Engine::Remote(_)) => {
            on_tokio()?;
            give_back_remote(limiter, bucket, limit, cost).await
        }
        (Source::Store, Engine::Unenabled) => Err(Error::NotEnabled),
        (Source::Fallback, _) => {
            limiter.inner.resilience.give_back(bucket, limit, cost);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Gives `cost` tokens back to `bucket` in the remote store, then has every instance forget
/// a refusal it remembers of the bucket (it is fuller than the refusal said), as after a
/// reset: the one way tokens go back to Redis, for a refund and for a call that gave up
/// waiting. Not telling the other instances is logged, not an error: the tokens are back,
/// and a caller that tried again would give them twice.
///
/// # Errors
/// The store's; [`Error::RefundUnsupported`] on a custom store.
pub(crate) async fn give_back_remote(
    limiter: &RateLimiter,
    bucket: &str,
    limit: &Limit,
    cost: u32,
) -> Result<(), Error> {
    let remote = match &limiter.inner.engine {
        Engine::Remote(remote) => remote,
        Engine::Local(_) | Engine::Unenabled => return Err(Error::NotEnabled),
    };
    let RemoteStore::Redis(store) = &remote.store else {
        return Err(Error::RefundUnsupported);
    };
    store.give_back_reserved(bucket, limit, cost).await?;
    tell_fuller(limiter, remote, store, bucket);
    Ok(())
}

/// Has every instance forget a refusal it remembers of `bucket`, which tokens given back
/// made fuller than the refusal said (a refund, a wait given up, a settlement's
/// give-back): this one's at once, the others' by a message published in the background,
/// so that the call giving back waits for its one round trip only. Not telling them is
/// logged, not an error: the tokens are back.
fn tell_fuller(limiter: &RateLimiter, remote: &Remote, store: &RedisStore, bucket: &str) {
    if let Some(cache) = &remote.deny_cache {
        cache.forget(bucket);
    }
    // From a limiter that is no instance too, as a reset.
    let channel = match &remote.fleet {
        Some(member) => member.channel().to_owned(),
        None => fleet::resets_channel(&limiter.inner.prefix),
    };
    let (store, bucket) = (store.clone(), bucket.to_owned());
    let publish = async move {
        if let Err(e) = store.publish(&channel, &bucket).await {
            crate::observe::log!(debug, error = %e, "could not tell the other instances of a give-back");
        }
    };
    // Every caller is on Tokio (the store's calls need it).
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(publish);
    }
}
