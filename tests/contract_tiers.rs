//! Tiers whose names are read at run time (issue 34): an enterprise contract's tier, built by
//! `Tier::try_new` from a name and a rate parsed out of configuration text (an owned `String`,
//! never a leaked one), in memory and on a real `redis-server`. Its calls are decided under
//! its limit, and its name is in the rejection, the recorded verdict and the
//! `RateLimit-Policy` header: of a function's limit, of one of several stacked limits, and of
//! a router's limit on the axum layer, in a served response. A name that a header or a
//! metrics label could not carry is refused when the tier is built. (The metrics label of a
//! contract's tier is in `tests/metrics.rs`, whose recorder is global to its process.)
//!
//! Each test runs in a process of its own (nextest), and builds the functions' limiter, or
//! enables the global one, on the store it tests.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use redis_ratelimit::context::scope_returning;
use redis_ratelimit::error::InvalidLimit;
use redis_ratelimit::headers::HeaderFamilies;
use redis_ratelimit::{
    Error, Global, Header, Limit, RateLimitLayer, RateLimited, RateLimiter, RequestContext, Tier,
    enable_redis_rate_limit, layer_limit, rate_limit,
};
use testkit::RedisServer;
use tower::ServiceExt as _;

mod support;

use support::request;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

/// The plan of callers without a contract.
const FREE: Tier = Tier::new("free", Limit::per_hour(1));

/// A contract as its configuration says it, one `key = value` a line: its tier's name and
/// how many calls an hour it buys.
const CONTRACT: &str = "customer = ACME Corp\ntier = acme-gold\ncalls_per_hour = 3\n";

/// A contract's tier, read from its configuration `text`: the name is a `String` the program
/// owns (and may drop), the limit a rate known only now.
fn contract_tier(text: &str) -> Result<Tier, Error> {
    let value = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(" = "))
            .map(str::to_owned)
    };
    let name: String = value("tier").unwrap();
    let per_hour: u32 = value("calls_per_hour").unwrap().parse().unwrap();
    Ok(Tier::try_new(
        name,
        Limit::try_new(per_hour, per_hour, redis_ratelimit::Unit::Hour)?,
    )?)
}

/// Who calls, and under which plan.
struct Caller {
    id: String,
    plan: Option<Tier>,
}

/// One search an hour, or the caller's plan's.
#[rate_limit(replenish = 1, unit = "hour", key = caller.id, tier = caller.plan, tiers = [FREE], name = "search", limiter = LIMITER)]
async fn search(caller: &Caller) -> Result<(), RateLimited> {
    Ok(())
}

/// Exports under two limits decided together: the caller's (one an hour, or its plan's) and
/// a generous one shared by every caller.
#[rate_limit(replenish = 1, unit = "hour", key = caller.id, tier = caller.plan, name = "export.caller", limiter = LIMITER)]
#[rate_limit(replenish = 1000, unit = "hour", key = Global, name = "export.all")]
async fn export(caller: &Caller) -> Result<(), RateLimited> {
    Ok(())
}

/// The functions' limiter: on `server`, or in memory.
async fn init(server: Option<&RedisServer>) {
    let limiter = match server {
        Some(server) => support::redis_limiter(server, "contract-tiers").await,
        None => RateLimiter::builder().memory().build().await.unwrap(),
    };
    // Under `cargo test` (one process) another test may have set it first.
    let _ = LIMITER.set(limiter);
}

/// How many calls `caller` makes before one is refused, and that refusal.
async fn admitted_until_refused<F>(mut call: impl FnMut() -> F) -> (usize, RateLimited)
where
    F: Future<Output = Result<(), RateLimited>>,
{
    let mut admitted = 0;
    loop {
        match call().await {
            Ok(()) => admitted += 1,
            Err(refused) => return (admitted, refused),
        }
        assert!(admitted <= 10, "never refused");
    }
}

async fn a_contract_tier_decides_calls_and_is_named_everywhere(server: Option<RedisServer>) {
    init(server.as_ref()).await;
    let text = String::from(CONTRACT);
    let acme = Caller {
        id: "acme".to_owned(),
        plan: Some(contract_tier(&text).unwrap()),
    };
    // The configuration the name was read from goes away: the tier keeps its own.
    drop(text);
    let (admitted, refused) = admitted_until_refused(|| search(&acme)).await;
    assert_eq!(admitted, 3, "the contract's three calls an hour");
    assert_eq!(refused.tier(), Some("acme-gold"));
    assert_eq!(refused.name(), Some("search"), "the limit's own name");
    assert_eq!(refused.decision().limit, Limit::per_hour(3));
    let headers = refused.headers(HeaderFamilies::ALL);
    assert_eq!(
        headers["ratelimit-policy"],
        "\"search[acme-gold]\";q=3;w=3600"
    );
    // The verdict a request's scope records names it too.
    let (result, recorded) = scope_returning(request("/search"), search(&acme)).await;
    assert!(result.is_err());
    let recorded = recorded.unwrap();
    assert_eq!(recorded.tier(), Some("acme-gold"));
    // A caller without a contract, beside it: the declared rate, under no tier; a free caller
    // under the constant tier.
    let anonymous = Caller {
        id: "anonymous".to_owned(),
        plan: None,
    };
    let (admitted, refused) = admitted_until_refused(|| search(&anonymous)).await;
    assert_eq!((admitted, refused.tier()), (1, None));
    let free = Caller {
        id: "free".to_owned(),
        plan: Some(FREE),
    };
    let (admitted, refused) = admitted_until_refused(|| search(&free)).await;
    assert_eq!((admitted, refused.tier()), (1, Some("free")));
}

async fn several_limits_name_the_contract_tier(server: Option<RedisServer>) {
    init(server.as_ref()).await;
    let acme = Caller {
        id: "acme-exports".to_owned(),
        plan: Some(contract_tier(CONTRACT).unwrap()),
    };
    let (admitted, refused) = admitted_until_refused(|| export(&acme)).await;
    assert_eq!(admitted, 3);
    // The tightest limit, the caller's, refused: under the contract's tier.
    assert_eq!(refused.name(), Some("export.caller"));
    assert_eq!(refused.tier(), Some("acme-gold"));
    let headers = refused.headers(HeaderFamilies::ALL);
    let policy = headers["ratelimit-policy"].to_str().unwrap();
    assert!(
        policy.starts_with("\"export.caller[acme-gold]\";q=3;w=3600, \"export.all\";q=1000;"),
        "{policy}"
    );
    let (_, recorded) = scope_returning(request("/export"), export(&acme)).await;
    assert_eq!(recorded.unwrap().tier(), Some("acme-gold"));
}

/// A router whose limit gives each request its contract's tier, looked up by the contract
/// header in a table built at run time.
fn contracts_app() -> Router {
    let contracts: Arc<HashMap<String, Tier>> = Arc::new(
        [contract_tier(CONTRACT).unwrap()]
            .into_iter()
            .map(|tier| (tier.name().to_owned(), tier))
            .collect(),
    );
    let tier_of = move |request: &RequestContext| {
        let contract = request.headers().get("x-contract")?.to_str().ok()?;
        contracts.get(contract).cloned()
    };
    Router::new()
        .route("/work", get(|| async { "done" }))
        .layer(RateLimitLayer::new().limit(layer_limit!(
            name = "api",
            replenish = 1,
            unit = "hour",
            key = Header("x-client"),
            tier = tier_of
        )))
}

async fn a_layer_decides_requests_under_a_contract_tier(server: Option<RedisServer>) {
    match server.as_ref() {
        Some(server) => enable_redis_rate_limit!(url = server.url(), prefix = "contract-layer")
            .await
            .unwrap(),
        None => enable_redis_rate_limit!(url = "memory://", prefix = "contract-layer")
            .await
            .unwrap(),
    };
    let app = contracts_app();
    let send = || {
        app.clone().oneshot(
            Request::get("/work")
                .header("x-client", "acme")
                .header("x-contract", "acme-gold")
                .body(Body::empty())
                .unwrap(),
        )
    };
    for _ in 0..3 {
        let admitted = send().await.unwrap();
        assert_eq!(admitted.status(), StatusCode::OK);
        assert_eq!(
            admitted.headers()["ratelimit-policy"],
            "\"api[acme-gold]\";q=3;w=3600"
        );
    }
    let refused = send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.headers()["ratelimit-policy"],
        "\"api[acme-gold]\";q=3;w=3600"
    );
}

support::on_memory_and_redis!(
    a_contract_tier_decides_calls_and_is_named_everywhere,
    several_limits_name_the_contract_tier,
    a_layer_decides_requests_under_a_contract_tier
);

#[test]
fn hostile_tier_names_are_refused_where_the_tier_is_built() {
    let limit = Limit::per_hour(3);
    let hostile = [
        "acme\"gold",
        "acme;q=1000000",
        "acme, \"other\";q=1",
        "acme\nx-injected: 1",
        "acme\r\n",
        "acme gold",
        "acme[gold]",
        "",
    ];
    for name in hostile {
        let refused = Tier::try_new(name.to_owned(), limit).unwrap_err();
        assert!(
            matches!(refused, InvalidLimit::BadTierName { len, .. } if len == name.len()),
            "{name:?}: {refused:?}"
        );
        assert_eq!(refused.fields(), ["tier"]);
    }
    let long = "a".repeat(10 * 1024);
    assert_eq!(
        Tier::try_new(long, limit).unwrap_err(),
        InvalidLimit::BadTierName {
            len: 10 * 1024,
            forbidden: None
        }
    );
    // Through `?`, as a contract read from configuration would meet it: the library's error,
    // saying what a tier name may be.
    let error = contract_tier("tier = acme;gold\ncalls_per_hour = 3").unwrap_err();
    assert!(matches!(
        error,
        Error::InvalidLimit(InvalidLimit::BadTierName { .. })
    ));
    let message = error.to_string();
    assert!(
        message.contains("must not contain ';' (at byte 4)")
            && message.contains("1 to 64 ASCII letters, digits, `-`, `_` or `.`"),
        "{message}"
    );
    // The longest name passes.
    let longest = "a".repeat(64);
    assert_eq!(
        Tier::try_new(longest.as_str(), limit).unwrap().name(),
        longest
    );
}
