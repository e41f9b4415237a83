//! Stacked `#[rate_limit]` attributes on the in-memory store: every limit of a call decided
//! together, all or nothing; the rejection names the limit that refused; each limit declared,
//! named and overridable on its own.
//!
//! Every test owns its annotated functions (so its own limits and buckets), and the limits
//! refill at most a token an hour: the tests pass in one process (`cargo test`) or one process
//! each (`cargo nextest`), in any order. One test enables the global limiter (in memory, with
//! an override); no other test uses the global limiter.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis_ratelimit::{
    Algorithm, Global, Header, Limit, RateLimited, RateLimiter, Source, Uri, context::scope,
    context::scope_returning, declared_limits, enable_redis_rate_limit, rate_limit,
};

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

mod support;

use support::{admitted, request};

/// The limiter of this file's functions.
async fn init() -> &'static RateLimiter {
    support::memory_limiter(&LIMITER, "macro-stacked").await
}

/// The declaration called `name`.
fn declared(name: &str) -> &'static redis_ratelimit::LimitDeclaration {
    declared_limits()
        .into_iter()
        .find(|d| d.name() == name)
        .unwrap_or_else(|| panic!("`{name}` is not declared"))
}

static SEARCHES: AtomicUsize = AtomicUsize::new(0);

/// Two a day per path, five a day in all.
#[rate_limit(replenish = 2, unit = "day", key = Uri, limiter = LIMITER)]
#[rate_limit(replenish = 5, unit = "day", key = Global)]
async fn search() -> Result<usize, RateLimited> {
    Ok(SEARCHES.fetch_add(1, Ordering::SeqCst) + 1)
}

#[tokio::test]
async fn a_call_passes_only_while_every_limit_allows_and_a_refusal_takes_nothing() {
    let limiter = init().await;
    // Two per path. Had the refused calls taken from the total, `/b` would find it drained.
    assert_eq!(admitted(|| request("/a"), 4, search).await, 2);
    assert_eq!(admitted(|| request("/b"), 4, search).await, 2);
    // One left in all: `/c` has two of its own, and gets one.
    assert_eq!(admitted(|| request("/c"), 3, search).await, 1);
    assert_eq!(
        SEARCHES.load(Ordering::SeqCst),
        5,
        "the body ran for each admission"
    );

    // The total refuses a path that still has tokens ...
    let (result, recorded) = scope_returning(request("/d"), search()).await;
    let refused = result.expect_err("five a day in all");
    assert_eq!(refused.name(), Some("macro_stacked::search#2"));
    assert_eq!(refused.decision().limit.burst_capacity(), 5);
    assert!(!refused.decision().allowed);
    assert_eq!(refused.decision().source, Source::Store);
    // ... and `/d`'s bucket keeps both: the per-path limit would have admitted the call.
    let parts: Vec<(Option<&str>, bool, u64)> = refused
        .parts()
        .map(|(name, d)| (name, d.allowed, d.remaining))
        .collect();
    assert_eq!(
        parts,
        [
            (Some("macro_stacked::search"), true, 2),
            (Some("macro_stacked::search#2"), false, 0),
        ]
    );
    // The context describes every limit, for the response headers.
    let recorded = recorded.expect("the check records its decision");
    assert_eq!(recorded.name, "macro_stacked::search#2");
    let described: Vec<&str> = recorded.parts().map(|(name, _)| name).collect();
    assert_eq!(
        described,
        ["macro_stacked::search", "macro_stacked::search#2"]
    );
    let first = declared("macro_stacked::search").declared_limit();
    let d = limiter
        .check_named("macro_stacked::search", "/d", &first, 2)
        .await
        .expect("decides");
    assert!(d.allowed, "`/d` still holds its two tokens: {d:?}");

    // A path refused by its own limit while the total has tokens is refused by the path's.
    let total = declared("macro_stacked::search#2").declared_limit();
    limiter
        .reset_named("macro_stacked::search#2", "global")
        .await
        .expect("resets");
    let refused = scope(request("/a"), search())
        .await
        .expect_err("`/a` used up");
    assert_eq!(refused.name(), Some("macro_stacked::search"));
    assert_eq!(refused.decision().limit.burst_capacity(), 2);
    // The total lost nothing to that refusal: all five are there.
    let d = limiter
        .check_named("macro_stacked::search#2", "global", &total, 5)
        .await
        .expect("decides");
    assert!(d.allowed, "the total kept its tokens: {d:?}");
    assert_eq!(SEARCHES.load(Ordering::SeqCst), 5);
}

/// Both refuse: the rejection carries the one with the longest wait.
#[rate_limit(replenish = 1, burst = 1, unit = "hour", key = Global, name = "stacked.hourly", limiter = LIMITER)]
#[rate_limit(replenish = 1, burst = 1, unit = "day", key = Global, name = "stacked.daily")]
async fn both() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn when_several_refuse_the_rejection_names_the_longest_wait() {
    init().await;
    assert!(both().await.is_ok());
    let refused = both().await.expect_err("both used up");
    assert_eq!(refused.name(), Some("stacked.daily"));
    assert!(refused.retry_after() > std::time::Duration::from_secs(23 * 3600));
    let names: Vec<Option<&str>> = refused.parts().map(|(name, _)| name).collect();
    assert_eq!(names, [Some("stacked.hourly"), Some("stacked.daily")]);
    assert!(refused.parts().all(|(_, d)| !d.allowed));
}

const LISTED_LINE: u32 = line!() + 1;
#[rate_limit(replenish = 3, unit = "minute", key = Header("x-api-key"), cost = 1, limiter = LIMITER)]
#[rate_limit(
    replenish = 300,
    unit = "day",
    key = Global,
    cost = 2,
)]
/// Doc comments between the attributes are kept.
#[rate_limit(
    replenish = 10,
    unit = "hour",
    name = "listed.hourly",
    algorithm = "sliding_log"
)]
async fn listed() -> Result<(), RateLimited> {
    Ok(())
}

#[test]
fn every_stacked_limit_is_declared_with_its_own_name_and_line() {
    let first = declared("macro_stacked::listed");
    assert_eq!(first.line(), LISTED_LINE);
    assert_eq!(first.file(), file!());
    assert_eq!(first.key(), "Header(\"x-api-key\")");
    assert_eq!(first.declared_limit().burst_capacity(), 3);
    assert_eq!(
        first.declared_limit().unit(),
        Some(redis_ratelimit::Unit::Minute)
    );

    let second = declared("macro_stacked::listed#2");
    assert_eq!(second.line(), LISTED_LINE + 1);
    assert_eq!(second.key(), "Global");
    assert_eq!(second.declared_limit().burst_capacity(), 300);
    assert_eq!(second.declared_cost(), 2);

    let third = declared("listed.hourly");
    assert_eq!(third.line(), LISTED_LINE + 8);
    assert_eq!(third.key(), "Uri");
    assert_eq!(
        third.declared_limit().algorithm_kind(),
        Algorithm::SlidingLog
    );

    // No `#3`: the third limit has a name of its own.
    let ours: Vec<&str> = declared_limits()
        .iter()
        .map(|d| d.name())
        .filter(|n| n.starts_with("macro_stacked::listed") || n.starts_with("listed."))
        .collect();
    assert_eq!(
        ours,
        [
            "listed.hourly",
            "macro_stacked::listed",
            "macro_stacked::listed#2"
        ]
    );
    let _ = listed;
}

/// A limit without a key refuses by the empty-key policy, and the others keep their tokens.
#[rate_limit(replenish = 1, burst = 3, unit = "hour", key = Global, limiter = LIMITER)]
#[rate_limit(replenish = 1, burst = 3, unit = "hour", key = Header("x-api-key"))]
async fn keyed() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn a_limit_without_a_key_vetoes_the_call_and_nothing_is_taken() {
    init().await;
    for _ in 0..5 {
        let refused = scope(request("/k"), keyed()).await.expect_err("no API key");
        assert_eq!(refused.decision().source, Source::NoKey);
        assert_eq!(refused.name(), Some("macro_stacked::keyed#2"));
    }
    let with_key = || request("/k").with_header("x-api-key", "k1");
    assert_eq!(admitted(with_key, 5, keyed).await, 3, "the total is whole");
}

/// Three limits of three algorithms, and `limiter` given twice, the same.
#[rate_limit(replenish = 4, unit = "day", algorithm = "sliding_log", key = Global, limiter = LIMITER)]
#[rate_limit(replenish = 3, unit = "day", algorithm = "fixed_window", key = Uri, limiter = LIMITER)]
#[rate_limit(replenish = 1, burst = 10, unit = "day", key = Header("x-api-key"))]
async fn three() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn three_limits_of_different_algorithms_decide_together() {
    init().await;
    let ctx = |path: &'static str| move || request(path).with_header("x-api-key", "k");
    assert_eq!(
        admitted(ctx("/x"), 5, three).await,
        3,
        "three a day per path"
    );
    assert_eq!(admitted(ctx("/y"), 5, three).await, 1, "four a day in all");
    let refused = scope(ctx("/z")(), three())
        .await
        .expect_err("four a day in all");
    assert_eq!(refused.name(), Some("macro_stacked::three"));
    let parts: Vec<u64> = refused.parts().map(|(_, d)| d.remaining).collect();
    // The API key's bucket kept the six tokens the refusals did not take.
    assert_eq!(parts, [0, 3, 6]);
}

/// Limits checked in memory before `enable`: the second is overridden there.
#[rate_limit(replenish = 1, burst = 4, unit = "hour", key = Global)]
#[rate_limit(replenish = 1, burst = 3, unit = "hour", key = Uri)]
async fn overridden() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn an_override_by_the_second_name_changes_only_the_second_limit() {
    let config =
        std::env::temp_dir().join(format!("macro-stacked-{}-limits.toml", std::process::id()));
    std::fs::write(
        &config,
        "[limits.\"macro_stacked::overridden#2\"]\nburst = 1\n",
    )
    .expect("writes the config");
    let enabled = enable_redis_rate_limit!(url = "memory://", config = config.clone()).await;
    let _ = std::fs::remove_file(&config);
    enabled.expect("enables in memory");

    let first = declared("macro_stacked::overridden");
    let second = declared("macro_stacked::overridden#2");
    assert_eq!(first.effective().limit, Limit::per_hour(1).burst(4));
    assert_eq!(second.declared_limit().burst_capacity(), 3);
    assert_eq!(second.effective().limit, Limit::per_hour(1).burst(1));

    // One per path now, four in all.
    for path in ["/1", "/2", "/3", "/4"] {
        assert_eq!(admitted(|| request(path), 3, overridden).await, 1, "{path}");
    }
    let refused = scope(request("/5"), overridden())
        .await
        .expect_err("four in all");
    assert_eq!(refused.name(), Some("macro_stacked::overridden"));
}

/// Stacked limits expand cleanly under clippy's strictest groups (`cargo clippy --all-targets
/// -- -D warnings` checks this file). rustfmt would spread the one-line body over several
/// lines, where `unused_braces` stays quiet.
#[deny(clippy::all, clippy::pedantic, unused_braces)]
#[rustfmt::skip]
mod lint_clean {
    use redis_ratelimit::{Global, Ip, RateLimited, rate_limit};

    /// One line.
    #[rate_limit(replenish = 10, key = Ip)]
    #[rate_limit(replenish = 100, key = Global)]
    pub(super) async fn one_line() -> Result<u8, RateLimited> { Ok(1) }

    /// A written name beside default ones: the compiler compares them.
    #[rate_limit(replenish = 10, key = Ip)]
    #[rate_limit(replenish = 100, key = Global, name = "lint_clean::named.total")]
    #[rate_limit(replenish = 1000, key = Global)]
    pub(super) async fn named(n: u8) -> Result<u8, RateLimited> {
        if n == 0 {
            return Ok(0);
        }
        Ok(n + 1)
    }
}

#[test]
fn stacked_futures_are_send() {
    fn is_send<T: Send>(_: &T) {}
    is_send(&lint_clean::one_line());
    is_send(&lint_clean::named(1));
    assert!(
        declared_limits()
            .iter()
            .any(|d| d.name() == "macro_stacked::lint_clean::named#3")
    );
}
