//! The kinds of state the scripts keep, one per algorithm script: the one list of their ids
//! and names, by which a call's spec names its script to `multi.lua` and `batch.lua`, the
//! library of Redis functions names its functions, and the tools read a key.

/// Which script's state a key holds: the algorithms, with the token bucket's two refills
/// apart (their states differ) and the leaky bucket with the token bucket (they share one).
/// A limit's kind, or a stored state's guessed one, comes from `ratelimit_core`'s
/// `tools::StateKindExt`.
///
/// ```
/// use ratelimit_algorithms::StateKind;
///
/// assert_eq!(StateKind::SlidingWindow.name(), "sliding_window");
/// // The id a call's spec names the script by (`multi.lua`, `batch.lua`).
/// assert_eq!(StateKind::SlidingWindow.id(), 4);
/// assert_eq!(StateKind::from_id(4), Some(StateKind::SlidingWindow));
/// // In shadow mode a spec adds 8 to the id: no kind's.
/// assert_eq!(StateKind::from_id(4 + 8), None);
/// assert!(StateKind::ALL.iter().enumerate().all(|(i, k)| k.index() == i));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum StateKind {
    /// GCRA: the token bucket refilled smoothly, and the leaky bucket.
    TokenBucket = 1,
    /// The token bucket refilled at once each period.
    IntervalBucket = 2,
    /// The fixed window.
    FixedWindow = 3,
    /// The sliding window.
    SlidingWindow = 4,
    /// The sliding log.
    SlidingLog = 5,
    /// A concurrency limit's slots (`Limit::concurrent`).
    Concurrency = 6,
}

impl StateKind {
    /// Every kind, in the order of its id.
    pub const ALL: [StateKind; 6] = [
        StateKind::TokenBucket,
        StateKind::IntervalBucket,
        StateKind::FixedWindow,
        StateKind::SlidingWindow,
        StateKind::SlidingLog,
        StateKind::Concurrency,
    ];

    /// Its name in `snake_case`: `token_bucket`, `interval_bucket`, `fixed_window`,
    /// `sliding_window`, `sliding_log`, `concurrency`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            StateKind::TokenBucket => "token_bucket",
            StateKind::IntervalBucket => "interval_bucket",
            StateKind::FixedWindow => "fixed_window",
            StateKind::SlidingWindow => "sliding_window",
            StateKind::SlidingLog => "sliding_log",
            StateKind::Concurrency => "concurrency",
        }
    }

    /// The number a call's spec names this kind's script by.
    #[must_use]
    pub const fn id(self) -> u8 {
        self as u8
    }

    /// The kind a spec names by `id` (without the shadow mode's 8, which `multi.lua` takes
    /// off first); `None` for a number that names no kind.
    #[must_use]
    pub const fn from_id(id: u8) -> Option<StateKind> {
        match (id as usize).checked_sub(1) {
            Some(i) if i < StateKind::ALL.len() => Some(StateKind::ALL[i]),
            _ => None,
        }
    }

    /// Its place in [`ALL`](StateKind::ALL).
    #[must_use]
    pub const fn index(self) -> usize {
        self as usize - 1
    }
}

// The ids count from 1 in the order of `ALL`, which indexes by them.
const _: () = {
    let mut i = 0;
    while i < StateKind::ALL.len() {
        assert!(StateKind::ALL[i] as usize == i + 1);
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::StateKind;

    #[test]
    fn every_kind_is_found_by_its_id_and_no_other_number_names_one() {
        for kind in StateKind::ALL {
            assert_eq!(StateKind::from_id(kind.id()), Some(kind));
        }
        let named = (0..=u8::MAX).filter(|&id| StateKind::from_id(id).is_some());
        assert_eq!(named.count(), StateKind::ALL.len());
    }
}
