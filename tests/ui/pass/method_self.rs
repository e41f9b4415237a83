use redis_ratelimit::{RateLimited, rate_limit};

struct Orders {
    items: Vec<u64>,
}

impl Orders {
    #[rate_limit(replenish = 10, name = "orders.list")]
    async fn list(&self) -> Result<&[u64], RateLimited> {
        Ok(&self.items)
    }

    #[rate_limit(replenish = 10, name = "orders.add")]
    async fn add(&mut self, id: u64) -> Result<usize, RateLimited> {
        self.items.push(id);
        Ok(self.items.len())
    }

    #[rate_limit(replenish = 10, name = "orders.new")]
    async fn new() -> Result<Self, RateLimited> {
        Ok(Orders { items: Vec::new() })
    }

    #[rate_limit(replenish = 10, name = "orders.into_items")]
    async fn into_items(self) -> Result<Vec<u64>, RateLimited> {
        Ok(self.items)
    }
}

trait Catalog {
    async fn count(&self) -> Result<usize, RateLimited>;

    #[rate_limit(replenish = 10, name = "catalog.first")]
    async fn first(&self) -> Result<Option<u64>, RateLimited> {
        Ok(None)
    }
}

impl Catalog for Orders {
    #[rate_limit(replenish = 10, name = "catalog.count")]
    async fn count(&self) -> Result<usize, RateLimited> {
        Ok(self.items.len())
    }
}

fn main() {
    let _ = (Orders::list, Orders::add, Orders::new, Orders::into_items);
    let _ = (<Orders as Catalog>::count, <Orders as Catalog>::first);
}
