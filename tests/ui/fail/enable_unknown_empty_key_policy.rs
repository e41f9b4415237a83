use redis_ratelimit::enable_redis_rate_limit;

async fn start() -> Result<(), redis_ratelimit::Error> {
    enable_redis_rate_limit!(empty_key = "skip").await?;
    Ok(())
}

fn main() {}
