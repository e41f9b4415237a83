//! The per-call features on the kinds of limit the other files leave out, in memory and on a
//! real `redis-server` (TESTING.md's table says which test covers which cell): `exempt`,
//! `count` and the empty-key policy on a `shared` use; `exempt`, the empty-key policy and
//! shadow mode on a concurrency limit. Each test runs in a process of its own (nextest) and
//! builds the functions' limiter on the store it tests.
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;

use redis_ratelimit::{
    Header, Limit, RateLimited, RateLimiter, RequestContext, Source, context::scope, rate_limit,
};
use testkit::RedisServer;
use tokio::sync::oneshot;

mod support;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

/// Two calls an hour per user, declared here.
#[rate_limit(replenish = 2, unit = "hour", key = user, name = "quota", limiter = LIMITER)]
async fn declared(user: &str) -> Result<(), RateLimited> {
    Ok(())
}

/// The quota, drawn from by another function: its internal callers are exempt.
#[rate_limit(shared = "quota", key = user, exempt = internal, limiter = LIMITER)]
async fn exempt_use(user: &str, internal: bool) -> Result<(), RateLimited> {
    Ok(())
}

/// What a counted call fails with.
#[derive(Debug, PartialEq)]
enum Failure {
    Failed,
    Limited,
}

impl From<RateLimited> for Failure {
    fn from(_: RateLimited) -> Self {
        Failure::Limited
    }
}

/// The quota, drawn from by another function that counts its failures only.
#[rate_limit(shared = "quota", key = user, count = Result::is_err, limiter = LIMITER)]
async fn counted_use(user: &str, fail: bool) -> Result<(), Failure> {
    if fail { Err(Failure::Failed) } else { Ok(()) }
}

/// The quota keyed by a header, drawn from by a function that lets keyless calls through, and
/// one that refuses them with 401.
#[rate_limit(shared = "quota", key = Header("x-user"), empty_key = "allow", limiter = LIMITER)]
async fn keyless_allowed() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(shared = "quota", key = Header("x-user"), empty_key_status = 401, limiter = LIMITER)]
async fn keyless_unauthorized() -> Result<(), RateLimited> {
    Ok(())
}

/// One report at a time per tenant; internal jobs are exempt. Says when it holds its slot
/// (or runs exempt), then runs until told to end.
#[rate_limit(concurrent = 1, key = tenant, exempt = internal, limiter = LIMITER)]
async fn report(
    tenant: u32,
    internal: bool,
    running: oneshot::Sender<()>,
    end: oneshot::Receiver<()>,
) -> Result<(), RateLimited> {
    let _ = running.send(());
    let _ = end.await;
    Ok(())
}

/// One export at a time per caller, keyed by a header; keyless calls are let through.
#[rate_limit(concurrent = 1, key = Header("x-user"), empty_key = "allow", limiter = LIMITER)]
async fn keyless_export() -> Result<(), RateLimited> {
    Ok(())
}

/// One sync at a time, in shadow mode: never refused, and says when it would have been.
#[rate_limit(concurrent = 1, key = "all", shadow = true, limiter = LIMITER)]
async fn shadow_sync(
    running: oneshot::Sender<()>,
    end: oneshot::Receiver<()>,
) -> Result<(), RateLimited> {
    let _ = running.send(());
    let _ = end.await;
    Ok(())
}

/// The functions' limiter: on `server`, or in memory.
async fn init(server: Option<&RedisServer>) -> &'static RateLimiter {
    let limiter = match server {
        Some(server) => support::redis_limiter(server, "features").await,
        None => RateLimiter::builder().memory().build().await.unwrap(),
    };
    // Under `cargo test` (one process) another test may have set it first: on either store,
    // the same answers.
    let _ = LIMITER.set(limiter);
    LIMITER.get().unwrap()
}

/// The tokens `user` has left of the quota.
async fn left(limiter: &RateLimiter, user: &str) -> u64 {
    limiter
        .peek_named("quota", user, &Limit::per_hour(2))
        .await
        .unwrap()
        .remaining
}

async fn a_shared_use_exempts_counts_and_has_its_own_empty_key_policy(server: Option<RedisServer>) {
    let limiter = init(server.as_ref()).await;
    // Exempt calls through the shared use take nothing from the quota.
    for _ in 0..5 {
        exempt_use("ann", true).await.unwrap();
    }
    assert_eq!(left(limiter, "ann").await, 2);
    exempt_use("ann", false).await.unwrap();
    assert_eq!(left(limiter, "ann").await, 1);

    // Successes through the counting use give their token back; failures keep it.
    for _ in 0..5 {
        counted_use("bob", false).await.unwrap();
    }
    assert_eq!(left(limiter, "bob").await, 2);
    assert_eq!(counted_use("bob", true).await, Err(Failure::Failed));
    assert_eq!(left(limiter, "bob").await, 1);
    declared("bob").await.unwrap();
    assert_eq!(counted_use("bob", false).await, Err(Failure::Limited));

    // A keyless call: let through by one use, refused with 401 by the other.
    let anonymous = || RequestContext::new().with_path("/q");
    for _ in 0..3 {
        scope(anonymous(), keyless_allowed()).await.unwrap();
    }
    let refused = scope(anonymous(), keyless_unauthorized())
        .await
        .unwrap_err();
    assert_eq!(refused.decision().source, Source::NoKey);
    assert_eq!(refused.status(), 401);
}

async fn a_concurrency_limit_exempts_and_has_its_own_empty_key_policy(server: Option<RedisServer>) {
    init(server.as_ref()).await;
    let first = support::hold(|running, end| report(1, false, running, end)).await;
    assert!(first.is_ok(), "the tenant's one slot");
    let refused = support::hold(|running, end| report(1, false, running, end))
        .await
        .err()
        .unwrap();
    assert_eq!(refused.decision().source, Source::Store);
    // An internal job runs beside the full key, and holds no slot.
    let internal = support::hold(|running, end| report(1, true, running, end)).await;
    assert!(internal.is_ok(), "exempt");
    support::end(internal).await;
    support::end(first).await;
    let again = support::hold(|running, end| report(1, false, running, end)).await;
    assert!(
        again.is_ok(),
        "the slot came back, and the exempt call took none"
    );
    support::end(again).await;

    // Keyless calls are let through, as many at once as come.
    let anonymous = || RequestContext::new().with_path("/export");
    let (a, b) = tokio::join!(
        scope(anonymous(), keyless_export()),
        scope(anonymous(), keyless_export())
    );
    assert!(a.is_ok() && b.is_ok());
}

async fn a_concurrency_limit_in_shadow_mode_never_refuses(server: Option<RedisServer>) {
    init(server.as_ref()).await;
    let first = support::hold(shadow_sync).await;
    assert!(first.is_ok());
    // Over the max: let through all the same.
    let second = support::hold(shadow_sync).await;
    assert!(second.is_ok(), "shadow mode lets the call through");
    support::end(second).await;
    support::end(first).await;
}

support::on_memory_and_redis!(
    a_shared_use_exempts_counts_and_has_its_own_empty_key_policy,
    a_concurrency_limit_exempts_and_has_its_own_empty_key_policy,
    a_concurrency_limit_in_shadow_mode_never_refuses
);
