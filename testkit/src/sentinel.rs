//! A real local Redis Sentinel deployment for one test: one master, one replica and three
//! sentinels (`redis-server <conf> --sentinel`), all on free loopback ports in temporary
//! directories, killed when dropped.
//!
//! Every helper is blocking; call them from the test's body, not from inside a spawned task.

use std::fmt;
use std::process::{Child, Command};
use std::time::Duration;

use redis::Value;

use crate::RedisServer;

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "mymaster";

/// How long the deployment may take to form, or a failover to complete.
const SETTLE: Duration = Duration::from_secs(30);

struct Sentinel {
    port: u16,
    /// Holds the conf (which the sentinel rewrites) and the log until the sentinel is dropped.
    _dir: tempfile::TempDir,
    child: Option<Child>,
}

/// One master, one replica and three sentinels (quorum 2), owned by one test.
pub struct SentinelSetup {
    servers: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

impl fmt::Debug for SentinelSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSetup")
            .field("data_ports", &self.data_ports())
            .field("sentinel_ports", &self.sentinel_ports())
            .finish()
    }
}

impl SentinelSetup {
    /// Starts the master, its replica (in sync) and three sentinels, and waits until every
    /// sentinel sees the master, the replica and the two other sentinels.
    ///
    /// # Panics
    /// When a process cannot start or the deployment does not form within 30 s.
    pub fn start() -> SentinelSetup {
        SentinelSetup::start_with(&[])
    }

    /// [`start`](SentinelSetup::start), the master and the replica with extra `redis-server`
    /// arguments (`testkit::module::load_args()`); not the sentinels.
    ///
    /// # Panics
    /// As `start`.
    pub fn start_with(extra: &[&str]) -> SentinelSetup {
        let master = RedisServer::start_with(extra);
        let mport = master.port().to_string();
        let mut replica_args = vec!["--replicaof", "127.0.0.1", &mport];
        replica_args.extend_from_slice(extra);
        let replica = RedisServer::start_with(&replica_args);
        let mut setup = SentinelSetup {
            servers: vec![master, replica],
            sentinels: Vec::new(),
        };
        setup
            .wait_replica_in_sync(1, SETTLE)
            .unwrap_or_else(|e| panic!("the replica did not sync: {e}"));
        for _ in 0..3 {
            let s = start_sentinel(setup.servers[0].port());
            setup.sentinels.push(s);
        }
        setup
            .wait_formed(SETTLE)
            .unwrap_or_else(|e| panic!("the sentinels did not form: {e}"));
        setup
    }

    /// `redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/mymaster`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The ports of the data nodes (the first was started as the master).
    pub fn data_ports(&self) -> Vec<u16> {
        self.servers.iter().map(RedisServer::port).collect()
    }

    /// The ports of the sentinels.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The data node on `port`.
    ///
    /// # Panics
    /// When no data node listens there.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// The master's port as each live sentinel reports it (`SENTINEL get-master-addr-by-name`);
    /// `None` for a sentinel that does not answer.
    pub fn reported_masters(&self) -> Vec<Option<u16>> {
        self.sentinels
            .iter()
            .filter(|s| s.child.is_some())
            .map(|s| master_addr(s.port))
            .collect()
    }

    /// The master's port if every live sentinel reports the same one.
    pub fn master_port(&self) -> Option<u16> {
        let reported = self.reported_masters();
        let first = (*reported.first()?)?;
        reported.iter().all(|p| *p == Some(first)).then_some(first)
    }

    /// Kills the current master (SIGKILL) and returns its port.
    ///
    /// # Panics
    /// When the sentinels do not agree on a master.
    pub fn kill_master(&mut self) -> u16 {
        let port = self
            .master_port()
            .expect("the sentinels agree on the master");
        self.servers
            .iter_mut()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
            .kill();
        port
    }

    /// Asks a sentinel to fail over now (`SENTINEL FAILOVER mymaster`): the replica is
    /// promoted and the old master, still running, is turned into its replica.
    ///
    /// # Errors
    /// When the sentinel refuses.
    pub fn force_failover(&self) -> Result<(), String> {
        let port = self.sentinels[0].port;
        let mut con = connection(port).map_err(|e| format!("sentinel {port}: {e}"))?;
        redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query::<()>(&mut con)
            .map_err(|e| format!("SENTINEL FAILOVER: {e}"))
    }

    /// Waits until every live sentinel reports a master other than `old`, and that master
    /// says it is one (`ROLE`); returns its port.
    ///
    /// # Errors
    /// What was still wrong when `timeout` ran out.
    pub fn wait_new_master(&self, old: u16, timeout: Duration) -> Result<u16, String> {
        crate::wait::poll_blocking(timeout, || match self.master_port() {
            Some(p) if p != old && role_of(p).as_deref() == Some("master") => Ok(p),
            _ => Err(format!(
                "no new master: sentinels report {:?}",
                self.reported_masters()
            )),
        })
    }

    /// Kills the data node on `port` (SIGKILL) and starts it again on its port and directory
    /// with its arguments, empty (no persistence): a replica comes back a replica, and this
    /// waits until it is in sync with its master again (a full sync: the data and the
    /// functions).
    ///
    /// # Errors
    /// When no data node listens there, or a replica is not in sync within 30 s.
    pub fn restart(&mut self, port: u16) -> Result<(), String> {
        let index = self
            .servers
            .iter()
            .position(|s| s.port() == port)
            .ok_or_else(|| format!("no data node on port {port}"))?;
        self.servers[index].restart();
        if role_of(port).as_deref() == Some("slave") {
            self.wait_replica_in_sync(index, SETTLE)?;
        }
        Ok(())
    }

    fn wait_replica_in_sync(&self, index: usize, timeout: Duration) -> Result<(), String> {
        let port = self.servers[index].port();
        crate::wait::poll_blocking(timeout, || {
            let info: Result<String, _> = connection(port)
                .and_then(|mut c| redis::cmd("INFO").arg("replication").query(&mut c));
            match info {
                Ok(i) if i.contains("master_link_status:up") => Ok(()),
                other => Err(format!("replica {port}: {other:?}")),
            }
        })
    }

    fn wait_formed(&self, timeout: Duration) -> Result<(), String> {
        let master = self.servers[0].port();
        crate::wait::poll_blocking(timeout, || {
            for s in &self.sentinels {
                let view = sentinel_view(s.port);
                let ok = view.as_ref().is_ok_and(|v| {
                    v.port == master
                        && v.flags == "master"
                        && v.replicas == 1
                        && v.other_sentinels == 2
                });
                if !ok {
                    return Err(format!("sentinel {}: {view:?}", s.port));
                }
            }
            Ok(())
        })
    }
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        for s in &mut self.sentinels {
            if let Some(mut child) = s.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // The data nodes stop in RedisServer's own Drop.
    }
}

/// What one sentinel knows about the master.
#[derive(Debug)]
struct View {
    port: u16,
    flags: String,
    replicas: u32,
    other_sentinels: u32,
}

fn sentinel_view(port: u16) -> Result<View, String> {
    let mut con = connection(port).map_err(|e| e.to_string())?;
    let v: Value = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(MASTER_NAME)
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    let fields: Vec<(String, String)> = match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| Some((value_str(kv.first()?), value_str(kv.get(1)?))))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| (value_str(k), value_str(v)))
            .collect(),
        other => return Err(format!("unexpected reply {other:?}")),
    };
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    Ok(View {
        port: get("port").parse().unwrap_or(0),
        flags: get("flags"),
        replicas: get("num-slaves").parse().unwrap_or(0),
        other_sentinels: get("num-other-sentinels").parse().unwrap_or(0),
    })
}

fn master_addr(sentinel: u16) -> Option<u16> {
    let mut con = connection(sentinel).ok()?;
    let addr: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(&mut con)
        .ok()?;
    addr?.1.parse().ok()
}

fn role_of(port: u16) -> Option<String> {
    let mut con = connection(port).ok()?;
    let v: Value = redis::cmd("ROLE").query(&mut con).ok()?;
    match v {
        Value::Array(items) => items.first().map(value_str),
        _ => None,
    }
}

fn start_sentinel(master_port: u16) -> Sentinel {
    let dir = tempfile::Builder::new()
        .prefix("ratelimit-sentinel-")
        .tempdir()
        .expect("create a temporary directory");
    let mut last_err = String::new();
    for _ in 0..5 {
        let port = crate::free_port();
        let conf = dir.path().join("sentinel.conf");
        let text = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             daemonize no\n\
             logfile \"{log}\"\n\
             dir \"{dir}\"\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            log = dir.path().join("redis.log").display(),
            dir = dir.path().display(),
        );
        std::fs::write(&conf, text).expect("write sentinel.conf");
        let mut cmd = Command::new(crate::redis_server_bin());
        cmd.arg(&conf).arg("--sentinel");
        match crate::launch(cmd, dir.path(), port) {
            Ok(child) => {
                return Sentinel {
                    port,
                    _dir: dir,
                    child: Some(child),
                };
            }
            Err(e) => last_err = e,
        }
    }
    panic!("could not start a sentinel: {last_err}");
}

fn connection(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let con = client.get_connection_with_timeout(Duration::from_millis(500))?;
    con.set_read_timeout(Some(Duration::from_secs(2)))?;
    con.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok(con)
}

fn value_str(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}
