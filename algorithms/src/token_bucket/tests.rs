//! The token bucket's own paths held to each other, and its arguments read back. Its decisions under limits (which need
//! `ratelimit-core`'s `Limit`) are tested in `ratelimit-core/src/algorithm/tests/`.

use super::*;
use proptest::prelude::*;

/// A second, a minute, an hour and a day, in microseconds (`Unit::ALL`'s periods).
const UNITS: [u64; 4] = [1_000_000, 60_000_000, 3_600_000_000, 86_400_000_000];

/// The parameters of `replenish` per `period_us` with `burst`, refilled smoothly, with no
/// wait and no initial fill (what `Params::of` gives such a `Limit`); `None` for a limit
/// that does not exist.
fn smooth(replenish: u32, burst: u32, period_us: u64) -> Option<Params> {
    if replenish == 0 || burst == 0 || !limits::bucket_is_exact(replenish, burst, period_us) {
        return None;
    }
    let (interval, per_micro) = limits::fine(replenish, period_us);
    let tau = interval * u64::from(burst);
    Some(Params {
        interval,
        per_micro,
        tau,
        absent: 0,
        forgotten: 0,
        reach: 0,
        hold: limits::hold_for(tau.into(), per_micro.into()),
        queue: false,
    })
}

proptest! {
    /// The `u64` path gives the reference's answer whenever it answers, and answers for
    /// every valid limit at the times a clock gives (below 2^62 µs) with the states it
    /// stores.
    #[test]
    fn narrow_equals_wide(
        replenish in prop_oneof![1u32..1000, 1u32..=u32::MAX],
        burst in prop_oneof![1u32..1000, 1u32..=u32::MAX],
        unit in 0usize..4,
        // Whole milliseconds too, where the expiry's rounding up shows.
        now in prop_oneof![0u64..(1 << 62), (0u64..(1 << 50)).prop_map(|ms| ms * 1000)],
        state in prop::option::of((-(1i64 << 40)..(1i64 << 40), 0u64..(1 << 52))),
        near in prop::option::of((0u64..(1 << 40), 0u64..(1 << 40))),
        cost in 1u64..=u64::from(u32::MAX),
    ) {
        let Some(p) = smooth(replenish, burst, UNITS[unit]) else {
            return Ok(());
        };
        let cost = cost.min(u64::from(burst));
        // Arbitrary states, and states a little after `now` (what a store holds).
        let arbitrary = state.map(|(offset_us, remainder)| State {
            expire_ms: now.saturating_add_signed(offset_us) / 1000,
            remainder,
            per_micro: if remainder % 3 == 0 { p.per_micro } else { 1 + remainder % 7 },
            interval: if remainder % 5 == 0 { p.interval } else { 1 + remainder % 1_000_003 },
        });
        // A stored bucket is full again within `tau`, plus the expiry's rounding.
        let refill_us = p.tau.div_ceil(p.per_micro) + 1000;
        let stored = near.map(|(ahead, remainder)| State {
            expire_ms: (now + ahead % refill_us) / 1000 + 1,
            remainder: remainder % (1000 * p.per_micro),
            per_micro: p.per_micro,
            interval: p.interval,
        });
        for state in [None, arbitrary, stored] {
            let wide = decide_wide(now, state, p, cost);
            match decide_narrow(now, state, p, cost) {
                Some(narrow) => prop_assert_eq!(narrow, wide),
                None => prop_assert!(
                    state == arbitrary && state.is_some(),
                    "only a far-off arbitrary state may need the wide path"
                ),
            }
        }
    }
}

/// Parameters `from_args` reads: any exact bucket, with any initial fill, reach, hold and
/// queue within the bounds a limit keeps (a leaky bucket is one token whose queue is in
/// `hold`).
fn any_params() -> impl Strategy<Value = Params> {
    (
        prop_oneof![1u64..1000, 1u64..(1 << 40)],
        prop_oneof![1u64..4, 1u64..(1 << 30)],
        prop_oneof![1u64..100, 1u64..(1 << 32)],
        any::<bool>(),
        any::<(u64, u64, u64)>(),
    )
        .prop_filter_map(
            "an exact bucket",
            |(interval, per_micro, burst, queue, r)| {
                let tau = if queue {
                    interval
                } else {
                    interval.checked_mul(burst)?
                };
                let queued = if queue {
                    interval.checked_mul(burst)?
                } else {
                    0
                };
                let used = 2 * u128::from(tau.max(queued)) + 2048 * u128::from(per_micro);
                if used > u128::from(limits::MAX_EXACT) {
                    return None;
                }
                let hold = limits::hold_for(tau.into(), per_micro.into()).max(queued);
                let hold = hold.max(r.0 % (limits::MAX_EXACT + 1));
                let absent = if queue { 0 } else { r.1 % (tau + 1) };
                Some(Params {
                    interval,
                    per_micro,
                    tau,
                    absent,
                    forgotten: absent,
                    reach: r.2 % (hold + 1),
                    hold,
                    queue,
                })
            },
        )
}

/// `args` as the signed integers a module reads.
fn signed(args: &[u64]) -> Vec<i64> {
    args.iter().map(|&a| i64::try_from(a).unwrap()).collect()
}

proptest! {
    /// Every call's arguments read back as its parameters and cost, in full and, with the
    /// rest at their defaults, as the four the limiter then sends; a cost given back reads as
    /// one.
    #[test]
    fn args_read_back(p in any_params(), cost in any::<u64>()) {
        let most = if p.queue { p.hold } else { p.tau } / p.interval;
        let cost = cost % (most + 1);
        let mut args = signed(&args(p, cost));
        prop_assert_eq!(from_args(&args), Some((p, Cost::Take(cost))));
        let defaults = p.absent == 0
            && p.reach == 0
            && !p.queue
            && p.hold == limits::hold_for(p.tau.into(), p.per_micro.into());
        if defaults {
            prop_assert_eq!(from_args(&args[..4]), Some((p, Cost::Take(cost))));
        }
        if cost > 0 {
            args[3] = -args[3];
            prop_assert_eq!(from_args(&args), Some((p, Cost::GiveBack(cost))));
        }
    }

    /// Arguments 5 to 8 left out read as `gcra.lua` reads them: `absent` and `reach` 0, `hold`
    /// as `hold_for` computes it, no queue.
    #[test]
    fn absent_arguments_take_the_scripts_defaults(p in any_params(), sent in 4usize..8) {
        let args = signed(&args(p, 1));
        let default_hold = limits::hold_for(p.tau.into(), p.per_micro.into());
        if sent == 6 && p.reach > default_hold {
            // No limit reaches beyond its hold.
            prop_assert_eq!(from_args(&args[..sent]), None);
            return Ok(());
        }
        let (read, _) = from_args(&args[..sent]).unwrap();
        prop_assert_eq!(read.absent, if sent > 4 { p.absent } else { 0 });
        prop_assert_eq!(read.forgotten, read.absent);
        prop_assert_eq!(read.reach, if sent > 5 { p.reach } else { 0 });
        prop_assert_eq!(read.hold, if sent > 6 { p.hold } else { default_hold });
        prop_assert!(!read.queue);
    }
}

#[test]
fn arguments_no_limit_sends_are_refused() {
    // 3 per second, burst 3: 1/3 µs fine units.
    let valid = [1_000_000, 3, 3_000_000, 1, 0, 0, 1_000, 0];
    assert!(from_args(&valid).is_some());
    let with = |i: usize, v: i64| {
        let mut args = valid;
        args[i] = v;
        from_args(&args)
    };
    assert_eq!(from_args(&valid[..3]), None, "three arguments");
    assert_eq!(
        from_args(&[1_000_000, 3, 3_000_000, 1, 0, 0, 1_000, 0, 0]),
        None
    );
    assert_eq!(with(0, 0), None, "no interval");
    assert_eq!(with(1, 0), None, "no fine unit");
    assert_eq!(with(2, 999_999), None, "less than a token");
    assert_eq!(with(0, -1_000_000), None, "a negative interval");
    assert_eq!(with(2, 1 << 50), None, "beyond exact arithmetic");
    assert_eq!(with(3, 4), None, "more than the burst");
    assert_eq!(with(3, -4), None, "more than the burst given back");
    assert_eq!(with(4, 3_000_001), None, "an absent bucket beyond empty");
    assert_eq!(with(5, 1_001), None, "a reach beyond the hold");
    assert_eq!(
        with(6, (1 << 51) + 1),
        None,
        "a hold beyond exact arithmetic"
    );
    assert_eq!(with(7, 2), None, "queue is 0 or 1");
    assert_eq!(with(7, 1).map(|(p, _)| p.queue), Some(true));
    assert_eq!(with(3, i64::MIN), None);
}

proptest! {
    /// A settlement's overdraft (issue 36): whatever the bucket held, `take_over` takes at most
    /// what was asked and never leaves the bucket owing more than a full bucket plus the
    /// debt allowed (and `hold`); the tokens it takes are owed exactly; the call after it is
    /// refused until its `retry_after`, which comes true; and an estimate taken then settled
    /// lower by giving the difference back leaves what taking the actual cost would have.
    #[test]
    fn an_overdraft_is_bounded_owed_exactly_and_waited_out(
        replenish in 1u32..1000,
        burst in 1u32..500,
        unit in 0usize..4,
        before in 0u64..600,
        extra in 0u64..2000,
        max_debt in 0u64..1000,
        estimate in 1u64..500,
        actual in 0u64..500,
    ) {
        let Some(p) = smooth(replenish, burst, UNITS[unit]) else {
            return Ok(());
        };
        let now = 1_800_000_000_000_000;
        // A bucket after `before` calls at `now`, each taking what it could.
        let mut state = None;
        for _ in 0..before {
            if let Some(s) = decide(now, state, p, 1).new_state {
                state = Some(s);
            }
        }
        let owed = |s: Option<State>| s.map_or(0, |s| s.owed_at(u128::from(now)));
        let (after, taken) = take_over(now, state, p, extra, max_debt);
        prop_assert!(taken <= extra);
        let bound = u128::from(p.tau)
            + (u128::from(max_debt) * u128::from(p.interval)).min(u128::from(p.hold));
        prop_assert!(owed(Some(after)) <= bound.max(owed(state)));
        prop_assert_eq!(
            owed(Some(after)),
            owed(state) + u128::from(taken) * u128::from(p.interval)
        );
        // All of `extra` was taken, or the bound is less than a token away.
        prop_assert!(
            taken == extra
                || bound.saturating_sub(owed(Some(after))) < u128::from(p.interval)
        );
        let next = decide(now, Some(after), p, 1);
        if !next.allowed {
            let later = now + next.retry_after_us;
            prop_assert!(decide(later, Some(after), p, 1).allowed);
            prop_assert!(!decide(later - 1, Some(after), p, 1).allowed);
        }
        // An estimate, settled lower: the difference comes back, no more.
        let estimate = estimate.min(u64::from(burst));
        let actual = actual.min(estimate);
        let (took, _) = take_over(now, None, p, estimate, 0);
        let settled = give_back(now, Some(took), p, estimate - actual);
        let direct = take_over(now, None, p, actual, 0).0;
        prop_assert_eq!(owed(settled), owed(Some(direct)).min(owed(Some(took))));
    }
}

proptest! {
    /// The memory store's path in whole microseconds gives `decide`'s answer on the state its
    /// instant stands for, and keeps the instant of the state `decide` writes; it answers for
    /// every bucket a store holds at a clock's times.
    #[test]
    fn whole_microseconds_equal_decide(
        p in any_params().prop_filter("whole microseconds", |p| p.per_micro == 1),
        now in prop_oneof![0u64..(1 << 62), (0u64..(1 << 50)).prop_map(|ms| ms * 1000)],
        ahead in prop_oneof![0u64..4_000, 0u64..(1 << 53)],
        behind in any::<bool>(),
        cost in 1u64..=u64::from(u32::MAX),
    ) {
        let cost = cost.min((p.tau / p.interval).max(1));
        let tat = if behind { now.saturating_sub(ahead) } else { now + ahead };
        let expire_ms = tat.div_ceil(1000);
        let state = State {
            expire_ms,
            remainder: expire_ms * 1000 - tat,
            per_micro: 1,
            interval: p.interval,
        };
        let reference = decide(now, Some(state), p, cost);
        let whole = decide_whole(now, tat, p, cost);
        prop_assert!(whole.is_some(), "a stored bucket at a clock's time is answered");
        let whole = whole.unwrap_or_else(|| unreachable!());
        let kept = |s: State| s.expire_ms * 1000 - s.remainder;
        prop_assert_eq!(
            (whole.allowed, whole.remaining, whole.retry_after_us, whole.reset_after_us),
            (reference.allowed, reference.remaining, reference.retry_after_us, reference.reset_after_us)
        );
        prop_assert_eq!(whole.new_state, reference.new_state.map(kept));
        if let Some(s) = reference.new_state {
            prop_assert_eq!((s.per_micro, s.interval), (1, p.interval));
        }
    }
}

/// A bucket in fine units (a rate that does not divide its period) is not decided on its
/// instant: `decide_whole` leaves it to `decide`.
#[test]
fn fine_units_are_left_to_decide() {
    let p = smooth(3, 10, UNITS[0]).expect("3 a second");
    assert_eq!(p.per_micro, 3);
    assert_eq!(decide_whole(1_000_000, 1_200_000, p, 1), None);
    let whole = smooth(2, 10, UNITS[0]).expect("2 a second");
    assert!(decide_whole(1_000_000, 1_200_000, whole, 1).is_some());
}
