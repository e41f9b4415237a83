//! Declared limits and the global limiter that `enable_redis_rate_limit!` installs.

pub(crate) mod runtime;
mod validate;

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::decision::Decision;
use crate::errors::Error;
use crate::limit::EmptyKeyPolicy;
use crate::limit::Limit;
use crate::limiter::inner::RateLimiter;
use crate::naming;

/// One `#[rate_limit]` function or `layer_limit!`, registered at compile time, or a layer's
/// limit built at run time ([`LayerLimit::new`](crate::http::LayerLimit::new)): its name,
/// limit, key resolver and place in the source. [`declared_limits`] lists them all.
pub struct LimitDeclaration {
    name: &'static str,
    limit: Limit,
    cost: u32,
    key: &'static str,
    file: &'static str,
    line: u32,
    /// The limit in force when an override changed it: set by `enable_redis_rate_limit!`,
    /// swapped whole by [`reload_overrides`](crate::reload_overrides); read by every call
    /// without a lock.
    effective: ArcSwapOption<Effective>,
    /// What a call must know before its limit, in one byte, so that the common call (a
    /// valid declaration of its own, never overridden) reads one byte, twice:
    /// [`VALID`] once a call found the declaration neither dangling nor duplicated
    /// ([`validate`]; a declaration found wrong never sets it, and each of its calls is
    /// refused); [`OVERRIDDEN`] once `effective` was set (until then no call touches the
    /// `ArcSwap`, whose load costs more than the rest of the lookup); [`SHARES`] for a
    /// shared use, from its construction.
    state: AtomicU8,
    /// The bucket key of the first key this declaration's enabled limiter resolved, so that
    /// a key that repeats (always, for `Global`) is not named again on every call.
    bucket: OnceLock<CachedBucket>,
    /// Set once a call's key was not the remembered one: the key varies (`Uri`, `Ip`), and
    /// comparing it with the remembered one would cost every call for the few it serves.
    varies: AtomicBool,
    /// The head of its bucket keys on its enabled limiter ([`naming::bucket_head`]): the name,
    /// scanned and written once, not once per call, for a key it does not remember.
    head: OnceLock<NamedHead>,
    /// The [`Warning`]s already logged, one bit each.
    warned: AtomicU8,
    /// What this limit does with a call that has no key, when not the limiter's policy.
    empty_key: Option<EmptyKeyPolicy>,
    /// The HTTP status of a refusal for want of a key, when not 403.
    empty_key_status: Option<u16>,
    /// The HTTP status of a refusal by this limit's bucket (its quota used up), when not 429.
    limited_status: Option<u16>,
    /// The tiers a call may be given (`tiers = [..]`), as far as they are known.
    tiers: &'static [crate::limit::Tier],
    /// A limit declared elsewhere that this function draws from (`shared = ".."`): its name is
    /// `name`, its limit and its overrides are the declaring function's.
    shares: bool,
    /// The declaration this one shares, found by name on first use.
    target: OnceLock<Option<&'static LimitDeclaration>>,
    /// Built at run time ([`runtime`]), not registered by a macro: `file` and `line` are
    /// those of the call that built it.
    built_at_run_time: bool,
    /// Its calls settle their actual cost (`settle = ..`): its limit in force must be one
    /// that can owe tokens.
    settles: bool,
}

/// A bucket key, with what it was named from: the limiter's prefix and the resolved key (the
/// declaration's name is the third part, and never changes).
struct CachedBucket {
    /// The limiter's own (kept alive here, so that the same pointer is the same prefix).
    prefix: Arc<str>,
    key: Box<str>,
    bucket: Box<str>,
}

/// A declaration's bucket-key head, with the prefix it was named under.
struct NamedHead {
    /// The limiter's own (kept alive here, so that the same pointer is the same prefix).
    prefix: Arc<str>,
    head: Box<str>,
}

/// The limit a declaration enforces after configuration overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effective {
    /// The limit.
    pub limit: Limit,
    /// Tokens one call takes.
    pub cost: u32,
    /// `false` when an override disabled the limit: calls pass unchecked.
    pub enabled: bool,
}

/// `3 per minute (burst 300)`, with the cost when above 1; `disabled` when an override
/// turned the limit off, so that nothing shows a quota that does not hold.
impl fmt::Display for Effective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.enabled {
            return write!(f, "disabled (declared {})", self.limit);
        }
        write!(f, "{}", self.limit)?;
        if self.cost > 1 {
            write!(f, ", {} tokens a call", self.cost)?;
        }
        Ok(())
    }
}

impl LimitDeclaration {
    /// A `#[rate_limit]` function's declaration (the macros reach it as
    /// `__private::declaration`).
    pub(crate) const fn new(
        name: &'static str,
        limit: Limit,
        cost: u32,
        key: &'static str,
        file: &'static str,
        line: u32,
    ) -> LimitDeclaration {
        LimitDeclaration {
            name,
            limit,
            cost,
            key,
            file,
            line,
            effective: ArcSwapOption::const_empty(),
            state: AtomicU8::new(0),
            bucket: OnceLock::new(),
            varies: AtomicBool::new(false),
            head: OnceLock::new(),
            warned: AtomicU8::new(0),
            empty_key: None,
            empty_key_status: None,
            limited_status: None,
            tiers: &[],
            shares: false,
            target: OnceLock::new(),
            built_at_run_time: false,
            settles: false,
        }
    }

    /// A layer's limit built at run time (see [`runtime`]), at `file` and `line` of the call
    /// that built it.
    #[cfg_attr(not(feature = "http-framework"), allow(dead_code))]
    pub(crate) const fn built_at_run_time(
        name: &'static str,
        limit: Limit,
        key: &'static str,
        file: &'static str,
        line: u32,
    ) -> LimitDeclaration {
        let mut decl = LimitDeclaration::new(name, limit, 1, key, file, line);
        decl.built_at_run_time = true;
        decl
    }

    /// Whether this limit was built at run time, from values known only then
    /// ([`LayerLimit::new`](crate::http::LayerLimit::new)), rather than declared by a macro:
    /// then [`file`](LimitDeclaration::file) and [`line`](LimitDeclaration::line) are those
    /// of the call that built it.
    pub fn is_built_at_run_time(&self) -> bool {
        self.built_at_run_time
    }

    /// A function's use of the limit `name` declared by another (`#[rate_limit(shared =
    /// "name")]`): the same buckets, limit and overrides; `cost` is this function's own.
    pub(crate) const fn sharing(
        name: &'static str,
        cost: u32,
        key: &'static str,
        file: &'static str,
        line: u32,
    ) -> LimitDeclaration {
        // A placeholder: a use has the declaring function's limit, and a use of a name that
        // nobody declares has none, so that its calls are refused (`refusal`), never decided
        // under this.
        let mut decl = LimitDeclaration::new(name, Limit::per_second(1), cost, key, file, line);
        decl.shares = true;
        decl.state = AtomicU8::new(SHARES);
        decl
    }

    /// Whether this function draws from a limit another declares (`shared = ".."`, by this
    /// declaration's [`name`](LimitDeclaration::name)).
    pub fn is_shared_use(&self) -> bool {
        self.shares
    }

    /// The declaration of the limit this one shares: the first of its name that is not itself
    /// a use of it. `None` when no function declares it ([`validate`] judges what that means).
    pub(crate) fn declaring(&self) -> Option<&'static LimitDeclaration> {
        // In the source only: a name built at run time is never one that a use names
        // (`runtime::declare` refuses it), so a use is judged before the program runs.
        *self
            .target
            .get_or_init(|| registered().find(|d| !d.shares && d.name == self.name))
    }

    /// The same declaration, listing the tiers its calls may be given.
    pub(crate) const fn with_tiers(
        mut self,
        tiers: &'static [crate::limit::Tier],
    ) -> LimitDeclaration {
        self.tiers = tiers;
        self
    }

    /// The tiers this limit's calls may be given in place of its declared limit
    /// (`#[rate_limit(tiers = [..], tier = ..)]`), as far as the declaration lists them: a
    /// call may be given another (a contract's own), under a name of its own.
    pub fn tiers(&self) -> &'static [crate::limit::Tier] {
        self.tiers
    }

    /// The same declaration, with its own empty-key policy and the status of its refusals
    /// for want of a key (`#[rate_limit(empty_key = "..", empty_key_status = ..)]`).
    pub(crate) const fn with_empty_key(
        mut self,
        policy: Option<EmptyKeyPolicy>,
        status: Option<u16>,
    ) -> LimitDeclaration {
        self.empty_key = policy;
        self.empty_key_status = status;
        self
    }

    /// The same declaration, answering a refusal by its bucket with `status` instead of 429
    /// (`#[rate_limit(limited_status = 402)]`: a quota used up is not a "slow down").
    pub(crate) const fn with_limited_status(mut self, status: Option<u16>) -> LimitDeclaration {
        self.limited_status = status;
        self
    }

    /// The HTTP status this limit answers a call its bucket refused with, if not 429.
    pub fn limited_status(&self) -> Option<u16> {
        self.limited_status
    }

    /// The same declaration, whose calls settle their actual cost (`#[rate_limit(settle =
    /// ..)]`): an override that gives it a limit that cannot owe tokens is refused.
    pub(crate) const fn settling(mut self) -> LimitDeclaration {
        self.settles = true;
        self
    }

    /// Whether this function's calls settle their actual cost under this limit (`settle =
    /// ..`).
    pub fn settles(&self) -> bool {
        self.settles
    }

    /// The statuses this limit's refusals are answered with.
    pub(crate) fn statuses(&self) -> crate::pipeline::verdict::Statuses {
        crate::pipeline::verdict::Statuses {
            empty_key: self.empty_key_status,
            limited: self.limited_status,
        }
    }

    /// This limit's own empty-key policy, if it has one (else the limiter's applies).
    pub fn empty_key_policy(&self) -> Option<EmptyKeyPolicy> {
        self.empty_key
    }

    /// The HTTP status this limit answers a call without a key with, if not 403.
    pub fn empty_key_status(&self) -> Option<u16> {
        self.empty_key_status
    }

    /// The limit's name: `module_path::function` unless given with `name = ".."`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether this is a concurrency limit ([`Limit::concurrent`]), of its own or shared:
    /// its calls hold a slot while they run. Overrides never change a limit's kind.
    pub fn is_concurrent(&self) -> bool {
        if self.shares {
            return self.declaring().is_some_and(|d| d.limit.is_concurrent());
        }
        self.limit.is_concurrent()
    }

    /// The limit as written in the source (of a shared use, as the declaring function wrote
    /// it).
    pub fn declared_limit(&self) -> Limit {
        match self.shares.then(|| self.declaring()).flatten() {
            Some(declaring) => declaring.limit,
            None => self.limit,
        }
    }

    /// Tokens one call takes, as written in the source.
    pub fn declared_cost(&self) -> u32 {
        self.cost
    }

    /// The limit in force: the declared one, or the configuration override applied by
    /// `enable_redis_rate_limit!`.
    ///
    /// A `shared = ".."` use of a name that no function declares has no limit in force: this
    /// is then a placeholder (1 per second), which no call is decided under, since every call
    /// of such a use is refused (see [`validate_declared_limits`]).
    #[inline]
    pub fn effective(&self) -> Effective {
        // One load for the common declaration, its own and never overridden. Acquire pairs
        // with `set_effective`'s Release: seen set, the override is seen too.
        if self.state.load(Ordering::Acquire) & (OVERRIDDEN | SHARES) == 0 {
            return Effective {
                limit: self.limit,
                cost: self.cost,
                enabled: true,
            };
        }
        self.effective_elsewhere()
    }

    /// [`effective`](LimitDeclaration::effective) of a shared use, or of a declaration
    /// overridden once.
    #[cold]
    fn effective_elsewhere(&self) -> Effective {
        if self.shares {
            return self.shared_effective();
        }
        match &*self.effective.load() {
            Some(effective) => **effective,
            None => Effective {
                limit: self.limit,
                cost: self.cost,
                enabled: true,
            },
        }
    }

    /// A shared use's limit in force: the declaring function's, overrides included, at this
    /// function's own cost.
    #[cold]
    fn shared_effective(&self) -> Effective {
        match self.declaring() {
            Some(declaring) => Effective {
                cost: self.cost,
                ..declaring.effective()
            },
            // Dangling: the placeholder, which no call is decided under (`refusal`).
            None => Effective {
                limit: self.limit,
                cost: self.cost,
                enabled: true,
            },
        }
    }

    /// The refusal of every call of this declaration when it is dangling or duplicated
    /// ([`validate`]), on whatever limiter decides it: it is never decided under an invented
    /// limit, nor in buckets another declaration's calls take from. The first refused call
    /// logs an ERROR naming the mistake, once per declaration.
    ///
    /// `None` for a valid declaration, which costs its calls one relaxed load once the first
    /// call found it valid.
    #[inline]
    pub(crate) fn refusal(&self) -> Option<Decision> {
        // Relaxed: the flag caches a judgement that never changes; a call that does not see it
        // set judges again, and comes to the same.
        if self.state.load(Ordering::Relaxed) & VALID != 0 {
            return None;
        }
        self.judged()
    }

    /// [`refusal`](LimitDeclaration::refusal) before this declaration is known to be valid:
    /// judged by the program's one validation.
    #[cold]
    fn judged(&self) -> Option<Decision> {
        let validation = validate::program();
        let Some(problem) = validation.problem(self) else {
            self.state.fetch_or(VALID, Ordering::Relaxed);
            return None;
        };
        self.warn_once(
            Warning::Invalid,
            &format_args!(
                "rate limit `{}` ({}:{}) refuses every call: {}",
                self.name,
                self.file,
                self.line,
                validation.describe(self.name, problem)
            ),
        );
        Some(crate::pipeline::without_store::fail_closed(
            &self.declared_limit(),
            self.cost,
        ))
    }

    /// The key resolver expression, as written (`Uri`, `Header("x-api-key")`); of a limit
    /// built at run time, the resolver's type without its path (`Ip`, `Header`, `(Ip,
    /// Route)`).
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// The source file of the function (or of the call that built the limit at run time).
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// The line of the `#[rate_limit]` attribute or `layer_limit!` (or of the call that built
    /// the limit at run time).
    pub fn line(&self) -> u32 {
        self.line
    }

    pub(crate) fn set_effective(&self, effective: Effective) {
        self.effective.store(Some(Arc::new(effective)));
        self.state.fetch_or(OVERRIDDEN, Ordering::Release);
    }

    /// The key of `key`'s bucket under this limit on `limiter` when the declaration
    /// remembers it: the first key resolved on a limiter that `remember`s is named once and
    /// kept, until a call brings another key or prefix; `None` for any other key or prefix,
    /// and for every key once one differed, which the caller names itself (on the stack, for
    /// a memory store).
    pub(crate) fn remembered_bucket(
        &'static self,
        limiter: &RateLimiter,
        key: &str,
        remember: bool,
    ) -> Option<&'static str> {
        if self.varies.load(Ordering::Relaxed) {
            return None;
        }
        let cached = match self.bucket.get() {
            Some(cached) => cached,
            None if remember => self.bucket.get_or_init(|| CachedBucket {
                prefix: Arc::clone(&limiter.inner.prefix),
                key: key.into(),
                bucket: limiter.named_bucket_key(self.name, key).into(),
            }),
            None => return None,
        };
        if *cached.key == *key && same_prefix(&cached.prefix, limiter) {
            return Some(&cached.bucket);
        }
        self.varies.store(true, Ordering::Relaxed);
        None
    }

    /// The head of this limit's bucket keys on `limiter` ([`naming::bucket_head`]), named on
    /// the first call; `None` on a limiter of another prefix than that first call's (the
    /// caller names the whole key).
    pub(crate) fn bucket_head(&'static self, limiter: &RateLimiter) -> Option<&'static str> {
        let named = match self.head.get() {
            Some(named) => named,
            None => self.name_head(limiter),
        };
        same_prefix(&named.prefix, limiter).then_some(&*named.head)
    }

    /// [`bucket_head`](LimitDeclaration::bucket_head)'s first call.
    #[cold]
    fn name_head(&'static self, limiter: &RateLimiter) -> &'static NamedHead {
        self.head.get_or_init(|| NamedHead {
            prefix: Arc::clone(&limiter.inner.prefix),
            head: naming::bucket_head(limiter.prefix(), self.name).into(),
        })
    }

    /// Logs `message` once per declaration and kind of mistake (not once per call): a
    /// limit that ran before enable and later runs without its layer says both.
    pub(crate) fn warn_once(&self, kind: Warning, message: &dyn fmt::Display) {
        let bit = 1u8 << (kind as u8);
        if self.warned.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            crate::observe::log!(error, limit = self.name, "{message}");
        }
    }

    /// Whether `kind` was logged for this declaration already.
    pub(crate) fn warned(&self, kind: Warning) -> bool {
        self.warned.load(Ordering::Relaxed) & (1u8 << (kind as u8)) != 0
    }
}

/// Whether `kept`, a limiter's prefix a declaration keeps alive, is `limiter`'s: nearly always
/// the same allocation, one pointer compared; else compared by its text.
fn same_prefix(kept: &Arc<str>, limiter: &RateLimiter) -> bool {
    Arc::ptr_eq(kept, &limiter.inner.prefix) || **kept == *limiter.prefix()
}

/// A declaration's `state`: found valid by a call.
const VALID: u8 = 1;
/// A declaration's `state`: overridden once.
const OVERRIDDEN: u8 = 2;
/// A declaration's `state`: a shared use.
const SHARES: u8 = 4;

/// The set-up mistakes a declaration logs, each once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Warning {
    /// Called before `enable_redis_rate_limit!` (or with an uninitialised `limiter = ..`).
    NotEnabled = 0,
    /// The limiter refused the limit itself (a misuse).
    CannotCheck = 1,
    /// No key for any call: a forgotten layer or peer address.
    MissingPiece = 2,
    /// The tokens of a call that did not count could not be given back.
    CannotRefund = 3,
    /// An async key resolver failed, or did not answer in time.
    CannotResolve = 4,
    /// Dangling or duplicated: every call is refused.
    Invalid = 5,
    /// A call's actual cost could not be settled (its estimate stays taken).
    CannotSettle = 6,
    /// A key resolver's calendar anchor was out of range (the limit's own was used).
    BadAnchor = 7,
}

impl fmt::Debug for LimitDeclaration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitDeclaration")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("cost", &self.cost)
            .field("key", &self.key)
            .field("tiers", &self.tiers)
            .field("shared_use", &self.shares)
            .field("at", &format_args!("{}:{}", self.file, self.line))
            .field("built_at_run_time", &self.built_at_run_time)
            .field("effective", &self.effective())
            .finish()
    }
}

#[doc(hidden)]
#[derive(Debug)]
pub struct Registration(pub &'static LimitDeclaration);

inventory::collect!(Registration);

/// Every limit declared in this program, sorted by name: those of `#[rate_limit]` and
/// `layer_limit!`, and the layers' limits built at run time so far
/// ([`LimitDeclaration::is_built_at_run_time`]).
///
/// ```
/// for decl in ratelimit_core::declared_limits() {
///     println!("{} = {} at {}:{}", decl.name(), decl.effective().limit, decl.file(), decl.line());
/// }
/// ```
pub fn declared_limits() -> Vec<&'static LimitDeclaration> {
    sorted(registered().chain(runtime::all()).collect())
}

/// The limits the macros declared, sorted as [`declared_limits`] sorts them: fixed before
/// `main` runs.
pub(crate) fn declared_in_source() -> Vec<&'static LimitDeclaration> {
    sorted(registered().collect())
}

/// The limits the macros registered, in no order.
fn registered() -> impl Iterator<Item = &'static LimitDeclaration> {
    inventory::iter::<Registration>.into_iter().map(|r| r.0)
}

/// `all` by name, then place.
fn sorted(mut all: Vec<&'static LimitDeclaration>) -> Vec<&'static LimitDeclaration> {
    all.sort_by(|a, b| {
        a.name
            .cmp(b.name)
            .then(a.file.cmp(b.file))
            .then(a.line.cmp(&b.line))
    });
    all
}

/// Checks the limits declared with `#[rate_limit]` and `layer_limit!` as a whole, the way
/// `enable_redis_rate_limit!` does before it installs the global limiter: for a service whose
/// functions use a limiter of its own (`#[rate_limit(.., limiter = MY_LIMITER)]`) and which
/// never calls enable, to call at startup, before it serves.
///
/// Two mistakes cannot be seen by one declaration alone, and compile: a `shared = ".."` use
/// of a name that no function declares (dangling), and a name declared by two functions or
/// layers (duplicated). Whether or not this is called, a call of such a declaration is never
/// decided under an invented limit or in a bucket shared by accident: it is refused, as a
/// store failing under the `deny` policy refuses (`Source::FailClosed`, a 503), and an error
/// naming the mistake is logged once per declaration.
///
/// A layer's limit built at run time ([`LayerLimit::new`](crate::http::LayerLimit::new)) is
/// judged when it is built, not here: its name is refused then if the source declares it
/// (or a `shared` use names it), or if another limit was built under it with another limit
/// or key; so it is never duplicated, and this judgement of the source, made once, holds
/// whatever the program builds later.
///
/// ```
/// use ratelimit_core::RateLimiter;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ratelimit_core::Error> {
/// // No `enable_redis_rate_limit!` checks the declarations of a limiter of your own: check
/// // them before building it, and stop at a mistake.
/// ratelimit_core::validate_declared_limits()?;
/// let limiter = RateLimiter::builder().memory().build().await?;
/// # let _ = limiter;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Config`] naming every dangling and every duplicated name, with the file and line
/// of each declaration involved.
pub fn validate_declared_limits() -> Result<(), Error> {
    validate::program().result()
}

static GLOBAL: OnceLock<RateLimiter> = OnceLock::new();
/// The overrides file `enable_redis_rate_limit!` read (or `None`), for `reload_overrides`.
static CONFIG: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Remembers where the overrides came from, once, at enable.
pub(crate) fn remember_config(config: Option<PathBuf>) {
    let _ = CONFIG.set(config);
}

/// The overrides file enable read: `None` before enable, `Some(None)` for no file.
pub(crate) fn config() -> Option<&'static Option<PathBuf>> {
    CONFIG.get()
}
static ENABLING: AtomicBool = AtomicBool::new(false);

/// The limiter installed by `enable_redis_rate_limit!`, if it has run.
pub fn global() -> Option<&'static RateLimiter> {
    GLOBAL.get()
}

/// The right to enable, held while one `enable` runs: given back when it is dropped, whether
/// that `enable` failed, succeeded (the installed limiter refuses later claims by itself) or
/// was cancelled (its future dropped at a timeout), so that a later `enable` may try again.
#[derive(Debug)]
pub(crate) struct EnableClaim(());

impl Drop for EnableClaim {
    fn drop(&mut self) {
        ENABLING.store(false, Ordering::SeqCst);
    }
}

/// Claims the right to enable; a second claim fails while the first is held or once a
/// limiter is installed.
pub(crate) fn claim_enable() -> Option<EnableClaim> {
    (GLOBAL.get().is_none() && !ENABLING.swap(true, Ordering::SeqCst)).then_some(EnableClaim(()))
}

pub(crate) fn install(limiter: RateLimiter) -> &'static RateLimiter {
    GLOBAL.get_or_init(|| limiter)
}

/// The names of the limits `decls` declare, each once (a declaration and its `shared = ".."`
/// uses are one limit), in the order first met.
pub(crate) fn limit_names<'a>(decls: &[&'a LimitDeclaration]) -> Vec<&'a str> {
    let mut names: Vec<&str> = Vec::with_capacity(decls.len());
    for decl in decls {
        if !names.contains(&decl.name) {
            names.push(decl.name);
        }
    }
    names
}

pub(crate) fn describe_names(decls: &[&LimitDeclaration]) -> Cow<'static, str> {
    if decls.is_empty() {
        return Cow::Borrowed("(none)");
    }
    Cow::Owned(limit_names(decls).join(", "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::Ordering;

    use super::{Effective, LimitDeclaration, VALID, Warning};
    use crate::decision::Source;
    use crate::limit::Limit;
    use crate::limiter::inner::RateLimiter;

    fn declaration() -> &'static LimitDeclaration {
        Box::leak(Box::new(LimitDeclaration::new(
            "t::decl",
            Limit::per_minute(3),
            1,
            "Global",
            file!(),
            line!(),
        )))
    }

    /// The declared limit is read without the `ArcSwap` until an override is set; from then
    /// on every override, the first and the later ones, is what calls see.
    #[test]
    fn every_override_is_seen_from_the_first() {
        let decl = declaration();
        assert_eq!(decl.effective().limit, Limit::per_minute(3));
        for n in [7, 9] {
            let effective = Effective {
                limit: Limit::per_second(n),
                cost: 2,
                enabled: n == 7,
            };
            decl.set_effective(effective);
            assert_eq!(decl.effective(), effective);
        }
    }

    /// A dangling use's calls are refused, failing closed at its own cost, and it says so;
    /// a valid declaration is judged by its first call, and its later calls read the flag.
    #[test]
    fn a_dangling_use_is_refused_and_a_valid_declaration_judged_once() {
        let valid = declaration();
        assert_eq!(valid.state.load(Ordering::Relaxed) & VALID, 0);
        assert_eq!(valid.refusal(), None);
        assert_eq!(valid.state.load(Ordering::Relaxed), VALID, "judged once");
        assert_eq!(valid.refusal(), None);
        assert!(!valid.warned(Warning::Invalid));

        let dangling = Box::leak(Box::new(LimitDeclaration::sharing(
            "t::nobody",
            2,
            "Global",
            file!(),
            line!(),
        )));
        for _ in 0..2 {
            let refusal = dangling.refusal().unwrap();
            assert_eq!(
                (refusal.allowed, refusal.source, refusal.cost),
                (false, Source::FailClosed, 2)
            );
        }
        assert!(dangling.warned(Warning::Invalid));
        assert_eq!(dangling.state.load(Ordering::Relaxed) & VALID, 0);
    }

    /// The remembered bucket key serves only the key and the prefix it was named from.
    /// A memory limiter of each prefix.
    fn memory_limiters<const N: usize>(prefixes: [&str; N]) -> [RateLimiter; N] {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        prefixes.map(|prefix| {
            rt.block_on(RateLimiter::builder().memory().prefix(prefix).build())
                .unwrap()
        })
    }

    #[test]
    fn a_remembered_bucket_serves_only_its_key_and_prefix() {
        let [a, b] = memory_limiters(["a", "b"]);
        let decl = declaration();
        let named = |limiter: &RateLimiter, key: &str| limiter.named_bucket_key("t::decl", key);
        // Not remembered, then remembered by the first call that may.
        assert_eq!(decl.remembered_bucket(&a, "k1", false), None);
        assert!(decl.bucket.get().is_none());
        let k1 = named(&a, "k1");
        assert_eq!(decl.remembered_bucket(&a, "k1", true), Some(k1.as_str()));
        assert_eq!(decl.remembered_bucket(&a, "k1", false), Some(k1.as_str()));
        for (limiter, key) in [(&a, "k2"), (&b, "k1"), (&b, "k2"), (&a, "k")] {
            assert_eq!(decl.remembered_bucket(limiter, key, true), None, "{key}");
        }
        // Once a key differed, the key varies: no call compares with the remembered one.
        assert_eq!(decl.remembered_bucket(&a, "k1", true), None);
    }

    /// A declaration's head serves the prefix it was named under, whether that limiter's
    /// or another's with the same prefix, and no other: a key after it is the bucket key.
    #[test]
    fn a_head_serves_only_its_prefix() {
        let [a, also_a, b] = memory_limiters(["a", "a", "b"]);
        let decl = declaration();
        let head = decl.bucket_head(&a).expect("named on the first call");
        for limiter in [&a, &also_a] {
            assert_eq!(decl.bucket_head(limiter), Some(head));
            let key = crate::naming::with_key_after(head, "k{1}", |k| k.to_vec());
            assert_eq!(
                key,
                limiter.named_bucket_key("t::decl", "k{1}").into_bytes()
            );
        }
        assert_eq!(decl.bucket_head(&b), None);
        assert_eq!(decl.bucket_head(&a), Some(head));
    }

    /// A limit and its `shared = ".."` uses are named once (issue 44: the startup line
    /// listed a shared name twice).
    #[test]
    fn a_shared_limit_is_named_once() {
        let search = LimitDeclaration::new("gw.search", Limit::per_minute(3), 1, "Global", "f", 1);
        let used = LimitDeclaration::sharing("gw.search", 1, "Global", "g", 2);
        let chat = LimitDeclaration::new("gw.chat", Limit::per_minute(3), 1, "Global", "f", 3);
        let decls = [&used, &search, &chat];
        assert_eq!(super::limit_names(&decls), ["gw.search", "gw.chat"]);
        assert_eq!(super::describe_names(&decls), "gw.search, gw.chat");
    }
}
