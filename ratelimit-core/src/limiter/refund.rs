//! Giving back the tokens of a call that should not count (`refund`): a check of what the
//! call took, handed to the funnel ([`Ask::Refund`]).

use super::*;

impl RateLimiter {
    /// Gives back `cost` tokens that a call took from `key`'s bucket under `limit`, for a call
    /// whose outcome should not count (a login endpoint that counts failed attempts only: each
    /// attempt takes its token up front, and a successful one gives it back). It addresses the
    /// bucket of [`check`](RateLimiter::check) and [`check_n`](RateLimiter::check_n); a
    /// `#[rate_limit]` function's buckets are its limit's: use
    /// [`refund_named`](RateLimiter::refund_named).
    ///
    /// The tokens go back through the store, so every instance sees them: at once in memory;
    /// on Redis in one script, after which every instance forgets a refusal its deny cache
    /// remembers of the bucket (by pub/sub, within milliseconds). Never more than was taken:
    /// the bucket as it is now gains `cost` tokens, floored at full, so a refund on a full
    /// bucket, or one the store no longer holds (it refilled, expired or was
    /// [reset](RateLimiter::reset)), gives nothing. Refund only what a call took: the store
    /// cannot tell a refund of tokens another call took from one of the caller's own.
    ///
    /// While the store is failing (the circuit of the bucket is open, see
    /// [`is_degraded`](RateLimiter::is_degraded)), calls take their tokens by the limit's
    /// failure policy, and so does a refund: the [fallback](crate::FailurePolicy::Fallback)'s
    /// bucket gets them back; under `allow` or `deny` nothing was taken and nothing is given.
    ///
    /// Only a bucket can be refunded without the time of the call that took the tokens: the
    /// token bucket (either refill) and the leaky bucket.
    ///
    /// ```
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ratelimit_core::Error> {
    /// let limiter = RateLimiter::builder().memory().build().await?;
    /// // 5 login attempts, one back every 12 s; only failed attempts count.
    /// let login = Limit::per_minute(5);
    /// assert!(limiter.check("user:42", &login).await?.allowed);
    /// let password_was_right = true;
    /// if password_was_right {
    ///     limiter.refund("user:42", &login, 1).await?;
    /// }
    /// assert_eq!(limiter.peek("user:42", &login).await?.remaining, 5);
    /// // Never more than full.
    /// limiter.refund("user:42", &login, 1).await?;
    /// assert_eq!(limiter.peek("user:42", &login).await?.remaining, 5);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::RefundNeedsBucket`] under a window algorithm; the cost errors of
    /// [`check_n`](RateLimiter::check_n); [`Error::RefundUnsupported`] on a custom
    /// [`Store`](crate::store::Store), which has no give-back; [`Error::NotEnabled`] before
    /// `enable_redis_rate_limit!`; otherwise the store's error (the failure policy does not
    /// answer for it, as for [`reset`](RateLimiter::reset)).
    pub async fn refund(&self, key: &str, limit: &Limit, cost: u32) -> Result<(), Error> {
        self.refund_now(&bucket_key(&self.inner.prefix, None, key), limit, cost)
            .await
    }

    /// [`refund`](RateLimiter::refund) to the bucket of `key` under the limit called `name`:
    /// the bucket [`check_named`](RateLimiter::check_named) took from, and a `#[rate_limit]`
    /// function's, by its limit's name (see [`declared_limits`](crate::declared_limits)).
    ///
    /// # Errors
    /// As [`refund`](RateLimiter::refund).
    pub async fn refund_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<(), Error> {
        self.refund_now(
            &bucket_key(&self.inner.prefix, Some(name), key),
            limit,
            cost,
        )
        .await
    }

    /// A refund that does not know who decided the call: see [`source_now`](Self::source_now).
    async fn refund_now(&self, bucket: &str, limit: &Limit, cost: u32) -> Result<(), Error> {
        let source = self.source_now(bucket, limit)?;
        let check = Check::new(bucket, limit, cost);
        decide_checks(self, &[check], Ask::Refund(&[source])).await?;
        Ok(())
    }

    /// Who would decide a call on `bucket` now, for a refund or a charge that does not know who
    /// decided the call it is for: the store, unless the bucket's circuit is open now, when the
    /// limit's failure policy does (as [`decide`](crate::pipeline::remote::decide) picks,
    /// without claiming a probe).
    ///
    /// # Errors
    /// [`Error::NotEnabled`] before `enable_redis_rate_limit!`.
    pub(super) fn source_now(&self, bucket: &str, limit: &Limit) -> Result<Source, Error> {
        match &self.inner.engine {
            Engine::Local(_) => Ok(Source::Store),
            Engine::Remote(_) => {
                let guard = &self.inner.resilience;
                let circuit = guard.circuit_of(|| key_slot(bucket.as_bytes()));
                Ok(guard.source_now(circuit, limit))
            }
            Engine::Unenabled => Err(Error::NotEnabled),
        }
    }
}
