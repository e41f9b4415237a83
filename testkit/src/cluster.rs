//! A real local Redis Cluster for one test: six `redis-server` processes (three masters, three
//! replicas) on free loopback ports, each in its own temporary directory, joined with
//! `redis-cli --cluster create`, killed when dropped.
//!
//! Every helper is blocking (it talks to the nodes with short-timeout synchronous
//! connections); call them from the test's body, not from inside a spawned task.

use std::collections::HashSet;
use std::fmt;
use std::hash::BuildHasher;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

/// Slots of a Redis Cluster.
pub const SLOTS: u32 = 16_384;

/// Nodes of the cluster: three masters and a replica of each.
const NODES: usize = 6;

/// How long the cluster may take to form, or to settle after a failover.
const SETTLE: Duration = Duration::from_secs(30);

/// Ports are drawn below Linux's ephemeral range (32768+), so that neither a node's port nor
/// its cluster bus port (port + 10000) can be taken by an outgoing connection meanwhile.
const PORT_RANGE: std::ops::Range<u16> = 10_000..22_000;

/// Offset of the cluster bus port.
const BUS_OFFSET: u16 = 10_000;

/// The `redis-cli` binary: `$REDIS_CLI_BIN`, else the one on `PATH`.
pub fn redis_cli_bin() -> PathBuf {
    std::env::var_os("REDIS_CLI_BIN").map_or_else(|| PathBuf::from("redis-cli"), PathBuf::from)
}

/// What a node is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Serves slots.
    Master,
    /// Replicates a master.
    Replica,
}

/// One range of slots as a node reports it (`CLUSTER SLOTS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot.
    pub start: u16,
    /// Last slot (inclusive).
    pub end: u16,
    /// The master's port.
    pub master: u16,
    /// The replicas' ports.
    pub replicas: Vec<u16>,
}

struct Node {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// A local Redis Cluster owned by one test.
pub struct RedisCluster {
    nodes: Vec<Node>,
    /// Extra `redis-server` arguments of every node (a module to load), kept for restarts.
    extra: Vec<String>,
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field("ports", &self.ports())
            .field("alive", &self.alive_ports())
            .finish()
    }
}

impl RedisCluster {
    /// Starts six nodes, creates the cluster (one replica per master) and waits until every
    /// node reports `cluster_state:ok` with all 16384 slots covered, every node agrees on who
    /// serves them, and every replica is in sync with its master.
    ///
    /// # Panics
    /// When a node cannot start or the cluster does not form within 30 s.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(&[])
    }

    /// [`start`](RedisCluster::start), every node with extra `redis-server` arguments
    /// (`testkit::module::load_args()`), also when restarted.
    ///
    /// # Panics
    /// As `start`.
    pub fn start_with(extra: &[&str]) -> RedisCluster {
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let mut nodes: Vec<Node> = Vec::with_capacity(NODES);
        let mut taken = HashSet::new();
        while nodes.len() < NODES {
            let dir = tempfile::Builder::new()
                .prefix("ratelimit-cluster-")
                .tempdir()
                .expect("create a temporary directory");
            let mut last_err = String::new();
            let mut started = None;
            for _ in 0..20 {
                let port = cluster_port(&taken);
                match spawn_node(dir.path(), port, &extra) {
                    Ok(child) => {
                        started = Some((port, child));
                        break;
                    }
                    Err(e) => last_err = e,
                }
            }
            let Some((port, child)) = started else {
                panic!("could not start a cluster node: {last_err}");
            };
            taken.insert(port);
            nodes.push(Node {
                port,
                dir,
                child: Some(child),
            });
        }
        let cluster = RedisCluster { nodes, extra };
        cluster.create();
        cluster
            .wait_healthy(SETTLE)
            .unwrap_or_else(|e| panic!("the cluster did not form: {e}"));
        cluster
    }

    fn create(&self) {
        let mut cmd = Command::new(redis_cli_bin());
        cmd.arg("--cluster").arg("create");
        for n in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port));
        }
        cmd.args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run `{}`: {e}. Install redis-tools (Debian: apt-get install \
                 redis-tools) or set REDIS_CLI_BIN",
                redis_cli_bin().display()
            )
        });
        // `Ok` once it has finished, `Err` until then.
        let finished = crate::wait::poll_blocking(SETTLE, || match child.try_wait() {
            Ok(Some(status)) => Ok(Ok(status)),
            Ok(None) => Err("still running"),
            Err(e) => Ok(Err(e)),
        });
        match finished {
            Ok(Ok(status)) => {
                let out = child.wait_with_output().map(|o| {
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                });
                assert!(
                    status.success(),
                    "redis-cli --cluster create failed ({status}): {out:?}"
                );
            }
            Ok(Err(e)) => panic!("waiting for redis-cli: {e}"),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("redis-cli --cluster create: {e}");
            }
        }
    }

    /// `redis+cluster://127.0.0.1:p1,...,127.0.0.1:p6` (every node, dead or alive).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The ports of all nodes, in start order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The ports of the nodes not killed.
    pub fn alive_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect()
    }

    /// Whether the node on `port` runs (was not killed).
    pub fn is_alive(&self, port: u16) -> bool {
        self.node(port).child.is_some()
    }

    /// The log file of the node on `port`.
    pub fn log_path(&self, port: u16) -> PathBuf {
        self.node(port).dir.path().join("redis.log")
    }

    fn node(&self, port: u16) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// A blocking connection to the node on `port` (short timeouts), without cluster
    /// redirection.
    ///
    /// # Errors
    /// When the node does not answer.
    pub fn node_connection(&self, port: u16) -> redis::RedisResult<redis::Connection> {
        node_connection(port)
    }

    /// Runs one command on the node on `port`.
    ///
    /// # Errors
    /// The node's error, or a connection error.
    pub fn query<T: redis::FromRedisValue>(
        &self,
        port: u16,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        cmd.query(&mut node_connection(port)?)
    }

    /// What the node on `port` says it is (`ROLE`); `None` when it does not answer.
    pub fn role(&self, port: u16) -> Option<Role> {
        let v: Value = self.query(port, &redis::cmd("ROLE")).ok()?;
        let Value::Array(items) = v else { return None };
        match items.first().map(value_str).as_deref() {
            Some("master") => Some(Role::Master),
            Some("slave") => Some(Role::Replica),
            _ => None,
        }
    }

    /// The slot map as a live node sees it (`CLUSTER SLOTS`), sorted by first slot.
    ///
    /// # Panics
    /// When no node answers.
    pub fn slots(&self) -> Vec<SlotRange> {
        let mut last = String::new();
        for port in self.alive_ports() {
            match slots_of(port) {
                Ok(s) => return s,
                Err(e) => last = e,
            }
        }
        panic!("no cluster node answered CLUSTER SLOTS: {last}");
    }

    /// The ports of the masters that serve slots now.
    pub fn masters(&self) -> Vec<u16> {
        let mut m: Vec<u16> = self.slots().iter().map(|r| r.master).collect();
        m.sort_unstable();
        m.dedup();
        m
    }

    /// A live replica of the master on `master`, if it has one.
    pub fn replica_of(&self, master: u16) -> Option<u16> {
        self.slots()
            .into_iter()
            .filter(|r| r.master == master)
            .flat_map(|r| r.replicas)
            .find(|&p| self.is_alive(p) && self.role(p) == Some(Role::Replica))
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of a live node).
    ///
    /// # Panics
    /// When no node answers.
    pub fn key_slot(&self, key: &str) -> u16 {
        for port in self.alive_ports() {
            if let Ok(slot) = self.query(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)) {
                return slot;
            }
        }
        panic!("no cluster node answered CLUSTER KEYSLOT");
    }

    /// The port of the master serving `slot` now.
    ///
    /// # Panics
    /// When no range covers the slot.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        self.slots()
            .iter()
            .find(|r| (r.start..=r.end).contains(&slot))
            .map(|r| r.master)
            .unwrap_or_else(|| panic!("slot {slot} is not served"))
    }

    /// The port of the master serving `key`'s slot now.
    pub fn master_of_key(&self, key: &str) -> u16 {
        self.master_of_slot(self.key_slot(key))
    }

    /// Kills the node on `port` (SIGKILL), keeping its directory.
    pub fn kill(&mut self, port: u16) {
        if let Some(mut child) = self.node_mut(port).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the killed node on `port` again, on its port and directory (its `nodes.conf`
    /// keeps its identity; it kept no data), and waits until the cluster is healthy with it
    /// back: a killed master whose replica was promoted rejoins as that one's replica, and
    /// syncs everything (data and functions) from it.
    ///
    /// # Errors
    /// When it cannot start, or the cluster does not settle within 30 s.
    pub fn restart(&mut self, port: u16) -> Result<(), String> {
        self.kill(port);
        let extra = self.extra.clone();
        let node = self.node_mut(port);
        let child = crate::respawn(|| spawn_node(node.dir.path(), port, &extra))
            .map_err(|e| format!("restart node {port}: {e}"))?;
        node.child = Some(child);
        self.wait_healthy(SETTLE)
    }

    /// Promotes the replica on `replica` with `CLUSTER FAILOVER` (a manual, coordinated
    /// failover: its master becomes its replica) and waits until the cluster is healthy with
    /// `replica` serving its former master's slots.
    ///
    /// # Errors
    /// When the node refuses, or the cluster does not settle within 30 s.
    pub fn failover(&self, replica: u16) -> Result<(), String> {
        let old_master = self
            .slots()
            .into_iter()
            .find(|r| r.replicas.contains(&replica))
            .map(|r| r.master)
            .ok_or_else(|| format!("{replica} is not a replica in the slot map"))?;
        let owned = self.ranges_of(old_master);
        let _: () = self
            .query(replica, redis::cmd("CLUSTER").arg("FAILOVER"))
            .map_err(|e| format!("CLUSTER FAILOVER on {replica}: {e}"))?;
        self.wait_promoted(replica, &owned, SETTLE)
    }

    /// Kills the master on `master` and waits until its replica has been promoted (by the
    /// cluster's own failure detection) and the cluster is healthy again; returns the new
    /// master's port.
    ///
    /// # Errors
    /// When `master` has no live replica or the cluster does not settle within 30 s.
    pub fn kill_master(&mut self, master: u16) -> Result<u16, String> {
        let replica = self
            .replica_of(master)
            .ok_or_else(|| format!("master {master} has no live replica"))?;
        let owned = self.ranges_of(master);
        self.kill(master);
        self.wait_promoted(replica, &owned, SETTLE)?;
        Ok(replica)
    }

    fn ranges_of(&self, master: u16) -> Vec<(u16, u16)> {
        self.slots()
            .into_iter()
            .filter(|r| r.master == master)
            .map(|r| (r.start, r.end))
            .collect()
    }

    fn wait_promoted(
        &self,
        node: u16,
        ranges: &[(u16, u16)],
        timeout: Duration,
    ) -> Result<(), String> {
        crate::wait::poll_blocking(timeout, || {
            if self.role(node) != Some(Role::Master) {
                return Err(format!("{node} is not a master yet"));
            }
            let map = self.health()?;
            for &(start, end) in ranges {
                let owner = map
                    .iter()
                    .find(|r| (r.start..=r.end).contains(&start) && r.end >= end)
                    .map(|r| r.master);
                if owner != Some(node) {
                    return Err(format!(
                        "slots {start}-{end} are served by {owner:?}, not {node}"
                    ));
                }
            }
            Ok(())
        })
    }

    /// Waits until every live node reports `cluster_state:ok` with all slots served, they all
    /// agree on the slot map, and every live replica whose master is alive is in sync.
    ///
    /// # Errors
    /// What was still wrong when `timeout` ran out.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<(), String> {
        crate::wait::poll_blocking(timeout, || self.health().map(drop))
    }

    /// The agreed slot map if the cluster is healthy (see [`wait_healthy`]).
    ///
    /// [`wait_healthy`]: RedisCluster::wait_healthy
    fn health(&self) -> Result<Vec<SlotRange>, String> {
        let alive = self.alive_ports();
        let mut agreed: Option<Vec<(u16, u16, u16)>> = None;
        let mut map = Vec::new();
        for &port in &alive {
            let info: String = self
                .query(port, redis::cmd("CLUSTER").arg("INFO"))
                .map_err(|e| format!("{port}: CLUSTER INFO: {e}"))?;
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
                    .unwrap_or("")
                    .to_owned()
            };
            let all = SLOTS.to_string();
            if field("cluster_state") != "ok"
                || field("cluster_slots_assigned") != all
                || field("cluster_slots_ok") != all
            {
                return Err(format!("{port}: {}", info.replace("\r\n", " ")));
            }
            let slots = slots_of(port)?;
            let covered: u32 = slots
                .iter()
                .map(|r| u32::from(r.end) - u32::from(r.start) + 1)
                .sum();
            if covered != SLOTS {
                return Err(format!("{port}: CLUSTER SLOTS covers {covered} slots"));
            }
            let owners: Vec<(u16, u16, u16)> =
                slots.iter().map(|r| (r.start, r.end, r.master)).collect();
            if let Some(a) = &agreed {
                if *a != owners {
                    return Err(format!("{port} sees {owners:?}, another node {a:?}"));
                }
            } else {
                agreed = Some(owners);
                map = slots;
            }
            if owners_dead(&map, &alive) {
                return Err(format!("{port} names a dead master: {map:?}"));
            }
            // With every node alive, every master has its replica in the map (a test that
            // fails a master over needs it there, not still joining).
            if alive.len() == self.nodes.len()
                && map
                    .iter()
                    .any(|r| !r.replicas.iter().any(|p| alive.contains(p)))
            {
                return Err(format!("{port} lists a master without a replica: {map:?}"));
            }
        }
        for &port in &alive {
            if self.role(port) == Some(Role::Replica) {
                let repl: String = self
                    .query(port, redis::cmd("INFO").arg("replication"))
                    .map_err(|e| format!("{port}: INFO replication: {e}"))?;
                let master_port: Option<u16> = repl
                    .lines()
                    .find_map(|l| l.strip_prefix("master_port:"))
                    .and_then(|p| p.trim().parse().ok());
                let master_alive = master_port.is_some_and(|m| alive.contains(&m));
                if master_alive && !repl.contains("master_link_status:up") {
                    return Err(format!("replica {port} is not in sync yet"));
                }
            }
        }
        Ok(map)
    }
}

fn owners_dead(map: &[SlotRange], alive: &[u16]) -> bool {
    map.iter().any(|r| !alive.contains(&r.master))
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn spawn_node(dir: &std::path::Path, port: u16, extra: &[String]) -> Result<Child, String> {
    let mut cmd = Command::new(crate::redis_server_bin());
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--protected-mode", "yes"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", "nodes.conf"])
        .args(["--cluster-node-timeout", "1000"])
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .arg("--dir")
        .arg(dir)
        .args(extra);
    crate::launch(cmd, dir, port)
}

/// A port in [`PORT_RANGE`] that, with its bus port, was free a moment ago.
fn cluster_port(taken: &HashSet<u16>) -> u16 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let state = std::collections::hash_map::RandomState::new();
    let span = u64::from(PORT_RANGE.end - PORT_RANGE.start);
    for _ in 0..1000 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let h = state.hash_one((std::process::id(), Instant::now(), n));
        let port = PORT_RANGE.start + u16::try_from(h % span).unwrap_or(0);
        if taken.contains(&port) {
            continue;
        }
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + BUS_OFFSET) {
            return port;
        }
    }
    panic!("no free port pair (port, port + 10000) found in {PORT_RANGE:?}");
}

fn node_connection(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let con = client.get_connection_with_timeout(Duration::from_millis(500))?;
    con.set_read_timeout(Some(Duration::from_secs(2)))?;
    con.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok(con)
}

fn slots_of(port: u16) -> Result<Vec<SlotRange>, String> {
    let v: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut node_connection(port).map_err(|e| format!("{port}: {e}"))?)
        .map_err(|e| format!("{port}: CLUSTER SLOTS: {e}"))?;
    let bad = || format!("{port}: unexpected CLUSTER SLOTS reply {v:?}");
    let Value::Array(ranges) = &v else {
        return Err(bad());
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(items) = range else {
            return Err(bad());
        };
        let int = |v: Option<&Value>| match v {
            Some(Value::Int(i)) => u16::try_from(*i).ok(),
            _ => None,
        };
        let node_port = |v: &Value| match v {
            Value::Array(n) => int(n.get(1)),
            _ => None,
        };
        let start = int(items.first()).ok_or_else(bad)?;
        let end = int(items.get(1)).ok_or_else(bad)?;
        let master = items.get(2).and_then(node_port).ok_or_else(bad)?;
        let replicas = items.iter().skip(3).filter_map(node_port).collect();
        out.push(SlotRange {
            start,
            end,
            master,
            replicas,
        });
    }
    out.sort_by_key(|r| r.start);
    Ok(out)
}

fn value_str(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => format!("{other:?}"),
    }
}
