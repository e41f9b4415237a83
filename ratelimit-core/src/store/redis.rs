use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script, Value};

use crate::error::redact_url;
use crate::{Decision, Error, Limit, Store};

/// The decision script, hashed once per process.
static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/gcra.lua")));

/// The heartbeat script.
static HEARTBEAT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/heartbeat.lua")));

/// Token buckets in Redis, shared by every process that uses the same server and prefix.
///
/// Each decision is one `EVALSHA` of one Lua script, timed by the Redis server's `TIME` (so
/// the callers' clocks never matter). A missing script (after a restart, a failover or
/// `SCRIPT FLUSH`) is loaded again and the call retried once. All calls share one multiplexed
/// connection, so concurrent calls are pipelined; it reconnects on its own after a failure.
/// Needs Redis 7.0 or newer.
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    url: String,
}

impl RedisStore {
    /// Connects to the Redis at `url`, checks its version and loads the script.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`], [`Error::Connect`], [`Error::UnsupportedRedis`].
    pub async fn connect(url: &str) -> Result<RedisStore, Error> {
        let redacted = redact_url(url);
        let client = Client::open(url).map_err(|source| Error::InvalidUrl {
            url: redacted.clone(),
            source,
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|source| Error::Connect {
                url: redacted.clone(),
                source,
            })?;
        let mut store = RedisStore {
            conn,
            url: redacted,
        };
        store.prepare().await?;
        Ok(store)
    }

    /// Uses an existing connection manager (its configuration, TLS, credentials); checks the
    /// server's version and loads the script.
    ///
    /// # Errors
    /// [`Error::UnsupportedRedis`], or [`Error::Redis`] if the server cannot be asked.
    pub async fn from_connection(conn: ConnectionManager) -> Result<RedisStore, Error> {
        let mut store = RedisStore {
            conn,
            url: String::from("(connection manager)"),
        };
        store.prepare().await?;
        Ok(store)
    }

    async fn prepare(&mut self) -> Result<(), Error> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.conn)
            .await
            .map_err(|source| Error::Connect {
                url: self.url.clone(),
                source,
            })?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_owned();
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major < 7 {
            return Err(Error::UnsupportedRedis { version });
        }
        SCRIPT.prepare_invoke().load_async(&mut self.conn).await?;
        Ok(())
    }

    /// Records this instance as alive in the set `key` and returns how many are.
    pub(crate) async fn heartbeat(&self, key: &str, id: &str, ttl: Duration) -> Result<u32, Error> {
        let mut conn = self.conn.clone();
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let n: u32 = HEARTBEAT
            .key(key)
            .arg(id)
            .arg(ttl_ms)
            .invoke_async(&mut conn)
            .await?;
        Ok(n)
    }

    /// The underlying connection, for commands of your own.
    pub fn connection(&self) -> &ConnectionManager {
        &self.conn
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Store for RedisStore {
    async fn check(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        let p = limit.params();
        let mut conn = self.conn.clone();
        let reply: Value = SCRIPT
            .key(key)
            .arg(p.interval)
            .arg(p.per_micro)
            .arg(p.tau)
            .arg(cost)
            .invoke_async(&mut conn)
            .await?;
        parse_reply(&reply, *limit, cost)
    }
}

fn parse_reply(reply: &Value, limit: Limit, cost: u32) -> Result<Decision, Error> {
    let bad = || Error::BadReply(format!("{reply:?}"));
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    let mut n = [0u64; 4];
    if items.len() != n.len() {
        return Err(bad());
    }
    for (slot, item) in n.iter_mut().zip(items) {
        match item {
            Value::Int(v) => *slot = u64::try_from(*v).map_err(|_| bad())?,
            _ => return Err(bad()),
        }
    }
    Ok(Decision::new(
        n[0] == 1,
        n[1],
        limit,
        cost,
        Duration::from_micros(n[2]),
        Duration::from_micros(n[3]),
    ))
}
