//! For tools that read what a fleet's limiters keep in Redis: the `ratelimit` command line,
//! admin pages, scripts, benchmarks. The limiter names buckets, reads their state, parses
//! store URLs and hides passwords with exactly these functions, so a tool that uses them
//! finds the buckets the services write, reads them as the services do, and never shows a
//! secret they would not.
//!
//! **Unstable**: this module follows the stored format, which may change in a minor release
//! (then these functions change with it, and a tool built against the same version keeps
//! agreeing with the limiter). Services do not need it.
//!
//! What it offers:
//! - bucket keys: [`bucket_key`] names one, [`parse_bucket_key`] reads one back
//!   ([`Bucket`], [`Part`]), [`key_slot`] is its Redis Cluster slot, and [`instances_key`]
//!   names the heartbeat's set of live instances (not a bucket);
//! - stored state: [`READ_SCRIPT`] reads a key without writing, [`Stored`] holds what it read
//!   ([`Stored::from_reply`], or [`Stored::new`] from a tool's own reads), [`StateKind`] says
//!   which algorithm's state it is (of a [`Limit`](crate::Limit), or guessed from its
//!   shape, by [`StateKindExt`]), [`decode_state`] describes it ([`Decoded`],
//!   [`BucketState`]), and [`peek`] says what a call would be told now ([`Peek`],
//!   [`Undecidable`]);
//! - URLs: [`parse_redis_url`] says what a store URL names ([`RedisTarget`], whose `Debug`
//!   hides passwords), [`node_url`] is the URL of one node of a cluster, [`redact_url`]
//!   hides a URL's password for messages, and [`url_complaint`] says what redis-rs found wrong
//!   with a URL without quoting it;
//! - connections: [`redis_client`] and [`cluster_connection`] open them as the limiter does,
//!   without `CLIENT SETINFO`, so that a tool works under the least ACL of
//!   docs/operations.md on every server;
//! - [`scripts`]: the decision scripts' text, as the limiter loads them (for benchmarks and
//!   measurements), and [`algorithms`]: each algorithm's decision in Rust (the
//!   `ratelimit-algorithms` crate's), the twin the conformance tests hold to its script, with
//!   its parameters, its script's arguments and its stored state.
//!
//! A bucket's Redis key is `<prefix>:{<n>:<name>:<key>}` for a named limit (`n` the written
//! name's length in bytes) and `<prefix>:{:<key>}` for an unnamed one (`RateLimiter::check`).
//! The name and the key are written as given (any Unicode) but for `{`, `}` and `%`, which are
//! percent-escaped; a part longer than [`MAX_PART_LEN`] bytes once escaped
//! is written as `%H` and a digest. The braces are a Redis Cluster hash tag: [`key_slot`] is
//! the slot the bucket lives in.
//!
//! ```
//! use ratelimit_core::tools::{Part, bucket_key, key_slot, parse_bucket_key, redact_url};
//!
//! let bucket = bucket_key("app", Some("api::orders"), "café:{42}");
//! assert_eq!(bucket, "app:{11:api::orders:café:%7B42%7D}");
//! let read = parse_bucket_key("app", &bucket).expect("a bucket key");
//! assert_eq!(read.name, Some(Part::Text("api::orders".to_owned())));
//! assert_eq!(read.key.text(), Some("café:{42}"));
//! assert_eq!(key_slot(bucket.as_bytes()), key_slot(b"11:api::orders:caf\xc3\xa9:%7B42%7D"));
//!
//! // A key too long to keep comes back as its digest.
//! let long = "k".repeat(500);
//! let read = parse_bucket_key("app", &bucket_key("app", None, &long)).expect("a bucket key");
//! assert_eq!((read.name, read.key.text()), (None, None));
//! assert!(read.key.stands_for(&long));
//!
//! // Not a bucket: the heartbeat's set of live instances.
//! assert_eq!(parse_bucket_key("app", "app:instances"), None);
//!
//! assert_eq!(redact_url("redis://user:pa/ss@10.0.0.1:6379/0"), "redis://***");
//! assert_eq!(redact_url("redis://:s3cret@10.0.0.1:6379"), "redis://:***@10.0.0.1:6379");
//! ```

mod kind;
mod state;

pub use self::kind::StateKindExt;
pub use self::state::{
    BucketState, Decoded, Peek, READ_SCRIPT, Stored, StoredValue, Undecidable, decode_state, peek,
};
pub use crate::algorithm::StateKind;
pub use crate::errors::redact_url;
pub use crate::naming::{Bucket, MAX_PART_LEN, Part, bucket_key, key_slot, parse_bucket_key};
pub use crate::store::redis::client::{
    ClusterConnection, NodeConnection, client as redis_client, cluster_connection,
};
pub use crate::store::redis::cross_slot::{SlotRange, cluster_slots};
pub use crate::store::redis::url::{
    Target as RedisTarget, node_url, parse_target as parse_redis_url, url_complaint,
};

/// The key of the heartbeat's sorted set of the live instances under `prefix`: what the
/// fallback divides a limit by. Not a bucket ([`parse_bucket_key`] says `None`).
///
/// ```
/// use ratelimit_core::tools::{instances_key, parse_bucket_key};
///
/// assert_eq!(instances_key("app"), "app:instances");
/// assert_eq!(parse_bucket_key("app", &instances_key("app")), None);
/// ```
#[must_use]
pub fn instances_key(prefix: &str) -> String {
    crate::fleet::instances_key(prefix)
}

/// The decision scripts' text, exactly as the limiter loads them (each with the shared
/// prelude): for benchmarks and measurements that run a script by itself. **Unstable**: the
/// scripts' arguments and replies change with the algorithms.
///
/// ```
/// use ratelimit_core::tools::scripts;
///
/// assert!(scripts::TOKEN_BUCKET.contains("redis.call"));
/// assert!(scripts::BATCH.starts_with("#!lua"));
/// ```
pub mod scripts {
    /// The token bucket (GCRA, also the leaky bucket): `gcra.lua`; its arguments are
    /// [`token_bucket::args`](super::algorithms::token_bucket::args).
    pub const TOKEN_BUCKET: &str = crate::algorithm::token_bucket::SCRIPT;
    /// The token bucket refilled at once each period.
    pub const INTERVAL_BUCKET: &str = crate::algorithm::interval_bucket::SCRIPT;
    /// The fixed window.
    pub const FIXED_WINDOW: &str = crate::algorithm::fixed_window::SCRIPT;
    /// The sliding window.
    pub const SLIDING_WINDOW: &str = crate::algorithm::sliding_window::SCRIPT;
    /// The sliding log.
    pub const SLIDING_LOG: &str = crate::algorithm::sliding_log::SCRIPT;
    /// A concurrency limit's acquire; its arguments are
    /// [`concurrency::args`](super::algorithms::concurrency::args).
    pub const CONCURRENCY: &str = crate::algorithm::concurrency::SCRIPT;
    /// A concurrency limit's release (one call's slots and ticket).
    pub const CONCURRENCY_RELEASE: &str = crate::algorithm::concurrency::RELEASE_SCRIPT;
    /// A concurrency limit's renewal (one call's leases).
    pub const CONCURRENCY_RENEW: &str = crate::algorithm::concurrency::RENEW_SCRIPT;
    /// Several limits of one call in one script (`multi.lua`, every algorithm included).
    pub const MULTI: &str = crate::algorithm::MULTI_SCRIPT;
    /// Several independent calls bound for one node in one script, each decided as if alone
    /// (`batch.lua`): how concurrent calls are coalesced.
    pub const BATCH: &str = crate::algorithm::BATCH_SCRIPT;
    /// Reads one bucket key, writing nothing (see [`READ_SCRIPT`](super::READ_SCRIPT)).
    pub const READ: &str = super::READ_SCRIPT;

    pub use crate::algorithm::library::Library;

    /// Every script above but `READ` as one library of Redis functions, which the Redis store
    /// loads (`FUNCTION LOAD REPLACE`) and calls (`FCALL`) where the server allows it: named
    /// by a hash of its code, so that two versions of the crate on one server never share
    /// a function.
    ///
    /// ```
    /// use ratelimit_core::tools::scripts;
    ///
    /// let library = scripts::library();
    /// assert!(library.text().starts_with("#!lua name=redis_ratelimit_"));
    /// // FCALL <this> 1 <bucket> <the arguments TOKEN_BUCKET takes>
    /// let function = library.function("token_bucket").unwrap();
    /// assert!(function.starts_with("rl_") && function.ends_with("_token_bucket"));
    /// ```
    #[must_use]
    pub fn library() -> &'static Library {
        Library::get()
    }

    /// The Redis module's name this version calls (`MODULE LIST`): `ratelimit_v1`.
    #[must_use]
    pub fn native_module() -> &'static str {
        ratelimit_vocab::native::MODULE_NAME
    }

    /// The Redis module's commands this version calls where a server has the module
    /// (`ratelimit.v1.token_bucket`, ...), each standing for the library's function of the
    /// same short name: the list the module must register.
    ///
    /// ```
    /// use ratelimit_core::tools::scripts;
    ///
    /// assert!(scripts::native_commands().contains(&"ratelimit.v1.token_bucket"));
    /// ```
    #[must_use]
    pub fn native_commands() -> Vec<&'static str> {
        crate::algorithm::library::NATIVE
            .iter()
            .filter_map(|lua| lua.native())
            .collect()
    }
}

/// Each algorithm's decision as a pure function in exact integer arithmetic: the Rust twin of
/// its script, which the memory store runs and the conformance tests
/// (`testkit/tests/algorithms.rs`) hold to the script on a real Redis. With each its
/// parameters, its script's arguments (`args`, and `from_args` that reads them back), and its
/// stored `State` (`decode` reads a key's value as the script does, `encode` writes it).
/// Each module is the `ratelimit-algorithms` crate's, with its script (`SCRIPT`); a
/// [`Limit`](crate::Limit)'s parameters are [`OfLimit`](algorithms::OfLimit)'s (import it to
/// write `WindowParams::of(&limit)`) and [`OfConcurrentLimit`](algorithms::OfConcurrentLimit)'s.
/// **Unstable**. See `docs/algorithms.md`.
///
/// ```
/// use ratelimit_core::tools::algorithms::{WindowParams, fixed_window};
///
/// // 3 per second; 2 taken a quarter into a window.
/// let p = WindowParams::try_new(3, 1_000_000).expect("a valid window");
/// let now = 1_800_000_000_250_000;
/// let first = fixed_window::decide(now, None, p, 2);
/// assert!(first.allowed);
/// let state = first.new_state.expect("a count to store");
/// assert_eq!(fixed_window::State::decode(&state.encode(), state.expire_ms), Some(state));
/// assert!(!fixed_window::decide(now, Some(state), p, 2).allowed);
/// ```
pub mod algorithms {
    pub use crate::algorithm::{
        OfConcurrentLimit, OfLimit, Outcome, WindowParams, calendar, concurrency, fixed_window,
        interval_bucket, sliding_log, sliding_window, token_bucket,
    };
}
