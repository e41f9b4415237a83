//! The funnel: the one function that decides a slice of checks ([`RateLimiter::decide_checks`]).
//!
//! Every entrance builds checks and hands them here: the public methods (`check_all*`,
//! `enter*`, `peek*`, `check_*estimate*`), the code `#[rate_limit]` generates for a call of
//! several limits or of a concurrency limit, and the HTTP layers' limits. (A call of one rate
//! limit takes the same steps from its first poll: `local.rs`.) What happens is switched by
//! what the checks ask, never by which entrance asked:
//! - a peek ([`Ask::Peek`]) reads each bucket and takes nothing: no deny cache, no slot;
//! - a call that holds ([`Ask::Hold`]) takes its concurrency limits' slots for one holder,
//!   and may queue for them (`slots.rs`);
//! - any other slice is decided together, all or nothing (`remote.rs`: the deny cache, the
//!   circuit, the deadline, the store, the failure policy; `waiting.rs`: shadow mode and the
//!   wait of a call that reserved its tokens).
//!
//! The answer is each check's own decision, in order ([`Decided`]): an entrance combines
//! them once, into the one verdict it returns, and never splits a combined decision again.

use crate::decision::Decision;
use crate::errors::Error;
use crate::limiter::inner::Engine;
use crate::limiter::inner::RateLimiter;
use crate::limiter::inner::on_tokio;
use crate::limiter::slot::Slot;
use crate::pipeline::check::{Check, validate_all};

/// What a call asks of its checks' buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
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
}

/// What a slice of checks came to.
#[derive(Debug)]
pub(crate) struct Decided {
    /// Each check's decision, in the checks' order.
    pub(crate) parts: Vec<Decision>,
    /// The guard of the concurrency slots the call holds: `Some` when it was admitted under a
    /// concurrency limit.
    pub(crate) slot: Option<Slot>,
}

impl Decided {
    /// The one verdict of the call: the parts combined ([`Decision::combined`]).
    pub(crate) fn combined(self) -> (Decision, Option<Slot>) {
        (Decision::combined(self.parts), self.slot)
    }
}

impl RateLimiter {
    /// Decides `checks`, one call's limits, as `ask` asks: the one function every entrance's
    /// checks end in (see the module's docs).
    ///
    /// # Errors
    /// [`Error::NoLimits`] for no checks, [`Error::DuplicateBucket`], the cost errors, a
    /// concurrency limit on a store that cannot hold slots, or the store's error when no
    /// failure policy decides in its place.
    pub(crate) async fn decide_checks(
        &self,
        checks: &[Check<'_>],
        ask: Ask,
    ) -> Result<Decided, Error> {
        if ask == Ask::Peek {
            return self.peek_checks(checks).await;
        }
        let mut decided = if ask == Ask::Hold && checks.iter().any(|c| c.limit.is_concurrent()) {
            self.take_slots(checks).await?
        } else {
            validate_all(checks)?;
            let parts = self.decide_all(checks).await?;
            Decided { parts, slot: None }
        };
        // Each limit as the call left it, before anything reads the parts.
        Decision::veto(&mut decided.parts);
        Ok(decided)
    }

    /// [`Ask::Peek`]: each bucket as the store holds it, shadow mode applied, nothing taken.
    async fn peek_checks(&self, checks: &[Check<'_>]) -> Result<Decided, Error> {
        if checks.is_empty() {
            return Err(Error::NoLimits);
        }
        let mut parts = Vec::with_capacity(checks.len());
        for check in checks {
            // A peek takes nothing: a concurrency limit needs no slot (no holder) for it.
            check.limit.check_cost(check.cost)?;
            let (bucket, limit, cost) = (check.bucket, check.limit, check.cost);
            let mut decision = match &self.inner.engine {
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
        Ok(Decided { parts, slot: None })
    }
}
