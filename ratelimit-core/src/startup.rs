//! `enable_redis_rate_limit!`: builds the global limiter, applies configuration overrides to
//! the declared limits, and fails fast on anything wrong.

use std::path::PathBuf;

use crate::errors::Error;
use crate::limiter::RateLimiterBuilder;
use crate::limiter::inner::RateLimiter;
use crate::registry::{self, Effective, LimitDeclaration, declared_limits, runtime};

/// The URL used when neither `url = ..` nor `REDIS_URL` gives one.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Settings of `enable_redis_rate_limit!(...)`: a [`RateLimiterBuilder`] for the limiter, and
/// the overrides file.
///
/// Whatever the builder leaves unset gets `enable`'s defaults, not the builder's: the store
/// is the Redis at env `REDIS_URL`, else [`DEFAULT_REDIS_URL`]; the prefix is the calling
/// crate's name.
#[derive(Debug)]
#[must_use]
pub struct EnableOptions {
    crate_name: String,
    limiter: RateLimiterBuilder,
    config: Option<PathBuf>,
}

impl EnableOptions {
    /// Defaults, with keys prefixed by `crate_name` (the macro passes the calling crate's).
    pub fn new(crate_name: &str) -> EnableOptions {
        EnableOptions::with_builder(crate_name, RateLimiter::builder())
    }

    /// The limiter as `builder` configures it (deny cache, circuit cool-down, fallback store,
    /// ...), with `enable`'s defaults for the store and prefix if it has none.
    pub fn with_builder(crate_name: &str, builder: RateLimiterBuilder) -> EnableOptions {
        EnableOptions {
            crate_name: crate_name.to_owned(),
            limiter: builder,
            config: None,
        }
    }

    /// A TOML file of overrides (default: env `RATE_LIMIT_CONFIG`, else none). See
    /// [`crate::overrides`] for the format.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(path.into());
        self
    }

    fn resolved_config(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            std::env::var_os(crate::overrides::CONFIG_VAR)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
    }
}

fn default_url() -> String {
    std::env::var("REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned())
}

/// Builds the global limiter from `options`; what `enable_redis_rate_limit!` runs.
///
/// # Errors
/// [`Error::AlreadyEnabled`] on a second call; a bad URL, an unreachable or too old Redis; an
/// override that names no declared limit or has an invalid value ([`Error::Config`]); a
/// declared `cost` larger than its `burst`; a limit name declared twice, or a `shared` use
/// of a name that nobody declares (see [`validate_declared_limits`](crate::validate_declared_limits)).
pub async fn enable(options: EnableOptions) -> Result<&'static RateLimiter, Error> {
    let Some(_claim) = registry::claim_enable() else {
        return Err(Error::AlreadyEnabled);
    };
    enable_claimed(options).await
}

async fn enable_claimed(options: EnableOptions) -> Result<&'static RateLimiter, Error> {
    let mut decls = declared_limits();
    let config = options.resolved_config();
    // Before connecting: a configuration mistake fails fast.
    let mut resolved = resolve_limits(&decls, config.as_deref())?;
    let limiter = options
        .limiter
        .or_defaults(default_url, &options.crate_name)
        .build()
        .await?;
    let settling = runtime::settling();
    // A layer's limit built at run time while the limiter was built: resolved with the rest
    // (declarations are only ever added, so the same count is the same set).
    let now = declared_limits();
    if now.len() != decls.len() {
        resolved = resolve_limits(&now, config.as_deref())?;
        decls = now;
    }
    for (decl, effective) in decls.iter().zip(resolved) {
        decl.set_effective(effective);
    }
    registry::remember_config(config);
    let limiter = registry::install(limiter);
    // From here on, a limit built at run time resolves its own limit in force.
    drop(settling);
    crate::observe::log!(
        info,
        prefix = limiter.prefix(),
        limits = registry::limit_names(&decls).len(),
        "redis-ratelimit enabled: {}",
        registry::describe_names(&decls)
    );
    Ok(limiter)
}

/// Reads the overrides again, from the file `enable_redis_rate_limit!` read (its `config`,
/// else env `RATE_LIMIT_CONFIG` as it was then) and from the environment as it is now, and
/// puts them in force: for a service to change its quotas without a restart (the examples do
/// it on `SIGHUP`).
///
/// Everything is validated first: an error (a file that does not parse, a limit it names that
/// is not declared, an invalid value) leaves every limit as it was, and names the file or
/// variable, the limit and the field. Then each limit's new value is swapped in whole: a call
/// sees the old limit or the new one, never a mix, and no call waits on a lock. A function with
/// stacked limits may see one limit's new value and another's old for the instant of the swap.
///
/// Buckets keep their state: tokens taken stay taken under the new limit, and a bucket over a
/// lowered burst answers an honest `retry_after` (see docs/operations.md). The global
/// limiter's deny cache is cleared, so that a raised limit admits at once.
///
/// ```no_run
/// # async fn run() -> Result<(), ratelimit_core::Error> {
/// // After editing limits.toml:
/// ratelimit_core::reload_overrides().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::NotEnabled`] before `enable_redis_rate_limit!` has succeeded; [`Error::Config`]
/// for an invalid override, with nothing changed.
pub async fn reload_overrides() -> Result<(), Error> {
    let (Some(config), Some(limiter)) = (registry::config(), registry::global()) else {
        return Err(Error::NotEnabled);
    };
    let mut changed = Vec::new();
    {
        // No limit is built at run time meanwhile: each is resolved here or by its building,
        // from this file or a newer one.
        let _settling = runtime::settling();
        let decls = declared_limits();
        let resolved = resolve_limits(&decls, config.as_deref())?;
        for (decl, effective) in decls.iter().zip(resolved) {
            if decl.effective() != effective {
                changed.push(decl.name());
            }
            decl.set_effective(effective);
        }
    }
    limiter.clear_deny_cache();
    crate::observe::log!(
        info,
        changed = changed.len(),
        "redis-ratelimit reloaded its overrides: {}",
        if changed.is_empty() {
            "nothing changed".to_owned()
        } else {
            format!("changed {}", changed.join(", "))
        }
    );
    Ok(())
}

/// Validates every declaration and applies the overrides, without touching any of them yet.
fn resolve_limits(
    decls: &[&'static LimitDeclaration],
    config: Option<&std::path::Path>,
) -> Result<Vec<Effective>, Error> {
    // Dangling and duplicated names: judged once for the program, as for calls of a limiter
    // of the user's own.
    registry::validate_declared_limits()?;
    let overrides = crate::overrides::load(config, decls)?;
    decls
        .iter()
        .map(|decl| resolve_one(decl, &overrides))
        .collect()
}

/// The limit in force of `decl`, a layer's limit built at run time, once enable has run:
/// resolved as [`reload_overrides`] would resolve it, from the overrides file enable read and
/// the environment as they are now. Overrides of names not built yet are left for the reload
/// that follows their building (a router rebuilt on reload builds them one after the other).
/// `None` before enable, which resolves it with the rest.
#[cfg_attr(not(feature = "http-framework"), allow(dead_code))]
pub(crate) fn resolve_built(decl: &LimitDeclaration) -> Result<Option<Effective>, Error> {
    let Some(config) = registry::config() else {
        return Ok(None);
    };
    let mut decls: Vec<&LimitDeclaration> = declared_limits().into_iter().collect();
    decls.push(decl);
    let overrides = crate::overrides::load_known(config.as_deref(), &decls)?;
    resolve_one(decl, &overrides).map(Some)
}

/// The limit in force of one declaration under `overrides`, checked.
fn resolve_one(
    decl: &LimitDeclaration,
    overrides: &crate::overrides::Overrides,
) -> Result<Effective, Error> {
    // A shared use: the declaring function's limit in force, at its own cost.
    let shared = decl.is_shared_use().then(|| decl.declaring()).flatten();
    let effective = match shared {
        Some(declaring) => Effective {
            cost: decl.declared_cost(),
            ..overrides.apply(declaring)?
        },
        None => overrides.apply(decl)?,
    };
    if decl.settles() && !effective.limit.settles() {
        return Err(Error::Config(format!(
            "limit `{}` ({}:{}): its calls settle their actual cost (`settle = ..`), but an \
             override makes it {}, which cannot owe tokens (a sliding window, an interval \
             refill or a concurrency limit); override it with `token_bucket`, \
             `leaky_bucket`, `fixed_window` or `sliding_log`, or remove `settle`",
            decl.name(),
            decl.file(),
            decl.line(),
            effective.limit
        )));
    }
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
}
