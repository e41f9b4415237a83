use redis_ratelimit::{Ip, Limit, Tier, layer_limit};

const PRO: Tier = Tier::new("pro", Limit::per_hour(100));

fn main() {
    // No call of a function to give a tier.
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, tiers = [PRO]);
}
