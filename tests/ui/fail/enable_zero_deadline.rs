use redis_ratelimit::enable_redis_rate_limit;

async fn start() -> Result<(), redis_ratelimit::Error> {
    enable_redis_rate_limit!(deadline_ms = 0).await?;
    Ok(())
}

fn main() {}
