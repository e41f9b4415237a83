//! Every valid limit's script arguments, as the limiter sends them, read back by
//! `ratelimit-algorithms`' `from_args` as its parameters and cost: what a Redis module that
//! decides natively receives.

use std::time::Duration;

use proptest::prelude::*;
use ratelimit_algorithms::Cost;
use ratelimit_vocab::limits::{MAX_LEASE_US, MAX_WAIT_US, MIN_LEASE_US};

use crate::algorithm::{
    Kernel, concurrency, fixed_window, interval_bucket, sliding_log, sliding_window, token_bucket,
};
use crate::limit::Algorithm;
use crate::limit::Limit;
use crate::limit::MAX_CONCURRENT;
use crate::limit::Refill;
use crate::limit::Unit;

/// Any limit that can be built: every algorithm and refill, a unit's period or another, an
/// initial fill, a wait, and concurrency limits.
fn any_limit() -> impl Strategy<Value = Limit> {
    let rate = (
        prop_oneof![3 => 1u32..100, 1 => 1u32..=u32::MAX],
        prop_oneof![3 => 1u32..100, 1 => 1u32..=u32::MAX],
        prop_oneof![
            (0usize..4).prop_map(|u| Unit::ALL[u].as_micros()),
            1u64..(1 << 40),
        ],
        (0..Algorithm::ALL.len(), 0..Refill::ALL.len()),
        prop::option::of(any::<u32>()),
        prop::option::of(prop_oneof![0u64..10_000_000, 0u64..=MAX_WAIT_US]),
    )
        .prop_filter_map(
            "a valid limit",
            |(replenish, burst, period_us, (a, r), initial, wait_us)| {
                let (algorithm, refill) = (Algorithm::ALL[a], Refill::ALL[r]);
                let token_bucket = matches!(algorithm, Algorithm::TokenBucket);
                let window = !token_bucket && !matches!(algorithm, Algorithm::LeakyBucket);
                let burst = if window { replenish } else { burst };
                let initial = initial
                    .filter(|_| token_bucket)
                    .map(|i| i % (burst + 1).max(1));
                let period = Duration::from_micros(period_us);
                let limit =
                    Limit::from_parts(replenish, burst, period, algorithm, refill, initial).ok()?;
                Some(match wait_us {
                    Some(w) => limit.try_wait(Duration::from_micros(w)).unwrap_or(limit),
                    None => limit,
                })
            },
        );
    let concurrent = (
        1..=MAX_CONCURRENT,
        MIN_LEASE_US..=MAX_LEASE_US,
        prop::option::of(0u64..10_000_000),
    )
        .prop_map(|(max, lease_us, wait_us)| {
            let limit = Limit::concurrent(max).lease(Duration::from_micros(lease_us));
            match wait_us {
                Some(w) => limit.wait(Duration::from_micros(w)),
                None => limit,
            }
        });
    prop_oneof![4 => rate, 1 => concurrent]
}

/// What the limiter sends, as a module reads the buckets' arguments (signed).
fn signed(args: &[u64]) -> Vec<i64> {
    args.iter().map(|&a| i64::try_from(a).unwrap()).collect()
}

/// `kernel`'s arguments for a call of `cost` read back: `Some` with the parameters and cost
/// `from_args` reads, which must be the kernel's own; for a bucket, also with the cost given
/// back, as `call.lua`'s mode 3 sends it.
fn read_back(kernel: Kernel, cost: u64) -> Result<(), TestCaseError> {
    let args = kernel.script_args(cost);
    let args = args.as_slice();
    match kernel {
        Kernel::Bucket(p) => {
            let mut args = signed(args);
            prop_assert_eq!(token_bucket::from_args(&args), Some((p, Cost::Take(cost))));
            let long = signed(&token_bucket::args(p, cost));
            prop_assert_eq!(token_bucket::from_args(&long), Some((p, Cost::Take(cost))));
            if cost > 0 {
                args[3] = -args[3];
                prop_assert_eq!(
                    token_bucket::from_args(&args),
                    Some((p, Cost::GiveBack(cost)))
                );
            }
        }
        Kernel::Interval(p) => {
            let mut args = signed(args);
            prop_assert_eq!(
                interval_bucket::from_args(&args),
                Some((p, Cost::Take(cost)))
            );
            if cost > 0 {
                args[4] = -args[4];
                let back = interval_bucket::from_args(&args);
                prop_assert_eq!(back, Some((p, Cost::GiveBack(cost))));
            }
        }
        Kernel::Fixed(p, c) => {
            prop_assert_eq!(fixed_window::from_any_args(args), Some((p, c, cost)));
        }
        Kernel::Sliding(p) => prop_assert_eq!(sliding_window::from_args(args), Some((p, cost))),
        Kernel::Log(p) => prop_assert_eq!(sliding_log::from_args(args), Some((p, cost))),
        Kernel::Concurrency(p) => prop_assert_eq!(concurrency::from_args(args), Some((p, cost))),
    }
    Ok(())
}

proptest! {
    /// Every limit's arguments for every cost it accepts, and for a peek's cost of 0, read
    /// back as its parameters and cost: the token bucket's four that the limiter sends when
    /// the rest are the script's defaults, and all eight.
    #[test]
    fn every_limits_arguments_read_back(
        limit in any_limit(),
        cost in any::<u32>(),
        holder in any::<u64>(),
    ) {
        let cost = cost % limit.burst_capacity() + 1;
        prop_assert!(limit.check_cost(cost).is_ok());
        let kernel = Kernel::held_by(&limit, holder);
        read_back(kernel, u64::from(cost))?;
        read_back(kernel, 0)?;
    }
}

#[test]
fn a_plain_token_bucket_sends_four_arguments_and_they_read_back() {
    let limit = Limit::per_second(3);
    let kernel = Kernel::of(&limit);
    assert_eq!(
        kernel.script_args(1).as_slice(),
        [1_000_000, 3, 3_000_000, 1]
    );
    read_back(kernel, 1).unwrap();
    // A wait sends all eight.
    let waits = Kernel::of(&limit.wait(Duration::from_secs(1)));
    assert_eq!(waits.script_args(1).as_slice().len(), 8);
    read_back(waits, 1).unwrap();
}
