//! Limits of an HTTP layer's own ([`LayerLimit`]): decided for every request the layer (or
//! actix middleware) serves, before the handler runs, and all-or-nothing with the handler's
//! own `#[rate_limit]` limits in one round trip.
//!
//! How one round trip is reached without knowing the handler: a layer cannot see whether the
//! handler below it checks limits of its own. So for each route (method and matched pattern)
//! it does not know yet, it decides its limits itself, before calling the handler; when the
//! handler's own check then runs in that request, the route is learned. On a learned route the
//! layer leaves its limits pending in the request's scope, and the handler's check decides
//! them with its own, in one script: all or nothing. A learned route's request whose handler
//! never checked (an extractor refused the request first) has the layer's limits decided when
//! the response comes back, and refused then if they refuse: the request counts, whatever the
//! handler made of it. A request with no matched route (a fallback, a layer around the whole
//! router as a service) is never learned: the layer decides first, every time.
//!
//! Layers nest (a router-wide layer, and a route group's with `route_layer`, `nest` or an
//! actix `scope`): an outer layer hands its pending limits to the next layer down in the
//! request's extensions ([`Handoff`]), which decides them with its own, so that one layer, the
//! innermost, decides every layer's limits, with the handler's when it has any. What a layer
//! decided first (on a route it had not learned yet) is handed down too, so that the response
//! describes every limit that decided the request, whichever layer decided it.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use http::StatusCode;

pub(crate) use super::layer_limit::Brought;
use super::layer_limit::{IN_USE, LayerLimit};
use super::{Config, SharedConfig};
use crate::RateLimited;
use crate::RateLimiter;
use crate::headers::HeaderFamilies;
use crate::pipeline::{Holding, Taken};
use crate::registry::{self, LimitDeclaration};
use crate::request::{CONTEXT, Recorded, Scope};

/// The most routes a layer remembers as checked by their handlers. Routes are the service's
/// own patterns, not what clients send, so this bound is never reached by a real router; past
/// it, a route is simply decided by the layer first.
const MAX_LEARNED: usize = 4096;

/// The routes (method and matched pattern) whose handlers were seen checking limits of their
/// own: there the layer leaves its limits to the handler's check.
#[derive(Debug, Default)]
pub(crate) struct Learned(RwLock<HashSet<Box<str>>>);

impl Learned {
    pub(crate) fn knows(&self, route: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(route)
    }

    /// Forgets `route`: its handler did not check (an extractor refused the request first,
    /// or another router's handler of the same pattern has no limits), so the layer decides
    /// first again until a check is seen.
    fn forget(&self, route: &str) {
        if self.knows(route) {
            self.0
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(route);
        }
    }

    fn learn(&self, route: &str) {
        if self.knows(route) {
            return;
        }
        let mut routes = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if routes.len() < MAX_LEARNED {
            routes.insert(route.into());
        }
    }
}

/// A route as a layer learns it: `GET /orders/{id}`. `None` for a method that is not one of
/// HTTP's own: a client may send any token as a method, and on a route that takes every
/// method each would be a route to remember.
pub(crate) fn route_key(method: &str, pattern: &str) -> Option<Box<str>> {
    const METHODS: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
    ];
    METHODS
        .contains(&method)
        .then(|| format!("{method} {pattern}").into_boxed_str())
}

/// What an outer layer passes to the next layer down, in the request's extensions: the limits
/// it left pending (none when it decided them itself), the tables that learn the route, and
/// whether a layer below took the limits over.
#[derive(Clone, Debug)]
pub(crate) struct Handoff {
    limits: Arc<[LayerLimit]>,
    /// The layer above's configuration: only a layer that tells the client the same way may
    /// decide its limits (an `Ip` key read behind other proxies would be another key).
    config: SharedConfig,
    learners: Learners,
    taken: Arc<AtomicBool>,
    /// What the layers above decided first (themselves, before calling the layer below), set
    /// before the layer below is called: the response that layer makes describes them too.
    decided: Decided,
}

/// The verdicts of the limits layers decided first for a request, outermost first.
type Decided = Arc<OnceLock<Vec<Recorded>>>;

/// The layers that learn a route once a check below them is seen, each with the route as it
/// saw it (an outer router sees a nested route by the nest's own pattern).
type Learners = Arc<[(Arc<Learned>, Box<str>)]>;

/// Whether two layers tell the client the same way: the same trusted proxies and header,
/// and the same IPv6 grouping.
fn tells_clients_alike(a: &Config, b: &Config) -> bool {
    a.proxies == b.proxies && a.ipv6_prefix == b.ipv6_prefix
}

/// What one layer does with one request.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Every limit to decide for this request: those handed down, then this layer's own.
    pub(crate) limits: Arc<[LayerLimit]>,
    /// Whether the handler's check decides them (a learned route), or the layer first.
    pub(crate) deferred: bool,
    learners: Learners,
    config: SharedConfig,
    /// Set when a layer below took the limits over.
    taken: Arc<AtomicBool>,
    /// What the layers above decided first, for this layer's response to describe.
    above: Vec<Recorded>,
    /// What the layers down to this one decided first, for the layer below.
    decided: Decided,
}

impl Plan {
    /// The plan of a layer configured with `config` (its own limits, its learned routes),
    /// for a request on `route` (none: no matched pattern) that brought `handed` from a layer
    /// above. `None` when there is nothing to decide: no limit here or above.
    ///
    /// A layer above that tells the client another way (other trusted proxies, another IPv6
    /// prefix) is not taken over: it decides its own limits first, every time.
    ///
    /// `route` is asked only when there is something to decide: a layer without limits pays
    /// nothing per request.
    pub(crate) fn new(
        config: &SharedConfig,
        handed: Option<Handoff>,
        route: impl FnOnce() -> Option<Box<str>>,
    ) -> Option<Plan> {
        let (own, learned) = (&config.limits, &config.learned);
        if own.is_empty() && handed.is_none() {
            return None;
        }
        let handed = handed.filter(|h| tells_clients_alike(&h.config, config));
        let mine = route().map(|route| (Arc::clone(learned), route));
        let deferred = mine.as_ref().is_some_and(|(_, route)| learned.knows(route));
        let above = handed
            .as_ref()
            .and_then(|h| h.decided.get().cloned())
            .unwrap_or_default();
        let (limits, learners): (Arc<[LayerLimit]>, Learners) = match handed {
            None if own.is_empty() => return None,
            None => (Arc::clone(own), mine.into_iter().collect()),
            Some(handed) => {
                // This layer decides every limit handed down (now, or its handler's check):
                // the layers above may leave theirs pending on this route from now on.
                handed.taken.store(true, Ordering::Release);
                for (above, route) in handed.learners.iter() {
                    above.learn(route);
                }
                let limits: Arc<[LayerLimit]> = if own.is_empty() {
                    handed.limits
                } else {
                    handed.limits.iter().chain(own.iter()).cloned().collect()
                };
                let learners = handed.learners.iter().cloned().chain(mine).collect();
                (limits, learners)
            }
        };
        Some(Plan {
            limits,
            deferred,
            learners,
            config: Arc::clone(config),
            taken: Arc::new(AtomicBool::new(false)),
            above,
            decided: Decided::default(),
        })
    }

    /// What to hand to the next layer down: the pending limits when deferred (none when this
    /// layer decides them first), and the tables that learn the route.
    pub(crate) fn handoff(&self) -> Handoff {
        Handoff {
            limits: if self.deferred {
                Arc::clone(&self.limits)
            } else {
                Arc::from([])
            },
            learners: Arc::clone(&self.learners),
            config: Arc::clone(&self.config),
            taken: Arc::clone(&self.taken),
            decided: Arc::clone(&self.decided),
        }
    }

    /// What the request's scope holds of this plan, for the handler's check.
    pub(crate) fn scope(&self) -> LayerScope {
        LayerScope {
            limits: Arc::clone(&self.limits),
            learners: Arc::clone(&self.learners),
            pending: Cell::new(self.deferred),
            held: Holding::default(),
            decided: Cell::new(false),
            // What a limit takes is kept when it may have to be given back: by a layer that
            // decides first (if the handler then refuses), and for a limit that counts only
            // some responses.
            // Nothing is allocated when nothing is kept (a learned route with no counting
            // limit, the common case).
            taken: (!self.deferred || self.limits.iter().any(|l| l.count.is_some())).then(|| {
                self.limits
                    .iter()
                    .map(|l| (!self.deferred || l.count.is_some()).then(Taken::default))
                    .collect()
            }),
            first: RefCell::new(self.above.clone()),
        }
    }

    /// Whether the limits are still to decide once the response is back: deferred, not taken
    /// over by a layer below, and not decided by the handler's check. Then the route is
    /// forgotten: its next request is decided by the layer first.
    pub(crate) fn still_pending(&self, scope: Option<&crate::request::Scope>) -> bool {
        let pending = self.deferred
            && !self.taken.load(Ordering::Acquire)
            && scope
                .and_then(|s| s.layer.as_ref())
                .is_some_and(|l| l.pending.get());
        if pending {
            for (learned, route) in self.learners.iter() {
                learned.forget(route);
            }
        }
        pending
    }
}

/// A layer's limits as the request's scope holds them.
#[derive(Debug)]
pub(crate) struct LayerScope {
    limits: Arc<[LayerLimit]>,
    learners: Learners,
    /// The limits wait for the handler's check.
    pending: Cell<bool>,
    /// The concurrency slots taken for the request by a check that had nowhere else to keep
    /// them: given back once the response is made.
    held: Holding,
    /// The layer decided them before calling the handler.
    decided: Cell<bool>,
    /// What each of the layer's limits took, where it is kept (see [`Plan::scope`]): given
    /// back if a check of the handler refuses a request the layer decided first (all or
    /// nothing, on a route not learned yet), or once the response is made if the limit does
    /// not count it.
    taken: Kept,
    /// The verdicts of the limits decided first, by the layers above and this one, before
    /// the handler's check: the response describes them with the handler's.
    first: RefCell<Vec<Recorded>>,
}

impl LayerScope {
    /// Marks the limits decided by the layer itself, before the handler, with their
    /// `verdict`, which the response describes before the handler's; returns everything
    /// decided first so far, for the layer below.
    fn decided(&self, verdict: Option<Recorded>) -> Vec<Recorded> {
        self.decided.set(true);
        let mut first = self.first.borrow_mut();
        first.extend(verdict);
        first.clone()
    }

    /// For a handler's check on `limiter`: whether limits wait for it; and, when the layer
    /// decided them already, the route learned, so that its next requests leave them to the
    /// check. A check on another limiter than the global one (the limiter that decides layer
    /// limits) sees none and learns nothing.
    fn pending_for(&self, limiter: Option<&RateLimiter>) -> bool {
        let same = match (limiter, registry::global()) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same && self.decided.get() {
            for (learned, route) in self.learners.iter() {
                learned.learn(route);
            }
        }
        same && self.pending.get()
    }
}

/// The current request's layer scope, to `f`, when this program made layer limits and the
/// request has some.
fn with_layer<R>(f: impl FnOnce(&LayerScope) -> Option<R>) -> Option<R> {
    // Relaxed: a layer limit is made before the requests it serves are (the router is
    // built, then serves), and those requests reach the check through the runtime, which
    // orders them after it.
    if !IN_USE.load(Ordering::Relaxed) {
        return None;
    }
    crate::request::CONTEXT
        .try_with(|scope| scope.layer.as_ref().and_then(f))
        .ok()
        .flatten()
}

/// Whether a handler's check on `limiter` has its layers' limits to decide with its own (then
/// it goes the several-limit way, [`take_pending`]).
pub(crate) fn has_pending(limiter: Option<&RateLimiter>) -> bool {
    with_layer(|layer| layer.pending_for(limiter).then_some(())).is_some()
}

/// The layer limits a handler's check on `limiter` decides with its own: those its layer left
/// pending, taken. `None` outside a layer with limits, and on every later check of the
/// request.
pub(crate) fn take_pending(limiter: Option<&RateLimiter>) -> Option<Pending> {
    with_layer(|layer| {
        (layer.pending_for(limiter) && layer.pending.replace(false)).then(|| Pending {
            limits: Arc::clone(&layer.limits),
            taken: layer.taken.clone(),
        })
    })
}

/// The layers' limits a handler's check decides with its own, and where each keeps what it
/// takes (for those that count only some responses).
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) limits: Arc<[LayerLimit]>,
    pub(crate) taken: Kept,
}

/// What each of a scope's layer limits took, in the limits' order, where it is kept; `None`
/// when none is (shared, not copied, by the checks that keep into it).
pub(crate) type Kept = Option<Arc<[Option<Taken>]>>;

/// The kept parts of `kept`, one per limit (none: nothing kept).
pub(crate) fn kept(kept: &Kept) -> &[Option<Taken>] {
    kept.as_deref().unwrap_or_default()
}

/// Keeps `slot` in the current request's layer scope, until the response is made; dropped
/// (given back) outside one.
pub(crate) fn hold(slot: crate::Slot) {
    let _ = crate::request::CONTEXT.try_with(move |scope| {
        if let Some(layer) = &scope.layer {
            layer.held.keep(slot);
        }
    });
}

/// Decides `limits` alone, in the current scope (their resolvers read its request, their
/// verdict is recorded in it), on the global limiter: all or nothing, one round trip. What
/// they take is kept in the scope when `keep` says so.
pub(crate) async fn decide(limits: &[LayerLimit], keep: Keep) -> Result<(), Box<RateLimited>> {
    let taken = match keep {
        Keep::Taken => CONTEXT
            .try_with(|scope| scope.layer.as_ref().and_then(|l| l.taken.clone()))
            .ok()
            .flatten(),
        Keep::Nothing => None,
    };
    let brought = Brought::new(limits);
    let checks: Vec<_> = brought.checks(kept(&taken)).collect();
    crate::pipeline::decide_all(&checks, registry::global()).await
}

/// Whether [`decide`] keeps what the limits take in the scope (they are the scope's own
/// limits, in its order), or keeps nothing (after the response: nothing is given back then).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keep {
    Taken,
    Nothing,
}

/// A check refused the request: when the layer decided its limits first (a route not
/// learned yet), what they took is given back, through the store, so that the request takes
/// nothing, as on a learned route where one script decides them all. Spawned: the refusal is
/// not delayed by it (a give-back that fails leaves the tokens taken, as the request would
/// have counted).
pub(crate) fn give_back_on_refusal() {
    let parts: Vec<_> = with_layer(|layer| {
        layer.decided.get().then(|| {
            kept(&layer.taken)
                .iter()
                .flatten()
                .flat_map(Taken::take)
                .collect()
        })
    })
    .unwrap_or_default();
    let (Some(limiter), false) = (registry::global(), parts.is_empty()) else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        for part in parts {
            let given = limiter
                .refund_bucket(&part.bucket, &part.limit, part.cost, part.source)
                .await;
            if let Err(e) = given {
                tracing::debug!(target: "redis_ratelimit", error = %e,
                    "a layer's tokens for a refused request could not be given back");
            }
        }
    });
}

/// What a refusal replaces: the request, refused before the service below saw it; or the
/// response it gave, for a request whose handler did not decide the limits left to it.
#[derive(Debug)]
pub(crate) enum Refusing<R, T> {
    Request(R),
    Response(T),
}

/// Serves `req` under `plan`, in `scope`: the layers' limits decided first, or left to the
/// handler's check (and decided when the response is back if it did not check); `inner`
/// calls the service below; `refused` renders a refusal as the response (in the scope, so it
/// takes the verdict with it); `status` reads a response's status, for the limits that count
/// only some responses. Returns the response and the verdict its headers describe.
pub(crate) async fn serve<R, F, T, E>(
    mut scope: Scope,
    plan: Plan,
    req: R,
    inner: impl FnOnce(R) -> F,
    refused: impl FnOnce(Box<RateLimited>, Refusing<R, T>) -> T,
    status: impl Fn(&T) -> StatusCode,
) -> (Result<T, E>, Verdict)
where
    F: Future<Output = Result<T, E>>,
{
    scope.layer = Some(plan.scope());
    if !plan.deferred {
        let fut = CONTEXT.scope(scope, async {
            match decide(&plan.limits, Keep::Taken).await {
                Err(rejection) => Ok(refused(rejection, Refusing::Request(req))),
                Ok(()) => {
                    // What the layers decided so far is described with what the handler
                    // (or a layer below) decides next, in one list.
                    let _ = CONTEXT.try_with(|s| {
                        if let Some(layer) = &s.layer {
                            let _ = plan.decided.set(layer.decided(s.take_verdict()));
                        }
                    });
                    inner(req).await
                }
            }
        });
        let mut fut = std::pin::pin!(fut);
        let out = (&mut fut).await;
        let scope = fut.as_mut().take_value();
        let verdict = scope.as_ref().map(Verdict::of).unwrap_or_default();
        let uncounted = uncounted(scope.as_ref(), out.as_ref().ok().map(&status));
        give_back(uncounted).await;
        // A layer below took over: its response describes the request already.
        if plan.taken.load(Ordering::Acquire) {
            return (out, Verdict::default());
        }
        return (out, verdict);
    }
    let _ = plan.decided.set(plan.above.clone());
    let fut = CONTEXT.scope(scope, inner(req));
    let mut fut = std::pin::pin!(fut);
    let out = (&mut fut).await;
    let Some(scope) = fut.as_mut().take_value() else {
        return (out, Verdict::default());
    };
    let response = match out {
        Ok(response) if plan.still_pending(Some(&scope)) => response,
        out => {
            let verdict = Verdict::of(&scope);
            let uncounted = uncounted(Some(&scope), out.as_ref().ok().map(&status));
            give_back(uncounted).await;
            return (out, verdict);
        }
    };
    // A learned route whose handler did not check: the request counts all the same, under
    // the limits that count its response (the others would take and give back at once).
    let code = status(&response);
    let counted: Vec<LayerLimit> = plan
        .limits
        .iter()
        .filter(|l| l.counts(&code))
        .cloned()
        .collect();
    let after = CONTEXT.scope(scope, async {
        match decide(&counted, Keep::Nothing).await {
            Ok(()) => response,
            Err(rejection) => refused(rejection, Refusing::Response(response)),
        }
    });
    let mut after = std::pin::pin!(after);
    let response = (&mut after).await;
    let verdict = Verdict::of_finished(after.as_mut());
    (Ok(response), verdict)
}

/// What the limits kept in `scope` took for a request whose response has `status`, under
/// each limit that does not count it. A response that is an error of the service (no status)
/// counts. Collected apart from [`give_back`]: the scope is not `Sync`, and must not be held
/// across an await.
fn uncounted(
    scope: Option<&Scope>,
    status: Option<StatusCode>,
) -> Vec<(&'static LimitDeclaration, Taken)> {
    let (Some(layer), Some(status)) = (scope.and_then(|s| s.layer.as_ref()), status) else {
        return Vec::new();
    };
    layer
        .limits
        .iter()
        .zip(kept(&layer.taken))
        .filter_map(|(limit, taken)| {
            let taken = taken.as_ref()?;
            (!limit.counts(&status)).then(|| (limit.decl, taken.clone()))
        })
        .collect()
}

/// Gives back what each limit took, through the global limiter's store.
async fn give_back(uncounted: Vec<(&'static LimitDeclaration, Taken)>) {
    for (decl, taken) in uncounted {
        crate::pipeline::refund(decl, &taken, registry::global()).await;
    }
}

/// What a request's response describes: the limits layers decided first (outermost first),
/// then the last limited call's verdict. Empty once a rejection's response took them with it
/// ([`rejection_rendering`]).
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub(crate) first: Vec<Recorded>,
    pub(crate) last: Option<Recorded>,
}

impl Verdict {
    /// What the scope of a request's future holds to describe, once the future is done.
    pub(crate) fn of_finished<F: Future>(
        fut: std::pin::Pin<&mut tokio::task::futures::TaskLocalFuture<Scope, F>>,
    ) -> Verdict {
        fut.take_value()
            .as_ref()
            .map(Verdict::of)
            .unwrap_or_default()
    }

    /// What `scope` holds to describe.
    fn of(scope: &Scope) -> Verdict {
        let first = scope
            .layer
            .as_ref()
            .map(|l| l.first.take())
            .unwrap_or_default();
        Verdict {
            first,
            last: scope.take_verdict(),
        }
    }
}

/// What a rejection's response describes, rendered in the current request's scope: the
/// header families of the integration serving it (every family outside one) and the limits
/// its layers decided first, taken with the verdict so that the integration does not render
/// them again over the rejection's headers.
pub(crate) fn rejection_rendering() -> (HeaderFamilies, Vec<Recorded>) {
    let families = crate::request::rendering_rejection();
    let first = CONTEXT
        .try_with(|s| s.layer.as_ref().map(|l| l.first.take()))
        .ok()
        .flatten()
        .unwrap_or_default();
    (families, first)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::pipeline::test_support::declaration;
    use crate::{Ip, TrustedProxies};

    fn config(limits: &[LayerLimit], proxies: TrustedProxies) -> SharedConfig {
        Arc::new(Config {
            proxies,
            limits: limits.into(),
            ..Config::default()
        })
    }

    /// `count` means something only on a bucket: on a window or a concurrency limit it is
    /// refused (said, and every request counts), never kept to fail at each refund.
    #[test]
    fn count_is_kept_only_where_tokens_can_be_given_back() {
        let with = |limit: crate::Limit| {
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
        assert!(with(crate::Limit::per_minute(5)));
        assert!(with(
            crate::Limit::per_minute(5).algorithm(crate::Algorithm::LeakyBucket)
        ));
        assert!(!with(
            crate::Limit::per_minute(5).algorithm(crate::Algorithm::FixedWindow)
        ));
        assert!(!with(crate::Limit::concurrent(2)));
    }

    /// A client chooses its method; only HTTP's own are routes to remember.
    #[test]
    fn only_http_methods_are_learned() {
        assert_eq!(route_key("GET", "/a/{id}").as_deref(), Some("GET /a/{id}"));
        assert_eq!(route_key("PATCH", "/a").as_deref(), Some("PATCH /a"));
        assert_eq!(route_key("XGET", "/a"), None);
        assert_eq!(route_key("get", "/a"), None);
    }

    /// However many routes a handler is seen checking on, the table stays bounded.
    #[test]
    fn the_learned_routes_are_bounded() {
        let learned = Learned::default();
        for i in 0..MAX_LEARNED + 100 {
            learned.learn(&format!("GET /r{i}"));
        }
        assert_eq!(learned.0.read().unwrap().len(), MAX_LEARNED);
        assert!(learned.knows("GET /r0"));
        learned.forget("GET /r0");
        assert!(!learned.knows("GET /r0"));
    }

    /// A layer takes over the limits handed down by one that tells the client as it does, and
    /// teaches it the route; one behind other proxies keys `Ip` by another address, so the
    /// layer above keeps deciding its own.
    #[test]
    fn a_layer_takes_over_only_what_it_keys_alike() {
        let outer = LayerLimit::declared(declaration("layered::outer", "Ip"), Ip);
        let inner = LayerLimit::declared(declaration("layered::inner", "Ip"), Ip);
        let proxies = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let above = config(&[outer], proxies.clone());
        let route = || route_key("GET", "/x");

        // First request: the outer layer decides first and hands down no limits.
        let first = Plan::new(&above, None, route).unwrap();
        assert!(!first.deferred);
        let below = config(std::slice::from_ref(&inner), proxies);
        let taken = Plan::new(&below, Some(first.handoff()), route).unwrap();
        assert_eq!(taken.limits.len(), 1);
        assert!(first.taken.load(Ordering::Acquire));
        // The outer layer learned that the route is decided below: now it defers.
        let second = Plan::new(&above, None, route).unwrap();
        assert!(second.deferred);
        let both = Plan::new(&below, Some(second.handoff()), route).unwrap();
        let names: Vec<_> = both.limits.iter().map(|l| l.decl.name()).collect();
        assert_eq!(names, ["layered::outer", "layered::inner"]);

        // Below, behind no trusted proxy: the handoff is left alone, and nothing is learned.
        let o2 = LayerLimit::declared(declaration("layered::o2", "Ip"), Ip);
        let above = config(&[o2], TrustedProxies::new(["10.0.0.0/8"]).unwrap());
        let plan = Plan::new(&above, None, route).unwrap();
        let below = config(&[inner], TrustedProxies::default());
        let own = Plan::new(&below, Some(plan.handoff()), route).unwrap();
        assert_eq!(own.limits.len(), 1);
        assert_eq!(own.limits[0].decl.name(), "layered::inner");
        assert!(!plan.taken.load(Ordering::Acquire));
        assert!(!Plan::new(&above, None, route).unwrap().deferred);
    }
}
