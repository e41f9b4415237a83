//! A call with one limit: decided in the call's first poll when the store answers at once
//! (memory), else boxed with its wait for the store; described, recorded for the response and
//! turned into the rejection in one place ([`conclude`]).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use super::call::{Before, Call, KeyArg, Taken, anchored, before_key, settle};
use super::provisional;
use super::scope::{record_current, with_current};
use super::{check_all, limiter_or_unenabled, report_missing_piece};
use crate::decision::Decision;
use crate::decision::{Label, Source};
use crate::limiter::inner::RateLimiter;
use crate::naming::{with_bucket_key, with_key_after};
use crate::pipeline::check::Check;
use crate::pipeline::verdict::RateLimited;
use crate::pipeline::verdict::Recorded;
use crate::registry::{Effective, LimitDeclaration, Warning};
use crate::request::resolving;
use crate::resolvers::KeyResolver;

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
    #[cfg(feature = "http-framework")]
    let several = decl.is_concurrent() || super::scope::has_pending(limiter);
    #[cfg(not(feature = "http-framework"))]
    let several = decl.is_concurrent();
    if several {
        return finish(Step::ask(Box::pin(async move {
            check_all(&[(decl, key, call)], limiter).await
        })));
    }
    let step = match key {
        KeyArg::Async(resolver) => Step::ask(Box::pin(async move {
            let (limiter_now, _) = limiter_or_unenabled(decl, limiter);
            let key = settle(*resolver, decl, limiter_now).await;
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
    match step.0 {
        Ok(()) => Ok(()),
        Err(rest) => match *rest {
            Rest::Refused(refused) => Err(refused),
            Rest::Ask(asking) => asking.await,
        },
    }
}

/// A check's outcome on its way out, the rejection boxed: it passes through several frames
/// (the task-local's closure among them, and the generated function's), and a rejection's 160
/// bytes, copied at each, cost the admitted calls more than one allocation costs a refused
/// one. It is unboxed only where the function returns it.
type Checked = Result<(), Box<RateLimited>>;

/// A one-limit check's future for a call whose store does not answer at once.
type Asking<'a> = Pin<Box<dyn Future<Output = Checked> + Send + 'a>>;

/// Where a one-limit check stands after its look at the request context: admitted, or the
/// rest (refused, or to be decided later), boxed. One word: it passes up through several
/// frames and into the check's future, and a two-word enum's copies stalled, each, on the
/// narrower stores that had just written it (a tenth of an annotated call in memory); a
/// refusal pays one small allocation more, a call that waits for its store one beside a
/// round trip.
struct Step<'a>(Result<(), Box<Rest<'a>>>);

/// A step that did not admit its call at once.
enum Rest<'a> {
    /// Decided, described and recorded: refused.
    Refused(Box<RateLimited>),
    /// To be decided by the store or the failure policy, later.
    Ask(Asking<'a>),
}

impl<'a> Step<'a> {
    /// Decided, described and recorded.
    #[inline]
    fn done(checked: Checked) -> Step<'a> {
        Step(checked.map_err(|refused| Box::new(Rest::Refused(refused))))
    }

    /// To be decided by the store or the failure policy, later.
    fn ask(asking: Asking<'a>) -> Step<'a> {
        Step(Err(Box::new(Rest::Ask(asking))))
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
    match before_key(decl, &call, &mut effective) {
        Before::Check => {}
        Before::Free => {
            record_current(Recorded::one(label, Decision::free(effective.limit)));
            return Step::done(Ok(()));
        }
        Before::Decided(decision) if decision.source == Source::Disabled => {
            // Said, so that what reads the decision (the response, a log line) shows no limit
            // applied rather than a quota that does not hold.
            record_current(Recorded::one(label, decision));
            return Step::done(Ok(()));
        }
        Before::Decided(decision) => return decided_before_key(decl, label, decision),
    }
    let (limiter, enabled) = limiter_or_unenabled(decl, limiter);
    if call.key_failed {
        let decision =
            super::without_store::decide_unresolved(limiter, &effective.limit, effective.cost);
        return decided_before_key(decl, label, decision);
    }
    // The label is copied where a step keeps it (a name and a tier name, both `'static`):
    // the closure may be called from either of two places, so it moves nothing out.
    with_current(|ctx, scope| {
        let in_scope = scope.is_some();
        // Made only where a scope keeps it (built and moved for nothing, a verdict cost an
        // admitted call a copy).
        let record =
            scope.map(|scope| |label, decision| scope.record(Recorded::one(label, decision)));
        // An empty key names nobody: it is no key (the empty-key policy), never one bucket
        // that every caller whose header is blank would share.
        let Some(resolved) = resolving(name, || key.resolve(ctx)).filter(|k| !k.is_empty()) else {
            report_missing_piece(decl, key);
            let decision = super::without_store::decide_without_key(
                limiter,
                decl.empty_key_policy(),
                &effective.limit,
                effective.cost,
            );
            return Step::done(conclude(decl, label.clone(), decision, None, None, record));
        };
        let bucket = match decl.remembered_bucket(limiter, &resolved, enabled) {
            Some(bucket) => Bucket::Named(Cow::Borrowed(bucket)),
            None => Bucket::Parts {
                limiter,
                name,
                key: &resolved,
            },
        };
        // A quota by calendar period starts where the key's resolver says (a billing day).
        anchored(decl, &mut effective.limit, || key.anchor(ctx));
        let (limit, cost) = (&effective.limit, effective.cost);
        // Validated once, not per call: a declaration's limit and cost when the macro
        // expanded, an override's when it was read (`overrides.rs`, at enable and reload).
        debug_assert!(limit.check_cost(cost).is_ok(), "{name}: an invalid cost");
        // Where the calls holding tokens of a bucket that counts only some outcomes stood
        // before it was asked: a refusal may lack what one that ends meanwhile gives back.
        let asked_at = provisional::Ticket::now();
        let local = super::local::decide_locally(limiter, limit, |store| match &bucket {
            Bucket::Named(bucket) => store.check_bytes(bucket.as_bytes(), limit, cost),
            Bucket::Parts { limiter, key, .. } => {
                check_parts(store, decl, limiter, key, limit, cost)
            }
        });
        let decided = match local {
            Some(local) if !local.waits => local.decision(*limit, cost),
            reserved => {
                return Step::ask(Box::pin(ask(
                    decl,
                    label.clone(),
                    limiter,
                    bucket.key(),
                    reserved.map_or(Asked::Nothing, |r| {
                        Asked::Reserved(r.decision(*limit, cost))
                    }),
                    effective,
                    in_scope,
                    call.taken.cloned(),
                )));
            }
        };
        match decided {
            // Refused while calls in flight hold tokens of the bucket that may come back:
            // decided again as they end, on the path that waits.
            decision
                if !decision.allowed
                    && call.taken.is_some_and(Taken::is_counting)
                    && provisional::is_held_or_passed(&bucket_key(&bucket), asked_at) =>
            {
                Step::ask(Box::pin(ask(
                    decl,
                    label.clone(),
                    limiter,
                    bucket.key(),
                    Refused(decision, asked_at),
                    effective,
                    in_scope,
                    call.taken.cloned(),
                )))
            }
            decision => Step::done(conclude(
                decl,
                label.clone(),
                decision,
                Some(bucket),
                call.taken,
                record,
            )),
        }
    })
}

/// A call decided before its key was known (by configuration, or for want of a key that
/// could be read): concluded, and recorded in the current scope.
fn decided_before_key<'a>(
    decl: &'static LimitDeclaration,
    label: Label,
    decision: Decision,
) -> Step<'a> {
    Step::done(conclude(
        decl,
        label,
        decision,
        None,
        None,
        Some(record_one),
    ))
}

/// The memory store's outcome on the bucket of `key` under `decl`, named on the stack after
/// the declaration's head (or whole, on a limiter of another prefix). Out of line: inlined,
/// it cost the call of a remembered bucket (`Global`'s) more than the call it saves.
#[inline(never)]
fn check_parts(
    store: &crate::store::MemoryStore,
    decl: &'static LimitDeclaration,
    limiter: &RateLimiter,
    key: &str,
    limit: &crate::limit::Limit,
    cost: u32,
) -> crate::algorithm::Outcome<u64> {
    match decl.bucket_head(limiter) {
        Some(head) => with_key_after(head, key, |bucket| store.check_bytes(bucket, limit, cost)),
        None => with_bucket_key(limiter.prefix(), Some(decl.name()), key, |bucket| {
            store.check_bytes(bucket, limit, cost)
        }),
    }
}

/// Records the verdict of a call decided under `label` in the current scope, if any.
fn record_one(label: Label, decision: Decision) {
    record_current(Recorded::one(label, decision));
}
/// What a call that must wait has been told at once: nothing yet, its tokens reserved (it
/// waits for them), or a refusal while calls in flight hold tokens of its bucket.
enum Asked {
    Nothing,
    Reserved(Decision),
    /// Refused in memory, with where the calls holding its bucket's tokens stood before.
    Refused(Decision, provisional::Ticket),
}
use Asked::Refused;

/// A call's decision from a store that does not answer at once, or by the failure policy
/// before enable; or the wait of a call that `reserved` its tokens in memory; decided again,
/// under a limit that counts only some outcomes, as calls holding its bucket's tokens end.
#[allow(clippy::too_many_arguments)]
async fn ask(
    decl: &'static LimitDeclaration,
    label: Label,
    limiter: &RateLimiter,
    bucket: Cow<'static, str>,
    asked: Asked,
    effective: Effective,
    in_scope: bool,
    taken: Option<Taken>,
) -> Checked {
    let check = Check::new(&bucket, &effective.limit, effective.cost);
    let decide = |reserved| async move {
        let decided = super::local::decide_later(limiter, check, reserved).await;
        decided.unwrap_or_else(|e| cannot_check(decl, &effective, &e))
    };
    let counting = taken.as_ref().is_some_and(Taken::is_counting);
    // A counted call's tokens are held from the moment it asks, not from when its answer is
    // read: under load, the answers of calls refused after it can be read first, and found
    // nothing held (issue 44, item 5, on a loaded CI run).
    let mut asking = (counting && matches!(asked, Asked::Nothing))
        .then(|| provisional::Hold::new(bucket.to_string(), effective.cost));
    let (decision, asked_at) = match asked {
        Asked::Reserved(reserved) => {
            let asked_at = provisional::Ticket::now();
            (decide(Some(reserved)).await, asked_at)
        }
        Asked::Nothing => {
            let asked_at = provisional::Ticket::now();
            (decide(None).await, asked_at)
        }
        Asked::Refused(refused, asked_at) => (refused, asked_at),
    };
    let decision = if counting {
        if !decision.allowed {
            // Refused: it took nothing, and waits for the others' tokens, not its own.
            if let Some(hold) = asking.take() {
                hold.withdraw();
            }
        }
        provisional::decide_again(&bucket, asked_at, decision, || decide(None)).await
    } else {
        decision
    };
    let checked = conclude(
        decl,
        label,
        decision,
        Some(Bucket::Named(bucket)),
        taken.as_ref(),
        in_scope.then_some(record_one),
    );
    // Admitted: its tokens are kept by `taken` from here (nothing came back).
    if let Some(hold) = asking {
        hold.withdraw();
    }
    checked
}

/// Only misuse reaches here (cost validated at enable): refuses rather than run unchecked,
/// and says why once.
#[cold]
fn cannot_check(
    decl: &'static LimitDeclaration,
    effective: &Effective,
    e: &crate::errors::Error,
) -> Decision {
    decl.warn_once(
        Warning::CannotCheck,
        &format_args!("rate limit `{}` cannot be checked: {e}", decl.name()),
    );
    super::without_store::fail_closed(&effective.limit, effective.cost)
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

/// A bucket's key, built when it is not named yet (a refusal while tokens of it are held).
fn bucket_key(bucket: &Bucket<'_>) -> Cow<'static, str> {
    match bucket {
        Bucket::Named(bucket) => bucket.clone(),
        Bucket::Parts { limiter, name, key } => Cow::Owned(limiter.named_bucket_key(name, key)),
    }
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
/// handed with its label to `record` for the response headers where there is one (`None`
/// outside a scope: the verdict made, or the decision moved, for nothing cost an admitted
/// call a copy), and
/// the rejection, carrying the verdict, when it refused. The label moves through (cloned only
/// for a rejection).
fn conclude(
    decl: &'static LimitDeclaration,
    label: Label,
    decision: Decision,
    bucket: Option<Bucket<'_>>,
    taken: Option<&Taken>,
    record: Option<impl FnOnce(Label, Decision)>,
) -> Checked {
    // The key is shown only at TRACE, a rejection carries it, and a refund gives back to it:
    // named only then.
    let bucket = match bucket {
        Some(bucket)
            if !decision.allowed
                || taken.is_some()
                || tracing::enabled!(target: crate::observe::TARGET, tracing::Level::TRACE) =>
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
        if let Some(record) = record {
            record(label, decision);
        }
        Ok(())
    } else {
        #[cfg(feature = "http-framework")]
        super::scope::give_back_on_refusal();
        if let Some(record) = record {
            record(label.clone(), decision.clone());
        }
        let verdict = Recorded::one(label, decision);
        let key = bucket.map(Cow::into_owned).unwrap_or_default();
        Err(Box::new(RateLimited::refused(
            verdict,
            key,
            decl.statuses(),
        )))
    }
}
