use redis_ratelimit::{Ip, layer_limit};

fn main() {
    // A layer's limit refuses at once.
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, wait = "1s");
}
