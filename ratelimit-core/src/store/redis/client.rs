//! How every connection to Redis is opened, by the store and by the tools alike: without the
//! `CLIENT SETINFO` that redis-rs sends after connecting by default.
//!
//! Redis 7.0 does not know that subcommand; Redis 7.2 and newer and Valkey refuse it to a
//! user without `+client|setinfo`, and log every refusal in `ACL LOG`; and `+client|setinfo`
//! is itself an error in `ACL SETUSER` on Redis 7.0. Not sending it lets one ACL line (the
//! least ACL of docs/operations.md) serve every server. It only names the client library
//! in `CLIENT LIST`, which nothing here needs.

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::Connect;
use redis::{
    AsyncConnectionConfig, Client, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo,
    RedisFuture, RedisResult, Value,
};

/// A client for the server `info` names (a `redis://` URL, a [`ConnectionInfo`]) whose
/// connections send no `CLIENT SETINFO`.
///
/// # Errors
/// `info` is not a valid Redis URL.
pub fn client(info: impl IntoConnectionInfo) -> RedisResult<Client> {
    Client::open(connection_info(info)?)
}

/// `info` with `CLIENT SETINFO` turned off.
pub(crate) fn connection_info(info: impl IntoConnectionInfo) -> RedisResult<ConnectionInfo> {
    let info = info.into_connection_info()?;
    let redis = settings(info.redis_settings().clone());
    Ok(info.set_redis_settings(redis))
}

/// `redis` with `CLIENT SETINFO` turned off (for the master a Sentinel names).
pub(crate) fn settings(redis: RedisConnectionInfo) -> RedisConnectionInfo {
    redis.set_skip_set_lib_name()
}

/// A connection to a Redis Cluster whose connections to the nodes send no `CLIENT SETINFO`.
pub type ClusterConnection = redis::cluster_async::ClusterConnection<NodeConnection>;

/// Connects to the cluster `client` names ([`ClusterConnection`]).
///
/// The cluster client builds each node's connection settings afresh from its own parameters,
/// which have no switch for `CLIENT SETINFO`, so the switch is thrown where each node's
/// connection is opened ([`NodeConnection`]).
///
/// # Errors
/// No node of the cluster answers, or they disagree on the slots.
pub async fn cluster_connection(client: &ClusterClient) -> RedisResult<ClusterConnection> {
    client
        .get_async_generic_connection::<NodeConnection>()
        .await
}

/// One node's connection within a [`ClusterConnection`]: a multiplexed connection opened
/// without `CLIENT SETINFO`.
#[derive(Clone)]
pub struct NodeConnection(MultiplexedConnection);

impl std::fmt::Debug for NodeConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConnection").finish_non_exhaustive()
    }
}

impl Connect for NodeConnection {
    fn connect_with_config<'a, T>(info: T, config: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let conn = client(info)?
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            Ok(NodeConnection(conn))
        })
    }
}

impl ConnectionLike for NodeConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_send_no_client_setinfo() {
        let client = client("redis://u:p@127.0.0.1:7000/2").unwrap();
        let info = client.get_connection_info().redis_settings();
        assert!(info.skip_set_lib_name());
        // Everything else the URL says is kept.
        assert_eq!(
            (info.username(), info.password(), info.db()),
            (Some("u"), Some("p"), 2)
        );
    }
}
