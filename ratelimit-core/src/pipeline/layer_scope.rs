//! The HTTP layers' limits as a request's scope holds them ([`LayerScope`]): pending for the
//! handler's check to decide with its own (in one round trip), or decided first by the layer,
//! with what each took kept to give back. The routes whose handlers were seen checking are
//! learned here ([`Learned`]). How a layer plans and serves a request is `http/layered.rs`'s;
//! this is what the pipeline reads and writes of it.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

use super::layer_limit::LayerLimit;
use super::{Holding, Taken};
use crate::limiter::inner::RateLimiter;
use crate::pipeline::verdict::Recorded;
use crate::registry;

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
    pub(crate) fn forget(&self, route: &str) {
        if self.knows(route) {
            self.0
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(route);
        }
    }

    pub(crate) fn learn(&self, route: &str) {
        if self.knows(route) {
            return;
        }
        let mut routes = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if routes.len() < MAX_LEARNED {
            routes.insert(route.into());
        }
    }
}

/// The layers that learn a route once a check below them is seen, each with the route as it
/// saw it (an outer router sees a nested route by the nest's own pattern).
pub(crate) type Learners = Arc<[(Arc<Learned>, Box<str>)]>;

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
    /// What each of the layer's limits took, where it is kept (see `Plan::scope` in `http/layered.rs`): given
    /// back if a check of the handler refuses a request the layer decided first (all or
    /// nothing, on a route not learned yet), or once the response is made if the limit does
    /// not count it.
    taken: Kept,
    /// The verdicts of the limits decided first, by the layers above and this one, before
    /// the handler's check: the response describes them with the handler's.
    first: RefCell<Vec<Recorded>>,
}

impl LayerScope {
    /// What a request's scope holds of a layer's `limits`: pending for the handler's check
    /// when `deferred`, else decided by the layer first; `learners` learn the route once a
    /// check is seen; `above` is what the layers above decided first.
    pub(crate) fn new(
        limits: Arc<[LayerLimit]>,
        learners: Learners,
        deferred: bool,
        above: Vec<Recorded>,
    ) -> LayerScope {
        // What a limit takes is kept when it may have to be given back: by a layer that
        // decides first (if the handler then refuses), and for a limit that counts only some
        // responses. Nothing is allocated when nothing is kept (a learned route with no
        // counting limit, the common case).
        let taken = (!deferred || limits.iter().any(|l| l.count.is_some())).then(|| {
            limits
                .iter()
                .map(|l| match (deferred, l.count.is_some()) {
                    // Held provisionally while the request runs: a refusal waits for them.
                    (_, true) => Some(Taken::counting()),
                    (false, false) => Some(Taken::default()),
                    (true, false) => None,
                })
                .collect()
        });
        LayerScope {
            limits,
            learners,
            pending: Cell::new(deferred),
            held: Holding::default(),
            decided: Cell::new(false),
            taken,
            first: RefCell::new(above),
        }
    }

    /// The limits, in order.
    pub(crate) fn limits(&self) -> &[LayerLimit] {
        &self.limits
    }

    /// Where each limit keeps what it takes, shared.
    pub(crate) fn taken(&self) -> Kept {
        self.taken.clone()
    }

    /// Whether the limits still wait for the handler's check.
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.get()
    }

    /// What the limits decided first describe, taken out (the response, or a rejection's,
    /// describes them once).
    pub(crate) fn take_first(&self) -> Vec<Recorded> {
        self.first.take()
    }

    /// Marks the limits decided by the layer itself, before the handler, with their
    /// `verdict`, which the response describes before the handler's; returns everything
    /// decided first so far, for the layer below.
    pub(crate) fn decided(&self, verdict: Option<Recorded>) -> Vec<Recorded> {
        self.decided.set(true);
        let mut first = self.first.borrow_mut();
        first.extend(verdict);
        first.clone()
    }

    /// For a handler's check on `limiter`: whether limits wait for it; and, when the layer
    /// decided them already, the route learned, so that its next requests leave them to the
    /// check. A check on another limiter than the global one (the limiter that decides layer
    /// limits) sees none and learns nothing.
    pub(crate) fn pending_for(&self, limiter: Option<&RateLimiter>) -> bool {
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

    /// The limits a handler's check on `limiter` decides with its own: those left pending,
    /// taken (`None` on every later check of the request).
    pub(crate) fn take_pending_for(&self, limiter: Option<&RateLimiter>) -> Option<Pending> {
        (self.pending_for(limiter) && self.pending.replace(false)).then(|| Pending {
            limits: Arc::clone(&self.limits),
            taken: self.taken.clone(),
        })
    }

    /// Keeps `slot` until the response is made.
    pub(crate) fn hold(&self, slot: crate::limiter::slot::Slot) {
        self.held.keep(slot);
    }

    /// The slots held for the request, taken out, for the layer to give back (and wait for)
    /// before its response leaves.
    pub(crate) fn take_held(&self) -> Vec<crate::limiter::slot::Slot> {
        self.held.take()
    }

    /// A check refused the request: when the layer decided its limits first (a route not
    /// learned yet), what they took is given back, through the store, so that the request
    /// takes nothing, as on a learned route where one script decides them all. Spawned: the
    /// refusal is not delayed by it (a give-back that fails leaves the tokens taken, as the
    /// request would have counted).
    pub(crate) fn give_back_on_refusal(&self) {
        if !self.decided.get() {
            return;
        }
        let parts: Vec<_> = kept(&self.taken)
            .iter()
            .flatten()
            .flat_map(Taken::take)
            .collect();
        let (Some(limiter), false) = (registry::global(), parts.is_empty()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let checks: Vec<_> = parts
                .iter()
                .map(crate::pipeline::check::TakenPart::check)
                .collect();
            let sources: Vec<_> = parts.iter().map(|p| p.source).collect();
            let given = super::decide::decide_checks(
                limiter,
                &checks,
                super::decide::Ask::Refund(&sources),
            )
            .await;
            {
                if let Err(e) = given {
                    crate::observe::log!(debug, error = %e,
                        "a layer's tokens for a refused request could not be given back");
                }
            }
        });
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

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
}
