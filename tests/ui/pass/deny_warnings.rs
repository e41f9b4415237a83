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
//! Every shape of function expands without a warning in a crate that denies them all; the
//! one-line bodies are the ones `unused_braces` used to flag. (trybuild runs rustc only;
//! `tests/macro_lints.rs` has the same shapes under clippy.)

use std::fmt::{self, Debug, Display};

use redis_ratelimit::{Global, RateLimited, rate_limit};

#[derive(Debug)]
enum ApiError {
    Limited,
    Parse,
}

impl Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Debug::fmt(self, f)
    }
}

impl actix_web::ResponseError for ApiError {}

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

/// One line.
#[rate_limit(replenish = 10)]
async fn value() -> Result<u32, RateLimited> { Ok(1) }

/// `Ok(())`.
#[rate_limit(replenish = 10)]
async fn unit() -> Result<(), ApiError> { Ok(()) }

/// An early return.
#[rate_limit(replenish = 10)]
async fn early(id: u64) -> Result<u64, ApiError> { if id == 0 { return Err(ApiError::Parse); } Ok(id) }

/// `?`.
#[rate_limit(replenish = 10)]
async fn question_mark(input: &str) -> Result<u64, ApiError> { Ok(input.parse::<u64>()?) }

/// The body is one `?` expression.
#[rate_limit(replenish = 10)]
async fn only_question_mark(input: &str) -> Result<u64, ApiError> { input.parse::<u64>().map_err(ApiError::from) }

/// Generic, with a lifetime and a where clause.
#[rate_limit(replenish = 10)]
async fn generic<'a, T>(value: &'a T) -> Result<&'a T, RateLimited> where T: Debug + Sync { Ok(value) }

/// `impl Trait` in argument and return position.
#[rate_limit(replenish = 10)]
async fn impl_trait(items: impl IntoIterator<Item = u64> + Send) -> Result<impl Display, RateLimited> { Ok(items.into_iter().sum::<u64>()) }

/// An `async move` block.
#[rate_limit(replenish = 10)]
async fn async_block(n: u64) -> Result<u64, RateLimited> { Ok(async move { n + 1 }.await) }

/// A block in the body: the user's own extra braces stay the user's business.
#[rate_limit(replenish = 10)]
async fn several_lines(n: u64) -> Result<u64, RateLimited> {
    let doubled = n * 2;
    Ok(doubled)
}

/// Outer attributes on both sides, a `cfg_attr`, and an inner attribute.
#[inline]
#[rate_limit(replenish = 10, key = Global)]
#[cfg_attr(all(), allow(clippy::unused_async))]
#[must_use = "the result says whether the call ran"]
async fn attributes() -> Result<bool, RateLimited> { Ok(true) }

/// An inner attribute.
#[rate_limit(replenish = 10)]
async fn inner_attribute() -> Result<bool, RateLimited> { #![allow(unused_variables)] Ok(false) }

/// Another attribute macro outside `#[rate_limit]`: it sees the function before us.
#[actix_web::get("/outside")]
#[rate_limit(replenish = 10)]
async fn route_outside() -> Result<String, ApiError> { Ok(String::from("outside")) }

/// And inside: it sees our expansion.
#[rate_limit(replenish = 10)]
#[actix_web::get("/inside")]
async fn route_inside() -> Result<String, ApiError> { Ok(String::from("inside")) }

/// Two limits stacked.
#[rate_limit(replenish = 100, name = "stacked.total", key = Global)]
#[rate_limit(replenish = 10, name = "stacked")]
async fn stacked() -> Result<u8, RateLimited> { Ok(2) }

/// A concurrency limit: its slot is held in a local until the body's future ends.
#[rate_limit(concurrent = 2, key = Global, lease = "10s", wait = "1s")]
async fn in_flight() -> Result<u8, RateLimited> { Ok(3) }

trait Catalog {
    /// A trait's default body.
    #[rate_limit(replenish = 10, name = "catalog.first")]
    async fn first(&self) -> Result<Option<u64>, RateLimited> { Ok(None) }
}

#[derive(Debug, Default)]
struct Counter(u64);

impl Catalog for Counter {}

impl Counter {
    /// `&self`.
    #[rate_limit(replenish = 10)]
    async fn get(&self) -> Result<u64, RateLimited> { Ok(self.0) }

    /// `&mut self`.
    #[rate_limit(replenish = 10)]
    async fn bump(&mut self) -> Result<u64, RateLimited> { self.0 += 1; Ok(self.0) }

    /// `self`.
    #[rate_limit(replenish = 10)]
    async fn into_inner(self) -> Result<u64, RateLimited> { Ok(self.0) }
}

fn main() {
    fn is_send<T: Send>(_: &T) {}
    is_send(&value());
    is_send(&in_flight());
    is_send(&unit());
    is_send(&early(1));
    is_send(&question_mark("1"));
    is_send(&only_question_mark("1"));
    is_send(&generic(&1));
    is_send(&impl_trait([1]));
    is_send(&async_block(1));
    is_send(&several_lines(1));
    is_send(&attributes());
    is_send(&inner_attribute());
    is_send(&stacked());
    let _ = (route_outside, route_inside);
    let mut counter = Counter::default();
    is_send(&counter.get());
    is_send(&counter.bump());
    is_send(&counter.first());
    is_send(&counter.into_inner());
}
