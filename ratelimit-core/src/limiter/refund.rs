//! Giving back the tokens of a call that should not count (`refund`), and the one way tokens
//! go back to Redis, which a waiting call that gives up uses too.

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

    /// A refund that does not know who decided the call: the store, unless the bucket's
    /// circuit is open now, when the limit's failure policy did (as [`decide`](Self::decide)
    /// picks, without claiming a probe).
    async fn refund_now(&self, bucket: &str, limit: &Limit, cost: u32) -> Result<(), Error> {
        let source = match &self.inner.engine {
            Engine::Local(_) => Source::Store,
            Engine::Remote(_) => {
                let guard = &self.inner.resilience;
                let circuit = guard.circuit_of(|| key_slot(bucket.as_bytes()));
                guard.source_now(circuit, limit)
            }
            Engine::Unenabled => return Err(Error::NotEnabled),
        };
        self.refund_bucket(bucket, limit, cost, source).await
    }

    /// Gives back `cost` tokens of the call on `bucket` that `source` decided
    /// ([`Decision::source`]): the store's to the store, the fallback's to the fallback; a call
    /// no bucket decided (fail-open, fail-closed, no key, the deny cache, disabled) took
    /// nothing, and nothing is given back. The `#[rate_limit]` path's refund.
    pub(crate) async fn refund_bucket(
        &self,
        bucket: &str,
        limit: &Limit,
        cost: u32,
        source: Source,
    ) -> Result<(), Error> {
        validate(&Check::new(bucket, limit, cost))?;
        if limit.algorithm_kind().is_window() {
            return Err(Error::RefundNeedsBucket(*limit));
        }
        match (source, &self.inner.engine) {
            (Source::Store, Engine::Local(s)) => {
                s.give_back(bucket, limit, cost, 1);
                Ok(())
            }
            (Source::Store, Engine::Remote(_)) => {
                on_tokio()?;
                self.give_back_remote(bucket, limit, cost).await
            }
            (Source::Store, Engine::Unenabled) => Err(Error::NotEnabled),
            (Source::Fallback, _) => {
                self.inner.resilience.give_back(bucket, limit, cost);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Gives `cost` tokens back to `bucket` in the remote store, then has every instance forget
    /// a refusal it remembers of the bucket (it is fuller than the refusal said), as after a
    /// reset: the one way tokens go back to Redis, for a refund and for a call that gave up
    /// waiting. Not telling the other instances is logged, not an error: the tokens are back,
    /// and a caller that tried again would give them twice.
    ///
    /// # Errors
    /// The store's; [`Error::RefundUnsupported`] on a custom store.
    pub(crate) async fn give_back_remote(
        &self,
        bucket: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<(), Error> {
        let remote = match &self.inner.engine {
            Engine::Remote(remote) => remote,
            Engine::Local(_) | Engine::Unenabled => return Err(Error::NotEnabled),
        };
        let RemoteStore::Redis(store) = &remote.store else {
            return Err(Error::RefundUnsupported);
        };
        store.give_back_reserved(bucket, limit, cost).await?;
        self.tell_fuller(remote, store, bucket);
        Ok(())
    }

    /// Has every instance forget a refusal it remembers of `bucket`, which tokens given back
    /// made fuller than the refusal said (a refund, a wait given up, a settlement's
    /// give-back): this one's at once, the others' by a message published in the background,
    /// so that the call giving back waits for its one round trip only. Not telling them is
    /// logged, not an error: the tokens are back.
    pub(crate) fn tell_fuller(&self, remote: &Remote, store: &RedisStore, bucket: &str) {
        if let Some(cache) = &remote.deny_cache {
            cache.forget(bucket);
        }
        // From a limiter that is no instance too, as a reset.
        let channel = match &remote.fleet {
            Some(member) => member.channel().to_owned(),
            None => fleet::resets_channel(&self.inner.prefix),
        };
        let (store, bucket) = (store.clone(), bucket.to_owned());
        let publish = async move {
            if let Err(e) = store.publish(&channel, &bucket).await {
                crate::observe::log!(debug, error = %e, "could not tell the other instances of a give-back");
            }
        };
        // Every caller is on Tokio (the store's calls need it).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(publish);
        }
    }
}
