//! A rate-limit service for Envoy on redis-ratelimit's limits: the foundation that reads
//! [envoyproxy/ratelimit](https://github.com/envoyproxy/ratelimit)'s configuration unchanged
//! and finds the rule, and the bucket, of each descriptor Envoy sends.
//!
//! - [`config`]: the YAML files (`domain`, nested `descriptors`, `rate_limit`, ...) with this
//!   library's extensions (algorithms, bursts, any period, calendar quotas, debt bounds,
//!   concurrency, failure policies, limits shared with Rust services), loaded whole or not at
//!   all, and [`Config::lookup`](config::Config::lookup), the reference's `GetLimit`;
//! - [`settings`]: the reference's environment variables, read into [`Settings`](settings::Settings).
//! - [`service`]: `ShouldRateLimit` decided from those rules, every descriptor of a request
//!   together ([`Service`](service::Service)), and [`server`], which serves it over gRPC with
//!   `grpc.health.v1` (the `ratelimit-envoy` binary runs it).
//! - [`watch`]: the configuration reloaded when its files change, the buckets kept.
//! - [`http`]: the reference's HTTP endpoints: `/healthcheck`, `/json`, and on the debug port
//!   `/rlconfig`; the Prometheus metrics of [`stats`], under the reference's names.
//!
//! ```
//! use ratelimit_envoy::config::{Config, Lookup};
//!
//! let config = Config::parse("api.yaml", "
//! domain: api
//! descriptors:
//!   - key: user
//!     rate_limit: { unit: hour, requests_per_unit: 1000, algorithm: token_bucket, burst: 50 }
//! ")?;
//! // What Envoy sends: a domain and, per descriptor, its entries in order.
//! let Lookup::Rule(found) = config.lookup("api", [("user", "alice")]) else {
//!     panic!("a rule applies");
//! };
//! let limit = found.rule().limit().expect("a limit");
//! assert_eq!((limit.replenish(), limit.burst_capacity()), (1000, 50));
//! // The service decides it with `limiter.check_named(bucket.name(), bucket.key(), limit, cost)`.
//! assert_eq!(found.bucket().key(), "user=alice");
//! # Ok::<(), ratelimit_envoy::config::ConfigErrors>(())
//! ```

pub mod config;
pub mod http;
pub mod server;
pub mod service;
pub mod settings;
pub mod stats;
pub mod usage;
pub mod watch;
mod yaml;

/// The service's guide (docs/envoy.md): every fenced Rust block in it is compiled by
/// `cargo test --doc`, so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/envoy.md")]
struct Guide;
