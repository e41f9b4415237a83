//! The heartbeat: this instance recorded as alive, and the live instances counted.

use std::time::Duration;

use super::RedisStore;
use crate::algorithm::library::Lua;
use crate::errors::Error;

impl RedisStore {
    /// Records this instance as alive in the set `key` and returns how many are, and whether
    /// this one was missing from the set.
    pub(crate) async fn heartbeat(
        &self,
        key: &str,
        id: &str,
        ttl: Duration,
    ) -> Result<(u32, bool), Error> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let (n, new): (u32, u8) = self
            .eval(Lua::Heartbeat, &[key], |c| {
                c.arg(id).arg(ttl_ms);
            })
            .await?;
        Ok((n, new == 1))
    }
}
