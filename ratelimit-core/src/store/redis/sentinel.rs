//! The master that the Sentinels name, followed across failovers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, ConnectionAddr, RedisError};

use super::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};

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
pub(super) struct SentinelConn {
    pub(super) client: tokio::sync::Mutex<SentinelClient>,
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
    pub(super) fn new(client: SentinelClient, master_name: String) -> SentinelConn {
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

    pub(super) async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
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

    pub(super) fn observe(&self, e: &RedisError) {
        let failed_over = e.code() == Some("READONLY");
        if failed_over || e.is_unrecoverable_error() || e.is_connection_dropped() || e.is_io_error()
        {
            self.forget();
        }
    }

    /// Starts a background check of the master in use if none ran for
    /// [`SENTINEL_CHECK_EVERY`]. Never waits, never fails.
    pub(super) fn check_soon(self: &Arc<Self>) {
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
                crate::observe::log!(debug, %e, "could not ask the sentinels for the master");
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
            crate::observe::log!(info, from = %current.addr,
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
