//! The heartbeat: this instance recorded as alive, and the live instances counted.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::RedisStore;
use crate::Error;

/// The heartbeat script's text.
const HEARTBEAT_LUA: &str = include_str!("../../scripts/heartbeat.lua");

/// The heartbeat script.
static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| Script::new(HEARTBEAT_LUA));

impl RedisStore {
    /// Records this instance as alive in the set `key` and returns how many are.
    pub(crate) async fn heartbeat(&self, key: &str, id: &str, ttl: Duration) -> Result<u32, Error> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let n: u32 = self
            .eval(&HEARTBEAT, HEARTBEAT_LUA, &[key], |c| {
                c.arg(id).arg(ttl_ms);
            })
            .await?;
        Ok(n)
    }
}
