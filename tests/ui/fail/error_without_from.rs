use redis_ratelimit::rate_limit;

#[derive(Debug)]
enum ApiError {
    NotFound,
}

#[rate_limit(replenish = 10)]
async fn list_orders() -> Result<Vec<u64>, ApiError> {
    Err(ApiError::NotFound)
}

fn main() {}
