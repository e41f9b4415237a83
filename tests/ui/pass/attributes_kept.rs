#![deny(warnings, unused, missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]
//! Attributes, docs and visibility survive the expansion.

use redis_ratelimit::{RateLimited, rate_limit};

/// Lists the orders.
///
/// # Errors
/// When rate limited.
#[rate_limit(replenish = 10)]
#[must_use = "a rate-limited call's result says whether it ran"]
#[inline]
pub async fn list_orders() -> Result<Vec<u64>, RateLimited> {
    #![allow(clippy::unnecessary_wraps)]
    let orders = vec![1, 2, 3];
    Ok(orders)
}

/// The orders module.
pub mod orders {
    use redis_ratelimit::{RateLimited, rate_limit};

    /// Counts orders.
    ///
    /// # Errors
    /// When rate limited.
    #[rate_limit(replenish = 10)]
    #[cfg(all())]
    pub(crate) async fn count(r#type: &str) -> Result<usize, RateLimited> {
        Ok(r#type.len())
    }

    /// Counts orders (never compiled).
    #[rate_limit(replenish = 10)]
    #[cfg(any())]
    pub(crate) async fn count(r#type: &str) -> Result<usize, RateLimited> {
        Ok(r#type.len() + 1)
    }
}

/// Both functions are Send futures, as web frameworks need.
fn main() {
    fn is_send<T: Send>(_: T) {}
    is_send(list_orders());
    is_send(orders::count("x"));
}
