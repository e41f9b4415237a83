//! Support for the code `#[rate_limit]` and `enable_redis_rate_limit!` generate. Not a public
//! API: its items change without notice.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;

pub use inventory;

mod call;
pub use crate::async_key::ErasedAsync;
pub use call::{
    Call, Cost, Fixed, Holding, IntoCost, IntoTier, KeyArg, KeyOf, Taken, ViaAsync, ViaDisplay,
    ViaNeither, ViaResolver, counts,
};

use crate::decision::{Label, Source};
use crate::limiter::Local;
use crate::naming::with_bucket_key;
use crate::registry::Effective;
use crate::registry::LimitDeclaration;
use crate::registry::Warning;
pub use crate::registry::{Registration, global};
use crate::request::{missing_piece, record_current, resolving, with_current};
use crate::{Algorithm, Decision, KeyResolver, Limit, RateLimited, RateLimiter, Refill, Unit};

/// The declaration of one `#[rate_limit]` function, in its `static`.
pub const fn declaration(
    name: &'static str,
    limit: Limit,
    cost: u32,
    key: &'static str,
    file: &'static str,
    line: u32,
) -> LimitDeclaration {
    LimitDeclaration::new(name, limit, cost, key, file, line)
}

/// What a layer's `key = ..` may be: a [`KeyResolver`] (a layer has no arguments whose value
/// could be the key).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a key resolver",
    label = "a layer's `key = ..` must implement `KeyResolver`",
    note = "a layer's limit keys each request by what it reads of it: `Ip`, `Route`, `Header(\"x-api-key\")`, `User`, or your own `KeyResolver`"
)]
pub trait LayerKey: KeyResolver {}

impl<K: KeyResolver> LayerKey for K {}

/// A layer's own limit (`layer_limit!`): its declaration, and the key resolver of its calls.
#[cfg(any(feature = "axum", feature = "actix-web"))]
pub fn layer_limit<K: LayerKey>(
    decl: &'static LimitDeclaration,
    key: K,
) -> crate::http::LayerLimit {
    crate::http::LayerLimit::new(decl, key)
}

/// The declaration of a function that draws from the limit `name` another declares
/// (`#[rate_limit(shared = "name")]`).
pub const fn shared(
    name: &'static str,
    cost: u32,
    key: &'static str,
    file: &'static str,
    line: u32,
) -> LimitDeclaration {
    LimitDeclaration::sharing(name, cost, key, file, line)
}

/// `decl` with its own empty-key policy and the status of its refusals for want of a key.
pub const fn with_empty_key(
    decl: LimitDeclaration,
    policy: Option<crate::EmptyKeyPolicy>,
    status: Option<u16>,
) -> LimitDeclaration {
    decl.with_empty_key(policy, status)
}

/// `decl` listing the tiers its calls may be given.
pub const fn with_tiers(decl: LimitDeclaration, tiers: &'static [crate::Tier]) -> LimitDeclaration {
    decl.with_tiers(tiers)
}

/// The limit of one `#[rate_limit]`, from every argument at once (a window's burst is its
/// `replenish`), evaluated in the declaration's `static`: an invalid one is a compile error.
pub const fn limit(
    replenish: u32,
    burst: Option<u32>,
    unit: Unit,
    algorithm: Algorithm,
    refill: Refill,
    initial: Option<u32>,
) -> Limit {
    let burst = match burst {
        Some(burst) => burst,
        None => replenish,
    };
    match Limit::from_parts(
        replenish,
        burst,
        unit.as_duration(),
        algorithm,
        refill,
        initial,
    ) {
        Ok(limit) => limit,
        Err(e) => crate::limit::invalid(&e),
    }
}

/// The check every `#[rate_limit]` function starts with: resolves the key from the current
/// request context, decides, records the decision for the response headers, and returns the
/// rejection when the call must not run.
///
/// The request context is looked at once, when `check` is called (not when its future is
/// first polled: generated code awaits it at once, in the function's own poll): the key
/// resolved and, when the store answers at once (memory), the decision taken and recorded
/// in it. A call that must wait for its answer
/// (a remote store, a limit that may wait, before enable) is boxed: this future then carries
/// nothing of it, and that call's round trip or wait dwarfs one allocation.
pub fn check<'a, K: KeyResolver + ?Sized>(
    decl: &'static LimitDeclaration,
    key: &K,
    call: Call<'_>,
    limiter: Option<&'a RateLimiter>,
) -> impl Future<Output = Result<(), Box<RateLimited>>> + Send + use<'a, K> {
    // Looked at when the check is made, in the function's own poll: the future then carries
    // the step alone, not the key, the call and the declaration.
    finish(at_once(decl, key, call, limiter))
}

/// [`check`] of a key as the macro writes it ([`KeyArg`]): an async resolver's key is
/// settled on the path of a store that does not answer at once (boxed, with its wait for the
/// store); every other key is checked at once.
pub fn check_key<'a>(
    decl: &'static LimitDeclaration,
    key: &'a KeyArg<'a>,
    call: Call<'a>,
    limiter: Option<&'a RateLimiter>,
) -> impl Future<Output = Result<(), Box<RateLimited>>> + Send + use<'a> {
    // A concurrency limit takes a slot and keeps it while the call runs, and the layers'
    // limits left pending for this check are decided with it: both the several-limit way.
    #[cfg(any(feature = "axum", feature = "actix-web"))]
    let several = decl.is_concurrent() || crate::http::layered::has_pending(limiter);
    #[cfg(not(any(feature = "axum", feature = "actix-web")))]
    let several = decl.is_concurrent();
    if several {
        return finish(Step::Ask(Box::pin(async move {
            check_all(&[(decl, key, call)], limiter).await
        })));
    }
    let step = match key {
        KeyArg::Async(resolver) => Step::Ask(Box::pin(async move {
            let (limiter_now, _) = limiter_or_unenabled(decl, limiter);
            let key = call::settle(*resolver, decl, limiter_now).await;
            let call = Call {
                key_failed: matches!(key, KeyArg::Failed),
                ..call
            };
            finish(at_once(decl, key.resolver(), call, limiter)).await
        })),
        key => at_once(decl, key.resolver(), call, limiter),
    };
    finish(step)
}

/// A step's future: its outcome at once, or the wait for it.
async fn finish(step: Step<'_>) -> Checked {
    match step {
        Step::Done(done) => done,
        Step::Ask(asking) => asking.await,
    }
}

/// A check's outcome on its way out, the rejection boxed: it passes through several frames
/// (the task-local's closure among them, and the generated function's), and a rejection's 160
/// bytes, copied at each, cost the admitted calls more than one allocation costs a refused
/// one. It is unboxed only where the function returns it.
type Checked = Result<(), Box<RateLimited>>;

/// A one-limit check's future for a call whose store does not answer at once.
type Asking<'a> = Pin<Box<dyn Future<Output = Checked> + Send + 'a>>;

/// Where a one-limit check stands after its look at the request context.
enum Step<'a> {
    /// Decided, described and recorded.
    Done(Checked),
    /// To be decided by the store or the failure policy, later.
    Ask(Asking<'a>),
}

/// What a one-limit check's look at the request context came to.
enum Looked {
    /// Decided at once, described, and recorded in the context when it is a scope's.
    Decided(Checked),
    /// The key's bucket, for a store that does not answer at once; or for a call that
    /// reserved its tokens in memory, with that decision, to wait for them.
    Ask(Cow<'static, str>, Option<Decision>),
    /// The call has no key.
    NoKey,
}

/// What a limit's check comes to before its key is looked at.
enum Before {
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
fn before_key(call: &Call<'_>, effective: &mut Effective) -> Before {
    if !effective.enabled {
        return Before::Decided(Decision::disabled(effective.limit, effective.cost));
    }
    if let Some(tier) = call.tier {
        effective.limit = tier.limit();
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

/// [`check`]'s synchronous part: everything but a wait for the store.
fn at_once<'a, K: KeyResolver + ?Sized>(
    decl: &'static LimitDeclaration,
    key: &K,
    call: Call<'_>,
    limiter: Option<&'a RateLimiter>,
) -> Step<'a> {
    let mut effective = decl.effective();
    let name = decl.name();
    let label = call.label(name);
    // A dangling or duplicated declaration's call is refused, by the name it was given.
    match decl
        .refusal()
        .map_or_else(|| before_key(&call, &mut effective), Before::Decided)
    {
        Before::Check => {}
        Before::Free => {
            record_current(label, Decision::free(effective.limit), None);
            return Step::Done(Ok(()));
        }
        Before::Decided(decision) if decision.source == Source::Disabled => {
            // Said, so that what reads the decision (the response, a log line) shows no limit
            // applied rather than a quota that does not hold.
            record_current(label, decision, None);
            return Step::Done(Ok(()));
        }
        Before::Decided(decision) => {
            return Step::Done(conclude(decl, label, decision, None, None, |d| {
                record_current(label, d, None);
            }));
        }
    }
    let (limiter, enabled) = limiter_or_unenabled(decl, limiter);
    if call.key_failed {
        let decision = limiter.decide_unresolved(&effective.limit, effective.cost);
        return Step::Done(conclude(decl, label, decision, None, None, |d| {
            record_current(label, d, None);
        }));
    }
    let (looked, in_scope) = with_current(|ctx, scope| {
        let in_scope = scope.is_some();
        // An empty key names nobody: it is no key (the empty-key policy), never one bucket
        // that every caller whose header is blank would share.
        let Some(resolved) = resolving(name, || key.resolve(ctx)).filter(|k| !k.is_empty()) else {
            return (Looked::NoKey, in_scope);
        };
        let bucket = match decl.remembered_bucket(limiter, &resolved, enabled) {
            Some(bucket) => Bucket::Named(Cow::Borrowed(bucket)),
            None => Bucket::Parts {
                limiter,
                name,
                key: &resolved,
            },
        };
        let (limit, cost) = (&effective.limit, effective.cost);
        // Validated once, not per call: a declaration's limit and cost when the macro
        // expanded, an override's when it was read (`overrides.rs`, at enable and reload).
        debug_assert!(limit.check_cost(cost).is_ok(), "{name}: an invalid cost");
        let local = limiter.decide_locally(limit, cost, |store| match &bucket {
            Bucket::Named(bucket) => store.check_bytes(bucket.as_bytes(), limit, cost),
            Bucket::Parts { limiter, key, .. } => {
                with_bucket_key(limiter.prefix(), Some(name), key, |bucket| {
                    store.check_bytes(bucket, limit, cost)
                })
            }
        });
        let decision = match local {
            Local::Decided(decision) => decision,
            Local::Reserved(decision) => {
                return (Looked::Ask(bucket.key(), Some(decision)), in_scope);
            }
            Local::Elsewhere => return (Looked::Ask(bucket.key(), None), in_scope),
        };
        let done = conclude(
            decl,
            label,
            decision,
            Some(bucket),
            call.taken,
            |decision| {
                if let Some(scope) = scope {
                    scope.record(label, decision, None);
                }
            },
        );
        (Looked::Decided(done), in_scope)
    });
    match looked {
        Looked::Decided(done) => Step::Done(done),
        Looked::Ask(bucket, reserved) => Step::Ask(Box::pin(ask(
            decl,
            label,
            limiter,
            bucket,
            reserved,
            effective,
            in_scope,
            call.taken.cloned(),
        ))),
        Looked::NoKey => {
            report_missing_piece(decl, key);
            let decision = limiter.decide_without_key(
                decl.empty_key_policy(),
                &effective.limit,
                effective.cost,
            );
            Step::Done(conclude(decl, label, decision, None, None, |d| {
                record_if(in_scope, label, d);
            }))
        }
    }
}

/// Records `decision` for the response headers when the call runs in a scope.
fn record_if(in_scope: bool, label: Label, decision: Decision) {
    if in_scope {
        record_current(label, decision, None);
    }
}

/// A call's decision from a store that does not answer at once, or by the failure policy
/// before enable; or the wait of a call that `reserved` its tokens in memory.
#[allow(clippy::too_many_arguments)]
async fn ask(
    decl: &'static LimitDeclaration,
    label: Label,
    limiter: &RateLimiter,
    bucket: Cow<'static, str>,
    reserved: Option<Decision>,
    effective: Effective,
    in_scope: bool,
    taken: Option<Taken>,
) -> Checked {
    let (limit, cost) = (&effective.limit, effective.cost);
    let decided = match reserved {
        Some(reserved) => limiter.wait_one(&bucket, limit, cost, reserved).await,
        None => limiter.decide(&bucket, limit, cost).await,
    };
    let decision = decided.unwrap_or_else(|e| cannot_check(decl, &effective, &e));
    conclude(
        decl,
        label,
        decision,
        Some(Bucket::Named(bucket)),
        taken.as_ref(),
        |d| record_if(in_scope, label, d),
    )
}

/// Only misuse reaches here (cost validated at enable): refuses rather than run unchecked,
/// and says why once.
#[cold]
fn cannot_check(
    decl: &'static LimitDeclaration,
    effective: &Effective,
    e: &crate::Error,
) -> Decision {
    decl.warn_once(
        Warning::CannotCheck,
        &format_args!("rate limit `{}` cannot be checked: {e}", decl.name()),
    );
    RateLimiter::fail_closed(&effective.limit, effective.cost)
}

/// A decided call's bucket key: named already, or the parts it is named from, when it is
/// needed (a refusal, a TRACE event, a store that does not answer at once). A memory store
/// decides a key the declaration does not remember on a key built on the stack.
enum Bucket<'k> {
    Named(Cow<'static, str>),
    Parts {
        limiter: &'k RateLimiter,
        name: &'static str,
        key: &'k str,
    },
}

impl Bucket<'_> {
    fn key(self) -> Cow<'static, str> {
        match self {
            Bucket::Named(bucket) => bucket,
            Bucket::Parts { limiter, name, key } => Cow::Owned(limiter.named_bucket_key(name, key)),
        }
    }
}

/// What every decided one-limit call ends with: the decision described (span, metrics),
/// handed to `record` for the response headers, and the rejection when it refused.
fn conclude(
    decl: &'static LimitDeclaration,
    label: Label,
    decision: Decision,
    bucket: Option<Bucket<'_>>,
    taken: Option<&Taken>,
    record: impl FnOnce(Decision),
) -> Checked {
    // The key is shown only at TRACE, a rejection carries it, and a refund gives back to it:
    // named only then.
    let bucket = match bucket {
        Some(bucket)
            if !decision.allowed
                || taken.is_some()
                || tracing::enabled!(target: "redis_ratelimit", tracing::Level::TRACE) =>
        {
            Some(bucket.key())
        }
        _ => None,
    };
    if let (Some(taken), Some(bucket)) = (taken, &bucket) {
        taken.keep(|| bucket.clone().into_owned(), &decision);
    }
    decision.observe(label.observed(), bucket.as_deref());
    if decision.allowed {
        record(decision);
        Ok(())
    } else {
        #[cfg(any(feature = "axum", feature = "actix-web"))]
        crate::http::layered::give_back_on_refusal();
        record(decision.clone());
        let key = bucket.map(Cow::into_owned).unwrap_or_default();
        Err(Box::new(
            RateLimited::new(decision, key)
                .with_name(label.name)
                .with_tier(label.tier)
                .with_empty_key_status(decl.empty_key_status()),
        ))
    }
}

/// The limiter that decides `decl`'s calls, and whether it is enabled; before
/// `enable_redis_rate_limit!` (or with its `limiter = ..` not initialised), one that decides
/// by the failure policy as if Redis were down, said once per limit.
pub(crate) fn limiter_or_unenabled<'a>(
    decl: &'static LimitDeclaration,
    limiter: Option<&'a RateLimiter>,
) -> (&'a RateLimiter, bool) {
    match limiter {
        Some(l) => (l, true),
        None => {
            decl.warn_once(
                Warning::NotEnabled,
                &format_args!(
                    "redis-ratelimit is not enabled: `{}` ran before \
                     `enable_redis_rate_limit!().await` (or its `limiter = ..` is not \
                     initialised); deciding it by its failure policy ({}) as if Redis were down",
                    decl.name(),
                    decl.effective().limit.failure_policy().unwrap_or_default()
                ),
            );
            (&*UNENABLED, false)
        }
    }
}

/// The check of a function with stacked `#[rate_limit]` attributes: every limit decided
/// together, all or nothing (see [`RateLimiter::check_all`]). A disabled limit passes
/// unchecked; a limit that finds no key is decided by the empty-key policy, and when that
/// refuses, the call is refused without asking the store (nothing is taken).
pub async fn check_all(
    limits: &[(&'static LimitDeclaration, &KeyArg<'_>, Call<'_>)],
    limiter: Option<&RateLimiter>,
) -> Result<(), Box<RateLimited>> {
    #[cfg(any(feature = "axum", feature = "actix-web"))]
    if let Some(layer) = crate::http::layered::take_pending(limiter) {
        // The layers' limits, left pending for this check: decided with these, together.
        let layer_keys = crate::http::layered::keys(&layer);
        let mut checks: Vec<_> = crate::http::layered::checks(&layer, &layer_keys).collect();
        checks.extend_from_slice(limits);
        return decide_all(&checks, limiter).await;
    }
    decide_all(limits, limiter).await
}

/// [`check_all`] of the limits given, and no others (the layers' limits are among them when
/// they were pending): async keys settled, then every limit decided together.
pub(crate) async fn decide_all(
    limits: &[(&'static LimitDeclaration, &KeyArg<'_>, Call<'_>)],
    limiter: Option<&RateLimiter>,
) -> Result<(), Box<RateLimited>> {
    let Some(&(first, ..)) = limits.first() else {
        return Ok(());
    };
    let (limiter, _) = limiter_or_unenabled(first, limiter);
    // The keys of async resolvers, settled first (none, for most calls).
    let mut settled: Vec<Option<KeyArg<'static>>> = Vec::new();
    if limits
        .iter()
        .any(|(_, key, _)| matches!(key, KeyArg::Async(_)))
    {
        for (decl, key, _) in limits {
            settled.push(match key {
                KeyArg::Async(resolver) => Some(call::settle(*resolver, decl, limiter).await),
                _ => None,
            });
        }
    }
    let key_of = |i: usize| -> &KeyArg<'_> {
        match settled.get(i) {
            Some(Some(key)) => key,
            _ => limits[i].1,
        }
    };
    let mut effective: Vec<_> = limits.iter().map(|(decl, ..)| decl.effective()).collect();
    let before: Vec<Before> = limits
        .iter()
        .zip(&mut effective)
        .map(|((decl, _, call), e)| {
            decl.refusal()
                .map_or_else(|| before_key(call, e), Before::Decided)
        })
        .collect();
    // Only the limits still to decide look at their keys.
    let (buckets, in_scope): (Vec<Option<String>>, bool) = with_current(|ctx, scope| {
        let buckets = limits
            .iter()
            .zip(&before)
            .enumerate()
            .map(|(i, ((decl, ..), before))| {
                let key = key_of(i).resolver();
                matches!(before, Before::Check)
                    .then(|| resolving(decl.name(), || key.resolve(ctx)))
                    .flatten()
                    .filter(|k| !k.is_empty())
                    .map(|k| limiter.named_bucket_key(decl.name(), &k))
            })
            .collect();
        (buckets, scope.is_some())
    });
    // Each limit's decision, by position; the store decides those with a bucket together.
    // A limit whose call costs nothing takes nothing and is not asked: its policy is
    // described all the same.
    let mut parts: Vec<Option<Decision>> = vec![None; limits.len()];
    let mut asked: Vec<usize> = Vec::with_capacity(limits.len());
    for (i, ((decl, ..), (before, e))) in limits
        .iter()
        .zip(before.into_iter().zip(&effective))
        .enumerate()
    {
        match before {
            Before::Decided(d) => parts[i] = Some(d),
            Before::Free => parts[i] = Some(Decision::free(e.limit)),
            Before::Check if matches!(key_of(i), KeyArg::Failed) => {
                parts[i] = Some(limiter.decide_unresolved(&e.limit, e.cost));
            }
            Before::Check if buckets[i].is_none() => {
                report_missing_piece(decl, key_of(i).resolver());
                let policy = decl.empty_key_policy();
                parts[i] = Some(limiter.decide_without_key(policy, &e.limit, e.cost));
            }
            Before::Check => asked.push(i),
        }
    }
    // A limit without a key that refuses vetoes the call: nothing is asked or taken.
    let vetoed = parts.iter().flatten().any(|d| !d.allowed);
    if !vetoed && !asked.is_empty() {
        let checks: Vec<(&str, &Limit, u32)> = asked
            .iter()
            .map(|&i| {
                let bucket = buckets[i].as_deref().unwrap_or_default();
                (bucket, &effective[i].limit, effective[i].cost)
            })
            .collect();
        // Concurrency limits among them take their slots, kept while the call runs.
        let decided = if checks.iter().any(|(_, limit, _)| limit.is_concurrent()) {
            limiter.enter_buckets(&checks).await.map(|entered| {
                if let Some(slot) = entered.slot {
                    hold(slot, limits);
                }
                entered.decision
            })
        } else {
            limiter.check_buckets(&checks).await
        };
        match decided {
            Ok(d) => {
                for (&i, part) in asked.iter().zip(d.parts()) {
                    parts[i] = Some(part.clone());
                }
            }
            Err(e) => {
                first.warn_once(
                    Warning::CannotCheck,
                    &format_args!("rate limits of `{}` cannot be checked: {e}", first.name()),
                );
                for &i in &asked {
                    let e = &effective[i];
                    parts[i] = Some(RateLimiter::fail_closed(&e.limit, e.cost));
                }
            }
        }
    }
    // The limits decided, in order (all of them unless a keyless refusal vetoed the call, or
    // a veto left some unasked), each with its name: paired once, here, and read back in
    // pairs.
    let mut named: Vec<(Label, Decision)> = Vec::with_capacity(limits.len());
    let mut keys: Vec<(&'static LimitDeclaration, Option<String>)> =
        Vec::with_capacity(limits.len());
    for (((decl, _, call), part), bucket) in limits.iter().zip(parts).zip(buckets) {
        if let Some(d) = part {
            named.push((call.label(decl.name()), d));
            keys.push((decl, bucket));
        }
    }
    if named.is_empty() {
        return Ok(());
    }
    let (decision, names) = Decision::combined_named(named);
    // Each limit as the call left it (a limit that admitted a refused call is vetoed); one
    // the call cost nothing under decided nothing, and is not counted.
    for ((label, part), (decl, bucket)) in names.pair(&decision).zip(&keys) {
        if part.source != Source::Free {
            part.observe(label.observed(), bucket.as_deref());
        }
        // What each limit that counts only some outcomes took, for its refund.
        let taken = limits
            .iter()
            .find(|(d, ..)| std::ptr::eq(*d, *decl))
            .and_then(|(.., call)| call.taken);
        if let (Some(taken), Some(bucket)) = (taken, bucket)
            && decision.allowed
        {
            taken.keep(|| bucket.clone(), part);
        }
    }
    if in_scope {
        record_current(
            names.tightest(&decision),
            decision.clone(),
            Some(names.clone()),
        );
    }
    if decision.allowed {
        Ok(())
    } else {
        #[cfg(any(feature = "axum", feature = "actix-web"))]
        crate::http::layered::give_back_on_refusal();
        let (decl, key) = keys.swap_remove(decision.tightest());
        let status = decl.empty_key_status();
        Err(Box::new(
            RateLimited::of_named(decision, names, key.unwrap_or_default())
                .with_empty_key_status(status),
        ))
    }
}

/// Keeps an admitted call's concurrency slots while it runs: in the function's own
/// [`Holding`] (the first limit's call carries it), else in the request's scope, whose layer
/// holds them until the response is made. With neither (a check made by hand outside any
/// scope), the slots are given back at once: nothing would know when the call ends.
fn hold(slot: crate::Slot, limits: &[(&'static LimitDeclaration, &KeyArg<'_>, Call<'_>)]) {
    match limits.iter().find_map(|(.., call)| call.holding) {
        Some(holding) => holding.keep(slot),
        #[cfg(any(feature = "axum", feature = "actix-web"))]
        None => crate::http::layered::hold(slot),
        #[cfg(not(any(feature = "axum", feature = "actix-web")))]
        None => drop(slot),
    }
}

/// Gives back what a call took under `decl` (kept in `taken` by its check), when the call's
/// outcome does not count (`#[rate_limit(count = ..)]`). A refund that fails leaves the
/// tokens taken, as if the call had counted, and is said once per limit.
pub async fn refund(decl: &'static LimitDeclaration, taken: &Taken, limiter: Option<&RateLimiter>) {
    let parts = taken.take();
    if parts.is_empty() {
        return;
    }
    let (limiter, _) = limiter_or_unenabled(decl, limiter);
    for part in parts {
        let refunded = limiter
            .refund_bucket(&part.bucket, &part.limit, part.cost, part.source)
            .await;
        if let Err(e) = refunded {
            decl.warn_once(
                Warning::CannotRefund,
                &format_args!(
                    "the tokens of a call of `{}` that did not count could not be given back \
                     (they stay taken): {e}",
                    decl.name()
                ),
            );
        }
    }
}

/// A forgotten layer (or `ConnectInfo`) makes every call keyless and refused with nothing to
/// say why; say it once per limit. A request that simply lacks what the key reads is the
/// empty-key policy's business, not a misconfiguration, and is not logged.
fn report_missing_piece<K: KeyResolver + ?Sized>(decl: &'static LimitDeclaration, key: &K) {
    if decl.warned(Warning::MissingPiece) {
        return;
    }
    if let Some(missing) = missing_piece(key) {
        decl.warn_once(
            Warning::MissingPiece,
            &format_args!(
                "rate limit `{}` (key = {}) finds no key for any call: {missing}; until then every \
             call is decided by the empty-key policy (refused with 403 by default)",
                decl.name(),
                decl.key()
            ),
        );
    }
}

/// Calls made before `enable_redis_rate_limit!` are decided by their failure policy, as if
/// the store were down; this limiter holds the fallback's memory.
static UNENABLED: LazyLock<RateLimiter> = LazyLock::new(RateLimiter::unenabled);

/// What `limiter = ..` may name: a limiter, or a cell that holds one once initialised.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a limiter",
    label = "`limiter = ..` takes a `RateLimiter`, or a `OnceLock`/`LazyLock` of one"
)]
pub trait AsLimiter {
    /// The limiter, if there is one yet.
    fn as_limiter(&self) -> Option<&RateLimiter>;
}

impl AsLimiter for RateLimiter {
    fn as_limiter(&self) -> Option<&RateLimiter> {
        Some(self)
    }
}

impl AsLimiter for std::sync::OnceLock<RateLimiter> {
    fn as_limiter(&self) -> Option<&RateLimiter> {
        self.get()
    }
}

impl<F: FnOnce() -> RateLimiter> AsLimiter for LazyLock<RateLimiter, F> {
    fn as_limiter(&self) -> Option<&RateLimiter> {
        Some(self)
    }
}

impl<T: AsLimiter + ?Sized> AsLimiter for &T {
    fn as_limiter(&self) -> Option<&RateLimiter> {
        (**self).as_limiter()
    }
}

/// The return types `#[rate_limit]` accepts: `Result<T, E>` with `E: From<RateLimited>`.
#[diagnostic::on_unimplemented(
    message = "`#[rate_limit]` functions must return `Result<_, E>` where `E: From<RateLimited>`, not `{Self}`",
    label = "the rejection `RateLimited` must convert into this return type",
    note = "return `Result<T, E>` and implement `From<redis_ratelimit::RateLimited>` for `E`"
)]
pub trait RateLimitReturn {
    /// The value a rejected call returns.
    fn rate_limited(rejection: Box<RateLimited>) -> Self;
}

impl<T, E: From<RateLimited>> RateLimitReturn for Result<T, E> {
    fn rate_limited(rejection: Box<RateLimited>) -> Self {
        Err(E::from(*rejection))
    }
}

/// What tests of the generated code's path share: a `tracing` subscriber that keeps every
/// event, and declarations of their own.
#[cfg(test)]
pub(crate) mod test_support {
    #![allow(clippy::unwrap_used)]

    use std::fmt::{self, Write as _};
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::{Event, Level, Metadata, Subscriber, span};

    use crate::Limit;
    use crate::registry::LimitDeclaration;

    /// A declaration of its own for one test (its logged-once flag untouched by others).
    pub(crate) fn declaration(name: &'static str, key: &'static str) -> &'static LimitDeclaration {
        Box::leak(Box::new(LimitDeclaration::new(
            name,
            Limit::per_minute(1),
            1,
            key,
            file!(),
            line!(),
        )))
    }

    /// Every event, as "LEVEL field=value ...", for the test to read back.
    #[derive(Clone, Default)]
    pub(crate) struct Capture(Arc<Mutex<Vec<String>>>);

    struct Line(String);

    impl Visit for Line {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, attributes: &span::Attributes<'_>) -> span::Id {
            let metadata = attributes.metadata();
            let mut line = Line(format!("SPAN {} {}", metadata.level(), metadata.name()));
            attributes.record(&mut line);
            self.0.lock().unwrap().push(line.0);
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut line = Line(event.metadata().level().to_string());
            event.record(&mut line);
            self.0.lock().unwrap().push(line.0);
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    impl Capture {
        /// Every event and span, in order: `LEVEL field=value ..` for an event, `SPAN LEVEL
        /// name field=value ..` for a span.
        pub(crate) fn lines(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }

        /// The ERROR events that mention `name`.
        pub(crate) fn errors_about(&self, name: &str) -> Vec<String> {
            self.0
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.starts_with(Level::ERROR.as_str()) && l.contains(name))
                .cloned()
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::test_support::{Capture, declaration};
    use super::*;
    use crate::headers::HeaderFamilies;
    use crate::request::{CONTEXT, Origin, Scope, scope};
    use crate::{Header, Ip, RequestContext, Uri};

    /// Runs `calls` keyed calls of `decl` in scopes made by `ctx` (none when `None`) and
    /// returns the errors logged about it.
    fn errors_after_calls(
        decl: &'static LimitDeclaration,
        key: &dyn KeyResolver,
        ctx: Option<fn() -> Scope>,
    ) -> Vec<String> {
        let capture = Capture::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let limiter = runtime
            .block_on(RateLimiter::builder().memory().build())
            .unwrap();
        tracing::subscriber::with_default(capture.clone(), || {
            runtime.block_on(async {
                for _ in 0..20 {
                    let call = async { check(decl, key, Call::NONE, Some(&limiter)).await };
                    let _ = match ctx {
                        Some(ctx) => CONTEXT.scope(ctx(), call).await,
                        None => call.await,
                    };
                }
            });
        });
        capture.errors_about(decl.name())
    }

    /// Every decision is a `rate_limit` span at DEBUG with the limit's name, the outcome, the
    /// tokens left and who decided; the bucket's key only in a TRACE event within it.
    #[test]
    fn every_decision_is_a_rate_limit_span() {
        static TRACED: LimitDeclaration = LimitDeclaration::new(
            "t::traced",
            crate::Limit::per_minute(1),
            1,
            "Uri",
            file!(),
            line!(),
        );
        let capture = Capture::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let limiter = runtime
            .block_on(RateLimiter::builder().memory().build())
            .unwrap();
        tracing::subscriber::with_default(capture.clone(), || {
            runtime.block_on(async {
                let ctx = || RequestContext::new().with_path("/traced/secret-user");
                for _ in 0..2 {
                    let call = async { check(&TRACED, &Uri, Call::NONE, Some(&limiter)).await };
                    let _ = scope(ctx(), call).await;
                }
                let _ = limiter.check("direct", &crate::Limit::per_second(1)).await;
            });
        });
        let lines = capture.lines();
        let spans: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("SPAN DEBUG rate_limit"))
            .collect();
        assert_eq!(spans.len(), 3, "{lines:#?}");
        assert!(
            spans[0].contains("limit=\"t::traced\"")
                && spans[0].contains("outcome=\"allowed\"")
                && spans[0].contains("remaining=0")
                && spans[0].contains("source=Store"),
            "{}",
            spans[0]
        );
        assert!(spans[1].contains("outcome=\"limited\""), "{}", spans[1]);
        assert!(spans[2].contains("limit=\"-\""), "{}", spans[2]);
        // The key only at TRACE, never in the span or a DEBUG event.
        for line in &lines {
            if line.contains("secret-user") {
                assert!(line.starts_with("TRACE"), "{line}");
            }
        }
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("TRACE") && l.contains("secret-user"))
        );
        // `check` on a memory limiter, whose bucket key is built on the stack: shown too.
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("TRACE") && l.contains("ratelimit:{:direct}")),
            "{lines:#?}"
        );
    }

    /// In a scope the decision is recorded for the response; outside one the thread's empty
    /// context, which every such call resolves its key against, is left as it was.
    #[test]
    fn a_decision_is_recorded_in_a_scope_and_nowhere_else() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let decl = declaration("t::recorded", "Global");
        runtime.block_on(async {
            let limiter = RateLimiter::builder().memory().build().await.unwrap();
            assert!(
                check(decl, &crate::Global, Call::NONE, Some(&limiter))
                    .await
                    .is_ok()
            );
            assert!(with_current(|_, scope| scope.is_none()));
            let (refused, recorded) =
                crate::request::scope_returning(RequestContext::new(), async {
                    check(decl, &crate::Global, Call::NONE, Some(&limiter)).await
                })
                .await;
            assert!(refused.is_err());
            let recorded = recorded.unwrap();
            assert_eq!(recorded.name, "t::recorded");
            assert!(!recorded.decision.allowed);
        });
    }

    /// A resolver sees the name of the limit whose key it resolves (each its own, stacked),
    /// and only while it resolves: nothing is written into the request's context.
    #[test]
    fn a_resolver_sees_the_limit_it_resolves_for() {
        struct ByHandler;
        impl KeyResolver for ByHandler {
            fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
                ctx.handler().map(Cow::Borrowed)
            }
        }
        let one = declaration("t::handler_one", "ByHandler");
        let two = declaration("t::handler_two", "ByHandler");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let limiter = RateLimiter::builder().memory().build().await.unwrap();
            let ctx = RequestContext::new();
            assert!(
                scope(ctx.clone(), async {
                    check(one, &ByHandler, Call::NONE, Some(&limiter)).await
                })
                .await
                .is_ok()
            );
            let refused = scope(ctx.clone(), async {
                check(one, &ByHandler, Call::NONE, Some(&limiter)).await
            })
            .await
            .unwrap_err();
            assert_eq!(
                refused.key(),
                limiter.named_bucket_key("t::handler_one", "t::handler_one")
            );
            let stacked = [
                (two, &KeyArg::Resolver(&ByHandler), Call::NONE),
                (
                    declaration("t::handler_three", "ByHandler"),
                    &KeyArg::Resolver(&ByHandler),
                    Call::NONE,
                ),
            ];
            assert!(
                scope(ctx.clone(), check_all(&stacked, Some(&limiter)))
                    .await
                    .is_ok()
            );
            let minute = Limit::per_minute(1);
            for name in ["t::handler_two", "t::handler_three"] {
                let d = limiter.peek_named(name, name, &minute).await.unwrap();
                assert_eq!(d.remaining, 0, "{name} took from its own key");
            }
            assert_eq!(ctx.handler(), None);
        });
    }

    #[test]
    fn a_call_outside_any_context_logs_the_missing_layer_once() {
        let decl = declaration("t::no_layer", "Uri");
        let errors = errors_after_calls(decl, &Uri, None);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("RateLimitLayer"), "{errors:?}");
        assert!(errors[0].contains("RateLimitMiddleware"), "{errors:?}");
    }

    #[test]
    fn a_layer_without_connect_info_logs_the_missing_peer_once() {
        let decl = declaration("t::no_peer", "Ip");
        let errors = errors_after_calls(
            decl,
            &Ip,
            Some(|| {
                Scope::served_by(
                    RequestContext::new().with_path("/login"),
                    Origin::Axum,
                    HeaderFamilies::ALL,
                )
            }),
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_request_without_the_header_is_not_a_misconfiguration() {
        let decl = declaration("t::no_header", "Header(\"x-api-key\")");
        let ctx = || {
            Scope::served_by(
                RequestContext::new().with_path("/x"),
                Origin::Axum,
                HeaderFamilies::ALL,
            )
        };
        assert_eq!(
            errors_after_calls(decl, &Header("x-api-key"), Some(ctx)),
            Vec::<String>::new()
        );
        let decl = declaration("t::with_peer", "Ip");
        let ctx = || Scope::new(RequestContext::new().with_peer("192.0.2.7:1000".parse().unwrap()));
        assert_eq!(
            errors_after_calls(decl, &Ip, Some(ctx)),
            Vec::<String>::new()
        );
    }
}
