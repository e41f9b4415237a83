//! The funnel: the one function that decides a slice of checks ([`decide_checks`]).
//!
//! Every entrance builds checks and hands them here: the public methods (`check_all*`,
//! `enter*`, `peek*`, `check_*estimate*`, `Usage::settle*`, `refund*`), the code
//! `#[rate_limit]` generates for a call of several limits or of a concurrency limit and for
//! its `settle = ..` and `count = ..`, and the HTTP layers' limits. (A call of one rate limit
//! takes the same steps from its first poll: `local.rs`.) What happens is switched by what
//! the checks ask, never by which entrance asked:
//! - a peek ([`Ask::Peek`]) reads each bucket and takes nothing: no deny cache, no slot;
//! - a settlement ([`Ask::Settle`]) or a refund ([`Ask::Refund`]) of what a call took goes
//!   back where it was taken (`give.rs`);
//! - a call that holds ([`Ask::Hold`]) takes its concurrency limits' slots for one holder,
//!   and may queue for them (`slots.rs`);
//! - any other slice is decided together, all or nothing (`remote.rs`: the deny cache, the
//!   circuit, the deadline, the store, the failure policy; `waiting.rs`: shadow mode and the
//!   wait of a call that reserved its tokens).
//!
//! The answer is each check's own decision, in order ([`Decided`]): an entrance combines
//! them once, into the one verdict it returns, and never splits a combined decision again.

use crate::decision::Decision;
use crate::decision::Source;
use crate::errors::Error;
use crate::limiter::inner::Engine;
use crate::limiter::inner::RateLimiter;
use crate::limiter::inner::on_tokio;
use crate::limiter::slot::Slot;
use crate::pipeline::check::{Check, Taking, validate_all};

use super::give;
use super::waiting::BoxedAnswer;

/// What a call asks of its checks' buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask<'a> {
    /// Take each check's cost if every limit admits the call, and nothing if any refuses. A
    /// concurrency limit cannot be decided so: nothing would give its slots back
    /// ([`InvalidLimit::NeedsSlot`](crate::limit::InvalidLimit::NeedsSlot)).
    Take,
    /// Take as [`Take`](Ask::Take) does, a concurrency limit's slots among them, held by the
    /// call (an id of its own) until the guard the answer carries is dropped.
    Hold,
    /// Say what taking would answer, and take nothing (`peek`): a concurrency limit needs no
    /// slot for it, and the deny cache, which knows refusals of calls that took, is not asked.
    Peek,
    /// Settle what each check took (its cost, an estimate) at the actual cost its [`Taking`]
    /// says, where it was taken: the difference given back, or taken into the limit's bounded
    /// debt (`Usage::settle`, `#[rate_limit(settle = ..)]`). The answer is in
    /// [`Decided::settled`].
    Settle(&'a [Taking]),
    /// Give each check's cost back where its [`Source`] says it was taken (`refund`,
    /// `#[rate_limit(count = ..)]`): the bucket as it is now gains it, floored at full.
    Refund(&'a [Source]),
}

/// What a slice of checks came to.
#[derive(Debug)]
pub(crate) struct Decided {
    /// Each check's decision, in the checks' order.
    pub(crate) parts: Vec<Decision>,
    /// The guard of the concurrency slots the call holds: `Some` when it was admitted under a
    /// concurrency limit.
    pub(crate) slot: Option<Slot>,
    /// Each check's `(taken, given_back)` of a settlement ([`Ask::Settle`]); empty otherwise.
    pub(crate) settled: Vec<(u64, u64)>,
}

impl Decided {
    /// The parts of a call that holds no slot.
    pub(crate) fn of(parts: Vec<Decision>) -> Decided {
        Decided {
            parts,
            slot: None,
            settled: Vec::new(),
        }
    }

    /// The answer of a call that decided nothing (a refund).
    fn nothing() -> Decided {
        Decided::of(Vec::new())
    }

    /// With a settlement's answer.
    fn with_settled(self, settled: Vec<(u64, u64)>) -> Decided {
        Decided { settled, ..self }
    }

    /// The one verdict of the call: the parts combined ([`Decision::combined`]).
    pub(crate) fn combined(self) -> (Decision, Option<Slot>) {
        (Decision::combined(self.parts), self.slot)
    }
}

/// Decides `checks`, one call's limits, as `ask` asks: the one function every entrance's
/// checks end in (see the module's docs).
///
/// # Errors
/// [`Error::NoLimits`] for no checks, [`Error::DuplicateBucket`], the cost errors, a
/// concurrency limit on a store that cannot hold slots, or the store's error when no
/// failure policy decides in its place.
pub(crate) async fn decide_checks(
    limiter: &RateLimiter,
    checks: &[Check<'_>],
    ask: Ask<'_>,
) -> Result<Decided, Error> {
    let mut decided = match ask {
        Ask::Peek => return peek_checks(limiter, checks).await,
        // Boxed as trait objects, as the store's other answers are: inline, their futures
        // made every entrance's too deep for the compiler to lay out (`queries overflow the
        // depth limit`), and they are the rare calls.
        Ask::Settle(taken) => {
            let settling: BoxedAnswer<'_, _> = Box::pin(give::settle(limiter, checks, taken));
            return Ok(Decided::nothing().with_settled(settling.await?));
        }
        Ask::Refund(sources) => {
            let refunding: BoxedAnswer<'_, _> = Box::pin(give::refund(limiter, checks, sources));
            refunding.await?;
            return Ok(Decided::nothing());
        }
        Ask::Hold if checks.iter().any(|c| c.limit.is_concurrent()) => {
            let (parts, slot) = super::slots::take_slots(limiter, checks).await?;
            Decided {
                slot,
                ..Decided::of(parts)
            }
        }
        Ask::Take | Ask::Hold => {
            validate_all(checks)?;
            let parts = super::remote::decide_all(limiter, checks).await?;
            Decided::of(parts)
        }
    };
    // Each limit as the call left it, before anything reads the parts.
    Decision::veto(&mut decided.parts);
    Ok(decided)
}

/// [`Ask::Peek`]: each bucket as the store holds it, shadow mode applied, nothing taken.
async fn peek_checks(limiter: &RateLimiter, checks: &[Check<'_>]) -> Result<Decided, Error> {
    if checks.is_empty() {
        return Err(Error::NoLimits);
    }
    let mut parts = Vec::with_capacity(checks.len());
    for check in checks {
        // A peek takes nothing: a concurrency limit needs no slot (no holder) for it.
        check.limit.check_cost(check.cost)?;
        let (bucket, limit, cost) = (check.bucket, check.limit, check.cost);
        let mut decision = match &limiter.inner.engine {
            Engine::Local(s) => s.peek_now(bucket, limit, cost),
            Engine::Remote(remote) => {
                on_tokio()?;
                remote.store.peek(bucket, limit, cost).await?
            }
            Engine::Unenabled => return Err(Error::NotEnabled),
        };
        decision.let_shadow_through();
        parts.push(decision);
    }
    Ok(Decided::of(parts))
}
