#![deny(
    warnings,
    unused,
    unused_braces,
    unused_parens,
    unused_qualifications,
    unused_results,
    nonstandard_style,
    rust_2018_idioms,
    future_incompatible,
    clippy::all,
    clippy::pedantic
)]
//! Two and three stacked limits, in every shape the single attribute takes, expand without a
//! warning in a crate that denies them all.

use std::sync::OnceLock;

use redis_ratelimit::{Global, Header, Ip, RateLimited, RateLimiter, Route, rate_limit};

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

#[derive(Debug)]
enum ApiError {
    Limited,
    Parse,
}

impl From<RateLimited> for ApiError {
    fn from(_: RateLimited) -> Self {
        ApiError::Limited
    }
}

impl From<std::num::ParseIntError> for ApiError {
    fn from(_: std::num::ParseIntError) -> Self {
        ApiError::Parse
    }
}

/// Two, default names (`..::two` and `..::two#2`), one line.
#[rate_limit(replenish = 3, unit = "minute", key = Ip)]
#[rate_limit(replenish = 300, unit = "day", key = Global)]
async fn two() -> Result<u32, RateLimited> { Ok(1) }

/// Three, by any path to the attribute, `limiter` on the second only.
#[rate_limit(replenish = 10, key = (Ip, Route))]
#[redis_ratelimit::rate_limit(replenish = 100, unit = "minute", key = Header("x-api-key"), limiter = LIMITER)]
#[::redis_ratelimit::rate_limit(replenish = 1000, unit = "hour", key = Global, cost = 2, burst = 2000)]
async fn three(input: &str) -> Result<u64, ApiError> { Ok(input.parse::<u64>()?) }

/// Written names beside default ones, the same `limiter` twice, every argument, an early
/// return, attributes and doc comments between the limits.
#[inline]
#[rate_limit(replenish = 5, name = "orders.per_client", key = Ip, limiter = LIMITER, policy = "deny")]
/// Between.
#[must_use = "the result says whether the call ran"]
#[rate_limit(replenish = 50, unit = "hour", key = Global, limiter = LIMITER, algorithm = "sliding_log")]
#[rate_limit(
    replenish = 500,
    burst = 1000,
    unit = "day",
    key = Global,
    name = "orders.daily",
    refill = "interval",
    initial = 0,
    cost = 1,
    policy = "allow",
)]
async fn written(id: u64) -> Result<u64, ApiError> { if id == 0 { return Err(ApiError::Parse); } Ok(id) }

/// Generic, `impl Trait`, an inner attribute.
#[rate_limit(replenish = 10)]
#[rate_limit(replenish = 100, key = Global)]
async fn generic<'a, T>(value: &'a T, more: impl IntoIterator<Item = u64> + Send) -> Result<impl std::fmt::Debug + 'a, RateLimited> where T: std::fmt::Debug + Sync { #![allow(unused_variables)] Ok((value, more.into_iter().sum::<u64>())) }

#[derive(Debug, Default)]
struct Counter(u64);

impl Counter {
    /// Methods, `&mut self`.
    #[rate_limit(replenish = 10, name = "counter.bump")]
    #[rate_limit(replenish = 100, key = Global, name = "counter.bump.total")]
    async fn bump(&mut self) -> Result<u64, RateLimited> { self.0 += 1; Ok(self.0) }
}

trait Catalog {
    /// A trait's default body.
    #[rate_limit(replenish = 10, name = "catalog.first")]
    #[rate_limit(replenish = 100, key = Global, name = "catalog.first.total")]
    async fn first(&self) -> Result<Option<u64>, RateLimited> { Ok(None) }
}

impl Catalog for Counter {}

fn main() {
    fn is_send<T: Send>(_: &T) {}
    is_send(&two());
    is_send(&three("1"));
    is_send(&written(1));
    is_send(&generic(&1, [1]));
    let mut counter = Counter::default();
    is_send(&counter.first());
    is_send(&counter.bump());
}
