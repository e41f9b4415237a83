//! The sliding log (seed 003's sorted set): exact, one entry per admitted token. The Rust
//! twin of `scripts/sliding_log.lua`, whose header gives the representation.
//!
//! Never more than `limit` tokens in any sliding period, at a memory cost bounded by `limit`
//! entries per key. `retry_after` is when the oldest tokens the call needs gone have left.
//!
//! A changed `limit` reads the log as it is. A changed period does not quite: the key expires
//! one old period after its newest token, so a longer period may find it gone (Redis dropped
//! it) where this twin, which keeps what it is given, still counts its tokens.

use crate::{Outcome, WindowParams};

/// The script's `ARGV` for a call of `cost` tokens.
pub fn args(p: WindowParams, cost: u64) -> [u64; 3] {
    [p.limit, p.period_us, cost]
}

/// The window and the cost that `sliding_log.lua` reads from `args`, its arguments as a Redis
/// module receives them: the inverse of [`args`], `None` for arguments that no valid limit
/// sends (as [`fixed_window::from_args`](crate::fixed_window::from_args): the same
/// arguments).
#[must_use]
pub fn from_args(args: &[u64]) -> Option<(WindowParams, u64)> {
    WindowParams::from_args(args)
}

/// The admission times of the tokens a key holds, in microseconds, oldest first (the sorted
/// set's scores; its members only keep equal times apart).
pub type Log = Vec<u64>;

/// The key's expiry in milliseconds: when its newest token leaves.
pub fn expire_ms(log: &[u64], p: WindowParams) -> Option<u64> {
    log.last().map(|&t| (t + p.period_us).div_ceil(1000))
}

/// Decides a call of `cost` tokens at `now_us` on `log` (empty: absent). The caller
/// guarantees `1 <= cost <= limit`.
pub fn decide(now_us: u64, log: &[u64], p: WindowParams, cost: u64) -> Outcome<Log> {
    let limit = p.limit;
    // A token admitted at t counts while now - period < t.
    let first_live = log.partition_point(|&t| t.saturating_add(p.period_us) <= now_us);
    let live = &log[first_live..];
    let count = live.len() as u64;
    if count + cost > limit {
        // Caller's guarantee: `cost <= limit`, so that token is in the log.
        let nth = usize::try_from(count + cost - limit - 1).unwrap_or(usize::MAX);
        let leaves = live
            .get(nth)
            .map_or(now_us, |&t| t.saturating_add(p.period_us));
        let newest = live
            .last()
            .map_or(now_us, |&t| t.saturating_add(p.period_us));
        return Outcome {
            allowed: false,
            remaining: limit.saturating_sub(count),
            retry_after_us: leaves - now_us,
            reset_after_us: newest - now_us,
            new_state: None,
        };
    }
    let mut next = live.to_vec();
    // Sorted even when the clock stepped back behind the newest token.
    let at = next.partition_point(|&t| t <= now_us);
    next.splice(
        at..at,
        std::iter::repeat_n(now_us, usize::try_from(cost).unwrap_or(0)),
    );
    let newest = next.last().copied().unwrap_or(now_us);
    Outcome {
        allowed: true,
        remaining: limit - count - cost,
        retry_after_us: 0,
        reset_after_us: newest + p.period_us - now_us,
        new_state: Some(next),
    }
}

/// What giving back `cost` tokens that a call took at `reserved_at` (µs) leaves of `log`, as
/// `call.lua`'s give-back does: up to `cost` entries of that instant go (any are its tokens;
/// a later call never admits at an earlier instant's score). The key's expiry is kept.
#[must_use]
pub fn give_back(log: &[u64], cost: u64, reserved_at: u64) -> Log {
    let mut left = cost;
    log.iter()
        .copied()
        .filter(|&t| {
            let theirs = t == reserved_at && left > 0;
            left -= u64::from(theirs);
            !theirs
        })
        .collect()
}

/// Takes `extra` more tokens from `log` at `now_us`/// Takes `extra` more tokens from `log` at `now_us`, whatever it holds: a call that took an
/// estimate settles a larger actual cost (issue 36). The log may hold more live tokens than
/// its limit, into debt, by at most `max_debt` (what it takes beyond that is not taken); the
/// calls after it are refused until enough have left, which their `retry_after` says. The
/// tokens are added as [`decide`] adds an admitted call's (`call.lua`'s mode 5 runs
/// `sliding_log.lua` for them with a limit of what the log may then hold). The new log
/// (`None`: nothing taken, nothing written) and the tokens taken.
#[must_use]
pub fn take_over(
    now_us: u64,
    log: &[u64],
    p: WindowParams,
    extra: u64,
    max_debt: u64,
) -> (Option<Log>, u64) {
    let first_live = log.partition_point(|&t| t.saturating_add(p.period_us) <= now_us);
    let live = (log.len() - first_live) as u64;
    let taken = extra.min(p.limit.saturating_add(max_debt).saturating_sub(live));
    let Some(room) = (taken > 0)
        .then(|| WindowParams::try_new(live + taken, p.period_us))
        .flatten()
    else {
        return (None, 0);
    };
    (decide(now_us, log, room, taken).new_state, taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{T0, replay};
    use proptest::prelude::*;

    #[test]
    fn tokens_leave_one_period_after_their_admission() {
        let p = WindowParams::try_new(3, 1_000_000).unwrap();
        let a = decide(T0, &[], p, 2);
        assert_eq!(
            (a.allowed, a.remaining, a.reset_after_us),
            (true, 1, 1_000_000)
        );
        let log = a.new_state.unwrap();
        assert_eq!(log, [T0, T0]);
        let b = decide(T0 + 400_000, &log, p, 1);
        let log = b.new_state.unwrap();
        assert_eq!(expire_ms(&log, p), Some((T0 + 1_400_000) / 1000));
        // Full: a call of 2 needs both tokens of T0 gone, one of 1 the first.
        let r2 = decide(T0 + 500_000, &log, p, 2);
        assert_eq!(
            (r2.allowed, r2.remaining, r2.retry_after_us),
            (false, 0, 500_000)
        );
        assert_eq!(r2.reset_after_us, 900_000);
        let r3 = decide(T0 + 500_000, &log, p, 3);
        assert_eq!(
            r3.retry_after_us, 900_000,
            "the token of T0 + 0.4 s must go too"
        );
        assert!(!decide(T0 + 999_999, &log, p, 1).allowed);
        let back = decide(T0 + 1_000_000, &log, p, 2);
        assert_eq!(
            (back.allowed, back.new_state),
            (
                true,
                Some(vec![T0 + 400_000, T0 + 1_000_000, T0 + 1_000_000])
            )
        );
    }

    proptest! {
        /// No sliding period ever holds more than the limit, and the log never more entries;
        /// retry_after is exact (see `replay`).
        #[test]
        fn never_over_admits_and_retry_after_is_exact(
            limit in 1u64..30,
            period_ms in 1u64..3000,
            calls in prop::collection::vec((0u64..1_000_000, 1u64..6), 1..150),
        ) {
            let p = WindowParams::try_new(limit, period_ms * 1000).unwrap();
            let calls: Vec<_> = calls.into_iter().map(|(dt, c)| (dt, c.min(limit))).collect();
            let admitted = replay(None, &calls, |now, s: Option<&Log>, cost| {
                let o = decide(now, s.map_or(&[][..], Vec::as_slice), p, cost);
                assert!(o.new_state.as_ref().is_none_or(|l| l.len() as u64 <= limit));
                o
            })?;
            for &(now, _) in &admitted {
                let within: u64 = admitted.iter().filter(|a| a.0 <= now && a.0 + p.period_us() > now).map(|a| a.1).sum();
                prop_assert!(within <= limit);
            }
        }
    }

    proptest! {
        /// A settlement's overdraft: it takes what the limit and the debt leave room for, never
        /// more, adds it now (sorted, nothing live lost), and the next call is refused until
        /// enough have left; a give-back removes at most its cost, of its instant only.
        #[test]
        fn an_overdraft_stays_within_the_debt_and_a_give_back_within_its_instant(
            limit in 1u64..20,
            period_ms in 1u64..2000,
            offsets in prop::collection::vec(0u64..2_000_000, 0..40),
            extra in 0u64..40,
            debt in 0u64..20,
            back in 0u64..10,
        ) {
            let p = WindowParams::try_new(limit, period_ms * 1000).unwrap();
            let mut log: Log = offsets.iter().map(|o| T0 - o % p.period_us()).collect();
            log.sort_unstable();
            let live = |l: &[u64]| l.iter().filter(|&&t| t + p.period_us() > T0).count() as u64;
            let before = live(&log);
            let (after, taken) = take_over(T0, &log, p, extra, debt);
            prop_assert!(taken <= extra);
            prop_assert_eq!(taken, extra.min((limit + debt).saturating_sub(before)));
            match &after {
                Some(after) => {
                    prop_assert_eq!(live(after), before + taken);
                    prop_assert!(after.windows(2).all(|w| w[0] <= w[1]));
                    prop_assert_eq!(after.iter().filter(|&&t| t == T0).count() as u64,
                        log.iter().filter(|&&t| t == T0).count() as u64 + taken);
                    prop_assert!(!decide(T0, after, p, 1).allowed || before + taken < limit);
                }
                None => prop_assert_eq!(taken, 0),
            }
            let given = give_back(&log, back, T0 - 1000);
            let at = |l: &[u64]| l.iter().filter(|&&t| t == T0 - 1000).count() as u64;
            prop_assert_eq!(at(&given), at(&log).saturating_sub(back));
            prop_assert_eq!(given.len() as u64 + at(&log).min(back), log.len() as u64);
        }
    }

    proptest! {
        /// From any log (more tokens than a lowered limit, tokens in the future after the
        /// clock stepped back), every refusal's retry_after is exact.
        #[test]
        fn retry_after_is_exact_from_any_log(
            limit in 1u64..20,
            period_ms in 1u64..2000,
            offsets in prop::collection::vec(0u64..4_000_000, 0..60),
            calls in prop::collection::vec((0u64..1_000_000, 1u64..5), 1..60),
        ) {
            let p = WindowParams::try_new(limit, period_ms * 1000).unwrap();
            // Up to two periods back and two ahead of the first call.
            let span = 4 * p.period_us();
            let mut log: Log = offsets.iter().map(|o| T0 - span / 2 + o % span).collect();
            log.sort_unstable();
            let calls: Vec<_> = calls.into_iter().map(|(dt, c)| (dt, c.min(limit))).collect();
            replay(Some(log), &calls, |now, s: Option<&Log>, cost| {
                decide(now, s.map_or(&[][..], Vec::as_slice), p, cost)
            })?;
        }
    }
}
