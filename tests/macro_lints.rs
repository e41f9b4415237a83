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

/// At most two in flight per tenant, waiting up to a second for a slot.
///
/// # Errors
/// When rate limited.
#[rate_limit(concurrent = 2, key = Tenant, wait = "1s", lease = "5s")]
pub async fn export() -> ApiResult<u32> {
    Ok(1)
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

/// The paid plan.
pub const PRO: redis_ratelimit::Tier =
    redis_ratelimit::Tier::new("pro", redis_ratelimit::Limit::per_hour(100));

/// Everything computed per call: a key and a cost from the arguments, a tier, an exemption,
/// outcomes that do not count (a closure), generics, an early return and `?` in the body.
///
/// # Errors
/// When rate limited, or when `input` is not a number.
#[rate_limit(
    replenish = 10,
    unit = "hour",
    key = tenant,
    cost = items.len(),
    tier = pro.then_some(PRO),
    exempt = tenant == 0,
    count = |r| !matches!(r, Ok(0)),
    empty_key_status = 401
)]
pub async fn per_call<T>(
    tenant: u64,
    items: &[T],
    pro: bool,
    input: &str,
) -> Result<u64, Box<dyn std::error::Error + Send + Sync>>
where
    T: Sync,
{
    if input.is_empty() {
        return Ok(0);
    }
    let n: u64 = input.parse()?;
    Ok(n + items.len() as u64)
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

/// One-line bodies, each shape users write: the re-emitted body must not read as a block in
/// braces of its own (`unused_braces`), nor trip clippy's pedantic lints. rustfmt would spread
/// the bodies over several lines, where `unused_braces` stays quiet.
#[rustfmt::skip]
pub mod one_line {
    use std::fmt::Debug;

    use redis_ratelimit::{RateLimited, rate_limit};

    use super::{ApiError, ApiResult};

    /// A value.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 10, name = "lints.one_line.value")]
    pub async fn value() -> Result<u32, RateLimited> { Ok(1) }

    /// Unit.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 10, name = "lints.one_line.unit")]
    pub async fn unit() -> ApiResult<()> { Ok(()) }

    /// An early return on one line.
    ///
    /// # Errors
    /// When rate limited, or when `id` is 0.
    #[rate_limit(replenish = 10, name = "lints.one_line.early")]
    pub async fn early(id: u64) -> ApiResult<u64> { if id == 0 { return Err(ApiError::NotFound); } Ok(id) }

    /// `?` on one line.
    ///
    /// # Errors
    /// When rate limited, or when `input` is not a number.
    #[rate_limit(replenish = 10, name = "lints.one_line.question_mark")]
    pub async fn question_mark(input: &str) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> { Ok(input.parse::<u64>()?) }

    /// Generic, with a where clause and a lifetime.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 10, name = "lints.one_line.generic")]
    pub async fn generic<'a, T>(value: &'a T) -> Result<&'a T, RateLimited> where T: Debug + Sync { Ok(value) }

    /// `impl Trait` in argument and return position.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 10, name = "lints.one_line.impl_trait")]
    pub async fn impl_trait(items: impl IntoIterator<Item = u64> + Send) -> Result<impl Debug, RateLimited> { Ok(items.into_iter().sum::<u64>()) }

    /// An `async move` block in the body.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 10, name = "lints.one_line.async_block")]
    pub async fn async_block(n: u64) -> Result<u64, RateLimited> { Ok(async move { n + 1 }.await) }

    /// Outer attributes on both sides of the macro.
    ///
    /// # Errors
    /// When rate limited.
    #[inline]
    #[rate_limit(replenish = 10, name = "lints.one_line.attributes")]
    #[allow(clippy::unnecessary_wraps)]
    #[must_use = "the result says whether the call ran"]
    pub async fn attributes() -> Result<bool, RateLimited> { Ok(true) }

    /// An inner attribute.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 10, name = "lints.one_line.inner_attribute")]
    pub async fn inner_attribute() -> Result<bool, RateLimited> { #![allow(unused_variables)] Ok(false) }

    /// Two limits stacked.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 100, name = "lints.one_line.stacked.total", key = redis_ratelimit::Global)]
    #[rate_limit(replenish = 10, name = "lints.one_line.stacked")]
    pub async fn stacked() -> Result<u8, RateLimited> { Ok(2) }

    /// A limited counter.
    #[derive(Debug, Default)]
    pub struct Counter(u64);

    impl Counter {
        /// `&self`.
        ///
        /// # Errors
        /// When rate limited.
        #[rate_limit(replenish = 10, name = "lints.one_line.get")]
        pub async fn get(&self) -> Result<u64, RateLimited> { Ok(self.0) }

        /// `self` by value.
        ///
        /// # Errors
        /// When rate limited.
        #[rate_limit(replenish = 10, name = "lints.one_line.into_inner")]
        pub async fn into_inner(self) -> Result<u64, RateLimited> { Ok(self.0) }
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
    assert_eq!(per_call(7, &[1_u8, 2], true, "3").await.ok(), Some(5));
    assert_eq!(per_call(0, &[1_u8; 50], false, "").await.ok(), Some(0));
    assert_eq!(
        constants().await.map(|d| d.to_string()).ok().as_deref(),
        Some("ok")
    );

    assert_eq!(one_line::value().await.ok(), Some(1));
    assert!(one_line::unit().await.is_ok());
    assert!(matches!(one_line::early(0).await, Err(ApiError::NotFound)));
    assert_eq!(one_line::question_mark("4").await.ok(), Some(4));
    assert_eq!(one_line::generic(&3).await.ok(), Some(&3));
    assert_eq!(
        one_line::impl_trait([1, 2])
            .await
            .map(|s| format!("{s:?}"))
            .ok()
            .as_deref(),
        Some("3")
    );
    assert_eq!(one_line::async_block(1).await.ok(), Some(2));
    assert_eq!(one_line::attributes().await.ok(), Some(true));
    assert_eq!(one_line::inner_attribute().await.ok(), Some(false));
    assert_eq!(one_line::stacked().await.ok(), Some(2));
    let counter = one_line::Counter::default();
    assert_eq!(counter.get().await.ok(), Some(0));
    assert_eq!(counter.into_inner().await.ok(), Some(0));

    // `limiter = LIMITER` was never initialised: that function is decided by its failure
    // policy as if Redis were down, and the default policy limits it in memory.
    let ctx = RequestContext::new()
        .with_peer("192.0.2.1:4000".parse().expect("an address"))
        .with_route("/orders/{id}");
    let (result, recorded) =
        redis_ratelimit::context::scope_returning(ctx, every_argument(5)).await;
    assert_eq!(result.ok(), Some(5));
    let recorded = recorded.expect("decision recorded");
    assert_eq!(recorded.name, "lints.every_argument");
    assert_eq!(recorded.decision.source, Source::Fallback);
    assert_eq!(recorded.decision.remaining, 298);
    Ok(())
}
