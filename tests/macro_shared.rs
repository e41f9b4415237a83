//! Shared limits: several functions draw from one limit, declared once (`name = ".."` with its
//! rate) and used elsewhere by name (`shared = ".."`): one bucket per key across them, the
//! declaring function's limit and overrides, each function's own key and cost. Enabled
//! through the macro, in memory, with an override of the shared limit; the startup errors of
//! a dangling `shared` and of a name declared twice are in `tests/enable_shared.rs`.
#![allow(clippy::unwrap_used)]

use redis_ratelimit::{
    Global, Ip, RateLimited, RequestContext, Source, context::scope, declared_limits,
    enable_redis_rate_limit, rate_limit,
};

/// The search limit, declared here: 4 a day per client.
#[rate_limit(replenish = 4, unit = "day", key = Ip, name = "search")]
async fn search() -> Result<&'static str, RateLimited> {
    Ok("results")
}

/// Suggestions draw from the same searches.
#[rate_limit(shared = "search", key = Ip)]
async fn suggest() -> Result<&'static str, RateLimited> {
    Ok("suggestions")
}

/// An export costs two searches.
#[rate_limit(shared = "search", key = Ip, cost = 2)]
async fn export() -> Result<&'static str, RateLimited> {
    Ok("export")
}

/// Stacked with a limit of its own: all or nothing, as any two limits.
#[rate_limit(replenish = 1, unit = "day", key = Global, name = "reindex")]
#[rate_limit(shared = "search", key = Ip)]
async fn reindex() -> Result<&'static str, RateLimited> {
    Ok("reindexed")
}

fn client(ip: &str) -> RequestContext {
    RequestContext::new().with_peer(format!("{ip}:4000").parse().unwrap())
}

#[tokio::test]
async fn functions_that_share_a_limit_draw_from_one_bucket() {
    // An override of the shared limit, by its name, applies to every function that uses it.
    let dir = std::env::temp_dir().join(format!("macro-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("limits.toml");
    std::fs::write(&config, "[limits.search]\nreplenish = 5\nburst = 5\n").unwrap();
    enable_redis_rate_limit!(url = "memory://", prefix = "shared", config = config)
        .await
        .unwrap();

    let a = || client("203.0.113.1");
    // 5 a day (the override) across the three functions, for one client.
    assert!(scope(a(), search()).await.is_ok());
    assert!(scope(a(), suggest()).await.is_ok());
    assert!(scope(a(), export()).await.is_ok()); // 2 tokens
    assert!(scope(a(), suggest()).await.is_ok());
    let refused = scope(a(), search()).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::Store);
    assert_eq!(refused.name(), Some("search"));
    assert_eq!(refused.decision().limit.replenish(), 5, "the override");
    assert!(scope(a(), suggest()).await.is_err());
    // Another client has its own bucket.
    let b = || client("203.0.113.2");
    assert!(scope(b(), suggest()).await.is_ok());

    // Stacked with its own limit: refused by the shared one, the other takes nothing.
    let refused = scope(a(), reindex()).await.unwrap_err();
    let parts: Vec<(Option<&str>, bool)> = refused.parts().map(|(n, d)| (n, d.allowed)).collect();
    assert_eq!(parts, [(Some("reindex"), true), (Some("search"), false)]);
    assert!(
        scope(b(), reindex()).await.is_ok(),
        "reindex's token was not taken"
    );

    // Listed: the declaration and each use, the uses with their own cost and the shared limit.
    let uses: Vec<_> = declared_limits()
        .into_iter()
        .filter(|d| d.name() == "search")
        .collect();
    assert_eq!(uses.len(), 4, "{uses:?}");
    assert_eq!(uses.iter().filter(|d| !d.is_shared_use()).count(), 1);
    for d in &uses {
        assert_eq!(d.effective().limit.replenish(), 5);
        assert_eq!(d.declared_limit().replenish(), 4);
    }
    assert!(
        uses.iter()
            .any(|d| d.is_shared_use() && d.effective().cost == 2)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
