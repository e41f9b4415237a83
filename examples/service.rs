//! What the example services read at start: the store from `REDIS_URL` (in memory when it is
//! unset or empty), said on stdout once enabled, and the port from `PORT`.

use redis_ratelimit::RateLimiter;

/// `REDIS_URL`, or the in-memory store when it is unset or empty.
pub(crate) fn store_url() -> String {
    std::env::var("REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "memory://".to_owned())
}

/// Says which store holds the limits of `limiter`, enabled on `url`.
pub(crate) fn say_store(url: &str, limiter: &RateLimiter) {
    let store = if url.starts_with("memory:") {
        "in memory"
    } else {
        url
    };
    println!("rate limits: {store} (prefix `{}`)", limiter.prefix());
}

/// `PORT`, else 3000.
pub(crate) fn port() -> u16 {
    std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000)
}

/// Enables the limits on the store `REDIS_URL` names (in memory without it), and says where
/// they live.
pub(crate) async fn enable() -> Result<&'static RateLimiter, Box<dyn std::error::Error>> {
    let url = store_url();
    let limiter = redis_ratelimit::enable_redis_rate_limit!(url = url.clone()).await?;
    say_store(&url, limiter);
    Ok(limiter)
}
