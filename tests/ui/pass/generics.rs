use std::fmt::Display;

use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, name = "render")]
async fn render<T: Display + Send, const N: usize>(items: [T; N]) -> Result<String, RateLimited>
where
    T: Sync,
{
    Ok(items.iter().map(ToString::to_string).collect())
}

#[rate_limit(replenish = 10, name = "longest")]
async fn longest<'a>(a: &'a str, b: &'a str) -> Result<&'a str, RateLimited> {
    Ok(if a.len() >= b.len() { a } else { b })
}

#[rate_limit(replenish = 10, name = "sum")]
async fn sum(values: impl IntoIterator<Item = u64>) -> Result<u64, RateLimited> {
    Ok(values.into_iter().sum())
}

struct Repo<T>(Vec<T>);

impl<T: Clone + Send + Sync> Repo<T> {
    #[rate_limit(replenish = 10, name = "repo.get")]
    async fn get(&self, i: usize) -> Result<Option<T>, RateLimited> {
        Ok(self.0.get(i).cloned())
    }
}

fn main() {
    let _ = render::<u8, 3>;
    let _ = longest;
    drop(sum(vec![1, 2]));
    let _ = Repo::<u8>::get;
}
