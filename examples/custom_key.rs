//! Custom key resolvers: one bucket per API key (from a header, checked for shape) and one
//! per tenant (from the request's extensions, where authentication put it).
//!
//! ```sh
//! cargo run --example custom_key
//! ```
//!
//! The calls here are not HTTP requests: `scope` gives each one its context, as the HTTP
//! layer does for requests.
#![allow(clippy::print_stdout)]

mod report;

use std::borrow::Cow;
use std::process::ExitCode;

use redis_ratelimit::{
    KeyResolver, RateLimited, RequestContext, context::scope, enable_redis_rate_limit, rate_limit,
};

/// The API key from `x-api-key`, if it looks like one of ours (`ak_` and 8 to 64 characters
/// of `[A-Za-z0-9]`); anything else has no key, and the empty-key policy refuses it.
struct ApiKey;

impl KeyResolver for ApiKey {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        let key = ctx.headers().get("x-api-key")?.to_str().ok()?;
        let body = key.strip_prefix("ak_")?;
        let valid =
            (8..=64).contains(&body.len()) && body.bytes().all(|b| b.is_ascii_alphanumeric());
        valid.then_some(Cow::Borrowed(key))
    }
}

/// The tenant that authentication established, kept in the request's extensions.
#[derive(Debug, Clone)]
struct TenantId(String);

struct Tenant;

impl KeyResolver for Tenant {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.extensions()
            .get::<TenantId>()
            .map(|t| Cow::Borrowed(t.0.as_str()))
    }
}

/// 3 exports per hour per API key.
#[rate_limit(replenish = 3, unit = "hour", key = ApiKey)]
async fn export() -> Result<&'static str, RateLimited> {
    Ok("exported")
}

/// 10 reports per minute per tenant, each costing 4 tokens.
#[rate_limit(replenish = 10, unit = "minute", cost = 4, key = Tenant)]
async fn heavy_report() -> Result<&'static str, RateLimited> {
    Ok("report")
}

fn show(label: &str, result: Result<&str, RateLimited>) {
    match result {
        Ok(v) => println!("{label}: {v}"),
        Err(r) => println!(
            "{label}: refused ({:?}), retry in {:?}",
            r.decision().source,
            r.retry_after()
        ),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    report::logs();
    report::exit(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    enable_redis_rate_limit!(url = "memory://").await?;

    for i in 1..=4 {
        let ctx = RequestContext::new().with_header("x-api-key", "ak_12345678");
        show(
            &format!("export #{i} with ak_12345678"),
            scope(ctx, export()).await,
        );
    }
    let other = RequestContext::new().with_header("x-api-key", "ak_abcdefgh");
    show("export with another key", scope(other, export()).await);
    let bad = RequestContext::new().with_header("x-api-key", "not-a-key");
    show("export with a malformed key", scope(bad, export()).await);

    for i in 1..=3 {
        let ctx = RequestContext::new().with_extension(TenantId("acme".into()));
        show(
            &format!("acme report #{i}"),
            scope(ctx, heavy_report()).await,
        );
    }
    let ctx = RequestContext::new().with_extension(TenantId("globex".into()));
    show("globex report", scope(ctx, heavy_report()).await);
    Ok(())
}
