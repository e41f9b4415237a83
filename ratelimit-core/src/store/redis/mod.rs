//! The Redis store: the connection to each kind of deployment (here and in `sentinel`),
//! the URL that names it (`url`), the heartbeat (`heartbeat`) and the decision scripts
//! (`scripts`, told about each call by `spec`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{Client, RedisError, Value};

use super::Store;
use crate::algorithm::library::{Library, Lua};
use crate::decision::Decision;
use crate::errors::Error;
use crate::errors::redact_url;
use crate::limit::Limit;
use crate::pipeline::check::{self, Check};

pub(crate) mod client;
mod coalesce;
pub(crate) mod cross_slot;
mod decide;
mod heartbeat;
mod scripts;
mod sentinel;
mod spec;
pub(crate) mod url;

use self::client::ClusterConnection;
use self::sentinel::SentinelConn;
use self::url::{Target, parse_target, url_complaint};

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
/// own. Under load, concurrent calls bound for one node are coalesced: up to
/// [`batch_limit`](RedisStore::batch_limit) of them go as one script call that decides each
/// exactly as if it were alone (a lone call still goes at once, as its own `EVALSHA`).
///
/// The URL picks the deployment:
/// - `redis://host:port/db` (or `rediss://` for TLS, with the `tls` feature): one server;
/// - `redis+cluster://host1:port1,host2:port2`: a Redis Cluster, from any of its nodes (every
///   bucket key is hash-tagged, so a one-limit script never spans slots; a call under several
///   limits is one script per node, or reserved and given back across nodes);
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
    /// On a cluster, which master serves each slot, as the lowest slot that master serves
    /// (read by `CLUSTER SLOTS` when a call first spans masters, forgotten when a script
    /// meets a key its node no longer serves).
    masters: Arc<std::sync::RwLock<Option<Arc<[u16]>>>>,
    /// Whether a task is reading the slots' masters for `node_of`.
    reading_masters: Arc<std::sync::atomic::AtomicBool>,
    /// Each node's queue of calls and script calls in flight (see `coalesce`).
    lanes: Arc<coalesce::Lanes>,
    /// The most calls one script call decides; 1 sends every call alone.
    batch_limit: usize,
    batch_after: usize,
    /// Whether calls run by `FCALL` of this version's function library (chosen at `connect`:
    /// whenever the server lets this client load and call it), or by `EVALSHA`. Shared by
    /// the clones, and turned off for good when a node refuses `FCALL` later (an ACL that
    /// changed, a failover to a node with other ACLs).
    functions: Arc<std::sync::atomic::AtomicBool>,
    /// Whether a task is loading the library again (see `scripts::RedisStore::eval`).
    loading_library: Arc<std::sync::atomic::AtomicBool>,
    /// Whether the scripts the Redis module decides run as its commands (chosen at
    /// `connect`: where the server has this version's module and lets this client call it).
    /// Turned off for good, in every clone, when a node answers that it has no such command
    /// (a restart without the module, a failover to a node without it) or refuses it: that
    /// call, and every later one, runs by `FCALL` or `EVALSHA` instead.
    native: Arc<std::sync::atomic::AtomicBool>,
}

/// How a Redis store's decisions run on the server ([`RedisStore::path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RedisPath {
    /// As commands of the Redis module (`module/`, `ratelimit.v1.*`), where the module has
    /// them; the other scripts by `FCALL`, or `EVALSHA` where functions are refused.
    Module,
    /// By `FCALL` of this version's function library.
    Functions,
    /// By `EVALSHA` of each script.
    Scripts,
}

impl fmt::Display for RedisPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RedisPath::Module => "module",
            RedisPath::Functions => "functions",
            RedisPath::Scripts => "scripts",
        })
    }
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

impl RedisStore {
    /// Connects to the deployment at `url` (see the type's docs), checks the server version
    /// and loads the script.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`], [`Error::Connect`], [`Error::UnsupportedRedis`],
    /// [`Error::ScriptLoad`].
    pub async fn connect(url: &str) -> Result<RedisStore, Error> {
        let redacted = redact_url(url);
        let invalid = |source: RedisError| Error::InvalidUrl {
            reason: url_complaint(&source),
        };
        let unreachable = |source: RedisError| Error::Connect {
            url: redacted.clone(),
            source,
        };
        let target = parse_target(url).map_err(|reason| Error::InvalidUrl { reason })?;
        let (conn, listen) = match target {
            Target::Single(url) => {
                let client = client::client(url).map_err(invalid)?;
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
                    .map(|n| client::client(n.as_str()))
                    .collect::<Result<_, _>>()
                    .map_err(invalid)?;
                let listen = Listen::Nodes(clients.into());
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(3)
                    .build()
                    .map_err(invalid)?;
                let conn = client::cluster_connection(&client)
                    .await
                    .map_err(unreachable)?;
                (Conn::Cluster(conn), listen)
            }
            Target::Sentinel {
                sentinels,
                master,
                user,
                password,
            } => {
                let mut info = client::settings(redis::RedisConnectionInfo::default());
                if let Some(user) = user {
                    info = info.set_username(user);
                }
                if let Some(password) = password {
                    info = info.set_password(password);
                }
                let node = redis::sentinel::SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(info);
                let sentinels: Vec<redis::ConnectionInfo> = sentinels
                    .iter()
                    .map(|s| client::connection_info(s.as_str()))
                    .collect::<Result<_, _>>()
                    .map_err(invalid)?;
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
            masters: Arc::default(),
            reading_masters: Arc::default(),
            lanes: Arc::default(),
            batch_limit: coalesce::DEFAULT_BATCH_LIMIT,
            batch_after: coalesce::DEFAULT_BATCH_AFTER,
            functions: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            loading_library: Arc::default(),
            native: Arc::default(),
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
        // Functions wherever the server lets this client load and call them; scripts
        // otherwise, for the store's life (a server that refuses them now would refuse a
        // reload later).
        match store
            .run(|mut c| async move {
                scripts::load_library(&mut c).await?;
                scripts::call_library(&mut c).await
            })
            .await
        {
            Ok(()) => store
                .functions
                .store(true, std::sync::atomic::Ordering::Relaxed),
            Err(e) if scripts::functions_unavailable(&e) => {
                crate::observe::log!(info,
                    url = %store.url,
                    reason = %e,
                    "Redis refuses FUNCTION LOAD or FCALL: deciding by EVALSHA of each script"
                );
                store
                    .run(|mut c| async move {
                        redis::cmd("SCRIPT")
                            .arg("LOAD")
                            .arg(Lua::Alone(crate::algorithm::StateKind::TokenBucket).text())
                            .query_async::<Value>(&mut c)
                            .await
                    })
                    .await
                    .map_err(|e| store.not_loaded(e))?;
            }
            Err(e) => return Err(store.not_loaded(e)),
        }
        // The module's commands where the server has this version's and lets this client
        // call them; a server without them is no error.
        match store
            .run(|mut c| async move { scripts::probe_module(&mut c).await })
            .await
        {
            Ok(true) => store
                .native
                .store(true, std::sync::atomic::Ordering::Relaxed),
            Ok(false) => {}
            Err(e) => return Err(store.not_loaded(e)),
        }
        Ok(store)
    }

    /// How this store's decisions run on the server now: as the Redis module's commands, by
    /// `FCALL`, or by `EVALSHA` (chosen when it connected, and changed for good when a node
    /// refuses the module's commands or `FCALL`).
    #[must_use]
    pub fn path(&self) -> RedisPath {
        use std::sync::atomic::Ordering::Relaxed;
        if self.native.load(Relaxed) {
            RedisPath::Module
        } else if self.functions.load(Relaxed) {
            RedisPath::Functions
        } else {
            RedisPath::Scripts
        }
    }

    /// What a failure to load the library (or the script) at `build()` says: the connection
    /// lost, or Redis's answer (a replica, out of memory, an ACL).
    fn not_loaded(&self, source: RedisError) -> Error {
        let url = self.url.to_string();
        if crate::errors::never_answered(&source) {
            Error::Connect { url, source }
        } else {
            Error::ScriptLoad { url, source }
        }
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

    /// Bounds how many concurrent calls one script call decides (64 unless told; 1 sends
    /// every call on its own, one `EVALSHA` per decision).
    ///
    /// While a node has 16 script calls in flight ([`batch_after`](RedisStore::batch_after)),
    /// the calls that arrive for it gather, and
    /// leave together, up to this many, as one script call that decides each of them exactly
    /// as if it were alone (group commit). A lone caller, or any call that finds the node
    /// idle, is sent at once and waits no longer than without batching. Under load this
    /// saves Redis each call's command and script setup, and the client a reply per call
    /// (benches/results/history.md, section 3, measures it).
    ///
    /// Each call keeps its own deadline and failure policy: a call whose caller gave up before
    /// its batch left is not sent, an error deciding one call does not fail the others, and a
    /// lost connection fails each call of the batch it was carrying.
    ///
    /// ```
    /// # async fn f() -> Result<(), ratelimit_core::Error> {
    /// use ratelimit_core::{RateLimiter, store::RedisStore};
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?.batch_limit(16);
    /// let limiter = RateLimiter::builder().redis_store(store).build().await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    #[must_use]
    pub fn batch_limit(mut self, calls: usize) -> RedisStore {
        self.batch_limit = calls.max(1);
        self
    }

    /// How many script calls (or native commands) of one node may be in flight, each sent on
    /// its own, before the calls that arrive for it gather into batches (16 unless told; at
    /// least 1). See [`batch_limit`](RedisStore::batch_limit) for what a batch is.
    ///
    /// Below it, a call is sent at once and waits no longer than without batching; from it
    /// on, calls wait for one in flight to return, then leave together. A lower figure sends
    /// Redis fewer commands and wakes it less often under load (Redis's CPU per decision
    /// falls), at the price of that wait for calls beyond the figure: worth it where many
    /// calls are always in flight and Redis's CPU is what is short, as in the rate-limit
    /// service for Envoy, which sets 1 (docs/benchmarks.md, issue 46 under load). With 16,
    /// 16 concurrent calls were as fast as sent one by one; with 2 or 8 they were slower
    /// (benches/results/history.md 3.6).
    ///
    /// ```
    /// # async fn f() -> Result<(), ratelimit_core::Error> {
    /// use ratelimit_core::{RateLimiter, store::RedisStore};
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?.batch_after(4);
    /// let limiter = RateLimiter::builder().redis_store(store).build().await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    #[must_use]
    pub fn batch_after(mut self, in_flight: usize) -> RedisStore {
        self.batch_after = in_flight.max(1);
        self
    }

    /// The node that serves `key`, as coalescing names nodes: 0 outside a cluster; on one,
    /// the lowest slot of the key's master, or while the masters are not known (they are
    /// then read in the background) the key's slot plus 2^16.
    pub(crate) fn node_of(&self, key: &str) -> u32 {
        if !self.is_cluster() {
            return 0;
        }
        let slot = crate::naming::key_slot(key.as_bytes());
        let known = self
            .masters
            .read()
            .ok()
            .and_then(|m| m.as_ref().and_then(|m| m.get(usize::from(slot)).copied()));
        if let Some(master) = known {
            return u32::from(master);
        }
        if !self
            .reading_masters
            .swap(true, std::sync::atomic::Ordering::AcqRel)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let store = self.clone();
            runtime.spawn(async move {
                if store.slot_masters().await.is_none() {
                    // Unreadable: not again for a second (calls go by slot meanwhile).
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                store
                    .reading_masters
                    .store(false, std::sync::atomic::Ordering::Release);
            });
        }
        0x1_0000 | u32::from(slot)
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
}

/// A connection of any deployment kind, for one call.
enum AnyConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Multiplexed(MultiplexedConnection),
}

impl AnyConn {
    /// Sends `cmd`, which names no key, to a master: on a cluster any of its masters (such a
    /// command would otherwise go to any node, a replica included), elsewhere the server.
    async fn send_to_a_master(&mut self, cmd: redis::Cmd) -> Result<Value, RedisError> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        match self {
            AnyConn::Cluster(c) => {
                c.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
                )
                .await
            }
            other => cmd.query_async(other).await,
        }
    }
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
            .field(
                "scripts",
                &match self.path() {
                    RedisPath::Module => ratelimit_vocab::native::MODULE_NAME,
                    RedisPath::Functions => Library::get().name(),
                    RedisPath::Scripts => "EVALSHA",
                },
            )
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
        self.decide_all(&check::from_tuples(checks)).await
    }

    async fn check(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        self.check_one(Check::new(key, limit, cost)).await
    }

    async fn peek(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        self.peek_one(key, limit, cost).await
    }
}
