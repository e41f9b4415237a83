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

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use http::StatusCode;

use super::{Config, SharedConfig};
use crate::pipeline::layer_scope::{LayerScope, Learners, kept};
use crate::pipeline::scope::{CONTEXT, Scope, described};
use crate::pipeline::verdict::RateLimited;
use crate::pipeline::verdict::{Described, Recorded};
use crate::pipeline::{LayerLimit, Taken, release_all};
use crate::registry::{self, LimitDeclaration};

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
        LayerScope::new(
            Arc::clone(&self.limits),
            Arc::clone(&self.learners),
            self.deferred,
            self.above.clone(),
        )
    }

    /// Whether the limits are still to decide once the response is back: deferred, not taken
    /// over by a layer below, and not decided by the handler's check. Then the route is
    /// forgotten: its next request is decided by the layer first.
    pub(crate) fn still_pending(&self, scope: Option<&Scope>) -> bool {
        let pending = self.deferred
            && !self.taken.load(Ordering::Acquire)
            && scope
                .and_then(|s| s.layer.as_ref())
                .is_some_and(LayerScope::is_pending);
        if pending {
            for (learned, route) in self.learners.iter() {
                learned.forget(route);
            }
        }
        pending
    }
}

/// Decides `limits` alone, in the current scope (their resolvers read its request, their
/// verdict is recorded in it), on the global limiter: all or nothing, one round trip. What
/// they take is kept in the scope when `keep` says so.
pub(crate) async fn decide(limits: &[LayerLimit], keep: Keep) -> Result<(), Box<RateLimited>> {
    let taken = match keep {
        Keep::Taken => CONTEXT
            .try_with(|scope| scope.layer.as_ref().and_then(LayerScope::taken))
            .ok()
            .flatten(),
        Keep::Nothing => None,
    };
    let brought = crate::pipeline::scope::brought(limits);
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
) -> (Result<T, E>, Described)
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
        let verdict = scope.as_ref().map(described).unwrap_or_default();
        let uncounted = uncounted(scope.as_ref(), out.as_ref().ok().map(&status));
        let held = held(scope.as_ref());
        give_back(uncounted).await;
        release_all(held).await;
        // A layer below took over: its response describes the request already.
        if plan.taken.load(Ordering::Acquire) {
            return (out, Described::default());
        }
        return (out, verdict);
    }
    let _ = plan.decided.set(plan.above.clone());
    let fut = CONTEXT.scope(scope, inner(req));
    let mut fut = std::pin::pin!(fut);
    let out = (&mut fut).await;
    let Some(scope) = fut.as_mut().take_value() else {
        return (out, Described::default());
    };
    let response = match out {
        Ok(response) if plan.still_pending(Some(&scope)) => response,
        out => {
            let verdict = described(&scope);
            let uncounted = uncounted(Some(&scope), out.as_ref().ok().map(&status));
            let held = held(Some(&scope));
            give_back(uncounted).await;
            release_all(held).await;
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
    let scope = after.as_mut().take_value();
    let verdict = scope.as_ref().map(described).unwrap_or_default();
    let held = held(scope.as_ref());
    release_all(held).await;
    (Ok(response), verdict)
}

/// The concurrency slots `scope` holds for its request, taken out: given back, and waited
/// for, before the response leaves, so that the client finds them free when it arrives.
fn held(scope: Option<&Scope>) -> Vec<crate::limiter::slot::Slot> {
    scope
        .and_then(|s| s.layer.as_ref())
        .map(LayerScope::take_held)
        .unwrap_or_default()
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
        .limits()
        .iter()
        .zip(kept(&layer.taken()))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::client_ip::TrustedProxies;
    use crate::pipeline::test_support::declaration;
    use crate::resolvers::Ip;

    fn config(limits: &[LayerLimit], proxies: TrustedProxies) -> SharedConfig {
        Arc::new(Config {
            proxies,
            limits: limits.into(),
            ..Config::default()
        })
    }

    /// A client chooses its method; only HTTP's own are routes to remember.
    #[test]
    fn only_http_methods_are_learned() {
        assert_eq!(route_key("GET", "/a/{id}").as_deref(), Some("GET /a/{id}"));
        assert_eq!(route_key("PATCH", "/a").as_deref(), Some("PATCH /a"));
        assert_eq!(route_key("XGET", "/a"), None);
        assert_eq!(route_key("get", "/a"), None);
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
