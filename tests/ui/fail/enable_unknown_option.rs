use redis_ratelimit::enable_redis_rate_limit;

async fn start() -> Result<(), redis_ratelimit::Error> {
    enable_redis_rate_limit!(url = "redis://127.0.0.1:6379", timeout = 20).await?;
    Ok(())
}

fn main() {}
