//! A limit an HTTP layer decides for every request it serves ([`LayerLimit`]), and what one
//! request brings to it ([`Brought`]): its key, its tier and whether it is exempt, read from
//! the request as a handler's limit reads its call's arguments. How the layer decides them is
//! `http/layered.rs`'s; what a request's scope holds of them, `layer_scope.rs`'s.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::StatusCode;

use super::{Call, KeyArg, Taken};
use crate::errors::Error;
use crate::limit::Limit;
use crate::limit::Tier;
use crate::registry::{self, LimitDeclaration};
use crate::request::RequestContext;
use crate::resolvers::KeyResolver;

/// A limit an HTTP layer decides for every request it serves: declared by `layer_limit!` in
/// the source, or built at run time from configuration by [`LayerLimit::new`]; either way a
/// declared limit, listed by [`declared_limits`](crate::declared_limits) and overridable by
/// its name like any other. Given to [`RateLimitLayer::limit`](crate::RateLimitLayer) or
/// `RateLimitMiddleware::limit`.
///
/// What a handler's limit reads from its call's arguments, a layer's reads from the request:
/// which requests are exempt ([`exempt`](LayerLimit::exempt)), the tier each is decided
/// under ([`tier`](LayerLimit::tier)), and, from the response's status, which requests count
/// ([`count`](LayerLimit::count)). `layer_limit!(exempt = .., tier = .., count = ..)` sets
/// them.
#[derive(Clone)]
pub struct LayerLimit {
    pub(crate) decl: &'static LimitDeclaration,
    key: Arc<dyn KeyResolver>,
    exempt: Option<Reads<RequestContext, bool>>,
    tier: Option<Reads<RequestContext, Option<Tier>>>,
    pub(super) count: Option<Reads<StatusCode, bool>>,
}

/// What a layer's limit reads from a request (or its response's status).
type Reads<T, R> = Arc<dyn Fn(&T) -> R + Send + Sync>;

impl LayerLimit {
    /// A layer's limit named `name`, of `limit`, keyed by `key`, from values known only at
    /// run time (a configuration file): what `layer_limit!` declares in the source, for a
    /// service whose route groups and quotas are configured. Each request takes one token.
    ///
    /// It is a declared limit like a macro's:
    /// - listed by [`declared_limits`](crate::declared_limits), at the file and line of this
    ///   call, [`is_built_at_run_time`](LimitDeclaration::is_built_at_run_time), its key the
    ///   resolver's type (`Ip`, `Header`);
    /// - overridden by its name: built before `enable_redis_rate_limit!`, enable applies its
    ///   override with the rest; built after, the override in force (the file enable read,
    ///   and the environment) applies at once; and
    ///   [`reload_overrides`](crate::reload_overrides) covers it. An override of a name not
    ///   built yet is refused at enable and at a reload, as a typo is: build such limits
    ///   before enable, or reload once they are built;
    /// - refused with the same 429, headers and problem body, traced and counted under its
    ///   name.
    ///
    /// Built again with the same name, limit and key (a router rebuilt when its configuration
    /// is reloaded), it is a limit on the declaration built first: the same buckets, the same
    /// overrides, listed once. Each distinct name is kept for the life of the program (the
    /// declarations are `'static`), so build names from configuration, never from requests.
    ///
    /// ```
    /// use ratelimit_core::http::LayerLimit;
    /// use ratelimit_core::{Ip, Limit, Unit};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // From configuration: `name = "partners"`, `replenish = 600`, `unit = "minute"`.
    /// let (name, replenish, unit) = ("partners", 600, "minute");
    /// let limit = Limit::try_new(replenish, replenish, unit.parse::<Unit>()?)?;
    /// let partners = LayerLimit::new(name, limit, Ip)?
    ///     .exempt(|request| request.path() == Some("/health"));
    /// assert!(partners.declaration().is_built_at_run_time());
    /// assert!(ratelimit_core::declared_limits().iter().any(|d| d.name() == "partners"));
    /// // A router rebuilt with the same configuration: the same declaration.
    /// let again = LayerLimit::new(name, limit, Ip)?;
    /// assert!(std::ptr::eq(partners.declaration(), again.declaration()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config), naming both places, when the name is declared
    /// in the source (by `#[rate_limit]` or `layer_limit!`, or drawn from by a `shared = ".."`
    /// use, which draws only from a limit of the source) or was built already with another
    /// limit or key; when the name is empty (the rule of `name = ".."`); when `limit` waits
    /// or has a jitter (a layer's limit refuses at once); and, built after enable, when the
    /// overrides in force for it are invalid.
    #[track_caller]
    pub fn new<K: KeyResolver>(
        name: impl AsRef<str>,
        limit: Limit,
        key: K,
    ) -> Result<LayerLimit, Error> {
        let at = std::panic::Location::caller();
        let name = name.as_ref();
        if limit.max_wait().is_some() || limit.max_jitter().is_some() {
            return Err(Error::Config(format!(
                "the limit `{name}` built at {}:{} is {limit}: a layer's limit refuses at once, \
                 so it takes no wait nor jitter",
                at.file(),
                at.line()
            )));
        }
        let decl = registry::runtime::declare(
            name,
            limit,
            &registry::runtime::key_name::<K>(),
            at,
            crate::startup::resolve_built,
        )?;
        Ok(LayerLimit::declared(decl, key))
    }

    /// A limit on `decl`, keyed by `key`: what `layer_limit!` expands to, and
    /// [`LayerLimit::new`] builds.
    pub(crate) fn declared(decl: &'static LimitDeclaration, key: impl KeyResolver) -> LayerLimit {
        IN_USE.store(true, Ordering::Relaxed);
        LayerLimit {
            decl,
            key: Arc::new(key),
            exempt: None,
            tier: None,
            count: None,
        }
    }

    /// The limit's declaration: its name, limit, key and place in the source.
    pub fn declaration(&self) -> &'static LimitDeclaration {
        self.decl
    }

    /// Lets the requests `exempt` says are exempt through unchecked, taking nothing (health
    /// checks, internal callers): `Source::Exempt`, no rate-limit header for this limit.
    #[must_use]
    pub fn exempt(
        mut self,
        exempt: impl Fn(&RequestContext) -> bool + Send + Sync + 'static,
    ) -> LayerLimit {
        self.exempt = Some(Arc::new(exempt));
        self
    }

    /// Decides each request under the tier `tier` picks from it (a plan read from the
    /// principal an authentication layer put in the extensions, never from a header the
    /// client sets, or the client would pick its own rate; a constant, or a contract's tier
    /// built at run time by [`Tier::try_new`]): its limit in place of the declared one,
    /// `None` for the declared one. The request keeps its bucket whatever
    /// its tier; the headers, the rejection and the metrics name the tier. A tier's limit must
    /// be of the declaration's kind (a rate, or a concurrency limit), or the request is
    /// refused.
    #[must_use]
    pub fn tier(
        mut self,
        tier: impl Fn(&RequestContext) -> Option<Tier> + Send + Sync + 'static,
    ) -> LayerLimit {
        self.tier = Some(Arc::new(tier));
        self
    }

    /// Counts only the requests whose response status `count` accepts (say
    /// `StatusCode::is_server_error`, or failed logins by their 401): a request that does not
    /// count gets its tokens back once its response is made, through the store, where every
    /// instance sees them. As on a handler's limit, the tokens are taken before the request
    /// runs (so that concurrent requests cannot all pass), and only the buckets
    /// (`token_bucket`, `leaky_bucket`) give back exactly. On a window, or on a concurrency
    /// limit (whose slot comes back when the request ends, whatever its response), `count`
    /// cannot mean anything: `layer_limit!` does not compile it, and here it is refused with
    /// an error logged, every request counting.
    #[must_use]
    pub fn count(
        mut self,
        count: impl Fn(&StatusCode) -> bool + Send + Sync + 'static,
    ) -> LayerLimit {
        let limit = self.decl.declared_limit();
        if limit.is_concurrent() || limit.algorithm_kind().is_window() {
            crate::observe::log!(
                error,
                limit = self.decl.name(),
                "`count` on the layer limit `{}` ({limit}) is refused, and every request \
                 counts: only a bucket can give a request's tokens back, and a concurrency \
                 slot comes back when the request ends anyway",
                self.decl.name()
            );
            return self;
        }
        self.count = Some(Arc::new(count));
        self
    }

    /// Whether the limit reads the request itself (for a tier, or an exemption), beside its key.
    pub(crate) fn reads_request(&self) -> bool {
        self.tier.is_some() || self.exempt.is_some()
    }

    /// Whether a request whose response has `status` counts under this limit.
    pub(crate) fn counts(&self, status: &StatusCode) -> bool {
        self.count.as_ref().is_none_or(|count| count(status))
    }
}

impl fmt::Debug for LayerLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LayerLimit")
            .field("name", &self.decl.name())
            .field("key", &self.decl.key())
            .field("exempt", &self.exempt.is_some())
            .field("tier", &self.tier.is_some())
            .field("count", &self.count.is_some())
            .finish_non_exhaustive()
    }
}

/// Whether this program made any layer limit: until it does, a check does not look for
/// pending ones (the task-local look costs every call a few nanoseconds).
pub(crate) static IN_USE: AtomicBool = AtomicBool::new(false);

/// What one request brings to its layers' limits, read from it once: each limit's key, its
/// tier and whether the request is exempt. A layer's limit reads the request as a handler's
/// reads its call's arguments.
pub(crate) struct Brought<'a> {
    limits: &'a [LayerLimit],
    keys: Vec<KeyArg<'a>>,
    tiers: Vec<Option<Tier>>,
    exempt: Vec<bool>,
}

impl<'a> Brought<'a> {
    /// What a request brings to `limits`, read from `ctx`: given only when one of them reads
    /// the request ([`LayerLimit::reads_request`]), so that a tier and an exemption are kept
    /// per limit only then.
    pub(crate) fn new(limits: &'a [LayerLimit], ctx: Option<&RequestContext>) -> Brought<'a> {
        let (tiers, exempt) = match ctx {
            None => (Vec::new(), Vec::new()),
            Some(ctx) => {
                let tiers = limits
                    .iter()
                    .map(|l| l.tier.as_ref().and_then(|tier| tier(ctx)))
                    .collect();
                let exempt = limits
                    .iter()
                    .map(|l| l.exempt.as_ref().is_some_and(|exempt| exempt(ctx)))
                    .collect();
                (tiers, exempt)
            }
        };
        Brought {
            limits,
            keys: limits.iter().map(|l| KeyArg::Resolver(&*l.key)).collect(),
            tiers,
            exempt,
        }
    }

    /// The limits as checks, each keeping what it takes in its `taken`, where it has one.
    pub(crate) fn checks<'b>(
        &'b self,
        taken: &'b [Option<Taken>],
    ) -> impl Iterator<Item = (&'static LimitDeclaration, &'b KeyArg<'b>, Call<'b>)> {
        self.limits.iter().enumerate().map(move |(i, l)| {
            let mut call = Call::NONE.with_exempt(self.exempt.get(i).copied().unwrap_or(false));
            if l.tier.is_some() {
                call = call.with_tier(&self.tiers[i]);
            }
            if let Some(Some(taken)) = taken.get(i) {
                call = call.keeping(taken);
            }
            (l.decl, &self.keys[i], call)
        })
    }
}

impl fmt::Debug for Brought<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Brought")
            .field("limits", &self.limits)
            .field("tiers", &self.tiers)
            .field("exempt", &self.exempt)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolvers::Ip;

    /// `count` means something only on a bucket: on a window or a concurrency limit it is
    /// refused (said, and every request counts), never kept to fail at each refund.
    #[test]
    fn count_is_kept_only_where_tokens_can_be_given_back() {
        let with = |limit: crate::limit::Limit| {
            let decl: &'static LimitDeclaration = Box::leak(Box::new(LimitDeclaration::new(
                "layered::counted",
                limit,
                1,
                "Ip",
                file!(),
                line!(),
            )));
            LayerLimit::declared(decl, Ip)
                .count(http::StatusCode::is_server_error)
                .count
                .is_some()
        };
        assert!(with(crate::limit::Limit::per_minute(5)));
        assert!(with(
            crate::limit::Limit::per_minute(5).algorithm(crate::limit::Algorithm::LeakyBucket)
        ));
        assert!(!with(
            crate::limit::Limit::per_minute(5).algorithm(crate::limit::Algorithm::FixedWindow)
        ));
        assert!(!with(crate::limit::Limit::concurrent(2)));
    }
}
