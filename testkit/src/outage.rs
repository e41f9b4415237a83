//! Redis outages as the tests stage them: a limiter whose Redis was killed, and the wait for a
//! limiter to decide on Redis again once it is back.

use ratelimit_core::{Decision, Limit, RateLimiter, RateLimiterBuilder, Source};

use crate::RedisServer;

/// Starts a server, lets `build` make what a test needs on it (a limiter, or several), and
/// kills the server (`SIGKILL`: no chance to save): what `build` made, beside the dead server,
/// which keeps its port and directory for [`RedisServer::restart`].
///
/// # Panics
/// When no server starts (see [`RedisServer::start`]).
pub async fn redis_killed_under<T>(build: impl AsyncFnOnce(&RedisServer) -> T) -> (T, RedisServer) {
    let mut server = RedisServer::start();
    let built = build(&server).await;
    server.kill();
    (built, server)
}

/// A limiter whose Redis is gone: `RateLimiter::builder().redis(<its server>)` set up by
/// `configure` (a prefix, a failure policy, a deadline), built while the server ran, then the
/// server killed ([`redis_killed_under`]). Every call meets a store that does not answer.
///
/// # Panics
/// When no server starts, or the limiter is not built.
pub async fn limiter_without_redis(
    configure: impl FnOnce(RateLimiterBuilder) -> RateLimiterBuilder,
) -> (RateLimiter, RedisServer) {
    redis_killed_under(async |server| {
        configure(RateLimiter::builder().redis(server.url()))
            .build()
            .await
            .unwrap_or_else(|e| panic!("build a limiter on {}: {e}", server.url()))
    })
    .await
}

/// Calls `limiter.check(key, limit)` until the store decides it (the limiter back on Redis
/// after a fault): the store's decision.
///
/// # Panics
/// When no call is the store's within [`crate::wait::PATIENCE`].
pub async fn until_store(limiter: &RateLimiter, key: &str, limit: &Limit) -> Decision {
    crate::wait::eventually_ok("the store to decide again", async || {
        match limiter.check(key, limit).await {
            Ok(d) if d.source == Source::Store => Ok(d),
            Ok(d) => Err(format!("decided by {:?}", d.source)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}
