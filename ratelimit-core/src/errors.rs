//! The error type of every fallible operation.

use std::fmt;

use crate::limit::{InvalidLimit, Limit};

/// What went wrong, and what to do about it.
///
/// Its `Debug` is its message followed by its causes, as anyhow's and eyre's are, so that a
/// `main` returning `Result<(), Box<dyn Error>>` prints a readable error; `{:#?}` also names
/// the variant.
#[derive(thiserror::Error)]
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

    /// A several-limit method (`check_all*`, `enter_all*`, `check_all_estimates`) was given no
    /// limit to check.
    #[error("a call needs at least one (key, limit, cost) to decide: none was given")]
    NoLimits,

    /// [`check_all`](crate::RateLimiter::check_all) was given one bucket twice: the same key
    /// (and name) under two limits. Each (name, key) has one bucket; give each limit of a
    /// call its own name (`check_all_named`) or key.
    #[error(
        "the bucket `{0}` appears twice in one call: each limit of a call needs its own name or key (use check_all_named, or distinct keys)"
    )]
    DuplicateBucket(String),

    /// A custom `Store` that does not implement
    /// `check_all` was asked to decide several limits at once.
    #[error(
        "this store decides one limit per call: implement Store::check_all to decide several \
         limits of one call together"
    )]
    SeveralLimitsUnsupported,

    /// A custom `Store` that does not implement
    /// `peek` was asked to peek.
    #[error("this store cannot answer without taking: implement Store::peek")]
    PeekUnsupported,

    /// [`refund`](crate::RateLimiter::refund) was asked of a limiter on a custom
    /// `Store`: the trait has no way to give tokens back.
    #[error(
        "this store cannot give tokens back: a custom Store has no give-back, so a refund needs \
         the Redis or the memory store"
    )]
    RefundUnsupported,

    /// [`enter`](crate::RateLimiter::enter) was asked of a limiter on a custom
    /// `Store`: the trait has no way to give a slot back or renew it.
    #[error(
        "this store cannot hold concurrency slots: a custom Store has no release or renewal, so \
         a concurrency limit needs the Redis or the memory store"
    )]
    ConcurrencyUnsupported,

    /// [`refund`](crate::RateLimiter::refund) was asked under a window algorithm (the fixed
    /// or sliding window, the sliding log), whose count can be given back only with the time
    /// of the call that took it.
    #[error(
        "cannot refund under the limit {0}: a refund needs a bucket algorithm (the token bucket \
         or the leaky bucket); a window gives tokens back only with the time they were taken"
    )]
    RefundNeedsBucket(Limit),

    /// A call that settles its cost afterwards ([`check_estimate`](crate::RateLimiter::check_estimate))
    /// was asked under a limit that cannot settle.
    #[error(
        "cannot settle under the limit {0}: a settlement needs the token bucket (smooth refill), \
         the leaky bucket, the fixed window (a calendar quota is one) or the sliding log; the \
         sliding window, an interval refill and a concurrency limit cannot take an overdraft"
    )]
    CannotSettle(Limit),

    /// A call that settles its cost afterwards was asked of a limiter on a custom
    /// `Store`: the trait has no settlement.
    #[error(
        "this store cannot settle a call's cost: a custom Store has no settlement, so a call \
         that settles needs the Redis or the memory store"
    )]
    SettleUnsupported,

    /// [`Usage::settle_each`](crate::Usage::settle_each) was given another number of actual
    /// costs than the call has limits.
    #[error(
        "a settlement needs one actual cost per limit of the call: {limits} limits, {given} costs"
    )]
    SettleCount {
        /// The limits the call took from.
        limits: usize,
        /// The actual costs given.
        given: usize,
    },

    /// The key prefix would break the bucket keys' hash tags.
    #[error(
        "invalid prefix `{0}`: a prefix must not contain `{{` or `}}` (they would move keys between Redis Cluster slots)"
    )]
    InvalidPrefix(String),

    /// The builder was not told where to keep buckets.
    #[error("no store configured: call `.redis(url)` or `.memory()` on the builder")]
    NoStore,

    /// The Redis URL could not be parsed. The message shows no part of it: where a password
    /// ends in a URL that does not parse is anyone's guess.
    #[error(
        "invalid Redis URL (not shown: it may hold a password): {reason}; expected \
         redis://[user[:password]@]host[:port][/db] or rediss:// for TLS"
    )]
    InvalidUrl {
        /// What is wrong with it, in words that quote none of it.
        reason: String,
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

    /// Redis answered `build()` but would not load this crate's function library (or, where
    /// it offers no functions, its script), or would not run it: a read-only replica, a
    /// server out of memory (`maxmemory` with `noeviction`), an ACL without a command the
    /// scripts call. Loading is a write, so the URL must name a master (or the Sentinels),
    /// the server needs memory to spare, and the user the commands of the least ACL
    /// (docs/operations.md).
    #[error(
        "Redis at {url} would not load or run the rate-limit functions, answering: {source} \
         Loading them is a write (the URL must name a master, or the Sentinels, with memory to \
         spare), and running them needs the commands of the least ACL in docs/operations.md"
    )]
    ScriptLoad {
        /// The URL, with any password removed.
        url: String,
        /// What Redis answered.
        #[source]
        source: redis::RedisError,
    },

    /// The Redis server is older than 7.0 (the script needs `PEXPIRETIME`).
    #[error("Redis {version} is not supported: redis-ratelimit needs Redis 7.0 or newer")]
    UnsupportedRedis {
        /// The version the server reported.
        version: String,
    },

    /// A Redis limiter was built or used outside a Tokio runtime: its connections, deadline,
    /// heartbeat and reset listener run on Tokio.
    #[error(
        "redis-ratelimit needs a Tokio runtime (with its timers) to use Redis or to wait for a \
         call's turn: build the limiter (or call enable_redis_rate_limit!) and check, wait or \
         reset with it from code running on Tokio, e.g. inside #[tokio::main] or \
         Runtime::block_on"
    )]
    NoRuntime,

    /// The store did not answer within the per-call deadline.
    #[error("the rate-limit store did not answer within {0:?}")]
    Timeout(std::time::Duration),

    /// `enable_redis_rate_limit!` was called a second time.
    #[error(
        "redis-ratelimit is already enabled: enable_redis_rate_limit! may be called once per process"
    )]
    AlreadyEnabled,

    /// `reload_overrides` was called before `enable_redis_rate_limit!` succeeded.
    #[error(
        "redis-ratelimit is not enabled yet: call enable_redis_rate_limit! before reload_overrides"
    )]
    NotEnabled,

    /// A configuration override is invalid or names no declared limit; or the declared limits
    /// are wrong together: a name declared twice, a `shared` use of a name nobody declares
    /// (see [`validate_declared_limits`](crate::validate_declared_limits)).
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

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            write!(f, "Error::{}: ", self.variant())?;
        }
        let message = self.to_string();
        f.write_str(&message)?;
        // The causes the message does not already tell.
        let mut source = std::error::Error::source(self);
        let mut first = true;
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !message.contains(&cause_text) {
                if first {
                    f.write_str("\n\nCaused by:")?;
                    first = false;
                }
                write!(f, "\n    {cause_text}")?;
            }
            source = cause.source();
        }
        Ok(())
    }
}

impl Error {
    /// The variant's name, for `{:#?}`.
    fn variant(&self) -> &'static str {
        match self {
            Error::InvalidLimit(_) => "InvalidLimit",
            Error::CostExceedsBurst { .. } => "CostExceedsBurst",
            Error::ZeroCost => "ZeroCost",
            Error::NoLimits => "NoLimits",
            Error::DuplicateBucket(_) => "DuplicateBucket",
            Error::SeveralLimitsUnsupported => "SeveralLimitsUnsupported",
            Error::PeekUnsupported => "PeekUnsupported",
            Error::RefundUnsupported => "RefundUnsupported",
            Error::ConcurrencyUnsupported => "ConcurrencyUnsupported",
            Error::RefundNeedsBucket(_) => "RefundNeedsBucket",
            Error::CannotSettle(_) => "CannotSettle",
            Error::SettleUnsupported => "SettleUnsupported",
            Error::SettleCount { .. } => "SettleCount",
            Error::InvalidPrefix(_) => "InvalidPrefix",
            Error::NoStore => "NoStore",
            Error::InvalidUrl { .. } => "InvalidUrl",
            Error::Connect { .. } => "Connect",
            Error::ScriptLoad { .. } => "ScriptLoad",
            Error::UnsupportedRedis { .. } => "UnsupportedRedis",
            Error::NoRuntime => "NoRuntime",
            Error::Timeout(_) => "Timeout",
            Error::AlreadyEnabled => "AlreadyEnabled",
            Error::NotEnabled => "NotEnabled",
            Error::Config(_) => "Config",
            Error::Redis(_) => "Redis",
            Error::BadReply(_) => "BadReply",
        }
    }

    /// Whether the store failed (unreachable, slow, erroring), as opposed to a misuse: the
    /// failure policy decides such calls.
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            Error::Redis(_) | Error::Timeout(_) | Error::BadReply(_) | Error::Connect { .. }
        )
    }

    /// Whether the store's answer never came (no connection, a connection lost, no answer
    /// within the deadline), as opposed to an answer that was an error (`NOPERM`, a script's
    /// error, a reply of the wrong shape): after the first, an answer to a call sent before it
    /// says nothing of the store now; after the second, the server was up to answer.
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            Error::Timeout(_) | Error::Connect { .. } => true,
            Error::Redis(e) => never_answered(e),
            _ => false,
        }
    }
}

/// Whether Redis never answered: no connection, a connection lost, no answer in time (as
/// against an answer that was an error).
pub(crate) fn never_answered(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout()
}

/// The schemes of the URLs a store is built from (redis-rs's and this crate's): what
/// [`redact_url`] shows the rest of.
const STORE_SCHEMES: [&str; 11] = [
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "redis+unix",
    "unix",
    "valkey",
    "valkeys",
    "valkey+unix",
    "memory",
];

/// The URL without its secrets, for messages and logs; `(unparsable URL)` for what is not a
/// store URL at all.
///
/// Redis URL parsers disagree on where the userinfo ends when a password holds `@`, `/`, `?`
/// or `#` (`url` takes the last `@` of the authority, a split on the first `/` stops inside
/// the password), so this takes no parser's side: everything up to the *last* `@` of the
/// whole URL is userinfo, and only a user name of plain characters before its first `:` is
/// kept. Queries (`?password=..`) and fragments are dropped. When that userinfo holds a
/// `/`, `?` or `#`, the `@` may as well sit in a path or a query value, so nothing after the
/// scheme is shown. Over-redacting is the price of never showing a secret.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url
        .split_once("://")
        .filter(|(scheme, _)| STORE_SCHEMES.contains(scheme))
    else {
        // Not a store URL: it may be anything, a password included (`?a://a#__=`).
        return "(unparsable URL)".to_owned();
    };
    let mut out = format!("{scheme}://");
    let rest = match rest.rsplit_once('@') {
        Some((userinfo, _)) if userinfo.contains(['/', '?', '#']) => {
            out.push_str("***");
            return out;
        }
        Some((userinfo, after)) => {
            let user = userinfo.split_once(':').map(|(user, _)| user);
            match user {
                Some(user)
                    if user
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b)) =>
                {
                    out.push_str(user);
                    out.push_str(":***@");
                }
                _ => out.push_str("***@"),
            }
            after
        }
        None => rest,
    };
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    match rest.split_once('?') {
        // Not even the names: a password holding `&` or `=` would make pieces of itself look
        // like names.
        Some((path, _)) => {
            out.push_str(path);
            out.push_str("?***");
        }
        None => out.push_str(rest),
    }
    out
}

/// The rule of a call's cost, here because it answers in [`Error`]s (the limit knows nothing
/// of them).
impl Limit {
    /// Whether a call of `cost` tokens can be decided under this limit: at least one token,
    /// and no more than the bucket holds (one rule for the limiter and the tools).
    pub(crate) fn check_cost(&self, cost: u32) -> Result<(), Error> {
        if cost == 0 {
            return Err(Error::ZeroCost);
        }
        if !ratelimit_vocab::limits::cost_fits(cost, self.burst_capacity()) {
            return Err(Error::CostExceedsBurst { cost, limit: *self });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Error, redact_url};

    /// A message split over source lines must not carry the indentation into the text.
    #[test]
    fn messages_have_no_runs_of_spaces() {
        let messages = [
            Error::DuplicateBucket("p:{:k}".into()).to_string(),
            Error::NoLimits.to_string(),
            Error::ZeroCost.to_string(),
            Error::SeveralLimitsUnsupported.to_string(),
            Error::PeekUnsupported.to_string(),
            Error::RefundUnsupported.to_string(),
            Error::ConcurrencyUnsupported.to_string(),
            Error::RefundNeedsBucket(crate::limit::Limit::per_second(1)).to_string(),
            Error::CannotSettle(crate::limit::Limit::per_second(1)).to_string(),
            Error::SettleUnsupported.to_string(),
            Error::NoStore.to_string(),
            Error::NoRuntime.to_string(),
            Error::AlreadyEnabled.to_string(),
            Error::NotEnabled.to_string(),
        ];
        for m in messages {
            assert!(!m.contains("  "), "{m}");
        }
    }

    #[test]
    fn debug_is_the_readable_message() {
        let e =
            Error::Config("limits.toml: in `[limits.\"a\"]`: TOML parse error\n  |\n2 | x".into());
        assert_eq!(
            format!("{e:?}"),
            "limits.toml: in `[limits.\"a\"]`: TOML parse error\n  |\n2 | x"
        );
        assert!(format!("{e:#?}").starts_with("Error::Config: limits.toml"));
        // A cause the message already tells is not told twice; one it does not tell follows.
        let redis = redis::RedisError::from((redis::ErrorKind::Io, "connection refused"));
        let connect = Error::Connect {
            url: "redis://h:1".into(),
            source: redis,
        };
        assert_eq!(format!("{connect:?}"), connect.to_string());
        let limit = Error::from(
            crate::limit::Limit::try_new(0, 1, crate::limit::Unit::Second).unwrap_err(),
        );
        assert_eq!(
            format!("{limit:?}"),
            "invalid limit: `replenish` must be at least 1 token per unit"
        );
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        // The password holds `@`: the parser splits at the last one, and so does this.
        assert_eq!(redact_url("redis://:p@ss@h"), "redis://:***@h");
        assert_eq!(redact_url("redis://u:p/w@h:1/0"), "redis://***");
        assert_eq!(redact_url("rediss://u:p?w#x@h"), "rediss://***");
        assert_eq!(redact_url("redis://h/0?password=a@b&x=1"), "redis://***");
        // A user-only userinfo may be a password written without its `:`.
        assert_eq!(redact_url("redis://secret@h"), "redis://***@h");
        assert_eq!(
            redact_url("redis+cluster://:pw@a:1,b:2"),
            "redis+cluster://:***@a:1,b:2"
        );
        assert_eq!(
            redact_url("redis://h:1/0?password=secret&protocol=resp3"),
            "redis://h:1/0?***"
        );
        assert_eq!(redact_url("secret"), "(unparsable URL)");
        // What only looks like a URL shows nothing of itself (issue 44: 6 characters shown).
        assert_eq!(redact_url("?a://a#__="), "(unparsable URL)");
        assert_eq!(redact_url("s3cr3t://pa55w0rd"), "(unparsable URL)");
    }
}
