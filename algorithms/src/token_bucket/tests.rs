//! The token bucket's own paths held to each other. Its decisions under limits (which need
//! `ratelimit-core`'s `Limit`) are tested in `ratelimit-core/src/algorithm/tests/`.

use super::*;
use proptest::prelude::*;
use ratelimit_vocab::limits;

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
