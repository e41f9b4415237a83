//! `#[rate_limit(count = ..)]`: only the outcomes the predicate counts keep their tokens; the
//! others give theirs back through the store, never more than they took; and `tier = ..`, a
//! plan changed mid-bucket; a limit shared by two functions. On a real redis-server, with a second limiter on the same server
//! and prefix as another instance.
//!
//! One test (one server) for the whole file: the limiter is a process-wide static.
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::time::Duration;

use redis_ratelimit::key::{AsyncKeyResolver, ResolveError};
use redis_ratelimit::{
    FailurePolicy, Limit, RateLimited, RateLimiter, RequestContext, Source, Tier, context::scope,
    rate_limit,
};
use testkit::RedisServer;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

#[derive(Debug, PartialEq)]
enum LoginError {
    WrongPassword,
    Limited,
}

impl From<RateLimited> for LoginError {
    fn from(_: RateLimited) -> Self {
        LoginError::Limited
    }
}

/// Three failed attempts per user per hour; a successful login does not count.
#[rate_limit(replenish = 3, unit = "hour", key = user, count = Result::is_err, limiter = LIMITER)]
async fn login(user: &str, password: &str) -> Result<String, LoginError> {
    if password == "right" {
        return Ok(format!("welcome {user}"));
    }
    Err(LoginError::WrongPassword)
}

#[derive(Debug, PartialEq)]
enum ApiError {
    Server,
    Client,
    Limited,
}

impl From<RateLimited> for ApiError {
    fn from(_: RateLimited) -> Self {
        ApiError::Limited
    }
}

/// Five calls per hour; a call that failed on the server's side is refunded (a closure over
/// the result), and `?` in the body still returns the function's error type.
#[rate_limit(
    replenish = 5,
    unit = "hour",
    key = "api",
    count = |r| !matches!(r, Err(ApiError::Server)),
    limiter = LIMITER
)]
async fn api(outcome: &str) -> Result<u32, ApiError> {
    let parsed: Result<u32, ApiError> = match outcome {
        "server" => Err(ApiError::Server),
        "client" => Err(ApiError::Client),
        n => Ok(n.parse().unwrap()),
    };
    let n = parsed?;
    Ok(n + 1)
}

/// Stacked: the per-user limit counts failures only, the global one counts every call.
#[rate_limit(replenish = 2, unit = "hour", key = user, count = Result::is_err, limiter = LIMITER)]
#[rate_limit(
    replenish = 5,
    unit = "hour",
    key = "everyone",
    name = "stacked_login.global"
)]
async fn stacked_login(user: &str, ok: bool) -> Result<(), LoginError> {
    if ok {
        Ok(())
    } else {
        Err(LoginError::WrongPassword)
    }
}

const FREE: Tier = Tier::new("free", Limit::per_hour(2));
const PRO: Tier = Tier::new("pro", Limit::per_hour(5));

/// A search limited by the caller's plan.
#[rate_limit(replenish = 1, unit = "hour", key = user, tier = if pro { PRO } else { FREE }, limiter = LIMITER)]
async fn search(user: &str, pro: bool) -> Result<(), RateLimited> {
    Ok(())
}

/// An API key checked by an introspection that awaits: `"bad"` fails.
struct Introspected;

impl AsyncKeyResolver for Introspected {
    async fn resolve(&self, ctx: &RequestContext) -> Result<Option<String>, ResolveError> {
        let token = ctx.headers().get("authorization").cloned();
        tokio::task::yield_now().await;
        match token.as_ref().map(|t| t.to_str().unwrap_or_default()) {
            None => Ok(None),
            Some("bad") => Err("introspection refused".into()),
            Some(token) => Ok(Some(format!("client:{token}"))),
        }
    }
}

#[rate_limit(replenish = 2, unit = "hour", key = Introspected, limiter = LIMITER)]
async fn introspected() -> Result<(), RateLimited> {
    Ok(())
}

/// One token per file, ten per tenant per hour.
#[rate_limit(replenish = 10, unit = "hour", key = tenant, cost = files.len(), limiter = LIMITER)]
async fn upload(tenant: u32, files: &[&str]) -> Result<usize, RateLimited> {
    Ok(files.len())
}

/// A limit declared once and shared by a second function.
#[rate_limit(replenish = 3, unit = "hour", key = user, name = "mc.search", limiter = LIMITER)]
async fn full_search(user: &str) -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(shared = "mc.search", key = user, limiter = LIMITER)]
async fn quick_search(user: &str) -> Result<(), RateLimited> {
    Ok(())
}

async fn remaining(limiter: &RateLimiter, name: &str, key: &str, limit: &Limit) -> u64 {
    limiter
        .peek_named(name, key, limit)
        .await
        .unwrap()
        .remaining
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_counted_outcomes_keep_their_tokens() {
    let server = RedisServer::start();
    let build = || {
        RateLimiter::builder()
            .redis(server.url())
            .prefix("mc")
            .failure_policy(FailurePolicy::Deny)
            .deadline(Some(Duration::from_secs(10)))
            .build()
    };
    LIMITER.set(build().await.unwrap()).unwrap();
    let limiter = LIMITER.get().unwrap();
    // Another instance of the service, on the same Redis.
    let other = build().await.unwrap();
    let login_limit = Limit::per_hour(3);
    let name = "macro_count::login";

    // Successful logins do not count: any number of them, and the bucket stays full.
    for _ in 0..10 {
        assert_eq!(login("ann", "right").await.unwrap(), "welcome ann");
    }
    assert_eq!(remaining(&other, name, "ann", &login_limit).await, 3);

    // Failed ones do: three, then the limit refuses even the right password.
    for _ in 0..3 {
        assert_eq!(
            login("bob", "wrong").await.unwrap_err(),
            LoginError::WrongPassword
        );
    }
    assert_eq!(
        login("bob", "right").await.unwrap_err(),
        LoginError::Limited
    );
    assert_eq!(remaining(&other, name, "bob", &login_limit).await, 0);

    // A success after two failures gives back its own token only: never more than it took.
    for _ in 0..2 {
        assert!(login("cy", "wrong").await.is_err());
    }
    assert!(login("cy", "right").await.is_ok());
    assert_eq!(remaining(limiter, name, "cy", &login_limit).await, 1);
    // The refund is in Redis: the other instance sees it.
    assert_eq!(remaining(&other, name, "cy", &login_limit).await, 1);

    // A server error is refunded, a client error and a success count; `?` works in the body.
    let api_limit = Limit::per_hour(5);
    for _ in 0..4 {
        assert_eq!(api("server").await.unwrap_err(), ApiError::Server);
    }
    assert_eq!(
        remaining(&other, "macro_count::api", "api", &api_limit).await,
        5
    );
    assert_eq!(api("client").await.unwrap_err(), ApiError::Client);
    assert_eq!(api("41").await.unwrap(), 42);
    assert_eq!(
        remaining(&other, "macro_count::api", "api", &api_limit).await,
        3
    );

    // Costs from the arguments on Redis: taken as computed, zero takes nothing, above the
    // burst is refused at once and takes nothing.
    assert_eq!(upload(1, &["a"; 7]).await.unwrap(), 7);
    assert_eq!(upload(1, &[]).await.unwrap(), 0);
    let refused = upload(1, &["a"; 11]).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::CostExceedsBurst);
    assert_eq!(
        remaining(&other, "macro_count::upload", "1", &Limit::per_hour(10)).await,
        3
    );
    assert_eq!(
        upload(1, &["a"; 4]).await.unwrap_err().decision().source,
        Source::Store
    );

    // Tiers on Redis: a free caller upgraded mid-bucket goes on from what it took, and the
    // other instance sees the same bucket.
    assert!(search("eve", false).await.is_ok());
    assert!(search("eve", false).await.is_ok());
    assert_eq!(search("eve", false).await.unwrap_err().tier(), Some("free"));
    assert_eq!(
        remaining(&other, "macro_count::search", "eve", &PRO.limit()).await,
        3
    );
    for _ in 0..3 {
        assert!(search("eve", true).await.is_ok());
    }
    assert_eq!(search("eve", true).await.unwrap_err().tier(), Some("pro"));

    // An async resolver on Redis: its key's bucket is the one every instance sees; a failing
    // introspection is the failure policy's (deny here).
    let token = |t: &str| RequestContext::new().with_header("authorization", t);
    for _ in 0..2 {
        assert!(scope(token("t1"), introspected()).await.is_ok());
    }
    assert_eq!(
        scope(token("t1"), introspected())
            .await
            .unwrap_err()
            .decision()
            .source,
        Source::Store
    );
    assert_eq!(
        remaining(
            &other,
            "macro_count::introspected",
            "client:t1",
            &Limit::per_hour(2)
        )
        .await,
        0
    );
    let refused = scope(token("bad"), introspected()).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::FailClosed);

    // A shared limit on Redis: both functions take from the one bucket the other instance
    // sees.
    assert!(full_search("fay").await.is_ok());
    assert!(quick_search("fay").await.is_ok());
    assert_eq!(
        remaining(&other, "mc.search", "fay", &Limit::per_hour(3)).await,
        1
    );
    assert!(quick_search("fay").await.is_ok());
    assert_eq!(
        full_search("fay").await.unwrap_err().decision().source,
        Source::Store
    );

    // Stacked: successes give back the per-user token and keep the global one.
    let per_user = Limit::per_hour(2);
    let global = Limit::per_hour(5);
    assert!(stacked_login("dee", true).await.is_ok());
    assert!(stacked_login("dee", true).await.is_ok());
    assert_eq!(
        remaining(&other, "macro_count::stacked_login", "dee", &per_user).await,
        2
    );
    assert_eq!(
        remaining(&other, "stacked_login.global", "everyone", &global).await,
        3
    );
    // A failure keeps both; a refused call took nothing from either.
    assert!(stacked_login("dee", false).await.is_err());
    assert!(stacked_login("dee", false).await.is_err());
    assert_eq!(
        stacked_login("dee", true).await.unwrap_err(),
        LoginError::Limited
    );
    assert_eq!(
        remaining(&other, "macro_count::stacked_login", "dee", &per_user).await,
        0
    );
    assert_eq!(
        remaining(&other, "stacked_login.global", "everyone", &global).await,
        1
    );
}
