//! The macros' output passes the strictest lints users turn on: this file denies clippy's
//! `all` and `pedantic` groups (and rustc's warnings), and `cargo clippy --all-targets -- -D
//! warnings` checks it. Its one test enables the global limiter through the macro, in memory.
#![deny(clippy::all, clippy::pedantic, warnings, missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::fmt::Display;
use std::sync::OnceLock;

use redis_ratelimit::{
    EmptyKeyPolicy, Error, FailurePolicy, Header, Ip, KeyResolver, RateLimited, RateLimiter,
    RequestContext, Route, Source, Uri, enable_redis_rate_limit, rate_limit,
};

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

const PER_MINUTE: u32 = 30;

/// The service's error.
#[derive(Debug)]
pub enum ApiError {
    /// Rate limited.
    TooManyRequests(RateLimited),
    /// No such thing.
    NotFound,
}

impl From<RateLimited> for ApiError {
    fn from(rejection: RateLimited) -> Self {
        ApiError::TooManyRequests(rejection)
    }
}

/// The service's result.
pub type ApiResult<T> = Result<T, ApiError>;

/// Keys on a tenant header, lowercased.
#[derive(Debug)]
pub struct Tenant;

impl KeyResolver for Tenant {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        let value = ctx.headers().get("x-tenant")?.to_str().ok()?;
        Some(Cow::Owned(value.to_ascii_lowercase()))
    }
}

/// Defaults only.
///
/// # Errors
/// When rate limited.
#[rate_limit(replenish = 10)]
pub async fn defaults() -> Result<u32, RateLimited> {
    Ok(1)
}

/// Every argument.
///
/// # Errors
/// When rate limited.
#[rate_limit(
    replenish = 3,
    burst = 300,
    unit = "minute",
    key = (Ip, Route),
    cost = 2,
    name = "lints.every_argument",
    limiter = LIMITER,
)]
pub async fn every_argument(id: u64) -> ApiResult<u64> {
    if id == 0 {
        return Err(ApiError::NotFound);
    }
    Ok(id)
}

/// Constants, a header key, an `impl Trait` return.
///
/// # Errors
/// When rate limited.
#[rate_limit(replenish = PER_MINUTE, burst = 2 * PER_MINUTE, unit = "minute", key = Header("x-api-key"))]
pub async fn constants() -> Result<impl Display, RateLimited> {
    Ok("ok")
}

/// A custom resolver, generics, a where clause, an early return and `?`.
///
/// # Errors
/// When rate limited, or when `input` is not a number.
#[rate_limit(replenish = 5, unit = "hour", key = Tenant)]
pub async fn generic<T>(
    input: &str,
    scale: T,
) -> Result<u64, Box<dyn std::error::Error + Send + Sync>>
where
    T: Into<u64> + Send,
{
    if input.is_empty() {
        return Ok(0);
    }
    let n: u64 = input.parse()?;
    Ok(n * scale.into())
}

/// A limited service.
#[derive(Debug, Default)]
pub struct Orders {
    items: Vec<u64>,
}

impl Orders {
    /// `&self`.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 10, key = Uri, name = "lints.orders.list")]
    pub async fn list(&self) -> Result<&[u64], RateLimited> {
        Ok(&self.items)
    }

    /// `&mut self`, two limits.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 100, name = "lints.orders.add.total", key = redis_ratelimit::Global)]
    #[rate_limit(replenish = 10, name = "lints.orders.add")]
    pub async fn add(&mut self, id: u64) -> Result<usize, RateLimited> {
        self.items.push(id);
        Ok(self.items.len())
    }
}

#[tokio::test]
async fn enable_through_the_macro_then_call() -> Result<(), Error> {
    let limiter = enable_redis_rate_limit!(
        url = "memory://",
        prefix = "lints",
        policy = "deny",
        empty_key = "allow",
        deadline_ms = 20,
    )
    .await?;
    assert_eq!(limiter.prefix(), "lints");
    assert_eq!(limiter.failure_policy(), FailurePolicy::Deny);
    assert_eq!(limiter.empty_key_policy(), EmptyKeyPolicy::Allow);
    assert!(matches!(
        enable_redis_rate_limit!().await,
        Err(Error::AlreadyEnabled)
    ));

    // No request: no key, and the empty-key policy set above admits the call.
    assert_eq!(defaults().await.ok(), Some(1));
    let mut orders = Orders::default();
    assert_eq!(orders.add(7).await.ok(), Some(1));
    assert_eq!(orders.list().await.ok(), Some(&[7][..]));
    assert_eq!(generic("3", 2_u8).await.ok(), Some(6));
    assert_eq!(
        constants().await.map(|d| d.to_string()).ok().as_deref(),
        Some("ok")
    );

    // `limiter = LIMITER` was never initialised: that function is decided by its failure
    // policy as if Redis were down, and the default policy limits it in memory.
    let ctx = RequestContext::new()
        .with_peer("192.0.2.1:4000".parse().expect("an address"))
        .with_route("/orders/{id}");
    let (result, ctx) = redis_ratelimit::scope_returning(ctx, every_argument(5)).await;
    assert_eq!(result.ok(), Some(5));
    let recorded = ctx.recorded().expect("decision recorded");
    assert_eq!(recorded.name, "lints.every_argument");
    assert_eq!(recorded.decision.source, Source::Fallback);
    assert_eq!(recorded.decision.remaining, 298);
    Ok(())
}
