use std::fmt;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, Client, RedisError, Script, Value};

use crate::error::redact_url;
use crate::{Decision, Error, Limit, Store};

/// The decision script, hashed once per process.
static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/gcra.lua")));

/// The heartbeat script.
static HEARTBEAT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/heartbeat.lua")));

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Token buckets in Redis, shared by every process that uses the same server and prefix.
///
/// Each decision is one `EVALSHA` of one Lua script, timed by the Redis server's `TIME` (so
/// the callers' clocks never matter). A missing script (after a restart, a failover or
/// `SCRIPT FLUSH`) is loaded again and the call retried once. All calls share one multiplexed
/// connection per node, so concurrent calls are pipelined; it reconnects on its own.
///
/// The URL picks the deployment:
/// - `redis://host:port/db` (or `rediss://` for TLS): one server;
/// - `redis+cluster://host1:port1,host2:port2`: a Redis Cluster, from any of its nodes (every
///   bucket key is hash-tagged, so a script never spans slots);
/// - `redis+sentinel://sentinel1:26379,sentinel2:26379/mymaster`: the master that the Sentinels
///   name, followed across failovers.
///
/// Credentials go before the first host (`redis+cluster://:secret@h1:7000,h2:7001`) and apply
/// to the data nodes. Needs Redis 7.0 or newer.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    url: String,
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelConn>),
}

/// The master named by Sentinel, resolved again after a connection fails or the node answers
/// that it is a read-only replica (a failover happened).
struct SentinelConn {
    client: tokio::sync::Mutex<SentinelClient>,
    current: RwLock<Option<MultiplexedConnection>>,
}

impl SentinelConn {
    async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let mut client = self.client.lock().await;
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let conn = client.get_async_connection_with_config(&config).await?;
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(conn.clone());
        Ok(conn)
    }

    fn cached(&self) -> Option<MultiplexedConnection> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn observe(&self, e: &RedisError) {
        let failed_over = e.code() == Some("READONLY");
        if failed_over || e.is_unrecoverable_error() || e.is_connection_dropped() || e.is_io_error()
        {
            *self
                .current
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
    }
}

/// What a URL asks for.
enum Target {
    Single(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        user: Option<String>,
        password: Option<String>,
    },
}

fn parse_target(url: &str) -> Result<Target, String> {
    let split_hosts = |scheme: &str, rest: &str| -> Result<(Vec<String>, String), String> {
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (format!("{u}@"), h),
            None => (String::new(), authority),
        };
        let hosts: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| format!("{scheme}://{userinfo}{h}"))
            .collect();
        if hosts.is_empty() {
            return Err("no host given".to_owned());
        }
        Ok((hosts, path.to_owned()))
    };
    if let Some(rest) = url.strip_prefix("redis+cluster://") {
        return Ok(Target::Cluster(split_hosts("redis", rest)?.0));
    }
    if let Some(rest) = url.strip_prefix("rediss+cluster://") {
        return Ok(Target::Cluster(split_hosts("rediss", rest)?.0));
    }
    if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        // The credentials are the master's (the data node's), not the sentinels'.
        let (userinfo, hosts) = match rest
            .split_once('/')
            .map_or(rest, |(a, _)| a)
            .rsplit_once('@')
        {
            Some((u, _)) => (Some(u), &rest[u.len() + 1..]),
            None => (None, rest),
        };
        let (hosts, path) = split_hosts("redis", hosts)?;
        let master = path.split('/').next().unwrap_or("").to_owned();
        if master.is_empty() {
            return Err(
                "the master's name is missing: redis+sentinel://host:26379/<master>".to_owned(),
            );
        }
        let (user, password) = match userinfo.map(|u| u.split_once(':').unwrap_or((u, ""))) {
            Some((u, p)) => (
                Some(u.to_owned()).filter(|u| !u.is_empty()),
                Some(p.to_owned()).filter(|p| !p.is_empty()),
            ),
            None => (None, None),
        };
        return Ok(Target::Sentinel {
            sentinels: hosts,
            master,
            user,
            password,
        });
    }
    Ok(Target::Single(url.to_owned()))
}

impl RedisStore {
    /// Connects to the deployment at `url` (see the type's docs), checks the server version
    /// and loads the script.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`], [`Error::Connect`], [`Error::UnsupportedRedis`].
    pub async fn connect(url: &str) -> Result<RedisStore, Error> {
        let redacted = redact_url(url);
        let invalid = |source: RedisError| Error::InvalidUrl {
            url: redacted.clone(),
            source,
        };
        let unreachable = |source: RedisError| Error::Connect {
            url: redacted.clone(),
            source,
        };
        let target = parse_target(url).map_err(|why| {
            invalid(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "bad URL",
                why,
            )))
        })?;
        let conn = match target {
            Target::Single(url) => {
                let client = Client::open(url).map_err(invalid)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                Conn::Single(
                    ConnectionManager::new_with_config(client, config)
                        .await
                        .map_err(unreachable)?,
                )
            }
            Target::Cluster(nodes) => {
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(3)
                    .build()
                    .map_err(invalid)?;
                Conn::Cluster(client.get_async_connection().await.map_err(unreachable)?)
            }
            Target::Sentinel {
                sentinels,
                master,
                user,
                password,
            } => {
                let mut info = redis::RedisConnectionInfo::default();
                if let Some(user) = user {
                    info = info.set_username(user);
                }
                if let Some(password) = password {
                    info = info.set_password(password);
                }
                let node = redis::sentinel::SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(info);
                let client = SentinelClient::build(
                    sentinels,
                    master,
                    Some(node),
                    SentinelServerType::Master,
                )
                .map_err(invalid)?;
                let conn = Arc::new(SentinelConn {
                    client: tokio::sync::Mutex::new(client),
                    current: RwLock::new(None),
                });
                conn.connection().await.map_err(unreachable)?;
                Conn::Sentinel(conn)
            }
        };
        let store = RedisStore {
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
    /// [`Error::UnsupportedRedis`], or [`Error::Connect`] if the server cannot be asked.
    pub async fn from_connection(conn: ConnectionManager) -> Result<RedisStore, Error> {
        let store = RedisStore {
            conn: Conn::Single(conn),
            url: String::from("(connection manager)"),
        };
        store.prepare().await?;
        Ok(store)
    }

    async fn prepare(&self) -> Result<(), Error> {
        let info: Value = self
            .run(|mut c| async move { redis::cmd("INFO").arg("server").query_async(&mut c).await })
            .await
            .map_err(|source| Error::Connect {
                url: self.url.clone(),
                source,
            })?;
        let version = find_version(&info).unwrap_or_else(|| "unknown".to_owned());
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major < 7 {
            return Err(Error::UnsupportedRedis { version });
        }
        self.run(|mut c| async move { SCRIPT.prepare_invoke().load_async(&mut c).await })
            .await?;
        Ok(())
    }

    /// Runs `f` on a connection of the deployment (cheap clones of one multiplexed
    /// connection), noticing failovers.
    async fn run<T, F, Fut>(&self, f: F) -> Result<T, RedisError>
    where
        F: FnOnce(AnyConn) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        match &self.conn {
            Conn::Single(c) => f(AnyConn::Single(c.clone())).await,
            Conn::Cluster(c) => f(AnyConn::Cluster(c.clone())).await,
            Conn::Sentinel(s) => {
                let result = match s.connection().await {
                    Ok(c) => f(AnyConn::Multiplexed(c)).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = &result {
                    s.observe(e);
                }
                result
            }
        }
    }

    /// Records this instance as alive in the set `key` and returns how many are.
    pub(crate) async fn heartbeat(&self, key: &str, id: &str, ttl: Duration) -> Result<u32, Error> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let n: u32 = self
            .run(|mut c| async move {
                HEARTBEAT
                    .key(key)
                    .arg(id)
                    .arg(ttl_ms)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(n)
    }
}

/// A connection of any deployment kind, for one call.
enum AnyConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Multiplexed(MultiplexedConnection),
}

impl ConnectionLike for AnyConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            AnyConn::Single(c) => c.req_packed_command(cmd),
            AnyConn::Cluster(c) => c.req_packed_command(cmd),
            AnyConn::Multiplexed(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            AnyConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            AnyConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            AnyConn::Multiplexed(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            AnyConn::Single(c) => c.get_db(),
            AnyConn::Cluster(c) => c.get_db(),
            AnyConn::Multiplexed(c) => c.get_db(),
        }
    }
}

/// The server version in an `INFO server` reply (a cluster answers per node).
fn find_version(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => find_version_in(&String::from_utf8_lossy(b)),
        Value::VerbatimString { text, .. } => find_version_in(text),
        Value::SimpleString(s) => find_version_in(s),
        Value::Array(items) | Value::Set(items) => items.iter().find_map(find_version),
        Value::Map(pairs) => pairs.iter().find_map(|(_, v)| find_version(v)),
        _ => None,
    }
}

fn find_version_in(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(|v| v.trim().to_owned())
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.conn {
            Conn::Single(_) => "single",
            Conn::Cluster(_) => "cluster",
            Conn::Sentinel(_) => "sentinel",
        };
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

impl Store for RedisStore {
    async fn check(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        let p = limit.params();
        let reply: Value = self
            .run(|mut c| async move {
                SCRIPT
                    .key(key)
                    .arg(p.interval)
                    .arg(p.per_micro)
                    .arg(p.tau)
                    .arg(cost)
                    .invoke_async(&mut c)
                    .await
            })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_the_deployment() {
        assert!(
            matches!(parse_target("redis://h:1/2"), Ok(Target::Single(u)) if u == "redis://h:1/2")
        );
        match parse_target("redis+cluster://:pw@a:1,b:2").unwrap() {
            Target::Cluster(n) => assert_eq!(n, ["redis://:pw@a:1", "redis://:pw@b:2"]),
            _ => panic!("cluster"),
        }
        match parse_target("redis+sentinel://u:pw@a:26379,b:26379/mymaster").unwrap() {
            Target::Sentinel {
                sentinels,
                master,
                user,
                password,
            } => {
                assert_eq!(sentinels, ["redis://a:26379", "redis://b:26379"]);
                assert_eq!(master, "mymaster");
                assert_eq!(
                    (user.as_deref(), password.as_deref()),
                    (Some("u"), Some("pw"))
                );
            }
            _ => panic!("sentinel"),
        }
        assert!(parse_target("redis+sentinel://a:26379").is_err());
        assert!(parse_target("redis+cluster://").is_err());
    }
}
