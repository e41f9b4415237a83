//! How each descriptor of a request is decided, and the buckets they fall in.

use ratelimit_core::{Decision, Limit};

use crate::config::Rule;
use crate::usage::Charged;

/// How one descriptor is decided.
pub(super) enum Plan<'c> {
    /// A stream-done charge ([`crate::usage`]): never refused, charged after the request's
    /// other descriptors are decided (and only when they did not refuse it).
    StreamDone(StreamDone<'c>),
    /// No rule (or an unknown domain, or a replaced rule): `OK`, no limit.
    Free,
    /// `unlimited: true`.
    Unlimited,
    /// Refused whatever the bucket holds (`requests_per_unit: 0`, or a cost no burst holds).
    Refused(&'c Rule, Option<Limit>),
    /// Decided in the bucket of group `usize`.
    Bucket(&'c Rule, Limit, usize),
}

/// A descriptor marked with [`STREAM_DONE_KEY`], and what its charge did.
pub(super) struct StreamDone<'c> {
    pub(super) rule: &'c Rule,
    pub(super) limit: Limit,
    pub(super) name: &'c str,
    pub(super) key: &'c str,
    pub(super) estimate: u64,
    /// Its own `hits_addend`: `None` charges nothing (route-level `rate_limits`).
    pub(super) actual: Option<u64>,
    pub(super) charged: Option<Charged>,
}

/// One bucket of a request, with the summed cost of its descriptors.
pub(super) struct Group<'c> {
    pub(super) name: &'c str,
    pub(super) key: &'c str,
    pub(super) limit: Limit,
    pub(super) cost: u64,
    pub(super) decision: Option<Decision>,
}

/// Whether `plan` decides in group `at`.
pub(super) fn is_in(plan: &Plan<'_>, at: usize) -> bool {
    matches!(plan, Plan::Bucket(_, _, g) if *g == at)
}
