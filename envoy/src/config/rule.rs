//! What a descriptor's `rate_limit` block says: the rule a matched request is decided under.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ratelimit_core::{Algorithm, Limit, Refill};

/// A `unit` as envoyproxy/ratelimit reads it (any case): a fixed window of that many seconds,
/// aligned on the Unix epoch. Its month is 30 days and its year 365, whatever the calendar
/// says (`calendar: true` asks for real calendar weeks and months instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReferenceUnit {
    /// 1 second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days, from a Thursday (the epoch's weekday), as the reference counts it.
    Week,
    /// 30 days, as the reference counts it.
    Month,
    /// 365 days, as the reference counts it.
    Year,
}

impl ReferenceUnit {
    /// Every unit, shortest first.
    pub const ALL: [ReferenceUnit; 7] = [
        ReferenceUnit::Second,
        ReferenceUnit::Minute,
        ReferenceUnit::Hour,
        ReferenceUnit::Day,
        ReferenceUnit::Week,
        ReferenceUnit::Month,
        ReferenceUnit::Year,
    ];

    /// The window's length in seconds, as the reference's `UnitToDivider` says.
    pub const fn seconds(self) -> u64 {
        match self {
            ReferenceUnit::Second => 1,
            ReferenceUnit::Minute => 60,
            ReferenceUnit::Hour => 3_600,
            ReferenceUnit::Day => 86_400,
            ReferenceUnit::Week => 7 * 86_400,
            ReferenceUnit::Month => 30 * 86_400,
            ReferenceUnit::Year => 365 * 86_400,
        }
    }

    /// The name as Envoy's `RateLimitResponse.RateLimit.Unit` spells it, in lowercase.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReferenceUnit::Second => "second",
            ReferenceUnit::Minute => "minute",
            ReferenceUnit::Hour => "hour",
            ReferenceUnit::Day => "day",
            ReferenceUnit::Week => "week",
            ReferenceUnit::Month => "month",
            ReferenceUnit::Year => "year",
        }
    }

    /// What `requests_per_unit` of this unit means in the reference: a fixed window of
    /// [`seconds`](ReferenceUnit::seconds) admitting that many requests, or for 0 a rule that
    /// refuses every request. For a limit Envoy sends in the request itself
    /// (`RateLimitDescriptor.limit`), so that it means what a file's rule means.
    ///
    /// ```
    /// use ratelimit_envoy::config::{Action, ReferenceUnit};
    /// use ratelimit_core::Algorithm;
    /// use std::time::Duration;
    ///
    /// let Action::Limit(limit) = ReferenceUnit::Month.limit(1_000) else { panic!() };
    /// assert_eq!(limit.period(), Duration::from_secs(30 * 86_400));
    /// assert_eq!(limit.algorithm_kind(), Algorithm::FixedWindow);
    /// assert_eq!(ReferenceUnit::Second.limit(0), Action::Block);
    /// ```
    pub fn limit(self, requests_per_unit: u32) -> Action {
        if requests_per_unit == 0 {
            return Action::Block;
        }
        let period = Duration::from_secs(self.seconds());
        // A fixed window of whole seconds from 1 s to a year admitting up to u32::MAX: every
        // such window is exact.
        match Limit::from_parts(
            requests_per_unit,
            requests_per_unit,
            period,
            Algorithm::FixedWindow,
            Refill::Smooth,
            None,
        ) {
            Ok(limit) => Action::Limit(limit),
            Err(_) => Action::Block,
        }
    }
}

impl fmt::Display for ReferenceUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A unit name the reference does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid rate limit unit '{0}'; expected one of second, minute, hour, day, week, month, year \
     (any case)"
)]
pub struct UnknownReferenceUnit(pub String);

/// Case-insensitive, as the reference upper-cases the name before looking it up.
impl FromStr for ReferenceUnit {
    type Err = UnknownReferenceUnit;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReferenceUnit::ALL
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownReferenceUnit(s.to_owned()))
    }
}

/// What a rule does with the requests it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Decide them under this limit.
    Limit(Limit),
    /// Admit them all without a check (`unlimited: true`).
    Unlimited,
    /// Refuse them all without a check (`requests_per_unit: 0`, which the reference counts
    /// against a limit of 0: every hit is over it).
    Block,
}

/// A rule: a descriptor's `rate_limit` block, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub(crate) action: Action,
    pub(crate) name: Option<String>,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Option<ReferenceUnit>,
    pub(crate) replaces: Vec<String>,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) detailed_metric: bool,
    pub(crate) shared: Option<String>,
    pub(crate) stats_key: String,
}

impl Rule {
    /// The rule of Envoy's per-descriptor `limit` override
    /// ([`Config::override_of`](crate::config::Config::override_of)).
    pub(crate) fn overriding(
        requests_per_unit: u32,
        unit: ReferenceUnit,
        stats_key: String,
    ) -> Rule {
        Rule {
            action: unit.limit(requests_per_unit),
            name: None,
            requests_per_unit,
            unit: Some(unit),
            replaces: Vec::new(),
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            shared: None,
            stats_key,
        }
    }

    /// What the rule does: a limit, unlimited, or block.
    pub fn action(&self) -> &Action {
        &self.action
    }

    /// The limit, for a rule that has one.
    pub fn limit(&self) -> Option<&Limit> {
        match &self.action {
            Action::Limit(limit) => Some(limit),
            _ => None,
        }
    }

    /// `rate_limit.name`: what `replaces` refers to, and what Envoy's `current_limit.name`
    /// carries.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// `requests_per_unit` as written (0 for an unlimited rule; a concurrency rule's
    /// `concurrent`): what Envoy's `current_limit.requests_per_unit` carries.
    pub fn requests_per_unit(&self) -> u32 {
        self.requests_per_unit
    }

    /// `unit` as written; `None` for a rule with a `period`, a concurrency rule or an unlimited
    /// one. What Envoy's `current_limit.unit` carries.
    pub fn unit(&self) -> Option<ReferenceUnit> {
        self.unit
    }

    /// `rate_limit.replaces`: the names of the rules this one drops when both apply to one
    /// request.
    pub fn replaces(&self) -> &[String] {
        &self.replaces
    }

    /// `shadow_mode`: decided and counted, never refused. Also set on the
    /// [`limit`](Rule::limit) itself ([`Limit::is_shadow`]), so that the limiter treats it so.
    pub fn shadow_mode(&self) -> bool {
        self.shadow_mode
    }

    /// `quota_mode`: the reference's quota semantics (a request is refused only when every
    /// quota descriptor of it is over), left for the service to apply.
    pub fn quota_mode(&self) -> bool {
        self.quota_mode
    }

    /// `detailed_metric`: metrics per descriptor value, not per rule.
    pub fn detailed_metric(&self) -> bool {
        self.detailed_metric
    }

    /// `shared`: the name of a limit Rust services also use, whose buckets this rule draws
    /// from (see [`Bucket`](crate::config::Bucket)).
    pub fn shared(&self) -> Option<&str> {
        self.shared.as_deref()
    }

    /// The rule's key in the reference's statistics, such as
    /// `test-domain.key1_value1.subkey1`: the domain and each level's `key` or `key_value`.
    pub fn stats_key(&self) -> &str {
        &self.stats_key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_in_any_case_and_mean_the_references_windows() {
        assert_eq!("SECOND".parse(), Ok(ReferenceUnit::Second));
        assert_eq!("Minute".parse(), Ok(ReferenceUnit::Minute));
        assert_eq!("year".parse(), Ok(ReferenceUnit::Year));
        assert!("unknown".parse::<ReferenceUnit>().is_err());
        assert!("minutes".parse::<ReferenceUnit>().is_err());
        assert!("".parse::<ReferenceUnit>().is_err());
        assert_eq!(ReferenceUnit::Month.seconds(), 2_592_000);
        assert_eq!(ReferenceUnit::Year.seconds(), 31_536_000);
        for unit in ReferenceUnit::ALL {
            let Action::Limit(limit) = unit.limit(u32::MAX) else {
                panic!("{unit} per u32::MAX is a limit")
            };
            assert_eq!(limit.period(), Duration::from_secs(unit.seconds()));
            assert_eq!(limit.burst_capacity(), u32::MAX);
            assert_eq!(unit.as_str().parse(), Ok(unit));
        }
    }
}
