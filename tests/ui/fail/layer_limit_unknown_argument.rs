use redis_ratelimit::{Ip, layer_limit};

fn main() {
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, node = "eu-1");
}
