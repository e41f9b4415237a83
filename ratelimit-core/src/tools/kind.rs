//! Which algorithm's state a key holds: a [`Limit`]'s, or guessed from the state's shape.
//! [`StateKind`] is `ratelimit-algorithms`'; this crate's [`Limit`] and [`Stored`] give it
//! these methods by a trait.

use super::state::{Stored, StoredValue};
use crate::algorithm::{Kernel, StateKind, fixed_window, sliding_window, token_bucket};
use crate::limit::Algorithm;
use crate::limit::Limit;
use crate::limit::Refill;

/// A limit's [`StateKind`], and a stored state's. Import it to write `StateKind::of(&limit)`.
///
/// ```
/// use ratelimit_core::tools::{StateKind, StateKindExt as _, Stored, StoredValue};
/// use ratelimit_core::{Algorithm, Limit, Refill};
///
/// let leaky = Limit::per_second(3).algorithm(Algorithm::LeakyBucket);
/// assert_eq!(StateKind::of(&leaky), StateKind::TokenBucket);
/// assert_eq!(
///     StateKind::from_parts(Algorithm::TokenBucket, Refill::Interval),
///     StateKind::IntervalBucket
/// );
/// assert_eq!(StateKind::SlidingWindow.name(), "sliding_window");
///
/// // `window:previous:current` can only be a sliding window's.
/// let stored = Stored::new(0, StoredValue::Text("3:1:2".to_owned()), Some(9_000));
/// assert_eq!(StateKind::guess(&stored), Some((StateKind::SlidingWindow, true)));
/// ```
pub trait StateKindExt: Sized {
    /// The state `algorithm` keeps with `refill` (a rate limit's: a concurrency limit's is
    /// [`StateKind::Concurrency`]).
    #[must_use]
    fn from_parts(algorithm: Algorithm, refill: Refill) -> Self;

    /// The state `limit`'s script reads and writes, as the limiter picks the script.
    #[must_use]
    fn of(limit: &Limit) -> Self;

    /// Which script most likely wrote `stored`, and whether that is certain; `None` for a
    /// value no script writes. The shape tells: a sorted set is a sliding log,
    /// `window:previous:current` a sliding window, a negative integer a token bucket. A
    /// positive integer is a token bucket's, a fixed window's count or an interval bucket's
    /// slack: a token bucket's expiry falls on any millisecond, the counters' on their
    /// window's boundary, which for periods of whole seconds is a whole second.
    #[must_use]
    fn guess(stored: &Stored) -> Option<(Self, bool)>;
}

impl StateKindExt for StateKind {
    fn from_parts(algorithm: Algorithm, refill: Refill) -> StateKind {
        crate::algorithm::of_parts(algorithm, refill)
    }

    fn of(limit: &Limit) -> StateKind {
        Kernel::of(limit).kind()
    }

    fn guess(stored: &Stored) -> Option<(StateKind, bool)> {
        let expire_ms = stored.expire_ms.unwrap_or(0);
        let gcra = |v: &str| token_bucket::State::decode(v, expire_ms).is_some();
        match &stored.value {
            StoredValue::Absent | StoredValue::Other(_) => None,
            // A concurrency limit's scores are when leases end, in the future; a sliding log's
            // are admission times, in the past.
            StoredValue::Scores(s) if s.iter().any(|&t| t > stored.now_us) => {
                Some((StateKind::Concurrency, false))
            }
            StoredValue::Count { highest, .. } if *highest > stored.now_us => {
                Some((StateKind::Concurrency, false))
            }
            StoredValue::Scores(_) | StoredValue::Count { .. } => {
                Some((StateKind::SlidingLog, true))
            }
            StoredValue::Text(v) if sliding_window::State::decode(v).is_some() => {
                Some((StateKind::SlidingWindow, true))
            }
            StoredValue::Text(v) if v.starts_with('-') => {
                gcra(v).then_some((StateKind::TokenBucket, true))
            }
            StoredValue::Text(v) if v == "0" => Some((StateKind::IntervalBucket, true)),
            StoredValue::Text(v) => {
                let on_a_second = expire_ms > 0 && expire_ms.is_multiple_of(1000);
                if gcra(v) && !on_a_second {
                    Some((StateKind::TokenBucket, false))
                } else if fixed_window::State::decode(v, expire_ms).is_some() {
                    Some((StateKind::FixedWindow, false))
                } else {
                    None
                }
            }
        }
    }
}
