//! An override that names no declared limit, or has an invalid value, makes
//! `enable_redis_rate_limit!` fail with the file, the limit and the field; a corrected call
//! then succeeds (a failed enable leaves nothing installed).
//!
//! One test per file: enabling is once per process.
#![allow(clippy::unwrap_used)]

use redis_ratelimit::{Error, Global, RateLimited, enable_redis_rate_limit, rate_limit};
use testkit::RedisServer;

#[rate_limit(replenish = 5, key = Global)]
async fn orders() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn bad_overrides_fail_enable_with_a_clear_message() {
    let server = RedisServer::start();
    let config = server.dir().join("limits.toml");

    std::fs::write(
        &config,
        "[limits.\"enable_bad_override::ordres\"]\nburst = 2\n",
    )
    .unwrap();
    let err = enable_redis_rate_limit!(url = server.url(), config = config.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&config.display().to_string()),
        "names the file: {msg}"
    );
    assert!(
        msg.contains("enable_bad_override::ordres"),
        "names the limit: {msg}"
    );
    assert!(
        msg.contains("declared limits: enable_bad_override::orders"),
        "{msg}"
    );
    // Nothing installed: there is nothing to reload.
    assert!(
        matches!(
            redis_ratelimit::reload_overrides().await,
            Err(redis_ratelimit::Error::NotEnabled)
        ),
        "nothing installed"
    );

    std::fs::write(
        &config,
        "[limits.\"enable_bad_override::orders\"]\ncost = 9\n",
    )
    .unwrap();
    let msg = enable_redis_rate_limit!(url = server.url(), config = config.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("limit `enable_bad_override::orders`: field `cost`"),
        "{msg}"
    );
    assert!(msg.contains("exceeds burst 5"), "{msg}");

    std::fs::write(
        &config,
        "[limits.\"enable_bad_override::orders\"]\nburst = 9\n",
    )
    .unwrap();
    let limiter = enable_redis_rate_limit!(url = server.url(), config = config.clone())
        .await
        .unwrap();
    assert!(orders().await.is_ok());
    assert_eq!(
        limiter.prefix(),
        "redis-ratelimit",
        "the calling crate's name by default"
    );
}
