//! What the pipeline decides: a call's checks. A check is one limit of one call, as the
//! stores take it: the bucket's key, the limit, the call's validated cost under it, and, for
//! a concurrency limit, the call that holds the slot. Every entrance builds checks (a public
//! method from its arguments, the code `#[rate_limit]` generates from its declarations, a
//! layer from its limits); the stores, the fallback and the waits read them, and nothing else.

use crate::algorithm::Kernel;
use crate::decision::Source;
use crate::errors::Error;
use crate::limit::Limit;

/// One limit of one call, borrowed: what every stage of a decision reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Check<'a> {
    /// The store key of the bucket (see `naming`).
    pub(crate) bucket: &'a str,
    /// The limit in force for this call (a tier's, an override's).
    pub(crate) limit: &'a Limit,
    /// Tokens (or slots) the call takes, validated against the limit.
    pub(crate) cost: u32,
    /// The call's id where it holds a concurrency limit's slots (unique across the fleet), 0
    /// for a rate limit and where no call holds one (a peek).
    pub(crate) holder: u64,
}

impl<'a> Check<'a> {
    /// A check of `cost` under `limit` on `bucket`, held by no call.
    pub(crate) const fn new(bucket: &'a str, limit: &'a Limit, cost: u32) -> Check<'a> {
        Check {
            bucket,
            limit,
            cost,
            holder: 0,
        }
    }

    /// The same check, held by the call `holder` where its limit is a concurrency limit (a
    /// rate limit has no holder).
    #[must_use]
    pub(crate) fn held_by(self, holder: u64) -> Check<'a> {
        Check {
            holder: if self.limit.is_concurrent() {
                holder
            } else {
                0
            },
            ..self
        }
    }

    /// The arithmetic this check is decided by, with its holder.
    pub(crate) fn kernel(&self) -> Kernel {
        Kernel::held_by(self.limit, self.holder)
    }

    /// The same check, owning its bucket's key: for what outlives the call that made it (a
    /// task that gives back what an abandoned call took).
    pub(crate) fn into_owned(self) -> OwnedCheck {
        OwnedCheck {
            bucket: self.bucket.into(),
            limit: *self.limit,
            cost: self.cost,
            holder: self.holder,
        }
    }
}

/// A [`Check`] that owns its bucket's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnedCheck {
    pub(crate) bucket: Box<str>,
    pub(crate) limit: Limit,
    pub(crate) cost: u32,
    pub(crate) holder: u64,
}

impl OwnedCheck {
    /// The check, borrowed.
    pub(crate) fn as_check(&self) -> Check<'_> {
        Check {
            bucket: &self.bucket,
            limit: &self.limit,
            cost: self.cost,
            holder: self.holder,
        }
    }
}

/// The checks of the public `(key, limit, cost)` form (`Store::check_all`, a store of the
/// user's own), held by no call.
pub(crate) fn from_tuples<'a>(checks: &'a [(&'a str, &'a Limit, u32)]) -> Vec<Check<'a>> {
    checks
        .iter()
        .map(|&(bucket, limit, cost)| Check::new(bucket, limit, cost))
        .collect()
}

/// The public `(key, limit, cost)` form of `checks`, for a store of the user's own (which
/// holds no concurrency slots, and so needs no holder).
pub(crate) fn to_tuples<'a>(checks: &[Check<'a>]) -> Vec<(&'a str, &'a Limit, u32)> {
    checks.iter().map(|c| (c.bucket, c.limit, c.cost)).collect()
}

/// Validates the checks of one call: at least one, every cost valid, no bucket twice.
pub(crate) fn validate_all(checks: &[Check<'_>]) -> Result<(), Error> {
    if checks.is_empty() {
        return Err(Error::NoLimits);
    }
    for (i, check) in checks.iter().enumerate() {
        validate(check)?;
        if checks[..i].iter().any(|c| c.bucket == check.bucket) {
            return Err(Error::DuplicateBucket(check.bucket.to_owned()));
        }
    }
    Ok(())
}

/// Validates one check: its cost fits its limit, and a concurrency limit is held by a call.
pub(crate) fn validate(check: &Check<'_>) -> Result<(), Error> {
    // A concurrency limit is decided only with a slot to give back (`enter`), which gives it
    // its holder.
    if check.limit.is_concurrent() && check.holder == 0 {
        return Err(crate::limit::InvalidLimit::NeedsSlot.into());
    }
    check.limit.check_cost(check.cost)
}

/// One bucket's tokens a call took, and who decided it: a refund, a give-back and a
/// settlement go back to the same (the store's to the store, the fallback's to the
/// fallback).
#[derive(Debug)]
pub(crate) struct TakenPart {
    pub(crate) bucket: String,
    pub(crate) limit: Limit,
    pub(crate) cost: u32,
    pub(crate) source: Source,
    /// When the store took them, on its clock (0: not told): a window's settlement finds the
    /// window they were taken from by it.
    pub(crate) at: u64,
}

impl TakenPart {
    /// The check that took these tokens, to give them back or settle them.
    pub(crate) fn check(&self) -> Check<'_> {
        Check::new(&self.bucket, &self.limit, self.cost)
    }

    /// Who took these tokens, and when, for a settlement at `actual`.
    pub(crate) fn taking(&self, actual: u32) -> Taking {
        Taking {
            actual,
            source: self.source,
            at: self.at,
        }
    }
}

/// What a settled check took, beside the check of it (its cost the estimate): who took it,
/// when, and what the call turned out to cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taking {
    /// The actual cost.
    pub(crate) actual: u32,
    /// Who decided the take: the store, or the fallback.
    pub(crate) source: Source,
    /// When the store took it, on its clock (0: not told): a window's settlement finds the
    /// window the tokens were taken from by it.
    pub(crate) at: u64,
}
