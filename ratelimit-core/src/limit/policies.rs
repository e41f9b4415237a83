//! What a limit does when it cannot be decided as usual: when its store fails
//! ([`FailurePolicy`]), and when its call has no key ([`EmptyKeyPolicy`]). The words of a
//! limit, like its unit and algorithm; what the limiter does under them is `crate::policy`'s.

/// What a limiter does with a call when its store fails (unreachable, slower than the
/// deadline, erroring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Enforce the limit in this process's memory until the store is back (default). With
    /// Redis, each instance enforces its share: the limit divided by the number of instances
    /// that were alive (see [`RateLimiter::live_instances`](crate::RateLimiter::live_instances)),
    /// each bucket starting from this instance's part of what the store last said it held
    /// (its tokens, the calls it owes, when it is full again: whatever the limit's algorithm)
    /// (see [`RateLimiterBuilder::deny_cache`](crate::RateLimiterBuilder::deny_cache)), and
    /// going on from there through later outages.
    #[default]
    Fallback,
    /// Admit the call (fail open, like Spring Cloud Gateway).
    Allow,
    /// Refuse the call (fail closed, like Envoy's `failure_mode_deny`).
    Deny,
}

impl FailurePolicy {
    /// Every policy.
    pub(crate) const ALL: [FailurePolicy; 3] = [
        FailurePolicy::Fallback,
        FailurePolicy::Allow,
        FailurePolicy::Deny,
    ];

    /// The policy's name as written in `policy = ".."` and config overrides.
    pub const fn as_str(self) -> &'static str {
        self.word().name()
    }

    /// The word of the vocabulary the macros share, which owns the name.
    pub(crate) const fn word(self) -> ratelimit_vocab::FailurePolicy {
        match self {
            FailurePolicy::Fallback => ratelimit_vocab::FailurePolicy::Fallback,
            FailurePolicy::Allow => ratelimit_vocab::FailurePolicy::Allow,
            FailurePolicy::Deny => ratelimit_vocab::FailurePolicy::Deny,
        }
    }
}

impl std::fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `"deny"` in a config file, parsed as [`FailurePolicy::from_str`](std::str::FromStr) parses it.
impl<'de> serde::Deserialize<'de> for FailurePolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        super::deserialize_named::<_, _, ratelimit_vocab::FailurePolicy>(d)
    }
}

/// What a limiter does with a call whose key resolver found no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum EmptyKeyPolicy {
    /// Refuse the call (default, like Spring Cloud Gateway's `denyEmptyKey`).
    #[default]
    Deny,
    /// Admit the call without a check.
    Allow,
}
