//! For tools that read what a fleet's limiters keep in Redis: the `ratelimit` command line,
//! admin pages, scripts. The limiter names buckets, and hides passwords, with exactly these
//! functions, so a tool that uses them finds the buckets the services write and never shows
//! a secret they would not.
//!
//! **Unstable**: this module follows the stored format, which may change in a minor release
//! (then these functions change with it, and a tool built against the same version keeps
//! agreeing with the limiter). Services do not need it.
//!
//! A bucket's Redis key is `<prefix>:{<n>:<name>:<key>}` for a named limit (`n` the written
//! name's length in bytes) and `<prefix>:{:<key>}` for an unnamed one (`RateLimiter::check`).
//! The name and the key are written as given (any Unicode) but for `{`, `}` and `%`, which are
//! percent-escaped; a part longer than [`MAX_PART_LEN`](crate::MAX_PART_LEN) bytes once escaped
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

pub use crate::error::redact_url;
pub use crate::naming::{Bucket, Part, bucket_key, key_slot, parse_bucket_key};
