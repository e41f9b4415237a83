use redis_ratelimit::enable_redis_rate_limit;

async fn start() -> Result<(), redis_ratelimit::Error> {
    enable_redis_rate_limit!("redis://10.0.0.5:6380").await?;
    Ok(())
}

fn main() {}
