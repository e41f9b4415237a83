//! Support for the code `#[rate_limit]` and `enable_redis_rate_limit!` generate. Not a public
//! API: its items change without notice.

use std::sync::LazyLock;

pub use inventory;

pub use crate::async_key::ErasedAsync;
pub use crate::limiter::IntoActual;
pub use crate::pipeline::convert::{
    IntoCost, IntoTier, KeyOf, ViaAsync, ViaDisplay, ViaNeither, ViaResolver,
};
pub use crate::pipeline::{
    Call, Cost, Fixed, Holding, KeyArg, Taken, check, check_all, check_key, refund, settle,
};

use crate::limit::Algorithm;
use crate::limit::Limit;
use crate::limit::Refill;
use crate::limit::Unit;
use crate::limiter::inner::RateLimiter;
use crate::pipeline::verdict::RateLimited;
use crate::registry::LimitDeclaration;
pub use crate::registry::{Registration, global};
use crate::resolvers::KeyResolver;

/// The declaration of one `#[rate_limit]` function, in its `static`.
pub const fn declaration(
    name: &'static str,
    limit: Limit,
    cost: u32,
    key: &'static str,
    file: &'static str,
    line: u32,
) -> LimitDeclaration {
    LimitDeclaration::new(name, limit, cost, key, file, line)
}

/// What a layer's `key = ..` may be: a [`KeyResolver`] (a layer has no arguments whose value
/// could be the key).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a key resolver",
    label = "a layer's `key = ..` must implement `KeyResolver`",
    note = "a layer's limit keys each request by what it reads of it: `Ip`, `Route`, `Header(\"x-api-key\")`, `User`, or your own `KeyResolver`"
)]
pub trait LayerKey: KeyResolver {}

impl<K: KeyResolver> LayerKey for K {}

/// A layer's own limit (`layer_limit!`): its declaration, and the key resolver of its calls.
#[cfg(feature = "http-framework")]
pub fn layer_limit<K: LayerKey>(
    decl: &'static LimitDeclaration,
    key: K,
) -> crate::http::LayerLimit {
    crate::http::LayerLimit::declared(decl, key)
}

/// A layer's `tier = ..`: a function of the request whose answer is a tier, converted as a
/// function's `tier` is ([`IntoTier`]).
#[cfg(feature = "http-framework")]
pub fn layer_tier<T: IntoTier>(
    tier: impl Fn(&crate::request::RequestContext) -> T + Send + Sync + 'static,
) -> impl Fn(&crate::request::RequestContext) -> Option<crate::limit::Tier> + Send + Sync + 'static
{
    move |ctx| tier(ctx).to_tier()
}

/// The declaration of a function that draws from the limit `name` another declares
/// (`#[rate_limit(shared = "name")]`).
pub const fn shared(
    name: &'static str,
    cost: u32,
    key: &'static str,
    file: &'static str,
    line: u32,
) -> LimitDeclaration {
    LimitDeclaration::sharing(name, cost, key, file, line)
}

/// `decl` with its own empty-key policy and the status of its refusals for want of a key.
pub const fn with_empty_key(
    decl: LimitDeclaration,
    policy: Option<crate::limit::EmptyKeyPolicy>,
    status: Option<u16>,
) -> LimitDeclaration {
    decl.with_empty_key(policy, status)
}

/// `decl`, whose calls settle their actual cost (`settle = ..`).
pub const fn settling(decl: LimitDeclaration) -> LimitDeclaration {
    decl.settling()
}

/// `decl` answering a refusal by its bucket with `status` instead of 429.
pub const fn with_limited_status(decl: LimitDeclaration, status: Option<u16>) -> LimitDeclaration {
    decl.with_limited_status(status)
}

/// `decl` listing the tiers its calls may be given.
pub const fn with_tiers(
    decl: LimitDeclaration,
    tiers: &'static [crate::limit::Tier],
) -> LimitDeclaration {
    decl.with_tiers(tiers)
}

/// The limit of one `#[rate_limit]`, from every argument at once, evaluated in the
/// declaration's `static` (`Limit::declared`): an invalid one is a compile error.
pub const fn limit(
    replenish: u32,
    burst: Option<u32>,
    unit: Unit,
    algorithm: Algorithm,
    refill: Refill,
    initial: Option<u32>,
) -> Limit {
    Limit::declared(replenish, burst, unit, algorithm, refill, initial)
}

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
    #[inline]
    fn as_limiter(&self) -> Option<&RateLimiter> {
        Some(self)
    }
}

impl AsLimiter for std::sync::OnceLock<RateLimiter> {
    #[inline]
    fn as_limiter(&self) -> Option<&RateLimiter> {
        self.get()
    }
}

impl<F: FnOnce() -> RateLimiter> AsLimiter for LazyLock<RateLimiter, F> {
    #[inline]
    fn as_limiter(&self) -> Option<&RateLimiter> {
        Some(self)
    }
}

impl<T: AsLimiter + ?Sized> AsLimiter for &T {
    #[inline]
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
    fn rate_limited(rejection: Box<RateLimited>) -> Self;
}

impl<T, E: From<RateLimited>> RateLimitReturn for Result<T, E> {
    fn rate_limited(rejection: Box<RateLimited>) -> Self {
        Err(E::from(*rejection))
    }
}

/// Whether a call's `output` counts, by the limit's `count = ..` predicate: written so that a
/// closure's argument type is known from the function's return type.
pub fn counts<T>(output: &T, predicate: impl FnOnce(&T) -> bool) -> bool {
    predicate(output)
}
