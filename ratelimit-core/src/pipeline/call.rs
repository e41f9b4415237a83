//! What one call brings to its limits' checks beside their declarations (a cost computed from
//! its arguments, an exemption, a tier, where to keep what it took and the slots it holds), the
//! keys as a check takes them, and what the call's features decide before its key is looked
//! at ([`before_key`]).

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use super::provisional::Hold;
use super::scope::with_current;
use crate::async_key::ErasedAsync;
use crate::decision::Decision;
use crate::decision::{Label, Source};
use crate::limit::Limit;
use crate::limit::Tier;
use crate::limiter::inner::RateLimiter;
use crate::pipeline::check::TakenPart;
use crate::registry::{Effective, LimitDeclaration, Warning};
use crate::request::RequestContext;
use crate::request::resolving;
use crate::resolvers::KeyResolver;

/// What one call brings to its limit's check, beside the declaration: a cost computed from
/// the arguments (`cost = files.len()`), whether the call is exempt (`exempt = ..`), its tier
/// (`tier = ..`), and where to keep what it took, for a refund when its outcome does not
/// count (`count = ..`). Small and `Copy`: the check of a call with none of them passes
/// `Call::NONE`.
#[derive(Debug, Clone, Copy)]
pub struct Call<'t> {
    pub(crate) cost: Option<Cost>,
    pub(crate) exempt: bool,
    /// Whether the call chose a tier (`tier = ..`), and which: none means the declared limit.
    pub(crate) tiered: bool,
    pub(crate) tier: Option<&'t Tier>,
    pub(crate) taken: Option<&'t Taken>,
    /// Where the call keeps the concurrency slots it takes, while its function runs.
    pub(crate) holding: Option<&'t Holding>,
    /// The key's resolver failed, or did not answer within the deadline: the failure policy
    /// decides (set by the check, once an async key is settled).
    pub(crate) key_failed: bool,
}

impl<'t> Call<'t> {
    /// A call with nothing of its own: the declaration decides.
    pub const NONE: Call<'static> = Call {
        cost: None,
        exempt: false,
        tiered: false,
        tier: None,
        taken: None,
        holding: None,
        key_failed: false,
    };

    /// Keeps what this call takes in `taken`, to give it back if its outcome does not count.
    #[must_use]
    pub fn keeping<'u>(self, taken: &'u Taken) -> Call<'u>
    where
        't: 'u,
    {
        Call {
            taken: Some(taken),
            ..self
        }
    }

    /// The tier this call is decided under (its `tier = ..`, converted by [`IntoTier`](super::convert::IntoTier)):
    /// `None` for the declared limit.
    #[must_use]
    pub fn with_tier<'u>(self, tier: &'u Option<Tier>) -> Call<'u>
    where
        't: 'u,
    {
        Call {
            tiered: true,
            tier: tier.as_ref(),
            ..self
        }
    }

    /// Keeps the concurrency slots this call takes in `holding`, a local of the function's
    /// future: given back when it ends, however it ends.
    #[must_use]
    pub fn holding<'u>(self, holding: &'u Holding) -> Call<'u>
    where
        't: 'u,
    {
        Call {
            holding: Some(holding),
            ..self
        }
    }

    /// This call's cost, computed from its arguments.
    #[must_use]
    pub fn with_cost(mut self, cost: Cost) -> Call<'t> {
        self.cost = Some(cost);
        self
    }

    /// Whether this call is exempt from the limit.
    #[must_use]
    pub fn with_exempt(mut self, exempt: bool) -> Call<'t> {
        self.exempt = exempt;
        self
    }

    /// The limit `name` as this call is told under: with its tier, if it was given one.
    pub(crate) fn label(&self, name: &'static str) -> Label {
        Label {
            name,
            tier: self.tier.map(Tier::tier_name),
        }
    }
}

/// The concurrency slots a call holds while its function runs (`#[rate_limit(concurrent =
/// ..)]`, or a layer's concurrency limit decided with the function's): given back, and
/// waited for, once the function's body is done ([`release`](Holding::release)), so that
/// whoever the function answers (an HTTP client) finds them free when the answer arrives;
/// given back in the background if the function's future is dropped first (cancelled, or a
/// panic).
#[derive(Debug, Default)]
pub struct Holding(Mutex<Vec<crate::limiter::slot::Slot>>);

impl Holding {
    /// Keeps `slot` until it is released, or this is dropped.
    pub(crate) fn keep(&self, slot: crate::limiter::slot::Slot) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(slot);
    }

    /// The slots held, taken out (to release where `self` cannot be held across an await).
    pub(crate) fn take(&self) -> Vec<crate::limiter::slot::Slot> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Gives every slot back now, through its store, and waits until each is: what the code
    /// `#[rate_limit]` generates awaits once the function's body is done.
    pub fn release(&self) -> Released {
        release_all(self.take())
    }
}

/// Gives `slots` back, one after another, each through its store, waiting for each. A release
/// that fails leaves the slot to its lease, as a dropped slot does.
pub(crate) fn release_all(slots: Vec<crate::limiter::slot::Slot>) -> Released {
    if slots.is_empty() {
        return Released(None);
    }
    Released(Some(Box::pin(async move {
        for slot in slots {
            if let Err(e) = slot.release().await {
                crate::observe::log!(warn, error = %e,
                    "redis-ratelimit could not give back a concurrency slot; its lease frees it");
            }
        }
    })))
}

/// The release of a call's slots, under way: boxed, so that the future of a function that
/// awaits it has a layout the compiler finds at once (the store's futures inline made a
/// `#[rate_limit]` function with a `shared` use overflow rustc's query depth), and nothing
/// at all when no slot was held.
#[must_use = "a release does nothing until awaited"]
pub struct Released(Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>);

impl Future for Released {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        match &mut self.0 {
            None => std::task::Poll::Ready(()),
            Some(releasing) => releasing.as_mut().poll(cx),
        }
    }
}

impl fmt::Debug for Released {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Released").field(&self.0.is_some()).finish()
    }
}

/// The tokens a call took under one limit, kept until its outcome says whether it counts.
/// Made by [`Taken::counting`] for a limit that counts only some outcomes, its tokens are
/// held provisionally until it is dropped, after any
/// refund: a call refused meanwhile on the same bucket waits for them.
#[derive(Debug, Clone, Default)]
pub struct Taken(Arc<Kept>);

#[derive(Debug, Default)]
struct Kept {
    parts: Mutex<Vec<TakenPart>>,
    counting: bool,
    holds: Mutex<Vec<Hold>>,
}

impl Taken {
    /// What a call keeps under a limit that counts only some outcomes (`count = ..`).
    #[must_use]
    pub fn counting() -> Taken {
        Taken(Arc::new(Kept {
            counting: true,
            ..Kept::default()
        }))
    }

    /// Whether this call's limit counts only some outcomes, so that its refusals wait for the
    /// tokens held by its calls in flight.
    pub(crate) fn is_counting(&self) -> bool {
        self.0.counting
    }

    /// Keeps the tokens `decision` took from `bucket`, if it took any: an admitted call,
    /// decided by the store or the fallback, not let through by a limit in shadow mode (a
    /// shadowed refusal took nothing; a refund is never more than was taken).
    pub(crate) fn keep(&self, bucket: impl FnOnce() -> String, decision: &Decision) {
        let took = decision.allowed
            && !decision.shadowed
            && matches!(decision.source, Source::Store | Source::Fallback);
        if took {
            let bucket = bucket();
            if self.0.counting {
                self.0
                    .holds
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Hold::new(bucket.clone(), decision.cost));
            }
            self.0
                .parts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(TakenPart {
                    bucket,
                    limit: decision.limit,
                    cost: decision.cost,
                    source: decision.source,
                    at: decision.decided_at_us().unwrap_or(0),
                });
        }
    }

    /// What was kept, taken out.
    pub(crate) fn take(&self) -> Vec<TakenPart> {
        std::mem::take(&mut *self.0.parts.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A cost computed per call: the tokens asked for, or `None` when the value does not fit a
/// `u32` (or is negative), which no burst can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost(pub(crate) Option<u32>);

/// A key as the check takes it: a resolver to run against the request context, the value an
/// argument displayed as, a resolver that awaits (settled by the check, on its path for a
/// store that does not answer at once), or a key that could not be found out.
#[allow(missing_debug_implementations)]
pub enum KeyArg<'a> {
    /// A [`KeyResolver`], resolved against the request context.
    Resolver(&'a dyn KeyResolver),
    /// A key computed from the call's arguments, or by an async resolver.
    Value(Fixed),
    /// An [`AsyncKeyResolver`](crate::key::AsyncKeyResolver), to be settled.
    Async(&'a dyn ErasedAsync),
    /// An async resolver failed, or did not answer in time.
    Failed,
}

impl KeyArg<'_> {
    /// The key as the check takes it.
    pub fn resolver(&self) -> &dyn KeyResolver {
        match self {
            KeyArg::Resolver(resolver) => *resolver,
            KeyArg::Value(fixed) => fixed,
            KeyArg::Async(_) | KeyArg::Failed => &NoKey,
        }
    }
}

/// An [`AsyncKeyResolver`](crate::key::AsyncKeyResolver)'s answer within `limiter`'s
/// deadline: the key (none is an empty one), or [`KeyArg::Failed`] when it failed or did not
/// answer in time (said once per limit).
pub(crate) async fn settle(
    resolver: &dyn ErasedAsync,
    decl: &'static LimitDeclaration,
    limiter: &RateLimiter,
) -> KeyArg<'static> {
    let ctx = with_current(|ctx, _| ctx.clone());
    let resolving = resolving(decl.name(), || resolver.resolve_boxed(&ctx));
    let answer = match limiter.deadline() {
        Some(deadline) if tokio::runtime::Handle::try_current().is_ok() => {
            tokio::time::timeout(deadline, resolving)
                .await
                .map_err(|_| format!("no answer within the deadline of {deadline:?}").into())
                .and_then(|answer| answer)
        }
        _ => resolving.await,
    };
    match answer {
        Ok(key) => KeyArg::Value(Fixed(key.unwrap_or_default())),
        Err(e) => {
            decl.warn_once(
                Warning::CannotResolve,
                &format_args!(
                    "the key of `{}` could not be resolved, so its failure policy decides its \
                     calls (said once): {e}",
                    decl.name()
                ),
            );
            KeyArg::Failed
        }
    }
}

/// The resolver of a key not found: no key.
struct NoKey;

impl KeyResolver for NoKey {
    fn resolve<'a>(&'a self, _: &'a RequestContext) -> Option<Cow<'a, str>> {
        None
    }
}

/// A key computed before the check: the same for every context.
#[derive(Debug)]
pub struct Fixed(pub(crate) String);

impl KeyResolver for Fixed {
    fn resolve<'a>(&'a self, _: &'a RequestContext) -> Option<Cow<'a, str>> {
        Some(Cow::Borrowed(&self.0))
    }
}

/// What a limit's check comes to before its key is looked at.
pub(super) enum Before {
    /// To be decided on the call's key, under `effective` (this call's cost in it).
    Check,
    /// Decided already: the limit is disabled, the call exempt, or its cost more than the
    /// burst holds.
    Decided(Decision),
    /// The call costs nothing: it takes nothing and passes, with nothing to ask the store
    /// (its response still describes the limit's policy: [`Source::Free`]).
    Free,
}

/// Applies what `call` brings to its limit's `effective` state, before the key: one rule for
/// one limit and for several.
#[inline]
pub(super) fn before_key(
    decl: &'static LimitDeclaration,
    call: &Call<'_>,
    effective: &mut Effective,
) -> Before {
    // A dangling or duplicated declaration's call is refused, by the name it was given.
    if let Some(refused) = decl.refusal() {
        return Before::Decided(refused);
    }
    if !effective.enabled {
        return Before::Decided(Decision::disabled(effective.limit, effective.cost));
    }
    if let Some(tier) = call.tier {
        // A tier replaces the limit, not its kind: a rate's calls under a concurrency limit
        // would take slots nothing gives back, a concurrency limit's under a rate would never
        // give one back.
        if tier.limit().is_concurrent() != effective.limit.is_concurrent() {
            return Before::Decided(tier_of_another_kind(decl, tier, effective));
        }
        effective.limit = tier_limit(tier, &effective.limit);
    }
    if call.exempt {
        return Before::Decided(Decision::exempt(effective.limit));
    }
    let cost = match call.cost {
        Some(Cost(Some(0))) => return Before::Free,
        Some(Cost(cost)) => cost,
        // A declared cost fits the declared limit (checked when the macro expanded, or the
        // override was read); a tier's limit may hold less.
        None if call.tiered => Some(effective.cost),
        None => return Before::Check,
    };
    match cost {
        Some(cost) if effective.limit.check_cost(cost).is_ok() => {
            effective.cost = cost;
            Before::Check
        }
        cost => {
            let cost = cost.unwrap_or(u32::MAX);
            Before::Decided(Decision::cost_exceeds_burst(effective.limit, cost))
        }
    }
}

/// The limit a call under `tier` is decided by, in place of `declared` (of the same kind): the
/// tier's, whose slots are held for the declaration's lease (the attribute's `lease = ..`, or
/// an override's) unless the tier sets a lease of its own. How long a call may run between
/// its renewals is the function's, not the plan's.
fn tier_limit(tier: &Tier, declared: &Limit) -> Limit {
    let limit = tier.limit();
    match (limit.lease_time(), declared.lease_time()) {
        (Some(crate::limit::DEFAULT_LEASE), Some(lease)) => limit.try_lease(lease).unwrap_or(limit),
        _ => limit,
    }
}

/// `limit` with the calendar anchor the call's key resolver gives (`anchor`, asked only of a
/// quota by calendar period: `KeyResolver::anchor`), a customer's billing day. A limit of
/// another unit keeps its own; a day out of range is said once and the limit's own kept.
pub(super) fn anchored(
    decl: &'static LimitDeclaration,
    limit: &mut Limit,
    anchor: impl FnOnce() -> Option<u8>,
) {
    if limit.calendar().is_none() {
        return;
    }
    let Some(day) = anchor() else {
        return;
    };
    match limit.try_anchor(day) {
        Ok(anchored) => *limit = anchored,
        Err(e) => decl.warn_once(
            Warning::BadAnchor,
            &format_args!(
                "the key resolver of `{}` gave the calendar anchor {day}, which its limit {limit} \
                 cannot start on ({e}); the limit's own anchor is used",
                decl.name()
            ),
        ),
    }
}

/// The refusal of a call given a tier whose limit is not of its declaration's kind (a rate's
/// tier on a concurrency limit, or the other way round): a misuse no call can mean, said once.
#[cold]
fn tier_of_another_kind(
    decl: &'static LimitDeclaration,
    tier: &Tier,
    effective: &Effective,
) -> Decision {
    let kind = |limit: &Limit| {
        if limit.is_concurrent() {
            "a concurrency limit"
        } else {
            "a rate limit"
        }
    };
    decl.warn_once(
        Warning::CannotCheck,
        &format_args!(
            "tier `{}` given to a call of `{}` is {} and `{}` is {}: a tier must be a limit of \
             its declaration's kind, so these calls are refused",
            tier.name(),
            decl.name(),
            kind(&tier.limit()),
            decl.name(),
            kind(&effective.limit),
        ),
    );
    super::without_store::fail_closed(&effective.limit, effective.cost)
}
