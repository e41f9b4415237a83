use redis_ratelimit::enable_redis_rate_limit;

async fn start() -> Result<(), redis_ratelimit::Error> {
    enable_redis_rate_limit!(policy = "fail-open").await?;
    Ok(())
}

fn main() {}
