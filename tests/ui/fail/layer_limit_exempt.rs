use redis_ratelimit::{Ip, layer_limit};

fn main() {
    // A layer's `exempt` is a predicate on the request, not a `bool`.
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, exempt = true);
}
