//! Tiers: the limits one declared limit takes per caller (a plan: free, pro, a contract).

use super::Limit;

/// A named limit a call may be given in place of its declaration's: one plan's quota. A
/// `#[rate_limit(tier = ..)]` attribute picks one per call (from the caller's plan, an
/// argument, the request); the call keeps its bucket (one per limit and key), so a caller
/// whose plan changes goes on from the tokens it has, by the store's rules for a changed
/// limit. The response headers and metrics name the tier.
///
/// ```
/// use ratelimit_core::{Limit, Tier};
///
/// const FREE: Tier = Tier::new("free", Limit::per_hour(100));
/// const PRO: Tier = Tier::new("pro", Limit::per_hour(10_000));
/// assert_eq!(PRO.limit().burst_capacity(), 10_000);
/// // A contract's own limit, read at run time, under a tier name of its own.
/// let enterprise = Tier::new("enterprise", Limit::per_minute(2_500));
/// assert_eq!(enterprise.name(), "enterprise");
/// # let _ = FREE;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tier {
    name: &'static str,
    limit: Limit,
}

impl Tier {
    /// The tier `name`, whose calls are decided under `limit`.
    pub const fn new(name: &'static str, limit: Limit) -> Tier {
        Tier { name, limit }
    }

    /// The tier's name, as the headers and metrics show it.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The limit of the tier's calls.
    pub const fn limit(&self) -> Limit {
        self.limit
    }
}
