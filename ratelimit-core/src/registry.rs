//! Declared limits and the global limiter that `enable_redis_rate_limit!` installs.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::EmptyKeyPolicy;
use crate::Limit;
use crate::RateLimiter;

/// One `#[rate_limit]` function, registered at compile time: its name, limit, key resolver
/// and place in the source. [`declared_limits`] lists them all.
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
    /// Whether `effective` was ever set: until then every call reads the declared limit
    /// without touching the `ArcSwap` (whose load costs more than the rest of the lookup).
    overridden: AtomicBool,
    /// The bucket key of the first key this declaration's enabled limiter resolved, so that
    /// a key that repeats (always, for `Global`) is not named again on every call.
    bucket: OnceLock<CachedBucket>,
    /// Set once a call's key was not the remembered one: the key varies (`Uri`, `Ip`), and
    /// comparing it with the remembered one would cost every call for the few it serves.
    varies: AtomicBool,
    /// The [`Warning`]s already logged, one bit each.
    warned: AtomicU8,
    /// What this limit does with a call that has no key, when not the limiter's policy.
    empty_key: Option<EmptyKeyPolicy>,
    /// The HTTP status of a refusal for want of a key, when not 403.
    empty_key_status: Option<u16>,
    /// The tiers a call may be given (`tiers = [..]`), as far as they are known.
    tiers: &'static [crate::Tier],
    /// A limit declared elsewhere that this function draws from (`shared = ".."`): its name is
    /// `name`, its limit and its overrides are the declaring function's.
    shares: bool,
    /// The declaration this one shares, found by name on first use.
    target: OnceLock<Option<&'static LimitDeclaration>>,
}

/// A bucket key, with what it was named from: the limiter's prefix and the resolved key (the
/// declaration's name is the third part, and never changes).
struct CachedBucket {
    prefix: Box<str>,
    key: Box<str>,
    bucket: Box<str>,
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
            overridden: AtomicBool::new(false),
            bucket: OnceLock::new(),
            varies: AtomicBool::new(false),
            warned: AtomicU8::new(0),
            empty_key: None,
            empty_key_status: None,
            tiers: &[],
            shares: false,
            target: OnceLock::new(),
        }
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
        let mut decl = LimitDeclaration::new(name, Limit::per_second(1), cost, key, file, line);
        decl.shares = true;
        decl
    }

    /// Whether this function draws from a limit another declares (`shared = ".."`, by this
    /// declaration's [`name`](LimitDeclaration::name)).
    pub fn is_shared_use(&self) -> bool {
        self.shares
    }

    /// The declaration of the limit this one shares: the one of its name that is not itself a
    /// use of it. `None` when no function declares it (an error at enable).
    pub(crate) fn declaring(&self) -> Option<&'static LimitDeclaration> {
        *self.target.get_or_init(|| {
            inventory::iter::<Registration>
                .into_iter()
                .map(|r| r.0)
                .find(|d| !d.shares && d.name == self.name)
        })
    }

    /// The same declaration, listing the tiers its calls may be given.
    pub(crate) const fn with_tiers(mut self, tiers: &'static [crate::Tier]) -> LimitDeclaration {
        self.tiers = tiers;
        self
    }

    /// The tiers this limit's calls may be given in place of its declared limit
    /// (`#[rate_limit(tiers = [..], tier = ..)]`), as far as the declaration lists them: a
    /// call may be given another (a contract's own), under a name of its own.
    pub fn tiers(&self) -> &'static [crate::Tier] {
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
    pub fn effective(&self) -> Effective {
        if self.shares {
            return self.shared_effective();
        }
        let declared = Effective {
            limit: self.limit,
            cost: self.cost,
            enabled: true,
        };
        // Acquire pairs with `set_effective`'s Release: seen set, the override is seen too.
        if !self.overridden.load(Ordering::Acquire) {
            return declared;
        }
        match &*self.effective.load() {
            Some(effective) => **effective,
            None => declared,
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
            // Refused at enable; before it, said once, and decided as declared here (1/s).
            None => {
                self.warn_once(
                    Warning::CannotCheck,
                    &format_args!(
                        "`shared = \"{}\"` ({}:{}) names no declared limit",
                        self.name, self.file, self.line
                    ),
                );
                Effective {
                    limit: self.limit,
                    cost: self.cost,
                    enabled: true,
                }
            }
        }
    }

    /// The key resolver expression, as written (`Uri`, `Header("x-api-key")`).
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// The source file of the function.
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// The line of the `#[rate_limit]` attribute.
    pub fn line(&self) -> u32 {
        self.line
    }

    pub(crate) fn set_effective(&self, effective: Effective) {
        self.effective.store(Some(Arc::new(effective)));
        self.overridden.store(true, Ordering::Release);
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
                prefix: limiter.prefix().into(),
                key: key.into(),
                bucket: limiter.named_bucket_key(self.name, key).into(),
            }),
            None => return None,
        };
        if *cached.key == *key && *cached.prefix == *limiter.prefix() {
            return Some(&cached.bucket);
        }
        self.varies.store(true, Ordering::Relaxed);
        None
    }

    /// Logs `message` once per declaration and kind of mistake (not once per call): a
    /// limit that ran before enable and later runs without its layer says both.
    pub(crate) fn warn_once(&self, kind: Warning, message: &dyn fmt::Display) {
        let bit = 1u8 << (kind as u8);
        if self.warned.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            tracing::error!(target: "redis_ratelimit", limit = self.name, "{message}");
        }
    }

    /// Whether `kind` was logged for this declaration already.
    pub(crate) fn warned(&self, kind: Warning) -> bool {
        self.warned.load(Ordering::Relaxed) & (1u8 << (kind as u8)) != 0
    }
}

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
            .field("effective", &self.effective())
            .finish()
    }
}

#[doc(hidden)]
#[derive(Debug)]
pub struct Registration(pub &'static LimitDeclaration);

inventory::collect!(Registration);

/// Every limit declared with `#[rate_limit]` in this program, sorted by name.
///
/// ```
/// for decl in ratelimit_core::declared_limits() {
///     println!("{} = {} at {}:{}", decl.name(), decl.effective().limit, decl.file(), decl.line());
/// }
/// ```
pub fn declared_limits() -> Vec<&'static LimitDeclaration> {
    let mut all: Vec<&'static LimitDeclaration> = inventory::iter::<Registration>
        .into_iter()
        .map(|r| r.0)
        .collect();
    all.sort_by(|a, b| {
        a.name
            .cmp(b.name)
            .then(a.file.cmp(b.file))
            .then(a.line.cmp(&b.line))
    });
    all
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

pub(crate) fn describe_names(decls: &[&'static LimitDeclaration]) -> Cow<'static, str> {
    if decls.is_empty() {
        return Cow::Borrowed("(none)");
    }
    let names: Vec<&str> = decls.iter().map(|d| d.name).collect();
    Cow::Owned(names.join(", "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{Effective, LimitDeclaration};
    use crate::{Limit, RateLimiter};

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

    /// The remembered bucket key serves only the key and the prefix it was named from.
    #[test]
    fn a_remembered_bucket_serves_only_its_key_and_prefix() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let build = |prefix: &str| {
            rt.block_on(RateLimiter::builder().memory().prefix(prefix).build())
                .unwrap()
        };
        let (a, b) = (build("a"), build("b"));
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
}
