use redis_ratelimit::{Limit, RateLimited, Tier, rate_limit};

// A quote would end the string of the `RateLimit-Policy` header that names the tier.
const GOLD: Tier = Tier::new("gold\"", Limit::per_hour(100));

#[rate_limit(replenish = 10, key = user, tier = GOLD, tiers = [GOLD])]
async fn search(user: &str) -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
