//! The error type of every fallible operation.

use crate::limit::{InvalidLimit, Limit};

/// What went wrong, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A limit that cannot be built.
    #[error("invalid limit: {0}")]
    InvalidLimit(#[from] InvalidLimit),

    /// A call asked for more tokens than the bucket can ever hold, so it could never be
    /// admitted.
    #[error(
        "cost {cost} exceeds the burst capacity {} of the limit {limit}: such a call could \
         never be admitted; raise `burst` or lower `cost`",
        limit.burst_capacity()
    )]
    CostExceedsBurst {
        /// Tokens asked for.
        cost: u32,
        /// The limit it was checked against.
        limit: Limit,
    },

    /// A call asked for zero tokens.
    #[error("cost must be at least 1 token")]
    ZeroCost,

    /// The key prefix would break the bucket keys' hash tags.
    #[error(
        "invalid prefix `{0}`: a prefix must not contain `{{` or `}}` (they would move keys between Redis Cluster slots)"
    )]
    InvalidPrefix(String),

    /// The builder was not told where to keep buckets.
    #[error("no store configured: call `.redis(url)` or `.memory()` on the builder")]
    NoStore,

    /// The Redis URL could not be parsed.
    #[error(
        "invalid Redis URL `{url}`: {source}; expected redis://[user[:password]@]host[:port][/db] \
         or rediss:// for TLS"
    )]
    InvalidUrl {
        /// The URL, with any password removed.
        url: String,
        /// What the parser said.
        #[source]
        source: redis::RedisError,
    },

    /// Redis could not be reached or refused the connection.
    #[error("cannot connect to Redis at {url}: {source}; is the server running and reachable?")]
    Connect {
        /// The URL, with any password removed.
        url: String,
        /// The underlying error.
        #[source]
        source: redis::RedisError,
    },

    /// The Redis server is older than 7.0 (the script needs `PEXPIRETIME`).
    #[error("Redis {version} is not supported: redis-ratelimit needs Redis 7.0 or newer")]
    UnsupportedRedis {
        /// The version the server reported.
        version: String,
    },

    /// The store did not answer within the per-call deadline.
    #[error("the rate-limit store did not answer within {0:?}")]
    Timeout(std::time::Duration),

    /// `enable_redis_rate_limit!` was called a second time.
    #[error(
        "redis-ratelimit is already enabled: enable_redis_rate_limit! may be called once per process"
    )]
    AlreadyEnabled,

    /// A configuration override is invalid or names no declared limit.
    #[error("{0}")]
    Config(String),

    /// A Redis command failed.
    #[error("Redis error: {0}")]
    Redis(#[from] redis::RedisError),

    /// Redis answered the rate-limit script with something other than its four numbers,
    /// which means another program changed the bucket's key.
    #[error("unexpected reply from the rate-limit script: {0}")]
    BadReply(String),
}

impl Error {
    /// Whether the store failed (unreachable, slow, erroring), as opposed to a misuse: the
    /// failure policy decides such calls.
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            Error::Redis(_) | Error::Timeout(_) | Error::BadReply(_) | Error::Connect { .. }
        )
    }
}

/// The URL without its password, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            super::redact_url("redis://u:secret@h:1/0"),
            "redis://u:***@h:1/0"
        );
        assert_eq!(super::redact_url("redis://:secret@h"), "redis://:***@h");
        assert_eq!(super::redact_url("redis://h:1"), "redis://h:1");
    }
}
