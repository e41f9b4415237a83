//! The one way tokens go back to Redis, which a waiting call that gives up uses.

use super::*;

impl RateLimiter {
    /// Gives `cost` tokens back to `bucket` in the remote store, then has every instance forget
    /// a refusal it remembers of the bucket (it is fuller than the refusal said), as after a
    /// reset: the one way tokens go back to Redis. Not telling the other instances is logged,
    /// not an error: the tokens are back.
    ///
    /// # Errors
    /// The store's; [`Error::RefundUnsupported`] on a custom store.
    pub(super) async fn give_back_remote(
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
        if let Some(cache) = &remote.deny_cache {
            cache.forget(bucket);
        }
        // From a limiter that is no instance too, as a reset.
        let published = match &remote.fleet {
            Some(member) => store.publish(member.channel(), bucket).await,
            None => {
                store
                    .publish(&fleet::resets_channel(&self.inner.prefix), bucket)
                    .await
            }
        };
        if let Err(e) = published {
            tracing::debug!(target: "redis_ratelimit", error = %e, "could not tell the other instances of a give-back");
        }
        Ok(())
    }
}
