//! The connection to the Redis deployment the buckets live in: one server, or every master of
//! a Redis Cluster (a `SCAN` sees one node's keys only).

use std::time::Duration;

use ratelimit_core::tools::{
    ClusterConnection, READ_SCRIPT, RedisTarget, Stored, cluster_connection, cluster_slots,
    node_url, parse_redis_url, redact_url, redis_client, url_complaint,
};
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::{AsyncConnectionConfig, Client, RedisError, Script, Value};

use crate::failure::Failure;
use crate::state::Mode;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The shapes of URL the CLI reads, for error messages.
const EXPECTED: &str = "expected redis://[user[:password]@]host[:port][/db] or \
                        redis+cluster://[user[:password]@]host:port[,host:port...]";

/// A connected deployment.
pub(crate) struct Redis {
    /// The URL, password hidden, for messages.
    pub(crate) shown: String,
    deployment: Deployment,
    script: Script,
}

enum Deployment {
    Single(MultiplexedConnection),
    Cluster {
        conn: ClusterConnection,
        /// Each master, by address: where `SCAN` runs.
        masters: Vec<(String, MultiplexedConnection)>,
    },
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

/// What the URL names, checked before anything is sent.
/// Both boxed: their sizes differ, and differ again with TLS.
enum Target {
    Single(Box<Client>),
    Cluster(Box<ClusterClient>),
}

fn target(url: &str) -> Result<Target, Failure> {
    let shown = redact_url(url);
    // A URL that does not parse may hold its password anywhere: none of it is shown.
    let invalid = |why: &dyn std::fmt::Display| {
        Failure::Usage(format!(
            "invalid Redis URL (not shown: it may hold a password): {why}; {EXPECTED}"
        ))
    };
    if url.starts_with("memory:") {
        return Err(Failure::Usage(format!(
            "`{shown}` keeps buckets inside one process: there is nothing in it for the CLI to \
             read; give the URL of the Redis the service uses"
        )));
    }
    if !url.contains("://") {
        return Err(invalid(&"not a URL"));
    }
    match parse_redis_url(url).map_err(|why| invalid(&why))? {
        RedisTarget::Single(url) => redis_client(url)
            .map(|c| Target::Single(Box::new(c)))
            .map_err(|e| invalid(&url_complaint(&e))),
        RedisTarget::Cluster(nodes) => {
            let client = ClusterClient::builder(nodes)
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(2)
                .build()
                .map_err(|e| invalid(&url_complaint(&e)))?;
            Ok(Target::Cluster(Box::new(client)))
        }
        _ => Err(Failure::Usage(format!(
            "`{shown}`: the CLI does not follow Sentinel yet; give the current master's \
             redis://host:port URL (`SENTINEL get-master-addr-by-name <master>`)"
        ))),
    }
}

/// Checks `url` without connecting: the CLI says what is wrong with a URL before it says that
/// a server is unreachable.
pub(crate) fn check_url(url: &str) -> Result<(), Failure> {
    target(url).map(drop)
}

impl Redis {
    /// Connects to the deployment at `url` (on a cluster, to each of its masters too).
    pub(crate) async fn connect(url: &str) -> Result<Redis, Failure> {
        let shown = redact_url(url);
        let unreachable = |e: RedisError| {
            Failure::Redis(format!(
                "cannot connect to Redis at {shown}: {e}; is the server running and reachable?"
            ))
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let deployment = match target(url)? {
            Target::Single(client) => {
                let mut conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(unreachable)?;
                // Connected is not answering (a port that accepts, then says nothing useful).
                redis::cmd("PING")
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(unreachable)?;
                Deployment::Single(conn)
            }
            Target::Cluster(client) => {
                let mut conn = cluster_connection(&client).await.map_err(unreachable)?;
                let slots: Value = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut conn)
                    .await
                    .map_err(unreachable)?;
                let ranges = cluster_slots(&slots).ok_or_else(|| {
                    Failure::Redis(format!(
                        "the Redis Cluster at {shown} answered CLUSTER SLOTS with {slots:?}"
                    ))
                })?;
                let mut addresses: Vec<String> = Vec::new();
                for range in ranges {
                    if !addresses.contains(&range.master) {
                        addresses.push(range.master);
                    }
                }
                let mut masters = Vec::new();
                for address in addresses {
                    let node = node_url(url, &address);
                    let client = redis_client(node.as_str()).map_err(unreachable)?;
                    let c = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map_err(unreachable)?;
                    masters.push((address, c));
                }
                if masters.is_empty() {
                    return Err(Failure::Redis(format!(
                        "the Redis Cluster at {shown} names no master in CLUSTER SLOTS"
                    )));
                }
                Deployment::Cluster { conn, masters }
            }
        };
        Ok(Redis {
            shown,
            deployment,
            script: Script::new(READ_SCRIPT),
        })
    }

    /// Each server that holds buckets, by address, with its own URL (`url`'s credentials):
    /// the one server, or each master of a cluster.
    pub(crate) fn servers(&self, url: &str) -> Vec<(String, String)> {
        match &self.deployment {
            Deployment::Single(_) => vec![(self.shown.clone(), url.to_owned())],
            Deployment::Cluster { masters, .. } => masters
                .iter()
                .map(|(address, _)| (address.clone(), node_url(url, address)))
                .collect(),
        }
    }

    /// Reads `key` as it stands (one atomic script, writing nothing).
    pub(crate) async fn read(&self, key: &str, mode: Mode) -> Result<Stored, Failure> {
        let mut invocation = self.script.key(key);
        invocation.arg(mode.as_arg());
        let reply: Value = match &self.deployment {
            Deployment::Single(c) => invocation.invoke_async(&mut c.clone()).await,
            Deployment::Cluster { conn, .. } => invocation.invoke_async(&mut conn.clone()).await,
        }
        .map_err(|e| Failure::redis(&self.shown, &e))?;
        Stored::from_reply(&reply).ok_or_else(|| bad_reply(&self.shown, &reply))
    }

    /// Whether `key` exists.
    pub(crate) async fn exists(&self, key: &str) -> Result<bool, Failure> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(key);
        let n: i64 = match &self.deployment {
            Deployment::Single(c) => cmd.query_async(&mut c.clone()).await,
            Deployment::Cluster { conn, .. } => cmd.query_async(&mut conn.clone()).await,
        }
        .map_err(|e| Failure::redis(&self.shown, &e))?;
        Ok(n > 0)
    }

    /// Every key matching `pattern` on every master, by `SCAN` (never `KEYS`: it would block
    /// the server for the whole keyspace), `count` keys per step, each read as it stands; each
    /// step's keys go to `found` as soon as they are read.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        count: u32,
        mode: Mode,
        mut found: impl FnMut(Vec<(String, Stored)>),
    ) -> Result<(), Failure> {
        for mut node in self.nodes() {
            let mut cursor: u64 = 0;
            loop {
                let (next, keys) = self.scan_step(&mut node, cursor, pattern, count).await?;
                if !keys.is_empty() {
                    let reads = self.read_all(&mut node, &keys, mode).await?;
                    found(keys.into_iter().zip(reads).collect());
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }

    /// The names of the keys matching `pattern` on every master, by at most `steps` steps of
    /// `SCAN` of `count` keys on each: a look at a keyspace that may be large, never the
    /// whole of it. Whether it saw every key too.
    pub(crate) async fn some_keys(
        &self,
        pattern: &str,
        count: u32,
        steps: usize,
    ) -> Result<(Vec<String>, bool), Failure> {
        let mut found = Vec::new();
        let mut whole = true;
        for mut node in self.nodes() {
            let mut cursor: u64 = 0;
            for step in 1.. {
                let (next, keys) = self.scan_step(&mut node, cursor, pattern, count).await?;
                found.extend(keys);
                if next == 0 {
                    break;
                }
                if step == steps {
                    whole = false;
                    break;
                }
                cursor = next;
            }
        }
        Ok((found, whole))
    }

    /// The connection of each server that holds buckets: the one server, or each master.
    fn nodes(&self) -> Vec<MultiplexedConnection> {
        match &self.deployment {
            Deployment::Single(c) => vec![c.clone()],
            Deployment::Cluster { masters, .. } => masters.iter().map(|(_, c)| c.clone()).collect(),
        }
    }

    /// One step of `SCAN` on `node` from `cursor`: the next cursor and the keys it gave.
    async fn scan_step(
        &self,
        node: &mut MultiplexedConnection,
        cursor: u64,
        pattern: &str,
        count: u32,
    ) -> Result<(u64, Vec<String>), Failure> {
        redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count)
            .query_async(node)
            .await
            .map_err(|e| Failure::redis(&self.shown, &e))
    }

    /// Reads `keys`, all held by `node`, in one pipeline of `EVALSHA`s (the script loaded
    /// again when the node lost it).
    async fn read_all(
        &self,
        node: &mut MultiplexedConnection,
        keys: &[String],
        mode: Mode,
    ) -> Result<Vec<Stored>, Failure> {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("EVALSHA")
                .arg(self.script.get_hash())
                .arg(1)
                .arg(key)
                .arg(mode.as_arg());
        }
        let replies: Vec<Value> = match pipe.query_async(node).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                self.script
                    .prepare_invoke()
                    .load_async(node)
                    .await
                    .map_err(|e| Failure::redis(&self.shown, &e))?;
                pipe.query_async(node).await
            }
            other => other,
        }
        .map_err(|e| Failure::redis(&self.shown, &e))?;
        replies
            .iter()
            .map(|r| Stored::from_reply(r).ok_or_else(|| bad_reply(&self.shown, r)))
            .collect()
    }
}

fn bad_reply(shown: &str, reply: &Value) -> Failure {
    Failure::Redis(format!(
        "Redis at {shown} answered the read script with {reply:?}: is it Redis 7.0 or newer?"
    ))
}
