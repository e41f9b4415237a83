//! Procedural macros of [redis-ratelimit](https://docs.rs/redis-ratelimit):
//! [`#[rate_limit]`](macro@rate_limit) and [`enable_redis_rate_limit!`].
//!
//! Use them through the `redis-ratelimit` crate, which re-exports them with the runtime
//! they expand onto; this crate holds no runtime logic. The names it takes, the wait syntax
//! and the exact arithmetic it checks limits with come from `ratelimit-vocab`, which the
//! runtime uses too: a limit the macro accepts, the runtime accepts, with the same messages.

mod args;
mod attr;
mod enable;
mod expand;
mod item;
mod layer;
mod params;
mod stack;
mod valid;

use proc_macro::TokenStream;

/// Limits how often an `async fn` runs: a token bucket per (function, key), shared by every
/// instance of the service through Redis.
///
/// ```
/// use redis_ratelimit::{rate_limit, RateLimited, Header};
///
/// #[derive(Debug)]
/// enum ApiError {
///     TooManyRequests(RateLimited),
/// }
///
/// impl From<RateLimited> for ApiError {
///     fn from(rejection: RateLimited) -> Self {
///         ApiError::TooManyRequests(rejection)
///     }
/// }
///
/// /// 3 calls per minute per API key on average, up to 300 at once.
/// #[rate_limit(replenish = 3, burst = 300, unit = "minute", key = Header("x-api-key"))]
/// async fn list_orders() -> Result<Vec<u64>, ApiError> {
///     Ok(vec![1, 2, 3])
/// }
/// ```
///
/// # Arguments
///
/// | argument | type | default | meaning |
/// |---|---|---|---|
/// | `replenish` | integer ≥ 1 | required | tokens added back per `unit` (a window: tokens admitted per window) |
/// | `burst` | integer ≥ 1 | `replenish` | the bucket's capacity: the most calls allowed at once; a `leaky_bucket`'s queue size; not on a window |
/// | `unit` | `"second"`, `"minute"`, `"hour"`, `"day"` | `"second"` | the period of `replenish` |
/// | `key` | an expression whose value implements `KeyResolver` | `Uri` | which bucket a call takes from |
/// | `cost` | integer ≥ 1, at most `burst` | `1` | tokens one call takes |
/// | `name` | a string | `"module::path::function"`; `"module::path::function#n"` for the n-th of [several](#several-limits) | the limit's name in config overrides, logs and metrics |
/// | `limiter` | an expression: a `RateLimiter`, or a `OnceLock` / `LazyLock` of one | the global limiter | the limiter that decides (one for all of a function's [limits](#several-limits)) |
/// | `policy` | `"fallback"`, `"allow"`, `"deny"` | the limiter's | what this limit's calls get while Redis fails (see `FailurePolicy`) |
/// | `algorithm` | `"token_bucket"`, `"fixed_window"`, `"sliding_window"`, `"sliding_log"`, `"leaky_bucket"` | `"token_bucket"` | how calls are counted (see `Algorithm`); a window (`fixed_window`, `sliding_window`, `sliding_log`) admits `replenish` per `unit` and takes no `burst`; a `leaky_bucket` lets calls out one every `unit / replenish` and queues up to `burst` calls, each waiting for its turn |
/// | `refill` | `"smooth"`, `"interval"` | `"smooth"` | a token bucket's refill: one token at a time, or all `replenish` at once each `unit`; only on a token bucket |
/// | `initial` | integer ≥ 0, at most `burst` | `burst` | tokens in a new token bucket, so that a service warming up cannot take a whole burst at once; only on a token bucket |
/// | `wait` | a string: a whole number and `ms`, `s` or `m` (`"500ms"`, `"2s"`, `"1m"`), more than 0, at most a day (less for a few very fine-grained limits); `"none"` is the same as leaving it out, as in config overrides | none: a call over the limit is refused at once (a `leaky_bucket` waits up to its queue) | a call over the limit reserves its tokens at once and waits until they are due, if that is within `wait`; otherwise it is refused at once and takes nothing. Only on a token bucket refilled smoothly and on a `leaky_bucket` (see `Limit::wait`) |
/// | `shadow` | `true`, `false` | `false` | shadow mode: the limit decides, takes tokens, is logged, counted and described in the headers, but never refuses or delays a call (see `Limit::shadow`) |
///
/// `replenish`, `burst`, `cost` and `initial` are integer literals, checked by the macro, or constants of
/// type `u32` (`replenish = ORDERS_PER_MINUTE`), checked by the compiler when it evaluates the
/// limit. Either way a limit that cannot work (`0`, a `cost` above `burst`) does not compile.
/// `unit`, `algorithm`, `refill`, `policy`, `wait` and `name` are string literals, `shadow` a
/// `bool` literal, all checked by the macro. A config override may change every one of them
/// but `key`, `name` and `limiter` without recompiling.
///
/// `key` is ordinary Rust evaluated at each call, in the function's scope: import the
/// built-in resolvers you name (`use redis_ratelimit::{Ip, Route};`), write tuples
/// (`key = (Ip, Route)`) to key on several dimensions, or give a value of your own type that
/// implements `KeyResolver`. The resolver reads the call's `RequestContext`: the one the HTTP
/// layer records for each request, or the one given to `redis_ratelimit::context::scope`. A
/// call whose resolver finds no key (no request, no such header) is decided by the limiter's
/// empty-key policy: denied by default.
///
/// # What it generates
///
/// The function keeps its signature, attributes and body. Before the body runs, the call takes
/// `cost` tokens from its bucket; when the bucket has too few, the function returns
/// `Err(RateLimited.into())` and the body does not run. The limit itself is a `static`,
/// built once at compile time and registered for `redis_ratelimit::declared_limits()` with
/// its name, key expression, file and the attribute's line.
///
/// `policy` lets one limit fail differently from the rest: a payment endpoint that must fail
/// closed (`policy = "deny"`) beside read endpoints that fall back to memory. A config
/// override's `policy` field changes it without recompiling.
///
/// Until `enable_redis_rate_limit!().await` has installed the global limiter, functions without
/// a `limiter = ..` are decided by their failure policy as if Redis were down (by default, in
/// this process's memory), and each logs one error saying so.
///
/// # Requirements
///
/// - The function is an `async fn` (free function, method, trait method with a body;
///   generics and `where` clauses are fine).
/// - It returns `Result<T, E>` (directly or through a type alias) with
///   `E: From<RateLimited>`; a rejection converts into `E`.
/// - Names are unique in the program: two limits with one name are an error when
///   `enable_redis_rate_limit!` runs. Methods named alike in one module need `name = ".."`.
///
/// # Several limits
///
/// Stack attributes to hold one function to several limits, each with its own key, rate,
/// algorithm, cost and failure policy: 3 logins a minute per client *and* 300 a day in all.
/// They are decided together, in one round trip to Redis, all or nothing: a call refused by
/// any of them takes tokens from none, so a client refused by its own limit does not use up
/// the total. The rejection names the limit that refused (of several, the one with the
/// longest wait), and the response's headers describe every limit.
///
/// Each limit is declared, named and overridable on its own. Without `name = ".."`, the
/// first (outermost) attribute's limit is named `module::path::function` as usual, and the
/// n-th from the top `module::path::function#n` (`#2`, `#3`, ...). Two limits of one
/// function with one name do not compile. `limiter = ..` applies to all of them: write it on
/// one attribute (or the same on several).
///
/// ```
/// use std::sync::OnceLock;
/// use redis_ratelimit::{
///     Global, Ip, RateLimited, RateLimiter, RequestContext, context::scope, declared_limits,
///     rate_limit,
/// };
///
/// static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
///
/// /// 3 logins a minute per client, and 300 a day in all.
/// #[rate_limit(replenish = 3, unit = "minute", key = Ip, limiter = LIMITER)]
/// #[rate_limit(replenish = 300, unit = "day", key = Global)]
/// async fn login() -> Result<(), RateLimited> {
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let _ = LIMITER.set(RateLimiter::builder().memory().build().await?);
/// let client = |ip: &str| RequestContext::new().with_peer(format!("{ip}:5000").parse().unwrap());
///
/// for _ in 0..3 {
///     scope(client("203.0.113.9"), login()).await?;
/// }
/// let refused = scope(client("203.0.113.9"), login()).await.unwrap_err();
/// assert!(refused.name().unwrap().ends_with("::login")); // the per-client limit
/// scope(client("198.51.100.4"), login()).await?; // another client still gets in
///
/// let names: Vec<&str> = declared_limits().iter().map(|d| d.name()).collect();
/// assert!(names.iter().any(|n| n.ends_with("::login")));
/// assert!(names.iter().any(|n| n.ends_with("::login#2"))); // the daily total
/// # Ok(()) }
/// ```
///
/// The outermost attribute takes the others off the function (any attribute whose path ends
/// in `rate_limit`), so they must be written as such, not renamed on import or behind
/// `cfg_attr`.
///
/// # Concurrency limits
///
/// `concurrent = n` (an integer from 1 to 1,000,000, or a `u32` constant) limits the calls
/// **in flight** instead of a rate: at most `n` calls of one key run at once across every
/// instance. The call takes a slot before the body runs and holds it in a local of the
/// function's future, so the slot is given back whenever that future ends: the function
/// returned, failed or panicked, or its caller dropped it (a client gone, a timeout). A
/// process that dies holding slots loses them after `lease` (a duration written as `wait`
/// is, from 1 ms to a day; default 30 s), renewed while the call runs. With `wait`, a call
/// finding every slot taken queues for one up to `wait`, served in arrival order. It takes
/// `key`, `name`, `limiter`, `policy`, `wait`, `shadow`, `lease` and the empty-key settings;
/// a rate's arguments are refused. Stacked with rate limits, every limit of the call is
/// decided together, all or nothing. See `Limit::concurrent`.
///
/// ```
/// use redis_ratelimit::{RateLimited, User, rate_limit};
///
/// /// At most 2 exports per user at once; a third waits up to 5 s for a slot.
/// #[rate_limit(concurrent = 2, key = User, wait = "5s", lease = "1m")]
/// async fn export() -> Result<Vec<u8>, RateLimited> {
///     Ok(Vec::new())
/// }
/// ```
///
/// # Errors at compile time
///
/// Each misuse is reported on the token that causes it: a function that is not `async`, an
/// unknown argument (with the known name it is a typo of, if any, or ours for a name from
/// Spring such as `burstCapacity`), an argument given twice or without a value, a missing
/// `replenish`, a zero, negative or fractional count, a `cost` above `burst`, an `initial`
/// above `burst`, an unknown unit, algorithm, refill or failure policy, an empty `name`, a
/// `burst`, `refill` or `initial` on a window algorithm, a `refill` or `initial` on a
/// `leaky_bucket`, a `wait` that is not a duration, is 0 or longer than a day, or is on a
/// window or an interval refill, a limit too fine-grained for exact arithmetic, a `shadow`
/// that is not `true` or `false`, a `key` that is not a `KeyResolver`, a `limiter` that is
/// not a limiter, a return type the rejection cannot convert into, and, for stacked
/// attributes, two limits with one name or two different `limiter`s.
///
/// # Example: a method, a limiter of its own, several dimensions
///
/// ```
/// use std::sync::OnceLock;
/// use redis_ratelimit::{Ip, RateLimited, RateLimiter, RequestContext, Route, rate_limit};
/// use redis_ratelimit::context::scope;
///
/// static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
///
/// struct Search;
///
/// impl Search {
///     /// 10 searches per second per client and route, 50 at once; each search costs 5.
///     #[rate_limit(replenish = 10, burst = 50, cost = 5, key = (Ip, Route),
///                  name = "search", limiter = LIMITER)]
///     async fn run(&self, query: &str) -> Result<usize, RateLimited> {
///         Ok(query.len())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redis_ratelimit::Error> {
/// // `.redis(url)` shares the buckets between instances; memory keeps them in this process.
/// let _ = LIMITER.set(RateLimiter::builder().memory().build().await?);
///
/// let request = RequestContext::new()
///     .with_peer("203.0.113.9:5000".parse().unwrap())
///     .with_route("/search");
/// let admitted = scope(request, async {
///     let mut admitted = 0;
///     for _ in 0..20 {
///         if Search.run("rust").await.is_ok() {
///             admitted += 1;
///         }
///     }
///     admitted
/// })
/// .await;
/// assert_eq!(admitted, 10); // a burst of 50 tokens, 5 per search
/// # Ok(()) }
/// ```
#[proc_macro_attribute]
pub fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::rate_limit(args.into(), item.into()).into()
}

/// Installs the global limiter that `#[rate_limit]` functions use: an async expression
/// evaluating to `Result<&'static RateLimiter, Error>`.
///
/// ```no_run
/// use redis_ratelimit::enable_redis_rate_limit;
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     enable_redis_rate_limit!().await?;
///     // serve...
///     Ok(())
/// }
/// ```
///
/// It connects, loads the scripts, applies the configuration overrides to the declared limits,
/// and fails with a clear error on anything wrong: a bad URL, an unreachable Redis, an
/// override naming no declared limit, two limits with one name, a second call.
///
/// # Options
///
/// All optional, written `name = value` and separated by commas.
///
/// | option | value | default |
/// |---|---|---|
/// | `url` | an expression: `impl Into<String>` | env `REDIS_URL`, else `"redis://127.0.0.1:6379"`; `"memory://"` keeps buckets in this process |
/// | `prefix` | an expression: `impl Into<String>` | the calling crate's package name, so services sharing a Redis never share buckets |
/// | `policy` | `"fallback"`, `"allow"`, `"deny"` | `"fallback"`: when Redis fails, enforce the limits in memory on each node; `"allow"` fails open, `"deny"` fails closed |
/// | `empty_key` | `"deny"`, `"allow"` | `"deny"`: calls whose key resolver finds no key are refused |
/// | `deadline_ms` | an integer ≥ 1, or an expression of type `u64` | `50`: how long a call waits for Redis before the failure policy decides |
/// | `config` | an expression: `impl Into<PathBuf>` | env `RATE_LIMIT_CONFIG`, else none: a TOML file of overrides |
/// | `builder` | an expression: `RateLimiterBuilder` | `RateLimiter::builder()`: every other setting of the limiter (deny cache, circuit cool-down, fallback store); the options above apply on top of it, and what neither sets gets the defaults above |
///
/// ```no_run
/// # use redis_ratelimit::enable_redis_rate_limit;
/// # async fn run() -> Result<(), redis_ratelimit::Error> {
/// let limiter = enable_redis_rate_limit!(
///     url = "redis://10.0.0.5:6379/2",
///     prefix = "orders",
///     policy = "deny",
///     deadline_ms = 20,
///     config = "ratelimit.toml",
/// )
/// .await?;
/// # let _ = limiter; Ok(()) }
/// ```
///
/// ```no_run
/// # use redis_ratelimit::{RateLimiter, enable_redis_rate_limit, store::MemoryStore};
/// # async fn run() -> Result<(), redis_ratelimit::Error> {
/// enable_redis_rate_limit!(
///     prefix = "orders",
///     builder = RateLimiter::builder()
///         .deny_cache(0)
///         .circuit_cooldown(None)
///         .fallback_store(MemoryStore::new().with_max_keys(100_000)),
/// )
/// .await?;
/// # Ok(()) }
/// ```
///
/// Policies are checked at compile time: an unknown option or policy does not compile.
#[proc_macro]
pub fn enable_redis_rate_limit(options: TokenStream) -> TokenStream {
    enable::enable_redis_rate_limit(options.into()).into()
}

/// A limit an HTTP layer decides for every request it serves; see the guide, "A limit on a
/// whole router". Takes `#[rate_limit]`'s arguments, less those about one call of a function,
/// with `name` and `key` (a `KeyResolver`) required.
#[proc_macro]
pub fn layer_limit(args: TokenStream) -> TokenStream {
    layer::layer_limit(args.into()).into()
}
