//! The check of a `#[rate_limit(concurrent = ..)]` function: a slot taken before the body
//! runs, held by the generated code until the function's future ends (returned, failed,
//! panicked or dropped), through [`RateLimiter::enter_named`].

use super::{
    Bucket, KeyArg, LimitDeclaration, RateLimited, RateLimiter, cannot_check, conclude,
    limiter_or_unenabled, record_if, report_missing_piece,
};
use crate::__private::call::{Call, settle};
use crate::Slot;
use crate::decision::Decision;
use crate::request::{record_current, resolving, with_current};

/// Takes a slot of the call's key under `decl`'s concurrency limit: `Ok(Some(slot))` to hold
/// while the body runs, `Ok(None)` for a call that passes holding nothing (a disabled limit,
/// no key under an `allow` policy, a failure policy that lets it through), or the rejection.
pub async fn enter_key(
    decl: &'static LimitDeclaration,
    key: &KeyArg<'_>,
    limiter: Option<&RateLimiter>,
) -> Result<Option<Slot>, Box<RateLimited>> {
    let effective = decl.effective();
    let name = decl.name();
    let label = Call::NONE.label(name);
    if !effective.enabled {
        record_current(
            label,
            Decision::disabled(effective.limit, effective.cost),
            None,
        );
        return Ok(None);
    }
    let (limiter, _) = limiter_or_unenabled(decl, limiter);
    let settled;
    let key = match key {
        KeyArg::Async(resolver) => {
            settled = settle(*resolver, decl, limiter).await;
            &settled
        }
        key => key,
    };
    if matches!(key, KeyArg::Failed) {
        let decision = limiter.decide_unresolved(&effective.limit, effective.cost);
        return conclude(decl, label, decision, None, None, |d| {
            record_current(label, d, None);
        })
        .map(|()| None);
    }
    let resolver = key.resolver();
    let (resolved, in_scope) = with_current(|ctx, scope| {
        let resolved = resolving(name, || resolver.resolve(ctx))
            .filter(|k| !k.is_empty())
            .map(std::borrow::Cow::into_owned);
        (resolved, scope.is_some())
    });
    let Some(resolved) = resolved else {
        report_missing_piece(decl, resolver);
        let decision =
            limiter.decide_without_key(decl.empty_key_policy(), &effective.limit, effective.cost);
        return conclude(decl, label, decision, None, None, |d| {
            record_if(in_scope, label, d);
        })
        .map(|()| None);
    };
    let bucket = limiter.named_bucket_key(name, &resolved);
    let (decision, slot) = match limiter
        .enter_all_named(&[(name, &resolved, &effective.limit, effective.cost)])
        .await
    {
        Ok(entered) => (entered.decision, entered.slot),
        Err(e) => (cannot_check(decl, &effective, &e), None),
    };
    conclude(
        decl,
        label,
        decision,
        Some(Bucket::Named(bucket.into())),
        None,
        |d| record_if(in_scope, label, d),
    )
    .map(|()| slot)
}
