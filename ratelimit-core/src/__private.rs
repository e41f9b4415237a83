//! Support for the code `#[rate_limit]` and `enable_redis_rate_limit!` generate. Not a public
//! API: its items change without notice.

use std::sync::LazyLock;

pub use inventory;

use crate::context::{record_current, with_current};
use crate::decision::Source;
pub use crate::naming::{bucket_key, key_slot};
pub use crate::registry::{LimitDeclaration, Registration, global};
use crate::{KeyResolver, RateLimited, RateLimiter};

/// The check every `#[rate_limit]` function starts with: resolves the key from the current
/// request context, decides, records the decision for the response headers, and returns the
/// rejection when the call must not run.
pub async fn check(
    decl: &'static LimitDeclaration,
    key: &dyn KeyResolver,
    limiter: Option<&RateLimiter>,
) -> Result<(), RateLimited> {
    let effective = decl.effective();
    if !effective.enabled {
        return Ok(());
    }
    let (limiter, enabled) = match limiter {
        Some(l) => (l, true),
        None => {
            decl.warn_once(&format_args!(
                "redis-ratelimit is not enabled: `{}` ran before `enable_redis_rate_limit!().await` \
                 (or its `limiter = ..` is not initialised); deciding it by its failure policy \
                 ({}) as if Redis were down",
                decl.name(),
                effective.limit.failure_policy().unwrap_or_default()
            ));
            (&*UNENABLED, false)
        }
    };
    let name = decl.name();
    let bucket = with_current(|ctx| {
        ctx.set_handler(name);
        key.resolve(ctx).map(|k| limiter.named_bucket_key(name, &k))
    });
    let decision = match bucket {
        Some(bucket) => {
            let decided = if enabled {
                limiter
                    .check_bucket(&bucket, &effective.limit, effective.cost)
                    .await
            } else {
                limiter.decide_by_policy(&bucket, &effective.limit, effective.cost)
            };
            match decided {
                Ok(d) => (d, bucket),
                Err(e) => {
                    // Only misuse reaches here (cost validated at enable); refuse rather than
                    // run unchecked, and say why once.
                    decl.warn_once(&format_args!("rate limit `{name}` cannot be checked: {e}"));
                    let d = limiter
                        .decide_without_key(&effective.limit, effective.cost)
                        .with_source(Source::FailClosed);
                    (d, bucket)
                }
            }
        }
        None => {
            let d = limiter.decide_without_key(&effective.limit, effective.cost);
            (d, String::new())
        }
    };
    let (decision, bucket) = decision;
    record_current(name, decision);
    if decision.allowed {
        Ok(())
    } else {
        Err(RateLimited::new(decision, bucket).with_name(name))
    }
}

/// Calls made before `enable_redis_rate_limit!` are decided by their failure policy, as if
/// the store were down; this limiter holds the fallback's memory.
static UNENABLED: LazyLock<RateLimiter> = LazyLock::new(RateLimiter::unenabled);

/// What `limiter = ..` may name: a limiter, or a cell that holds one once initialised.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a limiter",
    label = "`limiter = ..` takes a `RateLimiter`, or a `OnceLock`/`LazyLock` of one"
)]
pub trait AsLimiter {
    /// The limiter, if there is one yet.
    fn as_limiter(&self) -> Option<&RateLimiter>;
}

impl AsLimiter for RateLimiter {
    fn as_limiter(&self) -> Option<&RateLimiter> {
        Some(self)
    }
}

impl AsLimiter for std::sync::OnceLock<RateLimiter> {
    fn as_limiter(&self) -> Option<&RateLimiter> {
        self.get()
    }
}

impl<F: FnOnce() -> RateLimiter> AsLimiter for LazyLock<RateLimiter, F> {
    fn as_limiter(&self) -> Option<&RateLimiter> {
        Some(self)
    }
}

impl<T: AsLimiter + ?Sized> AsLimiter for &T {
    fn as_limiter(&self) -> Option<&RateLimiter> {
        (**self).as_limiter()
    }
}

/// The return types `#[rate_limit]` accepts: `Result<T, E>` with `E: From<RateLimited>`.
#[diagnostic::on_unimplemented(
    message = "`#[rate_limit]` functions must return `Result<_, E>` where `E: From<RateLimited>`, not `{Self}`",
    label = "the rejection `RateLimited` must convert into this return type",
    note = "return `Result<T, E>` and implement `From<redis_ratelimit::RateLimited>` for `E`"
)]
pub trait RateLimitReturn {
    /// The value a rejected call returns.
    fn rate_limited(rejection: RateLimited) -> Self;
}

impl<T, E: From<RateLimited>> RateLimitReturn for Result<T, E> {
    fn rate_limited(rejection: RateLimited) -> Self {
        Err(E::from(rejection))
    }
}
