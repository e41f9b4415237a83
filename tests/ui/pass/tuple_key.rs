use redis_ratelimit::{Header, Ip, RateLimited, Route, User, rate_limit};

#[rate_limit(replenish = 10, key = (Ip, Route))]
async fn by_client_and_route() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, key = (User, Header("x-tenant"), Route))]
async fn by_user_tenant_route() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let _ = (by_client_and_route, by_user_tenant_route);
}
