//! Looking at and refilling buckets: `peek`, `reset`, and the deny cache's administration.

use super::*;
use crate::pipeline::decide::Ask;

impl RateLimiter {
    /// Answers as [`check`](RateLimiter::check) would for `key` under `limit`, and takes
    /// nothing: the store writes nothing, so asking changes no bucket. For looking at a bucket
    /// (an admin page, the `ratelimit` CLI, a test): `remaining` is the whole tokens the
    /// bucket holds now, so that exactly that many calls of cost 1 would be admitted now
    /// (`check` answers what is left after its call: one fewer), `retry_after` when a refused
    /// call would pass, `reset_after` when the bucket is full again. Every algorithm answers. For a limit that waits, an admitted answer's
    /// `retry_after` is how long the call would wait.
    ///
    /// It asks the store itself: not the deny cache, and not the failure policy (an
    /// administrative call, as [`reset`](RateLimiter::reset)).
    ///
    /// ```no_run
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # async fn run(limiter: RateLimiter) -> Result<(), ratelimit_core::Error> {
    /// let orders = Limit::per_minute(3).burst(300);
    /// let now = limiter.peek("user:42", &orders).await?;
    /// println!("{} left, full again in {:?}", now.remaining, now.reset_after);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The store's error; [`Error::PeekUnsupported`] for a custom store that cannot peek.
    pub async fn peek(&self, key: &str, limit: &Limit) -> Result<Decision, Error> {
        self.peek_n(key, limit, 1).await
    }

    /// [`peek`](RateLimiter::peek) for a call of `cost` tokens: `allowed` says whether such a
    /// call would be admitted now, and `retry_after` when it would pass; `remaining` is still
    /// the tokens the bucket holds now. Takes nothing.
    ///
    /// ```
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ratelimit_core::Error> {
    /// let limiter = RateLimiter::builder().memory().build().await?;
    /// let upload = Limit::per_minute(3).burst(5);
    /// assert!(limiter.check_n("user:42", &upload, 3).await?.allowed);
    /// let big = limiter.peek_n("user:42", &upload, 3).await?;
    /// assert!(!big.allowed);
    /// assert_eq!(big.remaining, 2);
    /// assert_eq!(big.retry_after.as_secs_f64().ceil(), 20.0); // one token every 20 s
    /// assert!(limiter.peek_n("user:42", &upload, 2).await?.allowed);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`peek`](RateLimiter::peek), and the cost errors of
    /// [`check_n`](RateLimiter::check_n).
    pub async fn peek_n(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        self.peek_named_n(None, key, limit, cost).await
    }

    /// [`peek`](RateLimiter::peek) at the bucket of `key` under the limit called `name`: a
    /// `#[rate_limit]` function's, by its limit's name (see
    /// [`declared_limits`](crate::declared_limits)).
    ///
    /// # Errors
    /// As [`peek`](RateLimiter::peek).
    pub async fn peek_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
    ) -> Result<Decision, Error> {
        self.peek_named_n(Some(name), key, limit, 1).await
    }

    /// A peek's check, through the funnel.
    async fn peek_named_n(
        &self,
        name: Option<&str>,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<Decision, Error> {
        let check = std::iter::once((name, key, limit, cost));
        Ok(self.decide_named(check, Ask::Peek).await?.combined().0)
    }

    /// Refills `key`'s bucket: deletes it from the store (a missing bucket is a full one) and
    /// from the deny caches of every instance (on Redis, each hears of it by pub/sub within
    /// milliseconds). It addresses the bucket of [`check`](RateLimiter::check); a
    /// `#[rate_limit]` function's buckets are its limit's: use
    /// [`reset_named`](RateLimiter::reset_named) with the limit's name.
    ///
    /// # Errors
    /// The store's error; the failure policy does not apply to administrative calls.
    pub async fn reset(&self, key: &str) -> Result<(), Error> {
        self.reset_bucket(&bucket_key(&self.inner.prefix, None, key))
            .await
    }

    /// [`reset`](RateLimiter::reset) for the bucket of `key` under the limit called `name`: a
    /// `#[rate_limit]` function's bucket, by its limit's name (`module::function` unless it
    /// has `name = ".."`; see [`declared_limits`](crate::declared_limits)).
    ///
    /// # Errors
    /// The store's error.
    pub async fn reset_named(&self, name: &str, key: &str) -> Result<(), Error> {
        self.reset_bucket(&bucket_key(&self.inner.prefix, Some(name), key))
            .await
    }

    pub(super) async fn reset_bucket(&self, bucket: &str) -> Result<(), Error> {
        let remote = match &self.inner.engine {
            Engine::Local(s) => return s.reset(bucket).await,
            Engine::Remote(remote) => remote,
            Engine::Unenabled => return Err(Error::NotEnabled),
        };
        if let Some(cache) = &remote.deny_cache {
            cache.forget(bucket);
        }
        // A full bucket again: an outage that comes next does not go on from what it held.
        self.inner.resilience.forget(bucket);
        // The instances hear of it on the fleet's channel; from a limiter that is no instance
        // too.
        let channel = match &remote.fleet {
            Some(member) => std::borrow::Cow::Borrowed(member.channel()),
            None => std::borrow::Cow::Owned(fleet::resets_channel(&self.inner.prefix)),
        };
        remote.store.reset(bucket, &channel).await
    }

    /// The deny cache, on a remote store that keeps one.
    pub(super) fn deny_cache(&self) -> Option<&DenyCache> {
        match &self.inner.engine {
            Engine::Local(_) | Engine::Unenabled => None,
            Engine::Remote(remote) => remote.deny_cache.as_deref(),
        }
    }

    /// Forgets every refusal remembered by the local deny cache (after changing limits at run
    /// time, say). The next call on each bucket asks the store.
    pub fn clear_deny_cache(&self) {
        if let Some(cache) = self.deny_cache() {
            cache.clear();
        }
    }

    /// How many refused buckets the local deny cache remembers now.
    pub fn deny_cache_len(&self) -> usize {
        self.deny_cache().map_or(0, DenyCache::len)
    }
}
