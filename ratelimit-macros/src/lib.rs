//! Procedural macros of [redis-ratelimit](https://docs.rs/redis-ratelimit):
//! [`#[rate_limit]`](macro@rate_limit) on an `async fn`, [`enable_redis_rate_limit!`] at
//! startup, and [`layer_limit!`] for the limits of an HTTP layer.
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
mod span;
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
/// Written `name = value`, separated by commas. A limit needs `replenish` (a rate limit),
/// `concurrent` (a [concurrency limit](#concurrency-limits)) or `shared` (a use of a limit
/// [declared elsewhere](#one-limit-for-several-functions)); everything else is optional.
///
/// | argument | value | default | meaning |
/// |---|---|---|---|
/// | `replenish` | integer ≥ 1 | required | tokens added back per `unit` (a window: tokens admitted per window) |
/// | `burst` | integer ≥ 1 | `replenish` | the bucket's capacity: the most calls allowed at once; a `leaky_bucket`'s queue size; not on a window |
/// | `unit` | `"second"`, `"minute"`, `"hour"`, `"day"` | `"second"` | the period of `replenish` |
/// | `algorithm` | `"token_bucket"`, `"fixed_window"`, `"sliding_window"`, `"sliding_log"`, `"leaky_bucket"` | `"token_bucket"` | how calls are counted (see `Algorithm`); a window (`fixed_window`, `sliding_window`, `sliding_log`) admits `replenish` per `unit` and takes no `burst`; a `leaky_bucket` lets calls out one every `unit / replenish` and queues up to `burst` calls, each waiting for its turn |
/// | `refill` | `"smooth"`, `"interval"` | `"smooth"` | a token bucket's refill: one token at a time, or all `replenish` at once each `unit`; only on a token bucket |
/// | `initial` | integer ≥ 0, at most `burst` | `burst` | tokens in a new token bucket, so that a service warming up cannot take a whole burst at once; only on a token bucket |
/// | `key` | an expression: a `KeyResolver` (`Ip`, `Header("x-api-key")`, `(Ip, Route)`, your own type), an `AsyncKeyResolver`, or any value that implements `Display`, computed from the function's parameters (`tenant_id`, `self.tenant`) | `Uri` | which bucket a call takes from ([below](#keys-costs-and-exemptions-from-the-call)) |
/// | `cost` | integer ≥ 1, at most `burst`; or an integer expression over the parameters (`files.len()`), computed per call | `1` | tokens one call takes |
/// | `exempt` | a `bool` expression over the parameters (`caller.internal`) | `false` | `true` lets the call through unchecked, taking nothing |
/// | `tier` | an expression over the parameters: a `Tier`, a `&Tier`, or an `Option` of one | none: the declared rate | the limit this call is decided under, such as its caller's plan ([below](#tiers)) |
/// | `tiers` | the tiers calls may be given: an array of `Tier` constants (`[FREE, PRO]`) or a `&'static [Tier]` | none | listed with the limit by `declared_limits()` (`LimitDeclaration::tiers`) |
/// | `count` | a predicate on the function's output, `FnOnce(&Output) -> bool`: `Result::is_err`, or a closure | every call counts | which outcomes count: a call that does not count gets its tokens back ([below](#counting-some-outcomes-only)); only on a bucket (`token_bucket`, `leaky_bucket`) |
/// | `settle` | a closure over the function's output, `FnOnce(&Output) -> integer`: the call's actual cost | none: `cost` is the cost | the call takes `cost` as an estimate and settles the actual cost when its body ends: the difference is given back, or taken, into debt up to the limit's bound ([below](#settling-the-actual-cost)); not beside `count`, not on a sliding window, an interval refill or a concurrency limit |
/// | `max_debt` | integer ≥ 0 | one burst | the most tokens a settlement may leave the bucket owing (`Limit::max_debt`; an override's `max_debt` changes it); not on a sliding window, an interval refill, a concurrency limit, a shared use or a layer |
/// | `name` | a string | `"module::path::function"`; `"module::path::function#n"` for the n-th of [several](#several-limits) | the limit's name in config overrides, logs and metrics |
/// | `limiter` | an expression: a `RateLimiter`, or a `OnceLock` / `LazyLock` of one | the global limiter | the limiter that decides (one for all of a function's [limits](#several-limits)); without `enable_redis_rate_limit!`, check the declarations at startup with `validate_declared_limits()` ([below](#requirements)) |
/// | `policy` | `"fallback"`, `"allow"`, `"deny"` | the limiter's | what this limit's calls get while Redis fails (see `FailurePolicy`) |
/// | `wait` | a string: a whole number and `ms`, `s` or `m` (`"500ms"`, `"2s"`, `"1m"`), more than 0, at most a day (less for a few very fine-grained limits); `"none"` is the same as leaving it out, as in config overrides | none: a call over the limit is refused at once (a `leaky_bucket` waits up to its queue) | a call over the limit reserves its tokens at once and waits until they are due, if that is within `wait`; otherwise it is refused at once and takes nothing. Only on a token bucket refilled smoothly, a `leaky_bucket` and a concurrency limit (see `Limit::wait`) |
/// | `jitter` | a duration written as `wait` is, at most an hour (`"60m"`) | none | lengthens each wait by a random spread of up to this, so that calls released together arrive apart, never before their turn; needs `wait` (or a `leaky_bucket`) |
/// | `shadow` | `true`, `false` | `false` | shadow mode: the limit decides, takes tokens, is logged, counted and described in the headers, but never refuses or delays a call (see `Limit::shadow`) |
/// | `empty_key` | `"deny"`, `"allow"` | the limiter's (`"deny"` unless `enable_redis_rate_limit!(empty_key = ..)` says otherwise) | what a call whose `key` finds no key gets: refused, or let through unchecked ([below](#calls-without-a-key)) |
/// | `empty_key_status` | an HTTP error status, 400 to 599 | `403` | the status of a refusal for want of a key (Spring's `emptyKeyStatus`) |
/// | `limited_status` | an HTTP error status, 400 to 599 | `429` | the status of a refusal by this limit's bucket: a monthly quota used up is a 402 or a 403, not a "slow down"; its problem body then says which quota is used up and when it comes back (`Retry-After` too) |
/// | `concurrent` | integer from 1 to 1,000,000 | none: a rate limit | a [concurrency limit](#concurrency-limits): at most this many calls of one key in flight |
/// | `lease` | a duration written as `wait` is, from 1 ms to a day | `"30s"` | how long a concurrency slot outlives a process that died holding it; only with `concurrent` |
/// | `shared` | a string: the `name` of a limit another function declares | none | this function [draws from that limit](#one-limit-for-several-functions) instead of declaring one |
///
/// `replenish`, `burst`, `initial`, `concurrent` and `cost` are integer literals, checked by
/// the macro, or constants of type `u32` (`replenish = ORDERS_PER_MINUTE`), checked by the
/// compiler when it evaluates the limit: either way a limit that cannot work (`0`, a `cost`
/// above `burst`) does not compile. A `cost` that names one of the function's parameters is
/// computed on each call instead. `unit`, `algorithm`, `refill`, `policy`, `wait`, `jitter`,
/// `lease`, `empty_key`, `name` and `shared` are string literals, `shadow` a `bool` literal
/// and `empty_key_status` and `limited_status` integer literals, all checked by the macro. `key`, `cost`,
/// `exempt`, `tier`, `count` and `settle` are ordinary Rust, evaluated on each call in the function's
/// scope, its parameters included, before the body runs: their types are checked by the
/// compiler, and an error is reported on the expression. A config override may change
/// `replenish`, `burst`, `unit`, `cost`, `algorithm`, `refill`, `initial`, `policy`, `wait`,
/// `shadow`, `concurrent` and `lease` without recompiling (see `redis_ratelimit::overrides`).
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
/// - Names are unique in the program, and a `shared = ".."` name is declared by some function
///   or layer. Neither can be seen by one attribute alone, so neither is a compile error:
///   `enable_redis_rate_limit!` refuses to start, naming every such mistake and the place of
///   each declaration. A program whose functions use a limiter of its own (`limiter = ..`)
///   and never calls enable gets the same error from
///   `redis_ratelimit::validate_declared_limits()`, to call at startup (building a limiter
///   checks nothing: it may serve no declaration). Either way, a call of a duplicated or
///   dangling declaration is never decided under an invented limit or in another function's
///   buckets: it is refused as a failing store under `policy = "deny"` refuses (a 503,
///   `Source::FailClosed`, the rejection naming the limit), and one error per declaration is
///   logged. Methods named alike in one module need `name = ".."`.
///
/// # Keys, costs and exemptions from the call
///
/// `key` is evaluated at each call, in the function's scope. A value that implements
/// `KeyResolver` is used as one: import the built-in resolvers you name
/// (`use redis_ratelimit::{Ip, Route};`), write tuples (`key = (Ip, Route)`) to key on
/// several dimensions, or give a value of your own type. A resolver reads the call's
/// `RequestContext`: the one the HTTP layer records for each request, or the one given to
/// `redis_ratelimit::context::scope`. An `AsyncKeyResolver` (a session lookup) is awaited
/// before the check, under the limiter's deadline. Any other value that implements `Display`
/// is the key itself, as its text: a parameter (`key = tenant_id`), a field
/// (`key = self.tenant`), any expression over them. A name that is not in scope is a compile
/// error on it, and so is a value that is none of these.
///
/// A `cost` written over the parameters (`cost = files.len()`) is computed on each call: any
/// integer type, never wrapped. A cost of 0 takes nothing and passes; a cost above the burst,
/// or one that does not fit a `u32`, is refused at once (`Source::CostExceedsBurst`: no wait
/// would admit it). `exempt` is a `bool` over the parameters: `true` lets the call through
/// unchecked and untaken (`Source::Exempt`).
///
/// ```
/// use std::sync::OnceLock;
/// use redis_ratelimit::{RateLimited, RateLimiter, rate_limit};
///
/// static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
///
/// struct Caller {
///     tenant: u64,
///     internal: bool,
/// }
///
/// /// 100 files a minute per tenant, one token per file; internal callers are not limited.
/// #[rate_limit(replenish = 100, unit = "minute", key = caller.tenant, cost = files.len(),
///              exempt = caller.internal, limiter = LIMITER)]
/// async fn upload(caller: &Caller, files: &[&str]) -> Result<usize, RateLimited> {
///     Ok(files.len())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redis_ratelimit::Error> {
/// let _ = LIMITER.set(RateLimiter::builder().memory().build().await?);
/// let tenant = Caller { tenant: 7, internal: false };
/// assert_eq!(upload(&tenant, &["a.csv"; 60]).await.ok(), Some(60));
/// assert!(upload(&tenant, &["b.csv"; 50]).await.is_err()); // 40 tokens left
/// let other = Caller { tenant: 8, internal: false };
/// assert!(upload(&other, &["c.csv"; 50]).await.is_ok()); // a bucket of its own
/// let job = Caller { tenant: 7, internal: true };
/// assert!(upload(&job, &["d.csv"; 500]).await.is_ok()); // exempt
/// # Ok(()) }
/// ```
///
/// # Tiers
///
/// `tier` picks the limit a call is decided under, from its arguments: a `Tier` (a name and a
/// `Limit`), a `&Tier`, or an `Option` of one, `None` for the attribute's own rate. The
/// expression is borrowed, never moved (`tier = caller.plan` reads a field of a `&Caller`). A
/// plan known when the program is written is a constant, `Tier::new("pro", ..)`; a contract's
/// tier, whose name and rate are read at run time, is `Tier::try_new(name, limit)?`, which
/// takes a `String` (no leaked string) and refuses a name a header or a metrics label could
/// not carry: a tier name is 1 to 64 ASCII letters, digits, `-`, `_` or `.` (a constant
/// with another name does not compile). A call keeps its bucket (one per limit and key)
/// whatever its tier. The response headers name the policy in force (`"search[pro]"`), and
/// so do `RateLimited::tier()`, the logs and the metrics. `tiers` lists the tiers calls may
/// be given, for `declared_limits()`: an array of constants or a `&'static [Tier]`. A config
/// override applies by the limit's name: a new rate replaces the declared one, which calls
/// without a tier get.
///
/// ```
/// use std::sync::OnceLock;
/// use redis_ratelimit::{Limit, RateLimited, RateLimiter, Tier, Unit, declared_limits, rate_limit};
///
/// static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
///
/// const FREE: Tier = Tier::new("free", Limit::per_hour(2));
/// const PRO: Tier = Tier::new("pro", Limit::per_hour(100));
///
/// /// The caller's plan picks the limit; a caller without one gets the declared 1 an hour.
/// #[rate_limit(replenish = 1, unit = "hour", key = user, tier = plan, tiers = [FREE, PRO],
///              limiter = LIMITER)]
/// async fn search(user: &str, plan: Option<Tier>) -> Result<(), RateLimited> {
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let _ = LIMITER.set(RateLimiter::builder().memory().build().await?);
/// search("ann", Some(FREE)).await?;
/// search("ann", Some(FREE)).await?;
/// let refused = search("ann", Some(FREE)).await.unwrap_err();
/// assert_eq!(refused.tier(), Some("free"));
/// search("bob", Some(PRO)).await?;
///
/// // A contract's tier, its name and rate read from configuration at run time.
/// let (name, per_hour): (String, u32) = ("acme-gold".to_owned(), 3);
/// let acme = Tier::try_new(name, Limit::try_new(per_hour, per_hour, Unit::Hour)?)?;
/// for _ in 0..3 {
///     search("acme", Some(acme.clone())).await?;
/// }
/// let refused = search("acme", Some(acme)).await.unwrap_err();
/// assert_eq!(refused.tier(), Some("acme-gold"));
///
/// let declared = declared_limits().into_iter().find(|d| d.name().ends_with("::search")).unwrap();
/// assert_eq!(declared.tiers(), &[FREE, PRO]);
/// # Ok(()) }
/// ```
///
/// A tier goes with the call, so it works wherever the call's limit is: on a `shared` use
/// (chosen where the limit is used, from that function's own arguments, while the declaring
/// function may give tiers of its own or none) and on a concurrency limit, where a tier's
/// limit is a `Limit::concurrent` (per-plan concurrency). A tier's limit must be of its
/// declaration's kind: a rate's tier given to a concurrency limit, or the other way round,
/// refuses the call (`Source::FailClosed`) and logs one error naming both.
///
/// ```
/// use std::sync::OnceLock;
/// use redis_ratelimit::{Limit, RateLimited, RateLimiter, Tier, rate_limit};
///
/// static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
///
/// const FREE_EXPORTS: Tier = Tier::new("free", Limit::concurrent(1));
/// const PRO_EXPORTS: Tier = Tier::new("pro", Limit::concurrent(5));
/// const PRO_SEARCH: Tier = Tier::new("pro", Limit::per_hour(100));
///
/// /// Free tenants run one export at a time, pro tenants five.
/// #[rate_limit(concurrent = 1, key = tenant, tier = if pro { PRO_EXPORTS } else { FREE_EXPORTS },
///              limiter = LIMITER)]
/// async fn export(tenant: u64, pro: bool) -> Result<(), RateLimited> {
///     Ok(())
/// }
///
/// #[rate_limit(replenish = 10, unit = "hour", key = user, name = "searches", limiter = LIMITER)]
/// async fn search(user: &str) -> Result<(), RateLimited> {
///     Ok(())
/// }
///
/// /// Suggestions draw from the search quota, at the caller's tier.
/// #[rate_limit(shared = "searches", key = user, tier = pro.then_some(PRO_SEARCH), limiter = LIMITER)]
/// async fn suggest(user: &str, pro: bool) -> Result<(), RateLimited> {
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let _ = LIMITER.set(RateLimiter::builder().memory().build().await?);
/// export(7, false).await?;
/// for _ in 0..20 {
///     suggest("ann", true).await?; // the pro rate, past the declared 10
/// }
/// # Ok(()) }
/// ```
///
/// # Counting some outcomes only
///
/// `count` reads the function's output (`&Output`) and says whether the call counts. The call
/// takes its tokens before the body runs, so that concurrent calls cannot all pass; a call that
/// does not count gets them back afterwards, through the store, where every instance sees
/// them (never more than it took). A body that panics or is cancelled counts. Only the
/// buckets (`token_bucket`, `leaky_bucket`) can give tokens back exactly, so `count` on a
/// window does not compile.
///
/// ```
/// use std::sync::OnceLock;
/// use redis_ratelimit::{RateLimited, RateLimiter, rate_limit};
///
/// static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
///
/// #[derive(Debug)]
/// enum LoginError {
///     WrongPassword,
///     TooManyAttempts(RateLimited),
/// }
///
/// impl From<RateLimited> for LoginError {
///     fn from(rejection: RateLimited) -> Self {
///         LoginError::TooManyAttempts(rejection)
///     }
/// }
///
/// /// 3 failed logins per user an hour: a successful one gives its token back.
/// #[rate_limit(replenish = 3, unit = "hour", key = user, count = Result::is_err,
///              limiter = LIMITER)]
/// async fn login(user: &str, password: &str) -> Result<(), LoginError> {
///     if password == "right" { Ok(()) } else { Err(LoginError::WrongPassword) }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let _ = LIMITER.set(RateLimiter::builder().memory().build().await?);
/// for _ in 0..10 {
///     assert!(login("ann", "right").await.is_ok()); // successes do not count
/// }
/// for _ in 0..3 {
///     assert!(matches!(login("ann", "wrong").await, Err(LoginError::WrongPassword)));
/// }
/// assert!(matches!(login("ann", "right").await, Err(LoginError::TooManyAttempts(_))));
/// # Ok(()) }
/// ```
///
/// # Settling the actual cost
///
/// Some calls know their cost only when they end: a completion's tokens, a download's bytes.
/// With `settle`, `cost` is an estimate the call takes before its body runs (so that a flood
/// cannot start a thousand expensive calls at once), and the closure reads the output
/// (`&Output`) for the actual cost. A smaller actual gives the difference back, a larger one
/// takes it at once, even below empty: the call that overdraws was served, and the calls
/// after it wait for the debt to refill (their `retry_after` says how long). The debt is
/// bounded by the limit's `Limit::max_debt`, one burst unless set, so a lying estimate cannot
/// starve a key for ever. A body that panics or is cancelled keeps its estimate. Stacked
/// limits settle each their own (a rate per minute and a quota per month); a shared use
/// settles in the declaration's buckets; a tier whose limit cannot owe keeps the estimate
/// (logged once). The settlement goes through the store in one step, where every instance
/// sees it. For a response that streams, take the estimate with
/// `RateLimiter::check_estimate` and settle the `Usage` it returns when the stream ends.
///
/// ```
/// use std::sync::OnceLock;
/// use redis_ratelimit::{RateLimited, RateLimiter, rate_limit};
///
/// static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
///
/// struct Completion {
///     text: String,
///     tokens: u32,
/// }
///
/// /// 10,000 completion tokens an hour per API key: `max_tokens` taken up front, the
/// /// tokens the completion used settled after it.
/// #[rate_limit(replenish = 10_000, unit = "hour", key = api_key, name = "llm.tokens",
///              cost = max_tokens, settle = |r| r.as_ref().map_or(0, |c| c.tokens),
///              limiter = LIMITER)]
/// async fn complete(api_key: &str, max_tokens: u32) -> Result<Completion, RateLimited> {
///     Ok(Completion { text: "Hello".into(), tokens: 12 })
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let _ = LIMITER.set(RateLimiter::builder().memory().build().await?);
/// let reply = complete("key:abc", 2_000).await?;
/// assert_eq!(reply.text, "Hello");
/// // 2,000 taken, 1,988 given back: 12 used.
/// let limit = redis_ratelimit::Limit::per_hour(10_000);
/// let left = LIMITER.get().unwrap().peek_named("llm.tokens", "key:abc", &limit).await?;
/// assert_eq!(left.remaining, 9_988);
/// # Ok(()) }
/// ```
///
/// # Calls without a key
///
/// A call whose `key` finds no key (no request in scope, no such header, an empty text) is
/// decided by the empty-key policy: the limiter's (`enable_redis_rate_limit!(empty_key = ..)`,
/// refused by default, as Spring Cloud Gateway's `denyEmptyKey`), or the limit's own,
/// `empty_key = "allow"` (let through unchecked) or `"deny"`. `empty_key_status` sets the HTTP
/// status of such a refusal (403 by default; 401 where the key is a credential).
///
/// ```
/// use redis_ratelimit::{Header, RateLimited, rate_limit};
///
/// /// 10 calls a second per API key; a call without one is answered 401.
/// #[rate_limit(replenish = 10, key = Header("x-api-key"), empty_key = "deny",
///              empty_key_status = 401)]
/// async fn report() -> Result<(), RateLimited> {
///     Ok(())
/// }
/// ```
///
/// # Waiting
///
/// With `wait`, a call over the limit waits its turn instead of being refused, up to the bound:
/// it reserves its tokens in the same round trip that decides, then sleeps until they are due,
/// served in reservation order across every instance. `jitter` lengthens each wait by a random
/// spread, so that calls released together arrive apart.
///
/// ```
/// use redis_ratelimit::{RateLimited, Uri, rate_limit};
///
/// /// 10 fetches a second per path, one at a time; a fetch waits up to 2 s for its turn.
/// #[rate_limit(replenish = 10, burst = 1, wait = "2s", jitter = "20ms", key = Uri)]
/// async fn fetch_page() -> Result<(), RateLimited> {
///     Ok(())
/// }
/// ```
///
/// # One limit for several functions
///
/// `shared = "name"` draws from the limit another function declares with `name = "name"`:
/// every function that uses it takes from the same bucket per key, under the declaring
/// function's limit and its overrides. A use says only how it draws: its own `key`, `cost`,
/// `exempt`, `count`, `limiter` and empty-key settings; the rate's arguments (`replenish`,
/// `unit`, `wait`, ...) are set once, where the limit is named, and do not compile beside
/// `shared`. A `shared` name that no function declares stops the service at
/// `enable_redis_rate_limit!` (with a limiter of your own, `validate_declared_limits()`
/// reports it), and each call of such a use is refused, never decided under a limit of its own
/// ([requirements](#requirements)).
///
/// ```
/// use redis_ratelimit::{Ip, RateLimited, rate_limit};
///
/// #[rate_limit(replenish = 100, unit = "hour", key = Ip, name = "search")]
/// async fn search() -> Result<&'static str, RateLimited> {
///     Ok("results")
/// }
///
/// /// An export counts as five searches.
/// #[rate_limit(shared = "search", key = Ip, cost = 5)]
/// async fn export() -> Result<&'static str, RateLimited> {
///     Ok("csv")
/// }
/// ```
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
/// above `burst`, an unknown unit, algorithm, refill, failure policy or empty-key policy, an
/// empty `name`, a `burst`, `refill` or `initial` on a window algorithm, a `refill` or
/// `initial` on a `leaky_bucket`, a `wait` that is not a duration, is 0 or longer than a day,
/// or is on a window or an interval refill, a `jitter` without a wait, a limit too
/// fine-grained for exact arithmetic, a `shadow` that is not `true` or `false`, an
/// `empty_key_status` that is not an error status, a rate's argument beside `concurrent` or a
/// declaration's beside `shared` (on that argument), a `lease` without `concurrent`, a `count`
/// on a window, a `key` that is not a `KeyResolver` nor a `Display` value, a `cost` that is
/// not an integer, an `exempt` that is not a `bool`, a `tier` that is not a `Tier`, a `count`
/// that is not a predicate on the output, a `limiter` that is not a limiter, a return type the
/// rejection cannot convert into, and, for stacked attributes, two limits with one name or two
/// different `limiter`s.
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
///                  name = "site_search", limiter = LIMITER)]
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

/// A limit that an HTTP layer decides for every request it serves: one for a whole router, or
/// for a group of routes, whether or not the handlers below have `#[rate_limit]`s of their own.
/// It is an expression of type `redis_ratelimit::http::LayerLimit`, for
/// `RateLimitLayer::limit` (axum, feature `axum`) or `RateLimitMiddleware::limit` (actix-web,
/// feature `actix-web`); without either feature it does not compile.
///
/// ```no_run
/// use std::net::SocketAddr;
/// use axum::{Router, routing::{get, post}};
/// use redis_ratelimit::{
///     Global, Ip, RateLimitLayer, RateLimited, enable_redis_rate_limit, layer_limit, rate_limit,
/// };
///
/// #[rate_limit(replenish = 10, unit = "minute", key = Global, name = "reports")]
/// async fn report() -> Result<&'static str, RateLimited> {
///     Ok("queued")
/// }
///
/// async fn users() -> &'static str {
///     "[]"
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     enable_redis_rate_limit!().await?;
///     // The admin group: 30 requests a minute per client, on top of the router's limit.
///     let admin = Router::new()
///         .route("/users", get(users))
///         .route_layer(RateLimitLayer::new().limit(layer_limit!(
///             name = "admin", replenish = 30, unit = "minute", key = Ip,
///         )));
///     let app = Router::new()
///         .route("/reports", post(report))
///         .nest("/admin", admin)
///         // Every request: 1,000 a minute per client.
///         .layer(RateLimitLayer::new().limit(layer_limit!(
///             name = "api", replenish = 1000, unit = "minute", key = Ip,
///         )));
///     let listener = tokio::net::TcpListener::bind("0.0.0.0:3000").await?;
///     axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
///     Ok(())
/// }
/// ```
///
/// actix-web takes the same limits, on `App::wrap` and on a `web::scope`'s `wrap`:
///
/// ```no_run
/// use actix_web::{App, HttpServer, web};
/// use redis_ratelimit::{Ip, RateLimitMiddleware, enable_redis_rate_limit, layer_limit};
///
/// async fn users() -> &'static str {
///     "[]"
/// }
///
/// #[actix_web::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     enable_redis_rate_limit!().await?;
///     HttpServer::new(|| {
///         App::new()
///             .wrap(RateLimitMiddleware::new().limit(layer_limit!(
///                 name = "api", replenish = 1000, unit = "minute", key = Ip,
///             )))
///             .service(
///                 web::scope("/admin")
///                     .wrap(RateLimitMiddleware::new().limit(layer_limit!(
///                         name = "admin", replenish = 30, unit = "minute", key = Ip,
///                     )))
///                     .route("/users", web::get().to(users)),
///             )
///     })
///     .bind(("127.0.0.1", 3000))?
///     .run()
///     .await?;
///     Ok(())
/// }
/// ```
///
/// # Arguments
///
/// Those of [`#[rate_limit]`](macro@rate_limit#arguments), with the same meanings, defaults and
/// compile-time checks, except:
///
/// - `name = ".."` is required: there is no function to name the limit after. Or
///   `shared = ".."` draws from a limit declared elsewhere, by a handler or another layer:
///   a router's layer and a handler may share one bucket.
/// - `key = ..` is required, and is a `KeyResolver` (`Ip`, `Route`, `Header("x-api-key")`,
///   `User`, a tuple of them, a type of your own): there are no arguments to compute it from.
/// - What a function's limit reads from its call, a layer's reads from the request and its
///   response: `exempt` is a predicate on the request (`Fn(&RequestContext) -> bool`: health
///   checks, internal callers), `tier` a function of it (`Fn(&RequestContext) -> T` where `T`
///   is a `Tier`, a `&'static Tier` or an `Option` of one: a plan read from the principal an
///   authentication layer set, never a header the client sets), and `count` a predicate on the response's status
///   (`Fn(&StatusCode) -> bool`, `redis_ratelimit::http::StatusCode`: only server errors, only
///   failed logins' 401s), under which a request that does not count gets its tokens back once
///   its response is made. `tiers` lists the tiers, as on a function.
/// - A compile error, on the argument, saying why: `limiter` (a layer's limits are decided on
///   the limiter `enable_redis_rate_limit!` installed), `wait` and `jitter` (a layer's limit
///   refuses at once), `settle` (a layer sees a response before its body has streamed: settle
///   from the handler, with `RateLimiter::check_estimate`).
///
/// The rest are as on a function: `replenish`, `burst`, `unit`, `algorithm`, `refill`,
/// `initial`, `cost`, `policy`, `shadow`, `empty_key`, `empty_key_status`,
/// `limited_status`, `concurrent` and `lease` (a `concurrent` layer limit holds its slot
/// until the response is made).
///
/// ```
/// use axum::{Router, routing::get};
/// use redis_ratelimit::{
///     Header, Limit, RateLimitLayer, RequestContext, Tier, http::StatusCode, layer_limit,
/// };
///
/// const PRO: Tier = Tier::new("pro", Limit::per_minute(6000));
///
/// /// The caller's plan, as the authentication layer (outside this one) found it and put it in
/// /// the request's extensions: never read from what the client sends, or a client would pick
/// /// its own rate.
/// #[derive(Clone)]
/// struct Plan {
///     pro: bool,
/// }
///
/// fn plan(request: &RequestContext) -> Option<Tier> {
///     request.extensions().get::<Plan>()?.pro.then_some(PRO)
/// }
///
/// # async fn ok() -> &'static str { "ok" }
/// let app: Router = Router::new()
///     .route("/health", get(ok))
///     .route("/search", get(ok))
///     .layer(RateLimitLayer::new().limit(layer_limit!(
///         name = "api",
///         replenish = 600,
///         unit = "minute",
///         key = Header("x-api-key"),
///         exempt = |request| request.path() == Some("/health"),
///         tier = plan,
///         tiers = [PRO],
///         // Only the requests the service failed count against the caller.
///         count = StatusCode::is_server_error,
///     )));
/// ```
///
/// The same on actix-web's middleware:
///
/// ```
/// use redis_ratelimit::{Ip, RateLimitMiddleware, http::StatusCode, layer_limit};
///
/// let failed_logins = RateLimitMiddleware::new().limit(layer_limit!(
///     name = "logins",
///     replenish = 5,
///     unit = "minute",
///     key = Ip,
///     count = |status: &StatusCode| *status == StatusCode::UNAUTHORIZED,
/// ));
/// # let _ = failed_logins;
/// ```
///
/// # What it does
///
/// The limit is declared as a function's is: listed by `declared_limits()`, changed by a
/// config override of its name, refused with the same 429, headers and problem body, traced
/// and counted under its name. A layer's limits are decided before the handler runs, all or
/// nothing with the handler's own limits, in one round trip to Redis where the route allows:
/// a request that the handler's limit refuses takes nothing from the layer's, and one that
/// the layer's limit refuses never reaches the handler. The guide's "A limit on a whole
/// router" says how a layer learns which routes have limits of their own.
///
/// A limit whose name and rate are known only at run time (route groups read from a
/// configuration file) is built by `redis_ratelimit::http::LayerLimit::new(name, limit, key)`
/// instead: the same declared limit, checked when it is built rather than when the code
/// compiles.
#[proc_macro]
pub fn layer_limit(args: TokenStream) -> TokenStream {
    layer::layer_limit(args.into()).into()
}
