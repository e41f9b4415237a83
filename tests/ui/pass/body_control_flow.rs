use redis_ratelimit::{RateLimited, rate_limit};

#[derive(Debug)]
enum ApiError {
    Limited,
    Parse(std::num::ParseIntError),
}

impl From<RateLimited> for ApiError {
    fn from(_: RateLimited) -> Self {
        ApiError::Limited
    }
}

impl From<std::num::ParseIntError> for ApiError {
    fn from(e: std::num::ParseIntError) -> Self {
        ApiError::Parse(e)
    }
}

#[rate_limit(replenish = 10)]
async fn parse(input: &str) -> Result<u64, ApiError> {
    fn helper(s: &str) -> &str {
        s.trim()
    }
    if input.is_empty() {
        return Ok(0);
    }
    let n: u64 = helper(input).parse()?;
    let doubled = async { n * 2 }.await;
    Ok(doubled)
}

fn main() {
    let _ = parse;
}
