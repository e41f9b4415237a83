//! The per-request scope: the request a call serves (read-only, for key resolvers), who
//! serves it and how its responses are described, the layers' limits pending for the
//! handler's check, and, out, the verdict of the calls made in it. Set per request by the
//! HTTP layer, or by [`scope`] for calls that are not HTTP requests (jobs, gRPC, tests).

use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;

#[cfg(feature = "http-framework")]
use std::sync::atomic::Ordering;

#[cfg(feature = "http-framework")]
use super::layer_limit::{Brought, IN_USE, LayerLimit};
#[cfg(feature = "http-framework")]
use super::layer_scope::{LayerScope, Pending};
use crate::headers::HeaderFamilies;
#[cfg(feature = "http-framework")]
use crate::limiter::inner::RateLimiter;
#[cfg(feature = "http-framework")]
use crate::pipeline::verdict::Described;
use crate::pipeline::verdict::Recorded;
use crate::request::RequestContext;
use crate::request::{MissingPiece, Origin};
use crate::resolvers::KeyResolver;

tokio::task_local! {
    pub(crate) static CONTEXT: Scope;
}

thread_local! {
    /// The context of calls made outside any scope: empty, and never written.
    static EMPTY: RequestContext = RequestContext::default();
}

/// What a request scope holds: the request as key resolvers see it, read-only; who serves it
/// and the header families its responses carry; and, apart, the verdict of the calls made in
/// it, which the HTTP layer renders as headers once the handler returns.
pub(crate) struct Scope {
    pub(crate) ctx: RequestContext,
    origin: Origin,
    families: Option<HeaderFamilies>,
    verdict: Cell<Option<Recorded>>,
    /// The limits of the layers serving the request, when they have any.
    #[cfg(feature = "http-framework")]
    pub(crate) layer: Option<LayerScope>,
}

impl Scope {
    /// A scope for `ctx`, built by a caller of [`scope`].
    pub(crate) fn new(ctx: RequestContext) -> Scope {
        Scope {
            ctx,
            origin: Origin::Scope,
            families: None,
            verdict: Cell::new(None),
            #[cfg(feature = "http-framework")]
            layer: None,
        }
    }

    /// A scope for `ctx`, built by an HTTP integration configured to send `families`.
    #[cfg_attr(not(feature = "http-framework"), allow(dead_code))]
    pub(crate) fn served_by(
        ctx: RequestContext,
        origin: Origin,
        families: HeaderFamilies,
    ) -> Scope {
        Scope {
            origin,
            families: Some(families),
            ..Scope::new(ctx)
        }
    }

    /// Records the verdict of a call made in this scope (the last call's stands).
    #[inline]
    pub(crate) fn record(&self, verdict: Recorded) {
        self.verdict.set(Some(verdict));
    }

    /// The verdict recorded, taken out.
    pub(crate) fn take_verdict(&self) -> Option<Recorded> {
        self.verdict.take()
    }
}

/// Runs `future` with `ctx` as the current request context: the `#[rate_limit]` functions it
/// calls resolve their keys from `ctx`. Returns the future's output alone;
/// [`scope_returning`] also gives the verdict of the calls made in it.
pub async fn scope<F: Future>(ctx: RequestContext, future: F) -> F::Output {
    CONTEXT.scope(Scope::new(ctx), future).await
}

/// Like [`scope`], and returns with the future's output the verdict of the last limited
/// call made in it (what the HTTP layer renders as the response's headers), if any.
pub async fn scope_returning<F: Future>(
    ctx: RequestContext,
    future: F,
) -> (F::Output, Option<Recorded>) {
    let mut fut = std::pin::pin!(CONTEXT.scope(Scope::new(ctx), future));
    let output = (&mut fut).await;
    let verdict = fut.as_mut().take_value().and_then(|s| s.take_verdict());
    (output, verdict)
}

/// Calls `f` with the current request context and its scope, or outside any scope with an
/// empty context and `None`: only a scope's verdict is read after the call, so only there is
/// a decision recorded.
pub(crate) fn with_current<R>(mut f: impl FnMut(&RequestContext, Option<&Scope>) -> R) -> R {
    // One task-local lookup in a scope; outside one, this thread's empty context rather than
    // a new one built and dropped on every call. `try_with` runs its closure only when it
    // succeeds, so `f` runs exactly once (an `FnOnce` would need an `Option` taken, and a
    // path for the `None` no call can reach).
    if let Ok(r) = CONTEXT.try_with(|scope| f(&scope.ctx, Some(scope))) {
        return r;
    }
    if let Ok(r) = EMPTY.try_with(|ctx| f(ctx, None)) {
        return r;
    }
    // This thread is being torn down: a context of its own for the last calls.
    f(&RequestContext::default(), None)
}

/// Records `verdict` in the current scope for the response headers; outside a
/// scope no one reads it, so nothing is recorded (callers that know they are outside one,
/// from [`with_current`], need not call this at all).
pub(crate) fn record_current(verdict: Recorded) {
    let _ = CONTEXT.try_with(|scope| scope.record(verdict));
}

/// What a rejection's response describes, rendered in the current request's scope: the
/// header families of the integration serving it (every family outside one, since nothing
/// chose otherwise), and the limits its layers decided first. Served by an integration, the
/// rejection takes the scope's verdict with it: its response describes the call already, so
/// the integration renders no headers a second time.
#[cfg_attr(not(feature = "http-framework"), allow(dead_code))]
pub(crate) fn rejection_rendering() -> (HeaderFamilies, Vec<Recorded>) {
    CONTEXT
        .try_with(|scope| {
            let families = scope.families.inspect(|_| {
                scope.verdict.take();
            });
            #[cfg(feature = "http-framework")]
            let first = scope.layer.as_ref().map(LayerScope::take_first);
            #[cfg(not(feature = "http-framework"))]
            let first = None;
            (families, first)
        })
        .map(|(families, first)| {
            (
                families.unwrap_or(HeaderFamilies::ALL),
                first.unwrap_or_default(),
            )
        })
        .unwrap_or((HeaderFamilies::ALL, Vec::new()))
}

/// What `scope` holds for its response to describe, taken out.
#[cfg(feature = "http-framework")]
pub(crate) fn described(scope: &Scope) -> Described {
    Described {
        first: scope
            .layer
            .as_ref()
            .map(LayerScope::take_first)
            .unwrap_or_default(),
        last: scope.take_verdict(),
    }
}

/// What the scope of a request's future holds to describe, once the future is done.
#[cfg(feature = "http-framework")]
pub(crate) fn described_finished<F: Future>(
    fut: std::pin::Pin<&mut tokio::task::futures::TaskLocalFuture<Scope, F>>,
) -> Described {
    fut.take_value().as_ref().map(described).unwrap_or_default()
}
/// The current request's layer scope, to `f`, when this program made layer limits and the
/// request has some.
#[cfg(feature = "http-framework")]
fn with_layer<R>(f: impl FnOnce(&LayerScope) -> Option<R>) -> Option<R> {
    // Relaxed: a layer limit is made before the requests it serves are (the router is
    // built, then serves), and those requests reach the check through the runtime, which
    // orders them after it.
    if !IN_USE.load(Ordering::Relaxed) {
        return None;
    }
    CONTEXT
        .try_with(|scope| scope.layer.as_ref().and_then(f))
        .ok()
        .flatten()
}

/// Whether a handler's check on `limiter` has its layers' limits to decide with its own (then
/// it goes the several-limit way, [`take_pending`]).
#[cfg(feature = "http-framework")]
pub(crate) fn has_pending(limiter: Option<&RateLimiter>) -> bool {
    with_layer(|layer| layer.pending_for(limiter).then_some(())).is_some()
}

/// The layer limits a handler's check on `limiter` decides with its own: those its layer left
/// pending, taken. `None` outside a layer with limits, and on every later check of the
/// request.
#[cfg(feature = "http-framework")]
pub(crate) fn take_pending(limiter: Option<&RateLimiter>) -> Option<Pending> {
    with_layer(|layer| layer.take_pending_for(limiter))
}

/// Keeps `slot` in the current request's layer scope, until the response is made; dropped
/// (given back) outside one.
#[cfg(feature = "http-framework")]
pub(crate) fn hold(slot: crate::limiter::slot::Slot) {
    let _ = CONTEXT.try_with(move |scope| {
        if let Some(layer) = &scope.layer {
            layer.hold(slot);
        }
    });
}

/// A check refused the current request: what its layers took first is given back
/// ([`LayerScope::give_back_on_refusal`]).
#[cfg(feature = "http-framework")]
pub(crate) fn give_back_on_refusal() {
    with_layer(|layer| {
        layer.give_back_on_refusal();
        None::<()>
    });
}

/// What the current request brings to `limits`: read from its context only when one of them
/// reads the request (a tier, an exemption).
#[cfg(feature = "http-framework")]
pub(crate) fn brought(limits: &[LayerLimit]) -> Brought<'_> {
    if !limits.iter().any(LayerLimit::reads_request) {
        return Brought::new(limits, None);
    }
    with_current(|ctx, _| Brought::new(limits, Some(ctx)))
}

/// The misconfiguration that made `key` find no key in the current context, if that is why.
pub(crate) fn missing_piece<K: KeyResolver + ?Sized>(key: &K) -> Option<MissingPiece> {
    CONTEXT
        .try_with(|scope| {
            if scope.ctx.peer().is_some() {
                return None;
            }
            // Would the key resolve with a peer? Then the missing peer is why it did not.
            let probe = scope
                .ctx
                .clone()
                .with_peer(SocketAddr::from(([192, 0, 2, 1], 0)));
            key.resolve(&probe)
                .is_some()
                .then_some(MissingPiece::Peer(scope.origin))
        })
        .unwrap_or(Some(MissingPiece::Context))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::decision::Decision;
    use crate::decision::Label;

    /// A rejection rendered for an HTTP integration takes the verdict with it, so that the
    /// integration renders the call's headers once; in a caller's own scope the verdict stays
    /// for `scope_returning`.
    #[test]
    fn a_rejection_rendered_for_an_integration_takes_the_verdict() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let decision = || {
            Decision::new(
                false,
                0,
                crate::limit::Limit::per_second(1),
                1,
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(1),
            )
        };
        let families = HeaderFamilies::ALL.without_spring();
        let served = Scope::served_by(RequestContext::new(), Origin::Axum, families);
        let (rendered, left) = runtime.block_on(CONTEXT.scope(served, async {
            record_current(Recorded::one(Label::of("t::served"), decision()));
            let (rendered, _) = rejection_rendering();
            (rendered, CONTEXT.with(Scope::take_verdict))
        }));
        assert_eq!((rendered, left), (families, None));

        let (rendered, left) = runtime.block_on(scope_returning(RequestContext::new(), async {
            record_current(Recorded::one(Label::of("t::own"), decision()));
            rejection_rendering().0
        }));
        assert_eq!(rendered, HeaderFamilies::ALL);
        assert_eq!(left.unwrap().name, "t::own");
    }
}
