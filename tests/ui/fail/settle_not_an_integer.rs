use redis_ratelimit::{Global, RateLimited, rate_limit};

struct Completion {
    tokens: Option<u32>,
}

// The actual cost is an integer, not an `Option` of one.
#[rate_limit(replenish = 100, key = Global, cost = 10, settle = |r| r.as_ref().map(|c| c.tokens))]
async fn complete() -> Result<Completion, RateLimited> {
    Ok(Completion { tokens: Some(3) })
}

fn main() {}
