//! Serving [`Service`] over gRPC, with `grpc.health.v1` reporting it `SERVING`.

use std::future::Future;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;

use crate::service::Service;

/// Serves `service` (`envoy.service.ratelimit.v3.RateLimitService`) and `grpc.health.v1` on
/// `listener` until `shutdown` completes, then lets the requests in flight finish. Health
/// reports `SERVING` for the whole server (`""`) and for the rate-limit service by name.
/// `service` may be shared (an `Arc<Service>`) with the HTTP endpoints and the configuration
/// watcher.
///
/// # Errors
/// The transport's, when serving fails.
pub async fn serve(
    service: impl Into<Arc<Service>>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(RateLimitServiceServer::from_arc(service.into()))
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY a response written in several writes (its headers, its
            // message, its trailers) waits on Nagle's algorithm for the peer's ACK.
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
}
