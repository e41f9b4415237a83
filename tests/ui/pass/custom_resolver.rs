use std::borrow::Cow;

use redis_ratelimit::{KeyResolver, RateLimited, RequestContext, rate_limit};

#[derive(Clone)]
struct TenantId(String);

/// One bucket per tenant, found in the request's extensions.
struct Tenant;

impl KeyResolver for Tenant {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.extensions()
            .get::<TenantId>()
            .map(|t| Cow::Borrowed(t.0.as_str()))
    }
}

/// A resolver with state, built per call.
struct Prefixed(&'static str);

impl KeyResolver for Prefixed {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.path().map(|p| Cow::Owned(format!("{}{p}", self.0)))
    }
}

#[rate_limit(replenish = 10, key = Tenant)]
async fn by_tenant() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, key = Prefixed("v1:"))]
async fn by_prefixed_path() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, key = Box::new(Tenant) as Box<dyn KeyResolver>)]
async fn by_boxed() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let _ = (by_tenant, by_prefixed_path, by_boxed);
}
