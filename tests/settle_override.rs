//! An override that gives a limit whose calls settle (`settle = ..`) an algorithm that cannot
//! owe tokens is refused by `enable_redis_rate_limit!` and by `reload_overrides`, naming the
//! limit; it used to start, then log an error on every call (issue 44).
//!
//! One test per file: enabling is once per process.
#![allow(clippy::unwrap_used)]

use redis_ratelimit::{Error, Global, RateLimited, enable_redis_rate_limit, rate_limit};

/// Tokens of a completion, settled at what it used.
#[rate_limit(
    replenish = 1_000, unit = "hour", key = Global, name = "so.tokens", cost = 100,
    settle = |used: &Result<u32, RateLimited>| *used.as_ref().unwrap_or(&0)
)]
async fn complete(used: u32) -> Result<u32, RateLimited> {
    Ok(used)
}

/// A limit without `settle` of its own, used by a function that settles.
#[rate_limit(replenish = 50, unit = "hour", key = Global, name = "so.embed")]
async fn embed() -> Result<u32, RateLimited> {
    Ok(1)
}

#[rate_limit(
    shared = "so.embed", key = Global, cost = 10,
    settle = |used: &Result<u32, RateLimited>| *used.as_ref().unwrap_or(&0)
)]
async fn embed_many(used: u32) -> Result<u32, RateLimited> {
    Ok(used)
}

/// Tokens that may never be left owing: a call that used more than its estimate takes what
/// is left, no more.
#[rate_limit(
    replenish = 500, unit = "hour", key = Global, name = "so.capped", cost = 10, max_debt = 0,
    settle = |used: &Result<u32, RateLimited>| *used.as_ref().unwrap_or(&0)
)]
async fn capped(used: u32) -> Result<u32, RateLimited> {
    Ok(used)
}

#[tokio::test]
async fn an_override_a_settling_limit_cannot_keep_is_refused() {
    let dir = std::env::temp_dir().join(format!("settle-override-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("limits.toml");
    for (name, line) in [("so.tokens", 11), ("so.embed", 25)] {
        std::fs::write(
            &config,
            format!("[limits.\"{name}\"]\nalgorithm = \"sliding_window\"\n"),
        )
        .unwrap();
        let err = enable_redis_rate_limit!(url = "memory://", config = config.clone())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("`{name}` (tests/settle_override.rs:{line})"))
                && msg.contains("settle")
                && msg.contains("cannot owe tokens"),
            "{msg}"
        );
    }

    // A window that can owe is fine; then a reload that would make it a sliding window is
    // refused and leaves it as it was.
    std::fs::write(
        &config,
        "[limits.\"so.tokens\"]\nalgorithm = \"fixed_window\"\n",
    )
    .unwrap();
    let limiter = enable_redis_rate_limit!(url = "memory://", config = config.clone())
        .await
        .unwrap();
    std::fs::write(
        &config,
        "[limits.\"so.tokens\"]\nalgorithm = \"sliding_window\"\n",
    )
    .unwrap();
    let msg = redis_ratelimit::reload_overrides()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("`so.tokens`") && msg.contains("cannot owe tokens"),
        "{msg}"
    );
    assert_eq!(complete(40).await.unwrap(), 40);
    assert_eq!(embed().await.unwrap(), 1);
    assert_eq!(embed_many(5).await.unwrap(), 5);
    let tokens = redis_ratelimit::declared_limits()
        .into_iter()
        .find(|d| d.name() == "so.tokens")
        .unwrap();
    assert_eq!(
        tokens.effective().limit.algorithm_kind(),
        redis_ratelimit::Algorithm::FixedWindow
    );

    // The attribute's debt bound is the limit's (issue 44: it could not be set there).
    let capped_decl = redis_ratelimit::declared_limits()
        .into_iter()
        .find(|d| d.name() == "so.capped")
        .unwrap();
    assert_eq!(capped_decl.declared_limit().debt_bound(), 0);
    assert_eq!(capped(600).await.unwrap(), 600);
    let left = limiter
        .peek_named("so.capped", "global", &capped_decl.declared_limit())
        .await
        .unwrap();
    // Empty, owing nothing: the next token is 7.2 s away (500 an hour), where a debt of the
    // default bound (a burst) would have put it 12 minutes away.
    assert_eq!(left.remaining, 0, "all 500 taken");
    assert!(
        left.retry_after <= std::time::Duration::from_millis(7_200),
        "{left:?}"
    );
}
