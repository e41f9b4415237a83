//! `macro_overhead`'s pairs, shared with `memory_instructions` (which counts them in
//! instructions): a function under `#[rate_limit]` and the same written out with
//! `check_named`, on one key (`Global`) and on a key that changes every call (`Rotating`),
//! both on the memory limiter in [`LIMITER`].

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::OnceLock;

use redis_ratelimit::{
    Global, KeyResolver, Limit, RateLimited, RateLimiter, RequestContext, rate_limit,
};

/// Both functions share this name, so both use the same bucket key.
const NAME: &str = "bench::limited";
/// Every call admitted, the bucket never full (so never dropped): the write path every time.
pub(crate) const LIMIT: Limit = Limit::per_second(1).burst(1_000_000_000);

/// The limiter of every function here, set by the bench before its first call.
pub(crate) static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

/// The keys `Rotating` and `by_hand_rotating` take in turn: [`set_keys`]'s, or 1,024
/// `client-NNNN`.
static KEYS: OnceLock<Vec<String>> = OnceLock::new();

#[derive(Debug)]
pub(crate) struct ApiError;

impl From<RateLimited> for ApiError {
    fn from(_: RateLimited) -> Self {
        ApiError
    }
}

#[rate_limit(
    replenish = 1,
    burst = 1_000_000_000,
    key = Global,
    name = "bench::limited",
    limiter = LIMITER
)]
pub(crate) async fn annotated(x: u64) -> Result<u64, ApiError> {
    Ok(x + 1)
}

pub(crate) async fn by_hand(x: u64) -> Result<u64, ApiError> {
    checked_by_hand(NAME, "global", x).await
}

/// What the annotated functions do, written out: `check_named`, then the body.
async fn checked_by_hand(name: &str, key: &str, x: u64) -> Result<u64, ApiError> {
    let limiter = LIMITER.get().ok_or(ApiError)?;
    let decision = limiter
        .check_named(name, key, &LIMIT, 1)
        .await
        .map_err(|_| ApiError)?;
    if !decision.allowed {
        return Err(ApiError);
    }
    Ok(x + 1)
}

/// Makes `keys` the ones the rotating pair takes in turn (before its first call; later, the
/// keys already in use stay). Unused by `macro_overhead`, which keeps the default.
#[allow(dead_code)]
pub(crate) fn set_keys(keys: Vec<String>) {
    let _ = KEYS.set(keys);
}

/// The keys the rotating pair takes in turn.
pub(crate) fn keys() -> &'static [String] {
    KEYS.get_or_init(|| (0..1024).map(|i| format!("client-{i:04}")).collect())
}

thread_local! {
    static TURN: Cell<usize> = const { Cell::new(0) };
}

/// The next of [`keys`], on this thread.
fn next_key() -> &'static str {
    let keys = keys();
    let i = TURN.with(|t| {
        let i = t.get();
        t.set((i + 1) % keys.len());
        i
    });
    &keys[i]
}

/// A key that changes on every call.
struct Rotating;

impl KeyResolver for Rotating {
    fn resolve<'a>(&'a self, _: &'a RequestContext) -> Option<Cow<'a, str>> {
        Some(Cow::Borrowed(next_key()))
    }
}

#[rate_limit(
    replenish = 1,
    burst = 1_000_000_000,
    key = Rotating,
    name = "bench::rotating",
    limiter = LIMITER
)]
pub(crate) async fn annotated_rotating(x: u64) -> Result<u64, ApiError> {
    Ok(x + 1)
}

pub(crate) async fn by_hand_rotating(x: u64) -> Result<u64, ApiError> {
    checked_by_hand("bench::rotating", next_key(), x).await
}
