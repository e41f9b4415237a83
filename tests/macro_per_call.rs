//! `#[rate_limit]` arguments computed on each call, on the in-memory store: a key and a cost
//! from the function's own arguments, calls exempt by a predicate, and a limit's own
//! empty-key policy and status.

use std::collections::HashSet;
use std::sync::OnceLock;

use redis_ratelimit::{
    EmptyKeyPolicy, Header, Limit, RateLimited, RateLimiter, RequestContext, Source, Tier,
    context::scope,
    context::scope_returning,
    declared_limits,
    key::{AsyncKeyResolver, ResolveError},
    rate_limit,
};

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

mod support;

use support::request;

async fn init() -> &'static RateLimiter {
    support::memory_limiter(&LIMITER, "macro-per-call").await
}

/// A tenant's uploads: keyed by the tenant id the handler receives, costing one token per
/// file.
#[rate_limit(replenish = 1, burst = 10, unit = "hour", key = tenant, cost = files.len(), limiter = LIMITER)]
async fn upload(tenant: u64, files: Vec<&'static str>) -> Result<usize, RateLimited> {
    Ok(files.len())
}

#[tokio::test]
async fn the_key_and_the_cost_come_from_the_arguments() {
    let limiter = init().await;
    assert_eq!(upload(1, vec!["a"; 4]).await.unwrap(), 4);
    assert_eq!(upload(1, vec!["a"; 6]).await.unwrap(), 6);
    // Tenant 1 has spent its ten tokens; tenant 2 has its own bucket.
    let refused = upload(1, vec!["a"]).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::Store);
    assert_eq!(refused.decision().cost, 1);
    assert_eq!(
        refused.key(),
        limiter.named_bucket_key("macro_per_call::upload", "1")
    );
    assert_eq!(upload(2, vec!["a"; 10]).await.unwrap(), 10);
}

#[tokio::test]
async fn a_cost_of_zero_takes_nothing_and_passes() {
    init().await;
    assert_eq!(upload(10, vec!["a"; 10]).await.unwrap(), 10);
    // The bucket is empty: a call that takes nothing still passes, and takes nothing.
    assert_eq!(upload(10, vec![]).await.unwrap(), 0);
    assert_eq!(
        upload(10, vec!["a"]).await.unwrap_err().decision().source,
        Source::Store
    );
}

#[tokio::test]
async fn a_cost_above_the_burst_is_refused_at_once_and_says_why() {
    let limiter = init().await;
    let (result, recorded) = scope_returning(request("/upload"), upload(20, vec!["a"; 11])).await;
    let refused = result.unwrap_err();
    assert_eq!(refused.decision().source, Source::CostExceedsBurst);
    assert_eq!(refused.decision().cost, 11);
    assert!(
        refused.decision().retry_after.is_zero(),
        "no wait admits it"
    );
    assert_eq!(refused.status(), 413);
    assert!(
        refused.to_string().contains("costs 11 tokens")
            && refused.to_string().contains("burst of 10"),
        "{refused}"
    );
    assert_eq!(recorded.unwrap().decision.source, Source::CostExceedsBurst);
    // Nothing was taken: the whole burst is there.
    let bucket = "20";
    let left = limiter
        .peek_named(
            "macro_per_call::upload",
            bucket,
            &redis_ratelimit::Limit::per_hour(1).burst(10),
        )
        .await
        .unwrap();
    assert_eq!(left.remaining, 10);
}

#[rate_limit(replenish = 1, burst = 10, unit = "hour", key = "one", cost = units, limiter = LIMITER)]
async fn wide(units: u64) -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, burst = 10, unit = "hour", key = "one", cost = delta, limiter = LIMITER)]
async fn signed(delta: i32) -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn a_cost_that_does_not_fit_is_refused_not_wrapped() {
    init().await;
    // 2^32 + 1 would wrap to 1 token.
    let refused = wide(u64::from(u32::MAX) + 2).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::CostExceedsBurst);
    assert_eq!(refused.decision().cost, u32::MAX);
    assert!(refused.to_string().contains("or more"), "{refused}");
    let refused = signed(-1).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::CostExceedsBurst);
    // Neither took anything.
    assert!(wide(10).await.is_ok());
}

/// Keys that look alike as text still name distinct buckets when distinct: the key is the
/// argument's text, named like any other key.
#[rate_limit(replenish = 1, unit = "hour", key = user, limiter = LIMITER)]
async fn by_user(user: &str) -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn distinct_argument_keys_never_share_a_bucket() {
    let limiter = init().await;
    let hostile = [
        "a", "a:b", "a%3Ab", "a:b:", ":a", "a\u{0}", "A", "a ", "", "a/b", "a\\b", "é",
    ];
    let mut buckets = HashSet::new();
    for key in hostile {
        if key.is_empty() {
            // No key: the empty-key policy, never a bucket every blank caller shares.
            let refused = by_user(key).await.unwrap_err();
            assert_eq!(refused.decision().source, Source::NoKey);
            continue;
        }
        assert!(
            by_user(key).await.is_ok(),
            "{key:?} has a bucket of its own"
        );
        assert!(buckets.insert(limiter.named_bucket_key("macro_per_call::by_user", key)));
    }
    for key in hostile.iter().filter(|k| !k.is_empty()) {
        assert!(by_user(key).await.is_err(), "{key:?} spent its own token");
    }
}

/// Internal callers are exempt; everyone else counts.
#[rate_limit(replenish = 1, unit = "hour", key = caller, exempt = caller.starts_with("internal-"), limiter = LIMITER)]
async fn exempt_internal(caller: &str) -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn exempt_calls_pass_unchecked_and_take_nothing() {
    init().await;
    for _ in 0..5 {
        let (result, recorded) =
            scope_returning(request("/x"), exempt_internal("internal-batch")).await;
        assert!(result.is_ok());
        let recorded = recorded.expect("an exempt call is recorded");
        assert_eq!(recorded.decision.source, Source::Exempt);
        assert_eq!(recorded.decision.outcome(), "exempt");
    }
    assert!(exempt_internal("customer").await.is_ok());
    assert!(exempt_internal("customer").await.is_err());
    // Still exempt once the others ran out.
    assert!(exempt_internal("internal-batch").await.is_ok());
}

/// Without the API key, this limit admits the call (the limiter-wide policy denies).
#[rate_limit(replenish = 1, unit = "hour", key = Header("x-api-key"), empty_key = "allow", limiter = LIMITER)]
async fn anonymous_allowed() -> Result<(), RateLimited> {
    Ok(())
}

/// Without the API key, this one refuses with 401.
#[rate_limit(replenish = 1, unit = "hour", key = Header("x-api-key"), empty_key_status = 401, limiter = LIMITER)]
async fn anonymous_unauthorized() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn a_limit_has_its_own_empty_key_policy_and_status() {
    init().await;
    for _ in 0..3 {
        assert!(scope(request("/a"), anonymous_allowed()).await.is_ok());
    }
    let refused = scope(request("/u"), anonymous_unauthorized())
        .await
        .unwrap_err();
    assert_eq!(refused.decision().source, Source::NoKey);
    assert_eq!(refused.status(), 401);
    // With a key, the limits count as any other.
    let keyed = || request("/a").with_header("x-api-key", "k");
    assert!(scope(keyed(), anonymous_allowed()).await.is_ok());
    assert!(scope(keyed(), anonymous_allowed()).await.is_err());

    let declared = declared_limits();
    let find = |name: &str| declared.iter().find(|d| d.name() == name).copied().unwrap();
    let allowed = find("macro_per_call::anonymous_allowed");
    assert_eq!(allowed.empty_key_policy(), Some(EmptyKeyPolicy::Allow));
    assert_eq!(allowed.empty_key_status(), None);
    let unauthorized = find("macro_per_call::anonymous_unauthorized");
    assert_eq!(unauthorized.empty_key_policy(), None);
    assert_eq!(unauthorized.empty_key_status(), Some(401));
}

/// Stacked limits each take their own per-call values, decided together.
#[rate_limit(replenish = 1, burst = 5, unit = "hour", key = tenant, cost = n, limiter = LIMITER)]
#[rate_limit(replenish = 1, burst = 100, unit = "hour", key = "all", cost = n * 2, exempt = n == 0)]
async fn stacked(tenant: u32, n: u32) -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn stacked_limits_take_their_own_per_call_values() {
    init().await;
    assert!(stacked(1, 5).await.is_ok());
    let refused = stacked(1, 1).await.unwrap_err();
    // The tenant's bucket refused; the shared one admitted, and took nothing (vetoed).
    let parts: Vec<_> = refused.parts().map(|(_, d)| (d.allowed, d.cost)).collect();
    assert_eq!(parts, [(false, 1), (true, 2)]);
    assert_eq!(refused.parts().nth(1).unwrap().1.outcome(), "vetoed");
    // Above the tenant's burst: refused at once, nothing asked.
    let refused = stacked(2, 6).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::CostExceedsBurst);
    // Zero: the first limit takes nothing, the second is exempt.
    assert!(stacked(1, 0).await.is_ok());
}

/// Failed attempts count, successful ones are given back: in memory as on Redis
/// (`tests/macro_count.rs`).
#[rate_limit(replenish = 2, unit = "hour", key = user, count = Result::is_err, limiter = LIMITER)]
async fn login(user: &str, ok: bool) -> Result<(), RateLimited> {
    if ok {
        Ok(())
    } else {
        Err(RateLimited::new(
            redis_ratelimit::Decision::new(
                false,
                0,
                redis_ratelimit::Limit::per_hour(2),
                1,
                std::time::Duration::ZERO,
                std::time::Duration::ZERO,
            ),
            "wrong password",
        ))
    }
}

#[tokio::test]
async fn in_memory_only_counted_outcomes_keep_their_tokens() {
    let limiter = init().await;
    let limit = redis_ratelimit::Limit::per_hour(2);
    for _ in 0..5 {
        assert!(login("ann", true).await.is_ok());
    }
    let left = |user: &'static str| async move {
        limiter
            .peek_named("macro_per_call::login", user, &limit)
            .await
            .unwrap()
            .remaining
    };
    assert_eq!(left("ann").await, 2);
    assert!(login("ann", false).await.is_err());
    assert_eq!(left("ann").await, 1);
    assert!(login("ann", false).await.is_err());
    // Out of tokens: refused by the limit, the body does not run, nothing to give back.
    let refused = login("ann", true).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::Store);
    assert_eq!(left("ann").await, 0);
}

const FREE: Tier = Tier::new("free", Limit::per_hour(2));
const PRO: Tier = Tier::new("pro", Limit::per_hour(5));

/// The caller's plan as the handler sees it.
#[derive(Clone, Copy)]
enum Plan {
    Free,
    Pro,
    Unknown,
}

impl Plan {
    fn tier(self) -> Option<Tier> {
        match self {
            Plan::Free => Some(FREE),
            Plan::Pro => Some(PRO),
            Plan::Unknown => None,
        }
    }
}

/// One request per hour unless the plan says otherwise.
#[rate_limit(replenish = 1, unit = "hour", key = user, tier = plan.tier(), tiers = [FREE, PRO], limiter = LIMITER)]
async fn search(user: &str, plan: Plan) -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn each_call_is_decided_under_its_callers_tier() {
    init().await;
    let admitted = |user: &'static str, plan: Plan| async move {
        let mut n = 0;
        while search(user, plan).await.is_ok() {
            n += 1;
            assert!(n <= 10, "{user} is never refused");
        }
        n
    };
    assert_eq!(admitted("f", Plan::Free).await, 2);
    assert_eq!(admitted("p", Plan::Pro).await, 5);
    // An unknown plan gets the declared rate.
    assert_eq!(admitted("u", Plan::Unknown).await, 1);

    // The verdict, the rejection and their headers name the tier in force.
    let (result, recorded) = scope_returning(request("/search"), search("p", Plan::Pro)).await;
    let refused = result.unwrap_err();
    assert_eq!(refused.tier(), Some("pro"));
    assert_eq!(
        refused.name(),
        Some("macro_per_call::search"),
        "the limit's own name"
    );
    assert_eq!(recorded.unwrap().tier(), Some("pro"));
    let headers = refused.headers(redis_ratelimit::headers::HeaderFamilies::ALL);
    assert_eq!(
        headers["ratelimit-policy"],
        "\"macro_per_call::search[pro]\";q=5;w=3600"
    );
    let (_, untiered) = scope_returning(request("/search"), search("u", Plan::Unknown)).await;
    assert_eq!(untiered.unwrap().tier(), None);

    // The declaration lists its tiers.
    let declared = declared_limits();
    let search = declared
        .iter()
        .find(|d| d.name() == "macro_per_call::search")
        .unwrap();
    assert_eq!(search.tiers(), [FREE, PRO]);
}

#[rate_limit(replenish = 1, unit = "hour", key = user, tier = plan.tier(), limiter = LIMITER)]
async fn upgrade(user: &str, plan: Plan) -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn a_plan_change_keeps_what_the_bucket_took() {
    let limiter = init().await;
    // Free: both tokens spent.
    assert!(upgrade("x", Plan::Free).await.is_ok());
    assert!(upgrade("x", Plan::Free).await.is_ok());
    assert!(upgrade("x", Plan::Free).await.is_err());
    // Upgraded mid-bucket: the same bucket, under the pro limit, less what it took.
    let left = limiter
        .peek_named("macro_per_call::upgrade", "x", &PRO.limit())
        .await
        .unwrap()
        .remaining;
    assert_eq!(left, 3);
    for _ in 0..3 {
        assert!(upgrade("x", Plan::Pro).await.is_ok());
    }
    assert!(upgrade("x", Plan::Pro).await.is_err());
    // Downgraded again: an empty bucket, refused, with an honest wait.
    let refused = upgrade("x", Plan::Free).await.unwrap_err();
    assert_eq!(refused.tier(), Some("free"));
    assert!(refused.retry_after() > std::time::Duration::ZERO);
}

/// A tier whose burst is below the call's cost refuses it at once, as the declared limit would.
#[rate_limit(replenish = 10, unit = "hour", key = "t", cost = 3, tier = FREE, limiter = LIMITER)]
async fn costly_for_free() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn a_cost_above_the_tiers_burst_is_refused_at_once() {
    init().await;
    let refused = costly_for_free().await.unwrap_err();
    assert_eq!(refused.decision().source, Source::CostExceedsBurst);
    assert_eq!(refused.tier(), Some("free"));
}

/// An account looked up in a session store that awaits: `"slow"` never answers, `"down"`
/// fails, `"anon"` has no account.
struct Account;

impl AsyncKeyResolver for Account {
    async fn resolve(&self, ctx: &RequestContext) -> Result<Option<String>, ResolveError> {
        let session = ctx
            .headers()
            .get("x-session")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("anon")
            .to_owned();
        tokio::task::yield_now().await;
        match session.as_str() {
            "slow" => {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                Ok(Some("never".to_owned()))
            }
            "down" => Err("the session store is down".into()),
            "anon" => Ok(None),
            other => Ok(Some(format!("account:{other}"))),
        }
    }
}

#[rate_limit(replenish = 1, unit = "hour", key = Account, limiter = LIMITER)]
async fn by_account() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, unit = "hour", key = Account, policy = "allow", limiter = LIMITER)]
async fn by_account_open() -> Result<(), RateLimited> {
    Ok(())
}

fn session(s: &str) -> RequestContext {
    request("/account").with_header("x-session", s)
}

#[tokio::test(start_paused = true)]
async fn an_async_resolver_keys_calls_and_its_failures_go_to_the_failure_policy() {
    let limiter = init().await;
    // Each account its bucket.
    assert!(scope(session("a"), by_account()).await.is_ok());
    let refused = scope(session("a"), by_account()).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::Store);
    assert_eq!(
        refused.key(),
        limiter.named_bucket_key("macro_per_call::by_account", "account:a")
    );
    assert!(scope(session("b"), by_account()).await.is_ok());
    // No account: the empty-key policy (deny).
    let refused = scope(session("anon"), by_account()).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::NoKey);
    // A failing store, and one that does not answer within the deadline (paused time runs
    // the timer out at once): the failure policy decides; the fallback has no key, so refuses.
    for s in ["down", "slow"] {
        let refused = scope(session(s), by_account()).await.unwrap_err();
        assert_eq!(refused.decision().source, Source::FailClosed, "{s}");
        assert_eq!(refused.status(), 503);
        let admitted = scope(session(s), by_account_open()).await;
        let (_, recorded) = scope_returning(session(s), by_account_open()).await;
        assert!(admitted.is_ok(), "{s}: `allow` admits");
        assert_eq!(recorded.unwrap().decision.source, Source::FailOpen);
    }
}
