#![deny(warnings, unused, unused_results, clippy::all, clippy::pedantic)]
//! Keys, costs and exemptions computed from the handler's own arguments, on axum extractors
//! (patterns included), with a limit's own empty-key policy and status.

use axum::Json;
use axum::extract::Path;
use redis_ratelimit::{Header, Limit, RateLimited, Tier, rate_limit};

struct File;

/// A tenant's uploads, one token per file.
#[rate_limit(replenish = 100, unit = "minute", key = tenant_id, cost = files.len())]
async fn upload(
    Path(tenant_id): Path<u64>,
    Json(files): Json<Vec<String>>,
) -> Result<String, RateLimited> {
    Ok(format!("{tenant_id}: {}", files.len()))
}

/// A resolver still works, a constant cost too; internal callers are exempt.
#[rate_limit(
    replenish = 10,
    key = Header("x-api-key"),
    cost = 2,
    exempt = caller == "internal",
    empty_key = "allow",
    empty_key_status = 401
)]
async fn report(caller: &str) -> Result<usize, RateLimited> {
    Ok(caller.len())
}

/// Only failures count; the body returns early and uses `?`.
#[rate_limit(replenish = 5, key = user, count = Result::is_err)]
async fn login(user: &str, password: &str) -> Result<String, RateLimited> {
    if password.is_empty() {
        return Ok(String::new());
    }
    let checked: Result<&str, RateLimited> = Ok(user);
    Ok(checked?.to_owned())
}

/// A predicate over an output whose type cannot be named.
#[rate_limit(replenish = 5, count = |out| out.is_ok())]
async fn listing() -> Result<impl std::fmt::Display, RateLimited> {
    Ok(String::from("rows"))
}

const FREE: Tier = Tier::new("free", Limit::per_hour(100));
const PRO: Tier = Tier::new("pro", Limit::per_hour(10_000));
const PLANS: &[Tier] = &[FREE, PRO];

/// A tier per call: a constant, one built from a contract row, or none (the declared rate).
#[rate_limit(replenish = 10, unit = "hour", key = user, tier = plan, tiers = [FREE, PRO])]
async fn tiered(user: &str, plan: Option<Tier>) -> Result<(), RateLimited> {
    let _ = user;
    Ok(())
}

#[rate_limit(replenish = 10, unit = "hour", key = user, tier = &PLANS[usize::from(pro)], tiers = PLANS)]
async fn tiered_by_flag(user: &str, pro: bool) -> Result<(), RateLimited> {
    let _ = user;
    Ok(())
}

/// A plan in a field of a borrowed argument (read, not moved out: a `Tier` is not `Copy`), a
/// contract's tier built at run time among them; the tiers listed as a borrowed array.
struct Caller {
    id: u64,
    plan: Option<Tier>,
}

#[rate_limit(replenish = 10, unit = "hour", key = caller.id, tier = caller.plan, tiers = &[FREE, PRO])]
async fn tiered_by_caller(caller: &Caller) -> Result<u64, RateLimited> {
    Ok(caller.id)
}

/// A tier by value from a method, and the argument still usable in the body.
impl Caller {
    fn tier(&self) -> Option<Tier> {
        self.plan.clone()
    }
}

#[rate_limit(replenish = 10, unit = "hour", key = caller.id, tier = caller.tier())]
async fn tiered_by_method(caller: Caller) -> Result<Option<Tier>, RateLimited> {
    Ok(caller.plan)
}

/// A method: the key from `self`, the cost from a slice.
struct Service {
    tenant: String,
}

impl Service {
    #[rate_limit(replenish = 10, key = self.tenant, cost = files.len())]
    async fn store(&self, files: &[File]) -> Result<usize, RateLimited> {
        Ok(files.len())
    }
}

fn main() {
    let _ = upload;
    let _ = report;
    let _ = login;
    let _ = tiered;
    let _ = tiered_by_flag;
    let _ = tiered_by_caller;
    let _ = tiered_by_method;
    let _ = Tier::try_new(String::from("acme-gold"), Limit::per_minute(2_500)).map(|gold| Caller {
        id: 1,
        plan: Some(gold),
    });
    let _ = listing;
    let _ = Service::store;
    let _ = Service {
        tenant: String::new(),
    }
    .tenant;
}
