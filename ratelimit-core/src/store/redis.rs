use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, RedisError, Script, Value};

use crate::algorithm::{Kernel, fixed_window, interval_bucket, sliding_log, sliding_window};
use crate::error::redact_url;
use crate::{Decision, Error, Limit, Store};

/// The token bucket's script (GCRA, smooth refill).
const GCRA_LUA: &str = crate::bucket::SCRIPT;

/// The heartbeat script's text.
const HEARTBEAT_LUA: &str = include_str!("../scripts/heartbeat.lua");

/// The decision scripts, each hashed once per process.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(GCRA_LUA));
static INTERVAL: LazyLock<Script> = LazyLock::new(|| Script::new(interval_bucket::SCRIPT));
static FIXED: LazyLock<Script> = LazyLock::new(|| Script::new(fixed_window::SCRIPT));
static SLIDING: LazyLock<Script> = LazyLock::new(|| Script::new(sliding_window::SCRIPT));
static LOG: LazyLock<Script> = LazyLock::new(|| Script::new(sliding_log::SCRIPT));

/// Several limits of one call (`multi.lua` with every algorithm).
static MULTI: LazyLock<Script> = LazyLock::new(|| Script::new(crate::algorithm::MULTI_SCRIPT));

/// The heartbeat script.
static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| Script::new(HEARTBEAT_LUA));

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Token buckets in Redis, shared by every process that uses the same server and prefix.
///
/// Each decision is one `EVALSHA` of one Lua script, timed by the Redis server's `TIME` (so
/// the callers' clocks never matter). A missing script (after a restart, a failover or
/// `SCRIPT FLUSH`) costs one more round trip: the call is retried once with `EVAL` and the
/// script's text, which cannot miss (a `SCRIPT LOAD` then `EVALSHA` retry can, when the
/// script is flushed again in between) and caches the script again. All calls share one
/// multiplexed connection per node, so concurrent calls are pipelined; it reconnects on its
/// own.
///
/// The URL picks the deployment:
/// - `redis://host:port/db` (or `rediss://` for TLS, with the `tls` feature): one server;
/// - `redis+cluster://host1:port1,host2:port2`: a Redis Cluster, from any of its nodes (every
///   bucket key is hash-tagged, so a script never spans slots);
/// - `redis+sentinel://sentinel1:26379,sentinel2:26379/mymaster`: the master that the Sentinels
///   name, followed across failovers: after a connection error or a `READONLY` reply, and
///   within about a second of the Sentinels naming another master even while the old one
///   still accepts writes.
///
/// Credentials go before the first host (`redis+cluster://:secret@h1:7000,h2:7001`) and apply
/// to the data nodes. Needs Redis 7.0 or newer.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    url: String,
    /// Where to open the connection that listens for resets (pub/sub needs its own).
    listen: Listen,
    /// Which deployment and database this is (its servers' run ids and the db), so that
    /// limiters of one process on one deployment share one heartbeat and one listener.
    deployment: Arc<str>,
}

/// How to reach a node for a pub/sub connection.
#[derive(Clone)]
enum Listen {
    /// Any of these (one server, or the seed nodes of a cluster, where `PUBLISH` reaches
    /// every node).
    Nodes(Arc<[Client]>),
    /// The master the sentinels name.
    Sentinel,
    /// A store made from a connection manager: no client to open another connection with.
    Nowhere,
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelConn>),
}

/// The master named by Sentinel, resolved again after a connection fails, after the node
/// answers that it is a read-only replica, and as soon as the sentinels name another master.
///
/// The last matters: after a failover that keeps the old master running (`SENTINEL FAILOVER`,
/// a partition), the old master stays a writable master for seconds (about ten with the
/// default settings) until the sentinels demote it. A client that only follows connection
/// errors keeps writing its buckets there while other instances use the new master, so each
/// side admits the full limit. So at most once per [`SENTINEL_CHECK_EVERY`], a call also asks
/// a sentinel, in the background, which master it names, and drops the connection when that
/// is not the one in use.
struct SentinelConn {
    client: tokio::sync::Mutex<SentinelClient>,
    master_name: String,
    current: RwLock<Option<Current>>,
    /// A connection to one of the sentinels, for the background check.
    sentinel: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    origin: Instant,
    /// Milliseconds since `origin` of the last check (or connection).
    checked_at: AtomicU64,
    checking: AtomicBool,
}

/// The connection in use and the address of the master it goes to.
#[derive(Clone)]
struct Current {
    conn: MultiplexedConnection,
    addr: ConnectionAddr,
}

/// How often the sentinels are asked whether the master in use is still theirs.
const SENTINEL_CHECK_EVERY: Duration = Duration::from_secs(1);

impl SentinelConn {
    fn new(client: SentinelClient, master_name: String) -> SentinelConn {
        SentinelConn {
            client: tokio::sync::Mutex::new(client),
            master_name,
            current: RwLock::new(None),
            sentinel: tokio::sync::Mutex::new(None),
            origin: Instant::now(),
            checked_at: AtomicU64::new(0),
            checking: AtomicBool::new(false),
        }
    }

    fn config() -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
        if let Some(c) = self.cached() {
            return Ok(c.conn);
        }
        let mut client = self.client.lock().await;
        if let Some(c) = self.cached() {
            return Ok(c.conn);
        }
        let master = client.async_get_client().await?;
        let addr = master.get_connection_info().addr().clone();
        let conn = master
            .get_multiplexed_async_connection_with_config(&Self::config())
            .await?;
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Current {
            conn: conn.clone(),
            addr,
        });
        self.checked_at.store(self.now_ms(), Ordering::Relaxed);
        Ok(conn)
    }

    fn cached(&self) -> Option<Current> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn forget(&self) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    fn observe(&self, e: &RedisError) {
        let failed_over = e.code() == Some("READONLY");
        if failed_over || e.is_unrecoverable_error() || e.is_connection_dropped() || e.is_io_error()
        {
            self.forget();
        }
    }

    /// Starts a background check of the master in use if none ran for
    /// [`SENTINEL_CHECK_EVERY`]. Never waits, never fails.
    fn check_soon(self: &Arc<Self>) {
        let every = u64::try_from(SENTINEL_CHECK_EVERY.as_millis()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        if now
            < self
                .checked_at
                .load(Ordering::Relaxed)
                .saturating_add(every)
            || self.checking.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.checking.store(false, Ordering::Release);
            return;
        };
        let this = Arc::clone(self);
        runtime.spawn(async move {
            let checked = tokio::time::timeout(CONNECT_TIMEOUT, this.check()).await;
            if let Ok(Err(e)) | Err(e) = checked.map_err(|_| "timed out".to_owned()) {
                tracing::debug!(%e, "could not ask the sentinels for the master");
            }
            this.checked_at.store(this.now_ms(), Ordering::Relaxed);
            this.checking.store(false, Ordering::Release);
        });
    }

    /// Asks a sentinel which master it names; drops the connection in use if it goes elsewhere
    /// (the next call resolves the master again, checking its role).
    async fn check(&self) -> Result<(), String> {
        let Some(current) = self.cached() else {
            return Ok(());
        };
        let mut sentinel = self.sentinel.lock().await;
        let mut conn = match sentinel.as_ref() {
            Some(c) => c.clone(),
            None => {
                let client = self
                    .client
                    .lock()
                    .await
                    .async_get_sentinel_client()
                    .await
                    .map_err(|e| e.to_string())?;
                let c = client
                    .get_multiplexed_async_connection_with_config(&Self::config())
                    .await
                    .map_err(|e| e.to_string())?;
                *sentinel = Some(c.clone());
                c
            }
        };
        let named: Result<Option<(String, u16)>, RedisError> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query_async(&mut conn)
            .await;
        let named = match named {
            Ok(n) => n,
            Err(e) => {
                *sentinel = None;
                return Err(e.to_string());
            }
        };
        let Some((host, port)) = named else {
            return Err(format!(
                "the sentinel knows no master `{}`",
                self.master_name
            ));
        };
        let in_use = match &current.addr {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => (h.as_str(), *p),
            _ => return Ok(()),
        };
        if in_use != (host.as_str(), port) {
            tracing::info!(
                from = %current.addr,
                to = %format_args!("{host}:{port}"),
                "the sentinels name another master; switching"
            );
            // Only if nobody has switched meanwhile.
            let mut slot = self
                .current
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if slot.as_ref().is_some_and(|c| c.addr == current.addr) {
                *slot = None;
            }
        }
        Ok(())
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
    if !cfg!(feature = "tls") && url.starts_with("rediss") {
        return Err(
            "`rediss://` connects with TLS, which needs the `tls` feature of \
                    redis-ratelimit (`features = [\"tls\"]`)"
                .to_owned(),
        );
    }
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
        let (conn, listen) = match target {
            Target::Single(url) => {
                let client = Client::open(url).map_err(invalid)?;
                let listen = Listen::Nodes(Arc::new([client.clone()]));
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let conn = ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(unreachable)?;
                (Conn::Single(conn), listen)
            }
            Target::Cluster(nodes) => {
                let clients: Vec<Client> = nodes
                    .iter()
                    .map(|n| Client::open(n.as_str()))
                    .collect::<Result<_, _>>()
                    .map_err(invalid)?;
                let listen = Listen::Nodes(clients.into());
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(3)
                    .build()
                    .map_err(invalid)?;
                let conn = client.get_async_connection().await.map_err(unreachable)?;
                (Conn::Cluster(conn), listen)
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
                    master.clone(),
                    Some(node),
                    SentinelServerType::Master,
                )
                .map_err(invalid)?;
                let conn = Arc::new(SentinelConn::new(client, master));
                conn.connection().await.map_err(unreachable)?;
                (Conn::Sentinel(conn), Listen::Sentinel)
            }
        };
        RedisStore::prepare(conn, redacted, listen).await
    }

    /// Uses an existing connection manager (its configuration, TLS, credentials); checks the
    /// server's version and loads the script. A limiter on such a store keeps no deny cache:
    /// without a client it cannot open the connection that hears of other instances' resets.
    ///
    /// # Errors
    /// [`Error::UnsupportedRedis`], or [`Error::Connect`] if the server cannot be asked.
    pub async fn from_connection(conn: ConnectionManager) -> Result<RedisStore, Error> {
        RedisStore::prepare(
            Conn::Single(conn),
            String::from("(connection manager)"),
            Listen::Nowhere,
        )
        .await
    }

    async fn prepare(conn: Conn, url: String, listen: Listen) -> Result<RedisStore, Error> {
        let mut store = RedisStore {
            conn,
            url,
            listen,
            deployment: Arc::from(""),
        };
        let (info, db): (Value, i64) = store
            .run(|mut c| async move {
                let info = redis::cmd("INFO").arg("server").query_async(&mut c).await?;
                Ok((info, c.get_db()))
            })
            .await
            .map_err(|source| Error::Connect {
                url: store.url.clone(),
                source,
            })?;
        let mut run_ids = info_fields(&info, "run_id:");
        run_ids.sort_unstable();
        store.deployment = format!("{}/{db}", run_ids.join(",")).into();
        let version = info_fields(&info, "redis_version:")
            .into_iter()
            .next()
            .unwrap_or_else(|| "unknown".to_owned());
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major < 7 {
            return Err(Error::UnsupportedRedis { version });
        }
        store
            .run(|mut c| async move { SCRIPT.prepare_invoke().load_async(&mut c).await })
            .await?;
        Ok(store)
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
                    Ok(c) => {
                        s.check_soon();
                        f(AnyConn::Multiplexed(c)).await
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = &result {
                    s.observe(e);
                }
                result
            }
        }
    }

    /// Whether this is a Redis Cluster deployment.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// Which deployment (servers and database) this store uses; equal for stores that share
    /// their buckets.
    pub(crate) fn deployment(&self) -> &str {
        &self.deployment
    }

    /// Whether [`listen`](RedisStore::listen) can work: not on a store made from a
    /// connection manager, which has no client to open another connection with.
    pub(crate) fn can_listen(&self) -> bool {
        !matches!(self.listen, Listen::Nowhere)
    }

    /// Tells every instance listening on `channel` (see [`listen`](RedisStore::listen)).
    pub(crate) async fn publish(&self, channel: &str, message: &str) -> Result<(), Error> {
        self.run(|mut c| async move {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query_async::<()>(&mut c)
                .await
        })
        .await?;
        Ok(())
    }

    /// A new connection subscribed to `channel`, and the messages it receives; they end when
    /// the connection is lost. Plain `PUBLISH`/`SUBSCRIBE`, not the sharded kind: a Redis
    /// Cluster forwards plain messages to every node, so any node will do, and the messages
    /// are rare (one per reset).
    pub(crate) async fn listen(
        &self,
        channel: &str,
    ) -> Result<redis::aio::PubSubStream, RedisError> {
        let clients: Vec<Client> = match &self.listen {
            Listen::Nodes(clients) => clients.to_vec(),
            Listen::Sentinel => match &self.conn {
                Conn::Sentinel(s) => vec![s.client.lock().await.async_get_client().await?],
                _ => Vec::new(),
            },
            Listen::Nowhere => Vec::new(),
        };
        let mut last = RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "a store made from a connection manager cannot open a pub/sub connection",
        ));
        for client in clients {
            let subscribed = async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(channel).await?;
                Ok::<_, RedisError>(pubsub.into_on_message())
            };
            match subscribed.await {
                Ok(messages) => return Ok(messages),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

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

    /// Runs `script` (whose text is `text`) on `key`, with the arguments `args` adds: `EVALSHA`,
    /// and on `NOSCRIPT` (a restart, a failover, `SCRIPT FLUSH`) `EVAL` with the text, on the
    /// same node. `EVAL` cannot miss, so no flush between a reload and a retry can fail the
    /// call, and it caches the script again for the next `EVALSHA`. In a cluster it goes to the
    /// key's node only, whereas `SCRIPT LOAD` goes to every master and fails while any of them
    /// is down.
    async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        text: &'static str,
        keys: &[&str],
        args: impl Fn(&mut redis::Cmd),
    ) -> Result<T, RedisError> {
        self.run(|mut c| async move {
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha.arg(script.get_hash()).arg(keys.len()).arg(keys);
            args(&mut evalsha);
            match evalsha.query_async(&mut c).await {
                Err(e) if e.code() == Some("NOSCRIPT") => {
                    let mut eval = redis::cmd("EVAL");
                    eval.arg(text).arg(keys.len()).arg(keys);
                    args(&mut eval);
                    eval.query_async(&mut c).await
                }
                other => other,
            }
        })
        .await
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

/// The values of the `field` lines (`redis_version:`) in an `INFO server` reply, one per node
/// (a cluster answers per node).
fn info_fields(v: &Value, field: &str) -> Vec<String> {
    let in_text = |info: &str| -> Vec<String> {
        info.lines()
            .filter_map(|l| l.strip_prefix(field))
            .map(|v| v.trim().to_owned())
            .collect()
    };
    match v {
        Value::BulkString(b) => in_text(&String::from_utf8_lossy(b)),
        Value::VerbatimString { text, .. } => in_text(text),
        Value::SimpleString(s) => in_text(s),
        Value::Array(items) | Value::Set(items) => {
            items.iter().flat_map(|v| info_fields(v, field)).collect()
        }
        Value::Map(pairs) => pairs
            .iter()
            .flat_map(|(_, v)| info_fields(v, field))
            .collect(),
        _ => Vec::new(),
    }
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
    async fn reset(&self, key: &str) -> Result<(), Error> {
        self.run(|mut c| async move { redis::cmd("DEL").arg(key).query_async::<()>(&mut c).await })
            .await?;
        Ok(())
    }

    async fn check_all(&self, checks: &[(&str, &Limit, u32)]) -> Result<Vec<Decision>, Error> {
        match checks {
            [(key, limit, cost)] => Ok(vec![self.check(key, limit, *cost).await?]),
            _ => self.check_several(checks).await,
        }
    }

    async fn check(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        // Each script's text and arguments; every script answers in the same shape.
        let (id, args) = Kernel::of(limit).script_args(u64::from(cost));
        let (script, text): (&Script, &'static str) = match id {
            1 => (&SCRIPT, GCRA_LUA),
            2 => (&INTERVAL, interval_bucket::SCRIPT),
            3 => (&FIXED, fixed_window::SCRIPT),
            4 => (&SLIDING, sliding_window::SCRIPT),
            _ => (&LOG, sliding_log::SCRIPT),
        };
        let reply: Value = self
            .eval(script, text, &[key], |cmd| {
                for a in args.as_slice() {
                    cmd.arg(*a);
                }
            })
            .await?;
        parse_reply(&reply, *limit, cost)
    }
}

/// What `multi.lua` answers for one group of limits: each limit's four numbers, and in
/// reserve mode each key as it was before and after (for `give_back.lua`).
#[derive(Debug, Default)]
struct GroupReply {
    numbers: Vec<[u64; 4]>,
    /// The server time the script ran at (us).
    now: u64,
    /// In reserve mode, each limit's remaining and reset_after before the call.
    as_was: Vec<[u64; 2]>,
}

impl RedisStore {
    /// [`Store::check_all`]: one script, `multi.lua`, for every limit of the call. On a
    /// cluster whose node does not serve every bucket, the buckets are decided per slot in
    /// slot order, each group reserved, and what was reserved is given back when a later
    /// group refuses (see the guide's "Several limits").
    async fn check_several(&self, checks: &[(&str, &Limit, u32)]) -> Result<Vec<Decision>, Error> {
        let numbers = match self.run_group(checks, Mode::Decide).await {
            Ok(group) => group.numbers,
            Err(e) if self.is_cluster() && is_non_local(&e) => {
                self.check_across_nodes(checks).await?
            }
            Err(e) => return Err(e),
        };
        Ok(decisions(&numbers, checks))
    }

    /// Reserves slot by slot, in slot order; gives back on the first refusal, and asks the
    /// rest without taking, so that every limit still answers.
    async fn check_across_nodes(
        &self,
        checks: &[(&str, &Limit, u32)],
    ) -> Result<Vec<[u64; 4]>, Error> {
        let mut order: Vec<usize> = (0..checks.len()).collect();
        order.sort_by_key(|&i| (crate::naming::key_slot(checks[i].0.as_bytes()), i));
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for i in order {
            let slot = crate::naming::key_slot(checks[i].0.as_bytes());
            match groups.last_mut() {
                Some(g) if crate::naming::key_slot(checks[g[0]].0.as_bytes()) == slot => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        let mut numbers = vec![[0u64; 4]; checks.len()];
        let mut reserved: Vec<(Vec<usize>, GroupReply)> = Vec::new();
        let mut refused = false;
        for group in groups {
            let part: Vec<(&str, &Limit, u32)> = group.iter().map(|&i| checks[i]).collect();
            let reply = self
                .run_group(&part, if refused { Mode::Veto } else { Mode::Reserve })
                .await;
            let reply = match reply {
                Ok(r) => r,
                Err(e) => {
                    self.give_back(checks, &reserved).await;
                    return Err(e);
                }
            };
            for (&i, n) in group.iter().zip(&reply.numbers) {
                numbers[i] = *n;
            }
            if reply.numbers.iter().any(|n| n[0] == 0) {
                refused = true;
                self.give_back(checks, &reserved).await;
                // Given back, the reserved limits answer as they stood before the call.
                for (group, reply) in reserved.drain(..) {
                    for (&i, as_was) in group.iter().zip(&reply.as_was) {
                        numbers[i][1] = as_was[0];
                        numbers[i][3] = as_was[1];
                    }
                }
            } else if !refused {
                reserved.push((group, reply));
            }
        }
        Ok(numbers)
    }

    /// Gives back what `reserved` took: each group's tokens returned to its buckets as they
    /// are now (best effort: a failure leaves the tokens taken, so the buckets are emptier,
    /// never fuller, and is logged).
    async fn give_back(
        &self,
        checks: &[(&str, &Limit, u32)],
        reserved: &[(Vec<usize>, GroupReply)],
    ) {
        for (group, reply) in reserved {
            let part: Vec<(&str, &Limit, u32)> = group.iter().map(|&i| checks[i]).collect();
            if let Err(e) = self.run_group(&part, Mode::GiveBack(reply.now)).await {
                tracing::warn!(error = %e, "redis-ratelimit could not give back the tokens a refused call reserved");
            }
        }
    }

    /// One `multi.lua` call for limits whose keys one node serves.
    async fn run_group(
        &self,
        checks: &[(&str, &Limit, u32)],
        mode: Mode,
    ) -> Result<GroupReply, Error> {
        let keys: Vec<&str> = checks.iter().map(|c| c.0).collect();
        let mut argv: Vec<u64> = Vec::with_capacity(checks.len() * 7 + 1);
        for (_, limit, cost) in checks {
            let (id, args) = Kernel::of(limit).script_args(u64::from(*cost));
            argv.push(u64::from(id));
            argv.push(args.as_slice().len() as u64);
            argv.extend_from_slice(args.as_slice());
        }
        let code = match mode {
            Mode::Decide => 0,
            Mode::Reserve => 1,
            Mode::Veto => 2,
            Mode::GiveBack(reserved_at) => {
                argv.push(reserved_at);
                3
            }
        };
        let reply: Value = self
            .eval(&MULTI, crate::algorithm::MULTI_SCRIPT, &keys[..1], |cmd| {
                cmd.arg(keys.len()).arg(code).arg(&keys).arg(&argv);
            })
            .await?;
        match mode {
            Mode::GiveBack(_) => Ok(GroupReply::default()),
            _ => parse_group(&reply, checks.len()),
        }
    }
}

/// What one `multi.lua` call does (see the script).
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Decide every limit; take from all or none.
    Decide,
    /// Decide, and say what each limit answered before the call, for a give-back.
    Reserve,
    /// Another node refused the call: answer, take nothing.
    Veto,
    /// Return what a reservation made at this server time (us) took.
    GiveBack(u64),
}

/// Whether a cluster node refused a script for a key it does not serve.
fn is_non_local(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.to_string().contains("non local key"))
}

/// `multi.lua`'s reply: four numbers per limit, the server time, and in reserve mode two
/// more per limit.
fn parse_group(reply: &Value, n: usize) -> Result<GroupReply, Error> {
    let bad = || Error::BadReply(format!("{reply:?}"));
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    if items.len() != n * 4 + 1 && items.len() != n * 6 + 1 {
        return Err(bad());
    }
    let numbers: Vec<u64> = items
        .iter()
        .map(|v| match v {
            Value::Int(v) => u64::try_from(*v).map_err(|_| bad()),
            _ => Err(bad()),
        })
        .collect::<Result<_, _>>()?;
    let (decided, rest) = numbers.split_at(n * 4);
    Ok(GroupReply {
        numbers: decided
            .chunks(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
        now: rest[0],
        as_was: rest[1..].chunks(2).map(|c| [c[0], c[1]]).collect(),
    })
}

/// Each limit's decision from its four numbers (a limit that would have admitted a refused
/// call answers as it stands: it kept its tokens).
fn decisions(numbers: &[[u64; 4]], checks: &[(&str, &Limit, u32)]) -> Vec<Decision> {
    numbers
        .iter()
        .zip(checks)
        .map(|(n, &(_, limit, cost))| {
            Decision::new(
                n[0] == 1,
                n[1],
                *limit,
                cost,
                Duration::from_micros(n[2]),
                Duration::from_micros(n[3]),
            )
        })
        .collect()
}

fn parse_reply(reply: &Value, limit: Limit, cost: u32) -> Result<Decision, Error> {
    let bad = || Error::BadReply(format!("{reply:?}"));
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    // Every script answers four numbers and the server time it decided at (for the
    // differential tests), which a decision does not need.
    let mut n = [0u64; 4];
    if items.len() != 5 {
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
