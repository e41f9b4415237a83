use redis_ratelimit::{RateLimited, rate_limit};

#[derive(Debug)]
enum ApiError {
    TooManyRequests(RateLimited),
    NotFound,
}

impl From<RateLimited> for ApiError {
    fn from(rejection: RateLimited) -> Self {
        ApiError::TooManyRequests(rejection)
    }
}

type ApiResult<T> = Result<T, ApiError>;

#[rate_limit(replenish = 10)]
async fn find_order(id: u64) -> ApiResult<u64> {
    if id == 0 {
        return Err(ApiError::NotFound);
    }
    Ok(id)
}

mod io_style {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}

#[rate_limit(replenish = 10)]
async fn boxed_error() -> io_style::Result<()> {
    Ok(())
}

fn main() {
    let _ = (find_order, boxed_error);
}
