//! Where buckets live: [`RedisStore`] (shared by every instance of a service) and
//! [`MemoryStore`] (one process), with the same semantics.

pub(crate) mod memory;
pub(crate) mod redis;

use std::future::Future;

pub use self::memory::MemoryStore;
pub use self::redis::{RedisPath, RedisStore};
use crate::decision::Decision;
use crate::errors::Error;
use crate::limit::Limit;

/// A place that keeps token buckets and decides calls atomically.
///
/// The built-in stores are [`RedisStore`] and [`MemoryStore`]; implement this trait to keep
/// buckets elsewhere and pass it to [`RateLimiterBuilder::store`](crate::RateLimiterBuilder::store).
/// The limiter validates `cost` (`1 <= cost <= limit.burst_capacity()`) before calling.
pub trait Store: Send + Sync + 'static {
    /// Takes `cost` tokens from the bucket `key` if it holds that many, refilled per `limit`.
    ///
    /// A store that cannot reserve ahead may ignore [`Limit::max_wait`] and the leaky bucket's
    /// queue: it then refuses a call that would have to wait, which is honest (the caller is
    /// told when to retry) but does not wait. A store that reserves admits such a call with
    /// the wait before it may go in [`Decision::retry_after`], and the limiter waits it.
    fn check(
        &self,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// Deletes the bucket `key` (it is full again).
    fn reset(&self, key: &str) -> impl Future<Output = Result<(), Error>> + Send;

    /// Answers as [`check`](Store::check) would for a call of `cost`, and takes nothing:
    /// writes nothing at all. Only `remaining` differs from `check`'s answer: it is the whole
    /// tokens the bucket holds now (the calls of cost 1 it would admit now), not those it
    /// would hold after the call, which a peek does not make.
    ///
    /// The default returns [`Error::PeekUnsupported`].
    fn peek(
        &self,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        let _ = (key, limit, cost);
        async { Err(Error::PeekUnsupported) }
    }

    /// Decides several limits of one call together, all or nothing: takes `cost` tokens from
    /// every bucket `key` under its `limit`, or, if any of them refuses, from none. Returns
    /// each limit's own decision in order; a limit that would have admitted a refused call
    /// says so (`allowed`), with the tokens it still holds. The limiter validates every cost
    /// and passes distinct keys.
    ///
    /// The default decides one limit with [`check`](Store::check) and refuses several with
    /// [`Error::SeveralLimitsUnsupported`]: a store cannot be all or nothing by calling
    /// `check` several times.
    fn check_all(
        &self,
        checks: &[(&str, &Limit, u32)],
    ) -> impl Future<Output = Result<Vec<Decision>, Error>> + Send {
        async move {
            match checks {
                [(key, limit, cost)] => Ok(vec![self.check(key, limit, *cost).await?]),
                _ => Err(Error::SeveralLimitsUnsupported),
            }
        }
    }
}

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe form of [`Store`] for user stores (built-in stores are dispatched statically).
pub(crate) trait DynStore: Send + Sync + 'static {
    fn check_dyn<'a>(
        &'a self,
        key: &'a str,
        limit: &'a Limit,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, Error>>;

    fn reset_dyn<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), Error>>;

    fn peek_dyn<'a>(
        &'a self,
        key: &'a str,
        limit: &'a Limit,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, Error>>;

    fn check_all_dyn<'a>(
        &'a self,
        checks: &'a [(&'a str, &'a Limit, u32)],
    ) -> BoxFuture<'a, Result<Vec<Decision>, Error>>;
}

impl<S: Store> DynStore for S {
    fn check_dyn<'a>(
        &'a self,
        key: &'a str,
        limit: &'a Limit,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, Error>> {
        Box::pin(self.check(key, limit, cost))
    }

    fn reset_dyn<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.reset(key))
    }

    fn peek_dyn<'a>(
        &'a self,
        key: &'a str,
        limit: &'a Limit,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, Error>> {
        Box::pin(self.peek(key, limit, cost))
    }

    fn check_all_dyn<'a>(
        &'a self,
        checks: &'a [(&'a str, &'a Limit, u32)],
    ) -> BoxFuture<'a, Result<Vec<Decision>, Error>> {
        Box::pin(self.check_all(checks))
    }
}
