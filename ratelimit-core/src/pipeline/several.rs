//! A call with several limits (stacked attributes, a concurrency limit, the layers' limits
//! left pending for the handler's check): every key settled and resolved, then every limit
//! decided together, all or nothing, and concluded as one verdict.

use super::call::{Before, Call, KeyArg, Taken, anchored, before_key, settle};
use super::provisional::{self, Admits as _};
use super::scope::{record_current, with_current};
use super::{Ask, Decided};
use super::{limiter_or_unenabled, report_missing_piece};
use crate::decision::Decision;
use crate::decision::{Label, Source};
use crate::limiter::inner::RateLimiter;
use crate::pipeline::check::Check;
use crate::pipeline::verdict::RateLimited;
use crate::pipeline::verdict::Recorded;
use crate::registry::{LimitDeclaration, Warning};
use crate::request::resolving;

/// The check of a function with stacked `#[rate_limit]` attributes: every limit decided
/// together, all or nothing (see [`RateLimiter::check_all`]). A disabled limit passes
/// unchecked; a limit that finds no key is decided by the empty-key policy, and when that
/// refuses, the call is refused without asking the store (nothing is taken).
pub async fn check_all(
    limits: &[(&'static LimitDeclaration, &KeyArg<'_>, Call<'_>)],
    limiter: Option<&RateLimiter>,
) -> Result<(), Box<RateLimited>> {
    #[cfg(feature = "http-framework")]
    if let Some(pending) = super::scope::take_pending(limiter) {
        // The layers' limits, left pending for this check: decided with these, together.
        let brought = super::scope::brought(&pending.limits);
        let mut checks: Vec<_> = brought
            .checks(super::layer_scope::kept(&pending.taken))
            .collect();
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
                KeyArg::Async(resolver) => Some(settle(*resolver, decl, limiter).await),
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
        .map(|((decl, _, call), e)| before_key(decl, call, e))
        .collect();
    // Only the limits still to decide look at their keys.
    // And where each limit's calendar periods start, when its key's resolver says.
    let (buckets, in_scope): (Vec<Option<String>>, bool) = with_current(|ctx, scope| {
        let buckets = limits
            .iter()
            .zip(&before)
            .zip(&mut effective)
            .enumerate()
            .map(|(i, (((decl, ..), before), e))| {
                let key = key_of(i).resolver();
                if !matches!(before, Before::Check) {
                    return None;
                }
                anchored(decl, &mut e.limit, || key.anchor(ctx));
                resolving(decl.name(), || key.resolve(ctx))
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
                parts[i] = Some(super::without_store::decide_unresolved(
                    limiter, &e.limit, e.cost,
                ));
            }
            Before::Check if buckets[i].is_none() => {
                report_missing_piece(decl, key_of(i).resolver());
                let policy = decl.empty_key_policy();
                parts[i] = Some(super::without_store::decide_without_key(
                    limiter, policy, &e.limit, e.cost,
                ));
            }
            Before::Check => asked.push(i),
        }
    }
    // A limit without a key that refuses vetoes the call: nothing is asked or taken.
    let vetoed = parts.iter().flatten().any(|d| !d.allowed);
    if !vetoed && !asked.is_empty() {
        let checks: Vec<Check<'_>> = asked
            .iter()
            .map(|&i| {
                let bucket = buckets[i].as_deref().unwrap_or_default();
                Check::new(bucket, &effective[i].limit, effective[i].cost)
            })
            .collect();
        // Concurrency limits among them take their slots, kept while the call runs.
        let asked_at = provisional::Ticket::now();
        let decided = super::decide::decide_checks(limiter, &checks, Ask::Hold).await;
        // Refused while calls in flight hold tokens of a limit that counts only some
        // outcomes (or one ended while it was asked): decided again, all together, as they
        // end.
        let held = asked
            .iter()
            .filter(|&&i| limits[i].2.taken.is_some_and(Taken::is_counting))
            .filter_map(|&i| buckets[i].as_deref())
            .find(|bucket| provisional::is_held_or_passed(bucket, asked_at));
        let decided = match (decided, held) {
            (Ok(refused), Some(bucket)) if !refused.admits() => {
                let before = refused.parts.clone();
                let again = || async {
                    let decided = super::decide::decide_checks(limiter, &checks, Ask::Hold).await;
                    decided.unwrap_or_else(|_| Decided::of(before.clone()))
                };
                Ok(provisional::decide_again(bucket, asked_at, refused, again).await)
            }
            (decided, _) => decided,
        };
        match decided {
            Ok(Decided {
                parts: each, slot, ..
            }) => {
                if let Some(slot) = slot {
                    hold(slot, limits);
                }
                for (&i, part) in asked.iter().zip(each) {
                    parts[i] = Some(part);
                }
            }
            Err(e) => {
                first.warn_once(
                    Warning::CannotCheck,
                    &format_args!("rate limits of `{}` cannot be checked: {e}", first.name()),
                );
                for &i in &asked {
                    let e = &effective[i];
                    parts[i] = Some(super::without_store::fail_closed(&e.limit, e.cost));
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
    let verdict = Recorded::several(named);
    let decision = &verdict.decision;
    // Each limit as the call left it (a limit that admitted a refused call is vetoed); one
    // the call cost nothing under decided nothing, and is not counted.
    for ((label, part), (decl, bucket)) in verdict.labelled().zip(&keys) {
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
    let (allowed, tightest) = (decision.allowed, decision.tightest());
    if in_scope {
        record_current(verdict.clone());
    }
    if allowed {
        Ok(())
    } else {
        #[cfg(feature = "http-framework")]
        super::scope::give_back_on_refusal();
        let (decl, key) = keys.swap_remove(tightest);
        Err(Box::new(RateLimited::refused(
            verdict,
            key.unwrap_or_default(),
            decl.statuses(),
        )))
    }
}

/// Keeps an admitted call's concurrency slots while it runs: in the function's own
/// [`Holding`](super::Holding) (the first limit's call carries it), else in the request's scope, whose layer
/// holds them until the response is made. With neither (a check made by hand outside any
/// scope), the slots are given back at once: nothing would know when the call ends.
fn hold(
    slot: crate::limiter::slot::Slot,
    limits: &[(&'static LimitDeclaration, &KeyArg<'_>, Call<'_>)],
) {
    match limits.iter().find_map(|(.., call)| call.holding) {
        Some(holding) => holding.keep(slot),
        #[cfg(feature = "http-framework")]
        None => super::scope::hold(slot),
        #[cfg(not(feature = "http-framework"))]
        None => drop(slot),
    }
}
