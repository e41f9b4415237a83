//! `#[rate_limit]` end to end on the in-memory store: what the generated code decides, when
//! the body runs, which bucket a call takes from, and what the program declares.
//!
//! Every test owns its annotated functions (so its own limits and buckets), and time-based
//! limits refill at most one token per hour: the tests pass in one process (`cargo test`) or
//! one process each (`cargo nextest`), in any order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use redis_ratelimit::{
    FailurePolicy, Global, Header, RateLimited, RateLimiter, RequestContext, Source, Uri,
    clock::ManualClock, context::scope, context::scope_returning, declared_limits, rate_limit,
    store::MemoryStore,
};

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

mod support;

use support::{admitted, request};

/// The limiter of this file's functions.
async fn init() -> &'static RateLimiter {
    support::memory_limiter(&LIMITER, "macro-memory").await
}

#[rate_limit(replenish = 2, unit = "day", limiter = LIMITER)]
async fn small_by_path() -> Result<&'static str, RateLimited> {
    Ok("small")
}

#[rate_limit(replenish = 1, burst = 5, unit = "hour", key = Header("x-api-key"), limiter = LIMITER)]
async fn larger_by_api_key() -> Result<&'static str, RateLimited> {
    Ok("larger")
}

#[tokio::test]
async fn limits_and_keys_are_independent() {
    init().await;
    let with_key = |key: &'static str| move || request("/shared").with_header("x-api-key", key);

    // Two tokens a day for each path.
    assert_eq!(admitted(|| request("/shared"), 4, small_by_path).await, 2);
    assert_eq!(admitted(|| request("/other"), 4, small_by_path).await, 2);

    // The other function has its own buckets: same path, and five tokens per API key.
    assert_eq!(admitted(with_key("k1"), 7, larger_by_api_key).await, 5);
    assert_eq!(admitted(with_key("k2"), 7, larger_by_api_key).await, 5);
    assert_eq!(admitted(|| request("/shared"), 1, small_by_path).await, 0);
}

static BODY_RUNS: AtomicUsize = AtomicUsize::new(0);

#[rate_limit(replenish = 3, unit = "day", limiter = LIMITER)]
async fn counted() -> Result<usize, RateLimited> {
    Ok(BODY_RUNS.fetch_add(1, Ordering::SeqCst) + 1)
}

#[tokio::test]
async fn a_rejected_call_does_not_run_the_body() {
    init().await;
    let mut results = Vec::new();
    for _ in 0..5 {
        results.push(scope(request("/counted"), counted()).await);
    }
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 3);
    let ran: Vec<usize> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    assert_eq!(ran, [1, 2, 3]);
    for rejected in &results[3..] {
        let rejection = rejected.as_ref().expect_err("over the limit");
        assert!(!rejection.decision().allowed);
        assert_eq!(rejection.decision().source, Source::Store);
        // One token a day / 3 = 8 h until the next one.
        assert!(rejection.retry_after() > Duration::from_secs(7 * 3600));
    }
}

#[rate_limit(replenish = 1, burst = 10, cost = 4, unit = "hour", limiter = LIMITER)]
async fn expensive() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, burst = 10, unit = "hour", limiter = LIMITER)]
async fn cheap() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn cost_takes_that_many_tokens() {
    init().await;
    assert_eq!(admitted(|| request("/report"), 5, expensive).await, 2);
    let (result, recorded) = scope_returning(request("/report"), expensive()).await;
    let rejection = result.expect_err("2 tokens left, 4 needed");
    assert_eq!(rejection.decision().cost, 4);
    assert_eq!(rejection.decision().remaining, 2);
    let recorded = recorded.expect("the check records its decision");
    assert_eq!(recorded.name, "macro_memory::expensive");
    assert!(!recorded.decision.allowed);

    // The same burst at cost 1 admits ten.
    assert_eq!(admitted(|| request("/report"), 12, cheap).await, 10);
}

#[rate_limit(replenish = 1, unit = "day", key = Uri, limiter = LIMITER)]
async fn by_uri() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn the_key_comes_from_the_scope() {
    init().await;
    assert!(scope(request("/users/1"), by_uri()).await.is_ok());
    let rejection = scope(request("/users/1"), by_uri())
        .await
        .expect_err("one token a day per path");
    assert!(
        rejection.key().contains("/users/1"),
        "bucket of the path: {}",
        rejection.key()
    );
    assert_eq!(rejection.name(), Some("macro_memory::by_uri"));
    assert!(scope(request("/users/2"), by_uri()).await.is_ok());
    // The declaration remembers the first path's bucket key; another path's is named anew,
    // exactly as `check_named` names it.
    let limiter = LIMITER.get().unwrap();
    for path in ["/users/1", "/users/2"] {
        let rejection = scope(request(path), by_uri()).await.expect_err(path);
        assert_eq!(
            rejection.key(),
            limiter.named_bucket_key("macro_memory::by_uri", path)
        );
    }
}

static KEYLESS_RUNS: AtomicUsize = AtomicUsize::new(0);

#[rate_limit(replenish = 100, key = Uri, limiter = LIMITER)]
async fn needs_a_path() -> Result<(), RateLimited> {
    KEYLESS_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn a_call_without_a_key_is_denied_by_the_empty_key_policy() {
    init().await;
    // Outside any scope there is no request, hence no path.
    let rejection = needs_a_path().await.expect_err("no key: denied");
    assert_eq!(rejection.decision().source, Source::NoKey);
    // A scope without a path is no better.
    let rejection = scope(RequestContext::new(), needs_a_path())
        .await
        .expect_err("no key: denied");
    assert_eq!(rejection.decision().source, Source::NoKey);
    assert_eq!(KEYLESS_RUNS.load(Ordering::SeqCst), 0);
    assert!(scope(request("/ok"), needs_a_path()).await.is_ok());
}

const LISTED_LINE: u32 = line!() + 1;
#[rate_limit(replenish = 3, burst = 300, unit = "minute", key = Header("x-api-key"), cost = 2)]
async fn listed() -> Result<(), RateLimited> {
    Ok(())
}

const RENAMED_LINE: u32 = line!() + 2;
/// Doc comments come before the attribute's line; the attribute's line is recorded.
#[rate_limit(
    replenish = 7,
    name = "orders.renamed",
    limiter = LIMITER
)]
async fn renamed() -> Result<(), RateLimited> {
    Ok(())
}

#[test]
fn declared_limits_list_each_function_where_it_is_declared() {
    let all = declared_limits();
    let find = |name: &str| {
        all.iter()
            .find(|d| d.name() == name)
            .unwrap_or_else(|| panic!("`{name}` is not declared: {all:#?}"))
    };

    let listed_decl = find("macro_memory::listed");
    assert_eq!(listed_decl.file(), file!());
    assert_eq!(listed_decl.line(), LISTED_LINE);
    let limit = listed_decl.declared_limit();
    assert_eq!(limit.replenish(), 3);
    assert_eq!(limit.burst_capacity(), 300);
    assert_eq!(limit.unit(), Some(redis_ratelimit::Unit::Minute));
    assert_eq!(listed_decl.declared_cost(), 2);
    assert_eq!(listed_decl.key(), "Header(\"x-api-key\")");

    let renamed_decl = find("orders.renamed");
    assert_eq!(renamed_decl.line(), RENAMED_LINE);
    assert_eq!(renamed_decl.declared_limit().burst_capacity(), 7);
    assert_eq!(
        renamed_decl.declared_limit().unit(),
        Some(redis_ratelimit::Unit::Second)
    );
    assert_eq!(renamed_decl.declared_cost(), 1);
    assert_eq!(renamed_decl.key(), "Uri");

    // Every function of this file is declared once, and the list is sorted by name.
    let ours: Vec<&str> = all
        .iter()
        .filter(|d| d.file() == file!())
        .map(|d| d.name())
        .collect();
    let mut sorted = ours.clone();
    sorted.sort_unstable();
    assert_eq!(ours, sorted);
    let mut unique = sorted.clone();
    unique.dedup();
    assert_eq!(unique, sorted, "no name is declared twice");
    for name in [
        "macro_memory::small_by_path",
        "macro_memory::counted",
        "macro_memory::find",
        "orders.list",
        "orders.add",
        "search.total",
        "search.per_path",
    ] {
        assert!(ours.contains(&name), "`{name}` missing from {ours:?}");
    }
    let _ = (listed, renamed);
}

struct Orders {
    served: AtomicUsize,
    items: Vec<u64>,
}

impl Orders {
    #[rate_limit(replenish = 2, unit = "day", key = Global, name = "orders.list", limiter = LIMITER)]
    async fn list(&self) -> Result<&[u64], RateLimited> {
        self.served.fetch_add(1, Ordering::SeqCst);
        Ok(&self.items)
    }

    #[rate_limit(replenish = 1, unit = "day", key = Global, name = "orders.add", limiter = LIMITER)]
    async fn add(&mut self, id: u64) -> Result<usize, RateLimited> {
        self.items.push(id);
        Ok(self.items.len())
    }
}

#[tokio::test]
async fn methods_with_self_are_limited() {
    init().await;
    let mut orders = Orders {
        served: AtomicUsize::new(0),
        items: vec![1, 2],
    };
    assert_eq!(orders.add(3).await.expect("first add"), 3);
    assert!(orders.add(4).await.is_err());
    assert_eq!(orders.items, [1, 2, 3]);

    assert_eq!(orders.list().await.expect("first list"), &[1, 2, 3]);
    assert!(orders.list().await.is_ok());
    assert!(orders.list().await.is_err());
    assert_eq!(orders.served.load(Ordering::SeqCst), 2);
}

#[derive(Debug)]
enum ApiError {
    TooManyRequests { retry_after: Duration },
    NotFound,
}

impl From<RateLimited> for ApiError {
    fn from(rejection: RateLimited) -> Self {
        ApiError::TooManyRequests {
            retry_after: rejection.retry_after(),
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;

#[rate_limit(replenish = 1, unit = "hour", key = Global, limiter = LIMITER)]
async fn find(id: u64) -> ApiResult<u64> {
    if id == 0 {
        return Err(ApiError::NotFound);
    }
    Ok(id * 10)
}

#[tokio::test]
async fn the_rejection_converts_into_the_functions_error_type() {
    init().await;
    assert!(matches!(find(0).await, Err(ApiError::NotFound)));
    match find(7).await {
        Err(ApiError::TooManyRequests { retry_after }) => {
            assert!(
                retry_after > Duration::from_secs(59 * 60),
                "{retry_after:?}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// Eight calls a day in all, three per path, decided together (see `tests/macro_stacked.rs`):
/// a call refused per path takes nothing from the total.
#[rate_limit(replenish = 1, burst = 8, unit = "day", key = Global, name = "search.total", limiter = LIMITER)]
#[rate_limit(replenish = 1, burst = 3, unit = "day", key = Uri, name = "search.per_path", limiter = LIMITER)]
async fn search() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn stacked_limits_all_apply() {
    init().await;
    // Three per path, each taking one of the eight total tokens.
    assert_eq!(admitted(|| request("/a"), 5, search).await, 3);
    assert_eq!(admitted(|| request("/b"), 5, search).await, 3);
    // Two total tokens left: the third call passes its path's limit, and the total refuses.
    assert_eq!(admitted(|| request("/c"), 3, search).await, 2);
    let rejection = scope(request("/d"), search())
        .await
        .expect_err("total used up");
    assert_eq!(rejection.name(), Some("search.total"));
    // Both refuse `/a`: each says so.
    let rejection = scope(request("/a"), search())
        .await
        .expect_err("path used up");
    let refused: Vec<(Option<&str>, bool)> = rejection
        .parts()
        .map(|(name, d)| (name, d.allowed))
        .collect();
    assert_eq!(
        refused,
        [
            (Some("search.total"), false),
            (Some("search.per_path"), false)
        ]
    );
}

static CLOCK: LazyLock<ManualClock> = LazyLock::new(ManualClock::new);
static CLOCKED: OnceLock<RateLimiter> = OnceLock::new();

#[rate_limit(replenish = 1, burst = 2, unit = "minute", key = Global, limiter = CLOCKED)]
async fn refilled() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn tokens_come_back_at_the_replenish_rate() {
    let limiter = RateLimiter::builder()
        .memory_store(MemoryStore::with_clock(CLOCK.clone()))
        .build()
        .await
        .expect("builds");
    CLOCKED.set(limiter).expect("only this test sets it");
    assert!(refilled().await.is_ok());
    assert!(refilled().await.is_ok());
    let rejection = refilled().await.expect_err("burst of 2 used");
    assert_eq!(rejection.retry_after(), Duration::from_secs(60));
    CLOCK.advance(Duration::from_secs(59));
    assert!(refilled().await.is_err());
    CLOCK.advance(Duration::from_secs(1));
    assert!(refilled().await.is_ok());
    assert!(refilled().await.is_err());
}

static UNENABLED_RUNS: AtomicUsize = AtomicUsize::new(0);

#[rate_limit(replenish = 2, unit = "day", key = Global)]
async fn before_enable() -> Result<(), RateLimited> {
    UNENABLED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn before_enable_the_global_limit_is_enforced_in_memory() {
    // This file never enables the global limiter: the calls are limited in this process.
    assert!(before_enable().await.is_ok());
    assert!(before_enable().await.is_ok());
    let rejection = before_enable().await.unwrap_err();
    assert_eq!(rejection.decision().source, Source::Fallback);
    assert_eq!(UNENABLED_RUNS.load(Ordering::SeqCst), 2);
}

static FAIL_CLOSED_RUNS: AtomicUsize = AtomicUsize::new(0);

#[rate_limit(replenish = 2, unit = "day", key = Global, policy = "deny")]
async fn fails_closed() -> Result<(), RateLimited> {
    FAIL_CLOSED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[rate_limit(replenish = 2, unit = "day", key = Global, policy = "allow")]
async fn fails_open() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn before_enable_a_limit_follows_its_own_failure_policy() {
    // Not enabled counts as Redis being down: `deny` refuses every call, `allow` admits all.
    let rejection = fails_closed().await.unwrap_err();
    assert_eq!(rejection.decision().source, Source::FailClosed);
    assert!(fails_closed().await.is_err());
    assert_eq!(FAIL_CLOSED_RUNS.load(Ordering::SeqCst), 0);
    for _ in 0..5 {
        assert!(
            fails_open().await.is_ok(),
            "over the burst of 2, still admitted"
        );
    }
    let limits = declared_limits();
    let declared = |suffix: &str| {
        limits
            .iter()
            .find(|d| d.name().ends_with(suffix))
            .unwrap()
            .declared_limit()
            .failure_policy()
    };
    assert_eq!(declared("::fails_closed"), Some(FailurePolicy::Deny));
    assert_eq!(declared("::fails_open"), Some(FailurePolicy::Allow));
    assert_eq!(declared("::before_enable"), None);
}

#[rate_limit(replenish = 3, unit = "day", algorithm = "sliding_log", limiter = LIMITER)]
async fn logged() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, burst = 5, unit = "day", initial = 2, limiter = LIMITER)]
async fn warming_up() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn the_attribute_picks_the_algorithm_and_the_initial_fill() {
    init().await;
    let ctx = || request("/algorithms");
    assert_eq!(
        admitted(ctx, 5, logged).await,
        3,
        "a sliding log of 3 a day"
    );
    assert_eq!(
        admitted(ctx, 5, warming_up).await,
        2,
        "a bucket of 5 that starts with 2"
    );
    let decl = declared_limits()
        .into_iter()
        .find(|d| d.name().ends_with("::logged"))
        .expect("declared");
    assert_eq!(
        decl.declared_limit().algorithm_kind(),
        redis_ratelimit::Algorithm::SlidingLog
    );
}

/// A resolver that answers an empty key for everyone: a blank header, a user with no id.
struct Blank;

impl redis_ratelimit::KeyResolver for Blank {
    fn resolve<'a>(&self, _: &'a RequestContext) -> Option<std::borrow::Cow<'a, str>> {
        Some(std::borrow::Cow::Borrowed(""))
    }
}

#[rate_limit(replenish = 1, burst = 5, unit = "hour", key = Blank, limiter = LIMITER)]
async fn blank_key() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn an_empty_key_is_no_key_not_one_shared_bucket() {
    init().await;
    let rejection = scope(request("/blank"), blank_key()).await.unwrap_err();
    assert_eq!(
        rejection.decision().source,
        Source::NoKey,
        "the empty-key policy decided"
    );
}
