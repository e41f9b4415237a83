//! A tier on every kind of limit that can take one, in memory and on a real `redis-server`:
//! on a `shared` use (chosen where the limit is used, from that call's arguments), and on a
//! concurrency limit (per-plan concurrency: free callers run one export at once, pro callers
//! three). A tier whose limit is not of its declaration's kind refuses its calls.
//!
//! Each test runs in a process of its own (nextest), and builds the functions' limiter on
//! the store it tests.
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;

use redis_ratelimit::{Limit, RateLimited, RateLimiter, Source, Tier, rate_limit};
use testkit::RedisServer;
use tokio::sync::oneshot;

mod support;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

/// The search quota's tier: the declared limit is one search an hour; pro callers get three.
const PRO_SEARCH: Tier = Tier::new("pro", Limit::per_hour(3));
/// Exports in flight at once, per tenant, by plan.
const FREE_EXPORTS: Tier = Tier::new("free", Limit::concurrent(1));
const PRO_EXPORTS: Tier = Tier::new("pro", Limit::concurrent(3));
/// A rate, given where a concurrency limit's tier is expected (and the other way round).
const A_RATE: Tier = Tier::new("rate", Limit::per_hour(100));
const SLOTS: Tier = Tier::new("slots", Limit::concurrent(100));

#[derive(Clone, Copy, PartialEq)]
enum Plan {
    Free,
    Pro,
}

/// The search quota, declared here at its base rate.
#[rate_limit(replenish = 1, unit = "hour", key = user, name = "search", limiter = LIMITER)]
async fn search(user: &str) -> Result<(), RateLimited> {
    Ok(())
}

/// Suggestions draw from the search quota, under the caller's tier.
#[rate_limit(shared = "search", key = user, tier = (plan == Plan::Pro).then_some(PRO_SEARCH), limiter = LIMITER)]
async fn suggest(user: &str, plan: Plan) -> Result<(), RateLimited> {
    Ok(())
}

/// One tenant's exports in flight: as many at once as its plan allows, each slot held for the
/// function's lease whatever the plan. Says when it holds its slot, then runs until told to
/// end.
#[rate_limit(concurrent = 1, key = tenant, lease = "10s", tier = match plan { Plan::Free => FREE_EXPORTS, Plan::Pro => PRO_EXPORTS }, tiers = [FREE_EXPORTS, PRO_EXPORTS], limiter = LIMITER)]
async fn export(
    tenant: u32,
    plan: Plan,
    running: oneshot::Sender<()>,
    end: oneshot::Receiver<()>,
) -> Result<(), RateLimited> {
    let _ = running.send(());
    let _ = end.await;
    Ok(())
}

/// A rate limit given a concurrency limit's tier.
#[rate_limit(replenish = 10, unit = "hour", key = "k", tier = SLOTS, limiter = LIMITER)]
async fn rate_with_slots() -> Result<(), RateLimited> {
    Ok(())
}

/// A concurrency limit given a rate's tier.
#[rate_limit(concurrent = 2, key = "k", tier = A_RATE, limiter = LIMITER)]
async fn slots_with_a_rate() -> Result<(), RateLimited> {
    Ok(())
}

/// The functions' limiter: on `server`, or in memory.
async fn init(server: Option<&RedisServer>) {
    let limiter = match server {
        Some(server) => support::redis_limiter(server, "tier-kinds").await,
        None => RateLimiter::builder().memory().build().await.unwrap(),
    };
    // Under `cargo test` (one process) another test may have set it first: on either store,
    // the same answers.
    let _ = LIMITER.set(limiter);
}

/// Starts an export of `tenant`'s and returns once it holds its slot, or with its refusal.
async fn start_export(tenant: u32, plan: Plan) -> support::Held {
    support::hold(move |running, end| export(tenant, plan, running, end)).await
}

async fn a_shared_use_decides_under_its_callers_tier(server: Option<RedisServer>) {
    init(server.as_ref()).await;
    // The pro caller draws three searches through the shared use, at its tier.
    for _ in 0..3 {
        suggest("pro-user", Plan::Pro).await.unwrap();
    }
    let refused = suggest("pro-user", Plan::Pro).await.unwrap_err();
    assert_eq!(refused.tier(), Some("pro"));
    assert_eq!(refused.decision().limit, PRO_SEARCH.limit());
    // One bucket: the declaring endpoint finds it spent too.
    assert!(search("pro-user").await.is_err());
    // A free caller is held to the declared rate, on either function.
    suggest("free-user", Plan::Free).await.unwrap();
    let refused = search("free-user").await.unwrap_err();
    assert_eq!(refused.tier(), None);
    assert_eq!(refused.decision().limit, Limit::per_hour(1));
    assert!(suggest("free-user", Plan::Free).await.is_err());
}

async fn a_concurrency_limit_holds_as_many_calls_as_the_plan(server: Option<RedisServer>) {
    init(server.as_ref()).await;
    // Pro: three at once, the fourth refused under the pro tier.
    let mut held = Vec::new();
    for _ in 0..3 {
        let started = start_export(7, Plan::Pro).await;
        assert!(started.is_ok(), "admitted under the pro tier");
        held.push(started);
    }
    let refused = start_export(7, Plan::Pro).await.err().unwrap();
    assert_eq!(refused.tier(), Some("pro"));
    assert_eq!(refused.decision().source, Source::Store);
    // The tier sets no lease: its slots are held for the function's 10 s, not the default
    // 30 s (issue 44).
    assert_eq!(
        refused.decision().limit,
        Limit::concurrent(3).lease(std::time::Duration::from_secs(10))
    );
    // Free: one at once, for another tenant.
    let free = start_export(8, Plan::Free).await;
    assert!(free.is_ok(), "one free export");
    let refused = start_export(8, Plan::Free).await.err().unwrap();
    assert_eq!(refused.tier(), Some("free"));
    // A call that ends gives its slot back, under either tier.
    support::end(free).await;
    support::end(start_export(8, Plan::Free).await).await;
    support::end(held.pop().unwrap()).await;
    held.push(start_export(7, Plan::Pro).await);
    for started in held {
        support::end(started).await;
    }
}

async fn a_tier_of_another_kind_refuses_its_calls(server: Option<RedisServer>) {
    init(server.as_ref()).await;
    for refused in [
        rate_with_slots().await.unwrap_err(),
        slots_with_a_rate().await.unwrap_err(),
    ] {
        assert_eq!(refused.decision().source, Source::FailClosed);
        assert!(!refused.decision().allowed);
    }
}

support::on_memory_and_redis!(
    a_shared_use_decides_under_its_callers_tier,
    a_concurrency_limit_holds_as_many_calls_as_the_plan,
    a_tier_of_another_kind_refuses_its_calls
);
