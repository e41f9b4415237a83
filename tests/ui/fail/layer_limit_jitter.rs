use redis_ratelimit::{Ip, layer_limit};

fn main() {
    // A layer's limit refuses at once: there is no wait to spread.
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, jitter = "50ms");
}
