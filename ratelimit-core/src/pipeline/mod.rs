//! How a limited call is decided: the steps, and the two paths through them.
//!
//! An entrance only builds checks ([`check::Check`]): the public methods of
//! [`RateLimiter`] from their arguments, the code `#[rate_limit]` generates from what the call
//! brings ([`call`]: a cost, a tier, an exemption; [`one`] and [`several`] resolve the keys and
//! conclude), the HTTP layers from their limits. Then:
//! - a call of one rate limit is decided in its first poll when the store answers at once
//!   (`local.rs`), else later, boxed ([`local::decide_later`]);
//! - any slice of checks goes through the funnel ([`decide::decide_checks`],
//!   `decide.rs`), which takes a peek, a concurrency limit's slots (`slots.rs`) or the rest
//!   (`remote.rs`) by what the checks ask.
//!
//! Both end in the same steps: the deny cache, the circuit, the deadline, the store and the
//! failure policy (`remote.rs`), shadow mode and a reservation's wait (`waiting.rs`). The
//! attribute's calls are then concluded in one place: described (span, metrics), recorded for
//! the response ([`verdict`]), kept for a refund, and turned into the rejection.

mod call;
pub(crate) mod check;
pub(crate) mod convert;
pub(crate) mod decide;
pub(crate) mod give;
#[cfg(feature = "http-framework")]
mod layer_limit;
#[cfg(feature = "http-framework")]
pub(crate) mod layer_scope;
pub(crate) mod local;
pub(crate) mod one;
pub(crate) mod provisional;
pub(crate) mod remote;
pub(crate) mod scope;
pub(crate) mod several;
pub(crate) mod slots;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
pub(crate) mod verdict;
pub(crate) mod waiting;
pub(crate) mod without_store;

use std::sync::LazyLock;

#[cfg(feature = "http-framework")]
pub(crate) use call::release_all;
pub use call::{Call, Cost, Fixed, Holding, KeyArg, Taken};
pub(crate) use decide::{Ask, Decided};
#[cfg(feature = "http-framework")]
pub use layer_limit::LayerLimit;
pub use one::{check, check_key};
pub use several::check_all;
#[cfg(feature = "http-framework")]
pub(crate) use several::decide_all;

use crate::decision::Source;
use crate::limiter::inner::RateLimiter;
use crate::pipeline::check::{Check, TakenPart, Taking};
use crate::registry::{LimitDeclaration, Warning};
use crate::resolvers::KeyResolver;
use scope::missing_piece;

/// The limiter that decides `decl`'s calls, and whether it is enabled; before
/// `enable_redis_rate_limit!` (or with its `limiter = ..` not initialised), one that decides
/// by the failure policy as if Redis were down, said once per limit.
#[inline]
pub(crate) fn limiter_or_unenabled<'a>(
    decl: &'static LimitDeclaration,
    limiter: Option<&'a RateLimiter>,
) -> (&'a RateLimiter, bool) {
    match limiter {
        Some(l) => (l, true),
        None => (unenabled(decl), false),
    }
}

/// [`limiter_or_unenabled`] before enable: the limiter of the failure policy, said once.
#[cold]
fn unenabled(decl: &'static LimitDeclaration) -> &'static RateLimiter {
    decl.warn_once(
        Warning::NotEnabled,
        &format_args!(
            "redis-ratelimit is not enabled: `{}` ran before \
             `enable_redis_rate_limit!().await` (or its `limiter = ..` is not \
             initialised); deciding it by its failure policy ({}) as if Redis were down",
            decl.name(),
            decl.effective().limit.failure_policy().unwrap_or_default()
        ),
    );
    &UNENABLED
}

/// Gives back what a call took under `decl` (kept in `taken` by its check), when the call's
/// outcome does not count (`#[rate_limit(count = ..)]`). A refund that fails leaves the
/// tokens taken, as if the call had counted, and is said once per limit.
pub async fn refund(decl: &'static LimitDeclaration, taken: &Taken, limiter: Option<&RateLimiter>) {
    let parts = taken.take();
    if parts.is_empty() {
        return;
    }
    let (limiter, _) = limiter_or_unenabled(decl, limiter);
    let checks: Vec<Check<'_>> = parts.iter().map(TakenPart::check).collect();
    let sources: Vec<Source> = parts.iter().map(|p| p.source).collect();
    let refunded = decide::decide_checks(limiter, &checks, Ask::Refund(&sources)).await;
    {
        if let Err(e) = refunded {
            decl.warn_once(
                Warning::CannotRefund,
                &format_args!(
                    "the tokens of a call of `{}` that did not count could not be given back \
                     (they stay taken): {e}",
                    decl.name()
                ),
            );
        }
    }
}

/// Settles what a call took under `decl` (its estimate, kept in `taken` by its check) at its
/// `actual` cost (`#[rate_limit(settle = ..)]`), as [`Usage::settle`](crate::Usage::settle)
/// does. A limit that cannot owe (a tier or an override made it a sliding window) keeps the
/// estimate, and so does a settlement that fails; each is said once per limit.
pub async fn settle(
    decl: &'static LimitDeclaration,
    taken: &Taken,
    actual: u32,
    limiter: Option<&RateLimiter>,
) {
    let (parts, cannot): (Vec<_>, Vec<_>) =
        taken.take().into_iter().partition(|p| p.limit.settles());
    if let Some(part) = cannot.first() {
        decl.warn_once(
            Warning::CannotSettle,
            &format_args!(
                "a call of `{}` could not settle its cost: its limit is now {} (a tier or an \
                 override), which cannot owe tokens; its estimate stays taken",
                decl.name(),
                part.limit
            ),
        );
    }
    if parts.is_empty() {
        return;
    }
    let (limiter, _) = limiter_or_unenabled(decl, limiter);
    let checks: Vec<Check<'_>> = parts.iter().map(TakenPart::check).collect();
    let taken: Vec<Taking> = parts.iter().map(|p| p.taking(actual)).collect();
    match decide::decide_checks(limiter, &checks, Ask::Settle(&taken)).await {
        Ok(decided) => {
            for (took, gave) in decided.settled {
                crate::observe::settled(crate::observe::Name::Declared(decl.name()), took, gave);
            }
        }
        Err(e) => decl.warn_once(
            Warning::CannotSettle,
            &format_args!(
                "a call of `{}` could not settle its cost (its estimate stays taken): {e}",
                decl.name()
            ),
        ),
    }
}

/// A forgotten layer (or `ConnectInfo`) makes every call keyless and refused with nothing to
/// say why; say it once per limit. A request that simply lacks what the key reads is the
/// empty-key policy's business, not a misconfiguration, and is not logged.
fn report_missing_piece<K: KeyResolver + ?Sized>(decl: &'static LimitDeclaration, key: &K) {
    if decl.warned(Warning::MissingPiece) {
        return;
    }
    if let Some(missing) = missing_piece(key) {
        decl.warn_once(
            Warning::MissingPiece,
            &format_args!(
                "rate limit `{}` (key = {}) finds no key for any call: {missing}; until then every \
             call is decided by the empty-key policy (refused with 403 by default)",
                decl.name(),
                decl.key()
            ),
        );
    }
}

/// Calls made before `enable_redis_rate_limit!` are decided by their failure policy, as if
/// the store were down; this limiter holds the fallback's memory.
static UNENABLED: LazyLock<RateLimiter> = LazyLock::new(RateLimiter::unenabled);
