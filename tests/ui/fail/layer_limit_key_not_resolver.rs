use redis_ratelimit::layer_limit;

fn main() {
    // A layer's key must be a resolver: there are no arguments whose value could be the key.
    let _ = layer_limit!(name = "api", replenish = 10, key = 42);
}
