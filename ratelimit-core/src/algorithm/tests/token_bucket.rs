//! The token bucket's decisions under limits: `ratelimit-algorithms`' arithmetic, through
//! the module [`tools::algorithms`](crate::tools::algorithms) makes public, with the
//! parameters of each [`Limit`].

use proptest::prelude::*;
use std::time::Duration;

use crate::algorithm::OfLimit as _;
use crate::algorithm::token_bucket::{Params, State, decide, give_back};
use crate::limit::Algorithm;
use crate::limit::Limit;

type Outcome = crate::algorithm::Outcome<State>;

fn run(limit: Limit, calls: &[(u64, u64)]) -> Vec<Outcome> {
    let mut state = None;
    calls
        .iter()
        .map(|&(now, cost)| {
            let o = decide(now, state, Params::of(&limit), cost);
            if let Some(s) = o.new_state {
                state = Some(s);
            }
            o
        })
        .collect()
}

const T0: u64 = 1_800_000_000_000_000;

#[test]
fn full_bucket_admits_exactly_burst() {
    let limit = Limit::per_second(3).burst(5);
    let outs = run(limit, &[(T0, 1); 6]);
    let allowed: Vec<bool> = outs.iter().map(|o| o.allowed).collect();
    assert_eq!(allowed, [true, true, true, true, true, false]);
    assert_eq!(outs[4].remaining, 0);
    // 5 tokens at 3/s: full again after 5/3 s, rounded up to the microsecond.
    assert_eq!(outs[4].reset_after_us, 1_666_667);
    // One token comes back after 1/3 s.
    assert_eq!(outs[5].retry_after_us, 333_334);
}

#[test]
fn waiting_exactly_retry_after_is_admitted() {
    let limit = Limit::per_second(7).burst(2);
    let p = Params::of(&limit);
    let mut state = None;
    let mut now = T0;
    for _ in 0..50 {
        let o = decide(now, state, p, 1);
        if o.allowed {
            state = o.new_state;
            continue;
        }
        let wait = o.retry_after_us;
        assert!(wait > 0);
        // A microsecond early is still denied; exactly on time is admitted.
        assert!(!decide(now + wait - 1, state, p, 1).allowed);
        now += wait;
    }
}

/// Runs `calls` (time, cost) under `limit` from `state`, keeping what is stored.
fn step(state: &mut Option<State>, now: u64, limit: Limit, cost: u64) -> Outcome {
    let o = decide(now, *state, Params::of(&limit), cost);
    if o.new_state.is_some() {
        *state = o.new_state;
    }
    o
}

#[test]
fn a_raised_quota_keeps_the_tokens_taken() {
    // 3 per minute, burst 5, drained; then the quota becomes 60 per minute, burst 5.
    let old = Limit::per_minute(3).burst(5);
    let mut state = None;
    for _ in 0..5 {
        assert!(step(&mut state, T0, old, 1).allowed);
    }
    // Still 5 tokens owed, now at one a second: not the 100 s the old rate needed.
    let new = Limit::per_minute(60).burst(5);
    let refused = step(&mut state, T0, new, 1);
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_us, 1_000_000, "one token at 1/s");
    assert_eq!(refused.reset_after_us, 5_000_000, "five tokens at 1/s");
    // Waiting exactly that is admitted, not refused again with the same answer.
    assert!(step(&mut state, T0 + 1_000_000, new, 1).allowed);
    assert!(!step(&mut state, T0 + 1_000_000, new, 1).allowed);
    // A larger burst keeps the 5 taken and offers the rest at once.
    let larger = Limit::per_minute(60);
    let mut state2 = None;
    for _ in 0..5 {
        assert!(step(&mut state2, T0, old, 1).allowed);
    }
    for i in 0..55 {
        assert!(
            step(&mut state2, T0, larger, 1).allowed,
            "call {i} of the 55 left"
        );
    }
    assert!(!step(&mut state2, T0, larger, 1).allowed);
}

#[test]
fn a_lowered_rate_keeps_the_tokens_taken() {
    // 100 per minute drained, then 5 per minute with the same burst: still 100 owed, at
    // 12 s each, where reading the old time-to-full (60 s) would give 95 back at once.
    let old = Limit::per_minute(100);
    let new = Limit::per_minute(5).burst(100);
    let mut state = None;
    for _ in 0..100 {
        assert!(step(&mut state, T0, old, 1).allowed);
    }
    let refused = step(&mut state, T0, new, 1);
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 0);
    assert_eq!(refused.retry_after_us, 12_000_000);
    assert_eq!(refused.reset_after_us, 1_200_000_000);
    assert!(!step(&mut state, T0 + 11_999_999, new, 1).allowed);
    assert!(step(&mut state, T0 + 12_000_000, new, 1).allowed);
    assert!(!step(&mut state, T0 + 12_000_000, new, 1).allowed);
}

#[test]
fn a_lowered_burst_keeps_its_retry_after() {
    // 1 per second, burst 10, drained; then the burst becomes 1. The 10 tokens taken stay
    // taken: the first refusal waits for all of them, then one a second.
    let old = Limit::per_second(1).burst(10);
    let mut state = None;
    for _ in 0..10 {
        assert!(step(&mut state, T0, old, 1).allowed);
    }
    let new = Limit::per_second(1).burst(1);
    let mut now = T0;
    for expected in [10_000_000, 1_000_000, 1_000_000, 1_000_000] {
        let refused = step(&mut state, now, new, 1);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_us, expected);
        now += refused.retry_after_us;
        assert!(
            !step(&mut state, now - 1, new, 1).allowed,
            "admitted before retry_after"
        );
        assert!(step(&mut state, now, new, 1).allowed, "waited retry_after");
    }
}

#[test]
fn a_clock_stepped_back_keeps_its_retry_after() {
    let limit = Limit::per_second(1).burst(1);
    // Back an hour: the bucket owes that hour too, and says so.
    let mut state = None;
    assert!(step(&mut state, T0, limit, 1).allowed);
    let back = T0 - 3_600_000_000;
    let refused = step(&mut state, back, limit, 1);
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_us, 3_601_000_000);
    assert!(!step(&mut state, back + 3_600_999_999, limit, 1).allowed);
    assert!(step(&mut state, back + 3_601_000_000, limit, 1).allowed);
    // Back more than a day: no reservation reaches that far, so it reads as empty.
    let mut state = None;
    assert!(step(&mut state, T0, limit, 1).allowed);
    let back = T0 - 2 * 86_400_000_000;
    let refused = step(&mut state, back, limit, 1);
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_us, 1_000_000);
    assert!(step(&mut state, back + 1_000_000, limit, 1).allowed);
}

#[test]
fn waiters_reserve_in_order_at_the_rate_never_early() {
    // 10 per second, burst 1, waits up to 1 s: the first goes at once, the next ten are
    // due 100 ms apart, the twelfth would wait 1.1 s and is refused, taking nothing.
    let limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(1));
    let mut state = None;
    for k in 0..11u64 {
        let o = step(&mut state, T0, limit, 1);
        assert!(o.allowed, "call {k}");
        assert_eq!(o.retry_after_us, k * 100_000, "call {k} waits its turn");
    }
    let refused = step(&mut state, T0, limit, 1);
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_us, 100_000);
    assert_eq!(refused.remaining, 0);
    // A call that does not wait sees every reservation: it is refused until they are due.
    let plain = Limit::per_second(10).burst(1);
    let o = step(&mut state, T0 + 500_000, plain, 1);
    assert_eq!(o.retry_after_us, 600_000);
    assert!(!step(&mut state, T0 + 1_099_999, plain, 1).allowed);
    assert!(step(&mut state, T0 + 1_100_000, plain, 1).allowed);
}

#[test]
fn a_new_rate_keeps_the_reservations() {
    // Ten calls reserved at 10 per second (1 s of tokens owed), then the rate doubles:
    // the ten tokens are still owed, at 50 ms each, so the next call waits 500 ms, not
    // nothing (which would let it go with the waiters of the old rate).
    let old = Limit::per_second(10).burst(1).wait(Duration::from_secs(2));
    let mut state = None;
    for _ in 0..10 {
        assert!(step(&mut state, T0, old, 1).allowed);
    }
    let new = Limit::per_second(20).burst(1).wait(Duration::from_secs(2));
    let o = step(&mut state, T0, new, 1);
    assert!(o.allowed);
    assert_eq!(o.retry_after_us, 500_000);
    // A waiting bucket's `remaining` counts tokens in the bucket, never the wait.
    assert_eq!(o.remaining, 0);
    let mut fresh = None;
    assert_eq!(
        step(&mut fresh, T0, old, 1).remaining,
        0,
        "burst 1, one taken"
    );
}

#[test]
fn a_leaky_bucket_lets_calls_out_at_the_rate_with_a_bounded_queue() {
    // 2 per second, a queue of 3: one leaves now, three wait 0.5, 1 and 1.5 s, the fifth
    // finds the queue full.
    let limit = Limit::per_second(2)
        .burst(3)
        .algorithm(Algorithm::LeakyBucket);
    let mut state = None;
    for (k, remaining) in [3u64, 2, 1, 0].into_iter().enumerate() {
        let o = step(&mut state, T0, limit, 1);
        assert!(o.allowed);
        assert_eq!(o.retry_after_us, k as u64 * 500_000);
        assert_eq!(o.remaining, remaining, "free places in the queue");
    }
    let full = step(&mut state, T0, limit, 1);
    assert!(!full.allowed);
    assert_eq!(full.retry_after_us, 500_000);
    // A shorter wait than the queue's bound refuses sooner.
    let short = limit.wait(Duration::from_millis(600));
    assert!(!step(&mut state, T0 + 400_000, short, 1).allowed);
    // Once the first has left, a place is free again, at the end of the queue.
    let o = step(&mut state, T0 + 500_000, limit, 1);
    assert!(o.allowed);
    assert_eq!(o.retry_after_us, 1_500_000);
}

#[test]
fn a_reservation_given_back_frees_its_place() {
    let limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(1));
    let mut state = None;
    for _ in 0..3 {
        assert!(step(&mut state, T0, limit, 1).allowed);
    }
    // The third (due at 200 ms) gives up: the next call takes its place.
    state = give_back(T0 + 10_000, state, Params::of(&limit), 1);
    let o = step(&mut state, T0 + 10_000, limit, 1);
    assert_eq!(o.retry_after_us, 190_000);
    // Given back entirely, a bucket is full (forgotten).
    let mut state = None;
    assert!(step(&mut state, T0, limit, 1).allowed);
    assert_eq!(give_back(T0, state, Params::of(&limit), 1), None);
}

#[test]
fn a_state_in_another_fine_unit_reads_no_fuller() {
    // 3 per second (d = 3) leaves a sub-microsecond remainder; 10 per second (d = 1)
    // must read the tokens it owes, not whole microseconds of credit.
    let old = Limit::per_second(3).burst(3);
    let mut state = None;
    for _ in 0..3 {
        assert!(step(&mut state, T0 + 7, old, 1).allowed);
    }
    let s = state.unwrap();
    assert_eq!((s.per_micro, s.interval), (3, 1_000_000));
    assert!(s.remainder > 0);
    // Owed: 3 tokens. Under 10 per second (burst 10) that is 300 ms, so 7 tokens remain.
    let new = Limit::per_second(10);
    for _ in 0..7 {
        assert!(step(&mut state, T0 + 7, new, 1).allowed);
    }
    let refused = step(&mut state, T0 + 7, new, 1);
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_us, 100_000);
    // A third of a token later, the fraction carries over, rounded towards empty by at
    // most a microsecond: 3 per second owes 1 token 333,333.3 µs after the first call.
    let mut state = None;
    assert!(step(&mut state, T0, old, 1).allowed);
    let one = Limit::per_second(1).burst(3);
    let half = step(&mut state, T0 + 1, one, 3);
    assert!(!half.allowed);
    // 1 token less 1 µs owed at 3/s is (333,333.3 - 1) / 333,333.3 of a token: at 1/s,
    // 999,997 µs, plus at most two fine units of rounding.
    assert!(
        (999_997..=999_999).contains(&half.retry_after_us),
        "{}",
        half.retry_after_us
    );
}

#[test]
fn shares_divide_rate_and_burst() {
    let p = Params::of(&Limit::per_second(10).burst(9));
    let s = p.shared(3, 1);
    assert_eq!(s.interval, 3 * p.interval);
    assert_eq!(s.tau / s.interval, 3);
    assert_eq!(s.absent, 0, "an absent bucket holds the whole share");
    assert_eq!(p.shared(1, 9), p);
    // 100 instances share a burst of 9: 0.09 tokens each, no token from nothing.
    let s = p.shared(100, 1);
    assert_eq!(s.tau, s.interval, "room for one call");
    assert_eq!(
        s.tau - s.absent,
        p.tau,
        "but an absent bucket holds 9/100 of a token"
    );
}

#[test]
fn shares_keep_the_initial_fill() {
    let empty = Params::of(&Limit::per_second(10).initial(0));
    for n in [1, 2, 7] {
        let s = empty.shared(n, 1);
        assert_eq!(
            s.absent, s.tau,
            "{n} instances: an absent share starts empty too"
        );
    }
    let three = Params::of(&Limit::per_second(10).initial(3)).shared(2, 1);
    // 3 of 10 tokens in all, so 1.5 of each instance's 5: 1.5 share intervals.
    assert_eq!(2 * (three.tau - three.absent), 3 * three.interval);
}

#[test]
fn an_initial_fill_starts_an_absent_bucket_below_full() {
    let limit = Limit::per_second(2).burst(10);
    let p = Params::of(&limit.initial(3));
    assert_eq!(p.absent, 7 * p.interval);
    assert_eq!(Params::of(&limit.initial(10)), Params::of(&limit));
    // Three calls pass at once, the fourth waits for a token (0.5 s); an empty start waits
    // for the first.
    let mut state = None;
    for remaining in [2, 1, 0] {
        let o = decide(0, state, p, 1);
        assert_eq!((o.allowed, o.remaining), (true, remaining));
        state = o.new_state;
    }
    let refused = decide(0, state, p, 1);
    assert_eq!((refused.allowed, refused.retry_after_us), (false, 500_000));
    let empty = decide(0, None, Params::of(&limit.initial(0)), 1);
    assert_eq!((empty.allowed, empty.retry_after_us), (false, 500_000));
    assert!(
        empty.new_state.is_some(),
        "stored, so that waiting 0.5 s is admitted"
    );
}

#[test]
fn params_are_exact_integers() {
    let p = Params::of(&Limit::per_second(3));
    assert_eq!((p.interval, p.per_micro, p.tau), (1_000_000, 3, 3_000_000));
    let p = Params::of(&Limit::per_minute(3).burst(300));
    assert_eq!((p.interval, p.per_micro), (20_000_000, 1));
    assert_eq!(p.tau, 300 * 20_000_000);
}

/// Limits with a whole and a fractional number of microseconds per token.
fn any_limit() -> impl Strategy<Value = Limit> {
    (1u32..2000, 1u32..50, 0usize..2)
        .prop_map(|(r, b, u)| Limit::try_new(r, b, crate::limit::Unit::ALL[u]).unwrap())
}

proptest! {
    /// After any change of limit, every refusal's `retry_after`, waited exactly, is
    /// admitted; and no call is admitted before the time already owed allows it (the
    /// bucket is never fuller than before the change, only never emptier than empty).
    #[test]
    fn every_change_of_limit_stays_honest(
        first in any_limit(),
        second in any_limit(),
        before in prop::collection::vec((0u64..500_000, 1u64..4), 1..40),
        switch_after in 0u64..3_000_000,
        cost in 1u64..4,
    ) {
        let mut state = None;
        let mut now = T0;
        for (dt, c) in before {
            now += dt;
            step(&mut state, now, first, c.min(u64::from(first.burst_capacity())));
        }
        now += switch_after;
        let p = Params::of(&second);
        let cost = cost.min(u64::from(second.burst_capacity()));
        // What is owed at the first call under the new limit: fine units of the old
        // limit, and the old interval, to count it in tokens.
        let first_call = now;
        let owed = state.map(|s| {
            let tat = i128::from(s.expire_ms) * 1000 * i128::from(s.per_micro)
                - i128::from(s.remainder);
            ((tat - i128::from(first_call) * i128::from(s.per_micro)).max(0), i128::from(s.interval))
        });
        let o = step(&mut state, now, second, cost);
        if !o.allowed {
            prop_assert!(o.retry_after_us > 0);
            now += o.retry_after_us;
            let again = step(&mut state, now, second, cost);
            prop_assert!(again.allowed, "waiting retry_after must be admitted");
        }
        if let Some((x_old, old_interval)) = owed {
            // The tokens taken stay taken: admitted at `now` only if the tokens owed (at
            // most a full bucket), less what refilled since at the new rate, leave room
            // for `cost`. Compared exactly, in new fine units times the old interval.
            let (tau, interval) = (i128::from(p.tau), i128::from(p.interval));
            let owed_new = (x_old * interval).min(tau * old_interval);
            let refilled = i128::from(now - first_call) * i128::from(p.per_micro) * old_interval;
            let room = (tau - i128::from(cost) * interval) * old_interval;
            prop_assert!(owed_new - refilled <= room, "admitted early: {} > {}", owed_new - refilled, room);
        }
    }
}

proptest! {
    /// Over any sequence of calls, admissions never exceed burst + rate x elapsed, the
    /// stored state always fits, and a refused call never changes the state.
    #[test]
    fn never_over_admits(
        replenish in 1u32..5000,
        burst in 1u32..500,
        unit in 0usize..4,
        steps in prop::collection::vec((0u64..2_000_000, 1u64..4), 1..200),
    ) {
        let limit = Limit::try_new(replenish, burst, crate::limit::Unit::ALL[unit]).unwrap();
        let p = Params::of(&limit);
        let mut state = None;
        let mut now = T0;
        let mut admitted: u128 = 0;
        for (dt, cost) in steps {
            now += dt;
            let cost = cost.min(u64::from(burst));
            let o = decide(now, state, p, cost);
            if o.allowed {
                admitted += u128::from(cost);
                let s = o.new_state.unwrap();
                prop_assert!(s.remainder < 1000 * p.per_micro);
                prop_assert!(s.expire_ms * 1000 > now);
                state = Some(s);
            } else {
                prop_assert!(o.new_state.is_none(), "under one limit a refusal writes nothing");
                prop_assert!(o.retry_after_us > 0);
            }
            let elapsed = u128::from(now - T0);
            let bound = u128::from(burst)
                + (elapsed * u128::from(replenish)).div_ceil(u128::from(limit.period_micros()));
            prop_assert!(admitted <= bound, "admitted {} > bound {}", admitted, bound);
        }
    }

    /// Calls that wait (any bound, mixed with calls that do not, and leaky buckets) go
    /// no more often than the limit allows: sorted by the instant each goes (decided +
    /// its wait), any `n` of them span at least `(n - burst)` intervals. No call waits
    /// longer than its bound, and a refused one takes nothing.
    #[test]
    fn reservations_never_go_early(
        replenish in 1u32..2000,
        burst in 1u32..20,
        leaky in any::<bool>(),
        steps in prop::collection::vec((0u64..300_000, 1u64..3, 0u64..3_000_000), 1..150),
    ) {
        let mut base = Limit::try_new(replenish, burst, crate::limit::Unit::Second).unwrap();
        if leaky {
            base = base.algorithm(Algorithm::LeakyBucket);
        }
        let p = Params::of(&base);
        let mut state = None;
        let mut now = T0;
        let mut goes: Vec<(u64, u64)> = Vec::new();
        for (dt, cost, wait) in steps {
            now += dt;
            let cost = cost.min(u64::from(burst));
            // A third of the calls do not wait (a bound of 0 or none).
            let limit = match wait % 3 {
                0 => base,
                _ => base.wait(Duration::from_micros(wait)),
            };
            let before = state;
            let o = decide(now, state, Params::of(&limit), cost);
            if o.allowed {
                let bound = if leaky {
                    u64::from(burst) * p.interval.div_ceil(p.per_micro)
                } else {
                    limit.max_wait().map_or(0, |w| u64::try_from(w.as_micros()).unwrap())
                };
                let bound = limit.max_wait().map_or(bound, |w| {
                    bound.min(u64::try_from(w.as_micros()).unwrap())
                });
                prop_assert!(o.retry_after_us <= bound + 1, "waits {} > {}", o.retry_after_us, bound);
                goes.push((now + o.retry_after_us, cost));
                state = o.new_state;
            } else {
                prop_assert!(o.new_state.is_none());
                prop_assert_eq!(state, before);
            }
        }
        goes.sort_unstable();
        // Any run of departures i..=j: their tokens beyond the burst take their intervals.
        let capacity = if leaky { 1 } else { u128::from(burst) };
        for i in 0..goes.len() {
            let mut tokens = 0u128;
            for j in i..goes.len() {
                tokens += u128::from(goes[j].1);
                let span = u128::from(goes[j].0 - goes[i].0) * u128::from(p.per_micro);
                // The first call's own tokens may all go at once (up to the capacity).
                let need = tokens.saturating_sub(capacity.max(u128::from(goes[i].1)));
                prop_assert!(
                    need * u128::from(p.interval) <= span + u128::from(p.per_micro),
                    "{} tokens in {} us", tokens, goes[j].0 - goes[i].0
                );
            }
        }
    }
}
