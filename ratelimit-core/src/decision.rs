//! What a check decided ([`Decision`]), by whom ([`Source`]), and the labels its limits are
//! told under ([`Label`], [`Names`]).

use std::borrow::Cow;

use std::sync::Arc;
use std::time::Duration;

use crate::limit::Limit;
use crate::limit::TierName;

/// The outcome of one rate-limit check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the call was admitted (and its tokens taken).
    pub allowed: bool,
    /// Whole tokens left in the bucket after this decision (of a
    /// [`peek`](crate::RateLimiter::peek), which takes nothing: the tokens it holds now).
    pub remaining: u64,
    /// The limit that was applied.
    pub limit: Limit,
    /// Tokens the call asked for.
    pub cost: u32,
    /// When denied (or [`shadowed`](Decision::shadowed)): how long until the same call would
    /// be admitted, rounded up to the microsecond, so waiting exactly this long is enough.
    /// Zero when allowed. (A `Store` admitting a call that reserved its tokens
    /// ahead, see [`Limit::wait`], says here how long it must wait; the limiter waits it.)
    pub retry_after: Duration,
    /// How long until the bucket is full again (zero when it is full).
    pub reset_after: Duration,
    /// Who decided: the store, or the failure policy while the store was failing.
    pub source: Source,
    /// The limit is in [shadow mode](Limit::shadow) and would have refused this call, or made
    /// it wait (a limit with a [`wait`](Limit::wait)): it was let through at once (`allowed`),
    /// and `retry_after` says when it would have passed. A refusal took nothing; a wait took
    /// its tokens, as the limit enforced would have. Of a call under several limits: some
    /// shadow limit would have, and the call was let through.
    pub shadowed: bool,
    /// A limit of a call decided under several that would have admitted it, while another
    /// refused it: it took nothing (its [`outcome`](Decision::outcome) is `vetoed`).
    vetoed: bool,
    /// Each limit's own decision, when the call was decided under several, and which of them
    /// this one's fields come from.
    /// One pointer, so that a one-limit decision grows by 8 bytes only.
    parts: Option<Arc<Parts>>,
    /// When the store decided, on its clock (the Redis server's), when it said so.
    decided_at: DecidedAt,
}

/// The store's time of a decision, µs (0: not told), which a window's
/// [settlement](crate::Usage::settle) needs to find the window the call took from. Not part of
/// what was decided: two decisions alike but for it are equal.
#[derive(Debug, Clone, Copy, Default)]
struct DecidedAt(u64);

impl PartialEq for DecidedAt {
    fn eq(&self, _: &DecidedAt) -> bool {
        true
    }
}

impl Eq for DecidedAt {}

/// The limits of a call decided under several.
#[derive(Debug, PartialEq, Eq)]
struct Parts {
    each: Box<[Decision]>,
    tightest: usize,
}

/// A limit as a call's decision is told under: its name, and the [tier](crate::Tier) the call
/// was given, if any. Cloned per call: a tier's name is a literal or shared, never copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Label {
    pub(crate) name: &'static str,
    pub(crate) tier: Option<TierName>,
}

impl Label {
    /// The limit `name`, untiered.
    #[cfg(test)]
    pub(crate) const fn of(name: &'static str) -> Label {
        Label { name, tier: None }
    }

    /// The name under which the limit is described to clients: `name`, or `name[tier]` for a
    /// call given a tier, so that the policy named is the one in force for this caller.
    pub(crate) fn shown<'n>(name: &'n str, tier: Option<&str>) -> Cow<'n, str> {
        match tier {
            None => Cow::Borrowed(name),
            Some(tier) => Cow::Owned(format!("{name}[{tier}]")),
        }
    }
}

/// The names of a call's limits, each in the place of its own part of the call's decision:
/// made only with that decision ([`Decision::combined_named`]), read only beside it
/// (`named_parts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names(Arc<[Label]>);

impl Names {
    /// The label of `decision`'s tightest part.
    pub(crate) fn tightest(&self, decision: &Decision) -> &Label {
        &self.0[decision.tightest()]
    }

    /// The label of each part, in the parts' order.
    pub(crate) fn labels(&self) -> &[Label] {
        &self.0
    }
}

/// Who took a [`Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The configured store (Redis, memory or custom).
    Store,
    /// The store failed; the in-memory fallback enforced the limit on this node.
    Fallback,
    /// The store failed; the call was admitted without a check (fail open).
    FailOpen,
    /// The store failed; the call was refused without a check (fail closed).
    FailClosed,
    /// The call had no key and the empty-key policy decided.
    NoKey,
    /// Refused locally: the store refused the same or a smaller cost on this bucket, and the
    /// bucket cannot have refilled enough since (the deny cache).
    DenyCache,
    /// The limit is disabled by configuration (`enabled = false`): no limit applied and the
    /// call passed unchecked; `remaining` is `u64::MAX` and no rate-limit header is sent.
    Disabled,
    /// The call is exempt from the limit (`#[rate_limit(exempt = ..)]` said so): it passed
    /// unchecked and took nothing; no rate-limit header is sent.
    Exempt,
    /// The call asked for more tokens than the limit's burst holds (or more than a `u32`
    /// counts), so that no wait could ever admit it: refused at once, nothing taken, no
    /// `Retry-After`.
    CostExceedsBurst,
    /// The call cost nothing (a `cost` of 0): it passed and took nothing, without asking the
    /// store. Its response headers describe the limit's policy, not its bucket, which was not
    /// asked; it is not counted in the metrics (nothing was decided).
    Free,
}

impl Decision {
    /// Builds a decision, for `Store` implementations.
    pub fn new(
        allowed: bool,
        remaining: u64,
        limit: Limit,
        cost: u32,
        retry_after: Duration,
        reset_after: Duration,
    ) -> Decision {
        Decision {
            allowed,
            remaining,
            limit,
            cost,
            retry_after,
            reset_after,
            source: Source::Store,
            shadowed: false,
            vetoed: false,
            parts: None,
            decided_at: DecidedAt(0),
        }
    }

    /// The same decision, told to have been made at `at_us` on the store's clock.
    #[must_use]
    pub(crate) fn decided_at(mut self, at_us: u64) -> Decision {
        self.decided_at = DecidedAt(at_us);
        self
    }

    /// When the store made this decision, µs on its clock, if it said (the Redis scripts
    /// and the module do).
    pub(crate) fn decided_at_us(&self) -> Option<u64> {
        (self.decided_at.0 != 0).then_some(self.decided_at.0)
    }

    /// The decision of a call under a limit disabled by configuration: admitted, no limit
    /// applied ([`Source::Disabled`]).
    pub(crate) fn disabled(limit: Limit, cost: u32) -> Decision {
        Decision::new(true, u64::MAX, limit, cost, Duration::ZERO, Duration::ZERO)
            .with_source(Source::Disabled)
    }

    /// The decision of a call exempt from its limit ([`Source::Exempt`]): admitted unchecked.
    pub(crate) fn exempt(limit: Limit) -> Decision {
        Decision::new(true, u64::MAX, limit, 0, Duration::ZERO, Duration::ZERO)
            .with_source(Source::Exempt)
    }

    /// The decision of a call that costs nothing under `limit` ([`Source::Free`]): admitted,
    /// nothing taken, the bucket not asked.
    pub(crate) fn free(limit: Limit) -> Decision {
        Decision::new(true, u64::MAX, limit, 0, Duration::ZERO, Duration::ZERO)
            .with_source(Source::Free)
    }

    /// The refusal of a call asking `cost` tokens, more than `limit`'s burst holds
    /// ([`Source::CostExceedsBurst`]); `cost` saturates at `u32::MAX`.
    pub(crate) fn cost_exceeds_burst(limit: Limit, cost: u32) -> Decision {
        Decision::new(false, 0, limit, cost, Duration::ZERO, Duration::ZERO)
            .with_source(Source::CostExceedsBurst)
    }

    /// Whether every one of a call's `parts` admits it; when one refuses, those that admitted
    /// took nothing, and are marked [`vetoed`](Decision::vetoed): no admission to count.
    pub(crate) fn veto(parts: &mut [Decision]) -> bool {
        let allowed = parts.iter().all(|d| d.allowed);
        if !allowed {
            for part in parts.iter_mut().filter(|d| d.allowed && !d.shadowed) {
                part.vetoed = true;
            }
        }
        allowed
    }

    /// The decision of a call under several limits, decided together
    /// ([`RateLimiter::check_all`](crate::RateLimiter::check_all)): admitted only if every
    /// limit admits it. Its fields are those of the tightest limit (when refused, the refusing
    /// limit with the longest `retry_after`; when admitted, the one with the fewest tokens
    /// left), except that `remaining` is the fewest left under any limit (any enforced one: a
    /// limit in [shadow mode](Limit::shadow) never describes a call another limit enforces)
    /// and `reset_after` the longest; [`parts`](Decision::parts) gives every limit's own
    /// decision.
    ///
    /// # Panics
    /// If `parts` is empty.
    #[must_use]
    pub fn combined(mut parts: Vec<Decision>) -> Decision {
        assert!(
            !parts.is_empty(),
            "a combined decision needs at least one part"
        );
        if parts.len() == 1
            && let Some(only) = parts.pop()
        {
            return only;
        }
        let allowed = Decision::veto(&mut parts);
        // A limit in shadow mode describes the call only when every limit is: it must not
        // make a client that reads the headers slow down for a limit that is not enforced.
        let enforced =
            |d: &Decision| !d.limit.is_shadow() || parts.iter().all(|p| p.limit.is_shadow());
        let tightest = if allowed {
            (0..parts.len())
                .filter(|&i| enforced(&parts[i]))
                .min_by_key(|&i| parts[i].remaining)
        } else {
            // The first of the longest waits.
            (0..parts.len())
                .filter(|&i| !parts[i].allowed)
                .min_by_key(|&i| std::cmp::Reverse(parts[i].retry_after))
        }
        .unwrap_or(0);
        let mut combined = parts[tightest].clone();
        combined.allowed = allowed;
        combined.shadowed = allowed && parts.iter().any(|d| d.shadowed);
        combined.remaining = parts
            .iter()
            .filter(|d| enforced(d))
            .map(|d| d.remaining)
            .min()
            .unwrap_or(0);
        combined.reset_after = parts
            .iter()
            .map(|d| d.reset_after)
            .max()
            .unwrap_or_default();
        combined.parts = Some(Arc::new(Parts {
            each: parts.into(),
            tightest,
        }));
        combined
    }

    /// Several limits' decisions, each given with its limit's name, combined: the names come
    /// back in the place of their own parts, paired here and nowhere else.
    pub(crate) fn combined_named(named: Vec<(Label, Decision)>) -> (Decision, Names) {
        let (names, parts): (Vec<_>, Vec<_>) = named.into_iter().unzip();
        (Decision::combined(parts), Names(names.into()))
    }

    /// Each limit's own decision, in the order the limits were given: one, this decision,
    /// unless the call was decided under several limits at once.
    pub fn parts(&self) -> &[Decision] {
        match &self.parts {
            Some(parts) => &parts.each,
            None => std::slice::from_ref(self),
        }
    }

    /// Which of [`parts`](Decision::parts) this decision's fields come from (0 for one limit).
    pub fn tightest(&self) -> usize {
        self.parts.as_ref().map_or(0, |p| p.tightest)
    }

    /// Lets a refusal (or a wait) by a limit in shadow mode through: it says it was
    /// [`shadowed`](Decision::shadowed) and keeps its `retry_after`.
    pub(crate) fn let_shadow_through(&mut self) {
        // Refused, or admitted only after a wait: a shadow limit neither refuses nor delays.
        if self.limit.is_shadow() && (!self.allowed || !self.retry_after.is_zero()) {
            self.allowed = true;
            self.shadowed = true;
        }
    }

    /// What happened to the call, in one word, as the `rate_limit` span and the metrics name
    /// it: `allowed` or `limited` by the store (or `limited` by the deny cache),
    /// `shadow_limited` (a limit in shadow mode would have refused), `no_key`, `fallback`,
    /// `fail_open` or `fail_closed` (the store was failing), `disabled`, `exempt`,
    /// `cost_exceeds_burst` (a call no wait could admit), or `free` (a call that cost nothing,
    /// never counted in the metrics). Of one limit of a
    /// call decided under several ([`parts`](Decision::parts)): `vetoed` when this limit would
    /// have admitted the call but another refused it, so that it took nothing; `allowed`
    /// counts only calls admitted, and `limited` only the limits that refused.
    pub fn outcome(&self) -> &'static str {
        match self.source {
            _ if self.shadowed => "shadow_limited",
            Source::NoKey => "no_key",
            Source::Fallback => "fallback",
            Source::FailOpen => "fail_open",
            Source::FailClosed => "fail_closed",
            Source::Disabled => "disabled",
            Source::Exempt => "exempt",
            Source::CostExceedsBurst => "cost_exceeds_burst",
            Source::Free => "free",
            _ if self.vetoed => "vetoed",
            _ if self.allowed => "allowed",
            _ => "limited",
        }
    }

    /// The same decision, attributed to `source`.
    #[must_use]
    pub(crate) fn with_source(mut self, source: Source) -> Decision {
        self.source = source;
        self
    }

    /// The decision of a memory store's outcome, whose `new_state` is the store's time when
    /// it wrote the bucket (the decision's time, which a settlement reads).
    pub(crate) fn from_store_outcome(
        o: &crate::algorithm::Outcome<u64>,
        limit: Limit,
        cost: u32,
    ) -> Decision {
        Decision::from_outcome(o, limit, cost).decided_at(o.new_state.unwrap_or(0))
    }

    pub(crate) fn from_outcome<S>(
        o: &crate::algorithm::Outcome<S>,
        limit: Limit,
        cost: u32,
    ) -> Decision {
        Decision::new(
            o.allowed,
            o.remaining,
            limit,
            cost,
            Duration::from_micros(o.retry_after_us),
            Duration::from_micros(o.reset_after_us),
        )
    }
}
