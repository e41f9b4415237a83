//! `enable_redis_rate_limit!`: builds the global limiter, applies configuration overrides to
//! the declared limits, and fails fast on anything wrong.

use std::path::PathBuf;
use std::time::Duration;

use crate::registry::{self, Effective, LimitDeclaration, declared_limits};
use crate::{EmptyKeyPolicy, Error, FailurePolicy, RateLimiter};

/// The URL used when neither `url = ..` nor `REDIS_URL` gives one.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Settings of `enable_redis_rate_limit!(...)`; every one is optional.
#[derive(Debug, Clone)]
#[must_use]
pub struct EnableOptions {
    url: Option<String>,
    prefix: String,
    policy: FailurePolicy,
    empty_key: EmptyKeyPolicy,
    deadline: Option<Duration>,
    config: Option<PathBuf>,
}

impl EnableOptions {
    /// Defaults, with keys prefixed by `crate_name` (the macro passes the calling crate's).
    pub fn new(crate_name: &str) -> EnableOptions {
        EnableOptions {
            url: None,
            prefix: crate_name.to_owned(),
            policy: FailurePolicy::default(),
            empty_key: EmptyKeyPolicy::default(),
            deadline: Some(crate::DEFAULT_DEADLINE),
            config: None,
        }
    }

    /// The Redis URL (default: env `REDIS_URL`, then [`DEFAULT_REDIS_URL`]); `memory://`
    /// keeps buckets in this process.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// The key prefix (default: the calling crate's name).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// What to do when Redis fails (default [`FailurePolicy::Fallback`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// What to do with calls that have no key (default [`EmptyKeyPolicy::Deny`]).
    pub fn empty_key_policy(mut self, policy: EmptyKeyPolicy) -> Self {
        self.empty_key = policy;
        self
    }

    /// How long a call may wait for Redis before the failure policy decides (default
    /// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE)).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// A TOML file of overrides (default: env `RATE_LIMIT_CONFIG`, else none). See
    /// [`crate::overrides`] for the format.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(path.into());
        self
    }

    fn resolved_url(&self) -> String {
        self.url
            .clone()
            .or_else(|| std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned())
    }

    fn resolved_config(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            std::env::var_os("RATE_LIMIT_CONFIG")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
    }
}

/// Builds the global limiter from `options`; what `enable_redis_rate_limit!` runs.
///
/// # Errors
/// [`Error::AlreadyEnabled`] on a second call; a bad URL, an unreachable or too old Redis; an
/// override that names no declared limit or has an invalid value ([`Error::Config`]); a
/// declared `cost` larger than its `burst`; two limits declared with one name.
pub async fn enable(options: EnableOptions) -> Result<&'static RateLimiter, Error> {
    if !registry::claim_enable() {
        return Err(Error::AlreadyEnabled);
    }
    let result = enable_claimed(options).await;
    if result.is_err() {
        registry::release_enable();
    }
    result
}

async fn enable_claimed(options: EnableOptions) -> Result<&'static RateLimiter, Error> {
    let decls = declared_limits();
    let resolved = resolve_limits(&decls, options.resolved_config().as_deref())?;
    let url = options.resolved_url();
    let limiter = RateLimiter::builder()
        .redis(url)
        .prefix(options.prefix.clone())
        .failure_policy(options.policy)
        .empty_key_policy(options.empty_key)
        .deadline(options.deadline)
        .build()
        .await?;
    for (decl, effective) in decls.iter().zip(resolved) {
        decl.set_effective(effective);
    }
    let limiter = registry::install(limiter);
    tracing::info!(
        prefix = limiter.prefix(),
        limits = decls.len(),
        "redis-ratelimit enabled: {}",
        registry::describe_names(&decls)
    );
    Ok(limiter)
}

/// Validates every declaration and applies the overrides, without touching any of them yet.
fn resolve_limits(
    decls: &[&'static LimitDeclaration],
    config: Option<&std::path::Path>,
) -> Result<Vec<Effective>, Error> {
    for pair in decls.windows(2) {
        if pair[0].name() == pair[1].name() {
            return Err(Error::Config(format!(
                "two limits are named `{}` ({}:{} and {}:{}); give one of them another `name = \"..\"`",
                pair[0].name(),
                pair[0].file(),
                pair[0].line(),
                pair[1].file(),
                pair[1].line()
            )));
        }
    }
    let overrides = crate::overrides::load(config, decls)?;
    decls
        .iter()
        .map(|decl| {
            let effective = overrides.apply(decl)?;
            if effective.cost > effective.limit.burst_capacity() {
                return Err(Error::Config(format!(
                    "limit `{}` ({}:{}): cost {} exceeds burst {}, so no call could ever pass",
                    decl.name(),
                    decl.file(),
                    decl.line(),
                    effective.cost,
                    effective.limit.burst_capacity()
                )));
            }
            Ok(effective)
        })
        .collect()
}
