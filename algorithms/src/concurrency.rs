//! A concurrency limit (`Limit::concurrent`): at most `max` calls of one key in flight. The
//! Rust twin of `concurrency.lua`, `concurrency_release.lua` and `concurrency_renew.lua`.
//!
//! The state is a set of members, each with the instant its lease ends (in Redis, a sorted
//! set scored by it, in server microseconds):
//! * a slot held: `h:<holder>:<j>`, `j` from 1 to the call's cost (a call of cost `n` holds
//!   `n` slots), its lease renewed by the call's guard while the call runs;
//! * a ticket of a call waiting for a slot: `w:<arrival>:<holder>:<cost>`, the arrival time
//!   (17 digits) and the holder (20 digits) zero-padded, so that the members' text orders the
//!   tickets by arrival (a ticket's arrival is after every other ticket's, even within one
//!   microsecond, so tickets never tie); its lease is renewed each time the waiter asks
//!   again. In Redis a ticket is scored by its lease end plus [`TICKET`] (2^52): the slots
//!   held are then counted by one `ZCOUNT` and the tickets read apart, so that a decision
//!   costs O(log n + tickets + cost) whatever the max.
//!
//! A member whose lease has ended counts for nothing, whether or not it is still stored (its
//! holder died, or stopped renewing). A call is admitted when the slots held plus its cost
//! stay within `max` and no live ticket is ahead of it (a call that does not wait has every
//! ticket ahead of it): waiters are served in arrival order, and a call that does not wait
//! never overtakes them. Refused, a call that may wait leaves (or renews) its ticket.
//!
//! `remaining` is the slots free after the call; `reset_after` is when the last lease ends
//! (the key carries no information after it): the latest of every live member's before the
//! call, and of the call's own if it writes one. A refusal's `retry_after` is a hint, not a
//! promise: a slot comes back when a call ends, which no store can foresee. It is the time
//! until the earliest live lease ends (when a slot is certain to be free if its holder has
//! died), at most [`RETRY_HINT_US`].

use ratelimit_vocab::limits;

use crate::Outcome;

/// The longest `retry_after` a refusal answers, in microseconds: a second.
pub const RETRY_HINT_US: u64 = 1_000_000;

/// What a ticket's score adds to its lease end in Redis (2^52: above every lease end, and
/// the sum below 2^53, exact in Lua's doubles).
pub const TICKET: u64 = 1 << 52;

/// A concurrency limit's parameters for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Slots: the most calls in flight.
    pub max: u64,
    /// How long a slot or a ticket lives without renewal, in microseconds.
    pub lease_us: u64,
    /// The call's id, unique across the fleet.
    pub holder: u64,
    /// Whether a refused call queues for a slot (the limit has a wait).
    pub queue: bool,
}

impl Params {
    /// The same limit shared by `instances` instances that cannot talk to each other (the
    /// fallback): each holds its whole part of the slots, at least one.
    #[must_use]
    pub fn shared(self, instances: u32) -> Params {
        Params {
            max: (self.max / u64::from(instances.max(1))).max(1),
            ..self
        }
    }
}

/// The script's arguments: max, lease (us), holder, queue (0 or 1), cost.
pub fn args(p: Params, cost: u64) -> [u64; 5] {
    [p.max, p.lease_us, p.holder, u64::from(p.queue), cost]
}

/// The parameters and the cost that `concurrency.lua` reads from `args`, its arguments as a
/// Redis module receives them: the inverse of [`args`]. The holder is any `u64` (0 where no
/// call holds a slot: a peek); the script uses it as text, which the limiter writes in
/// canonical decimal. `None` for arguments that no valid limit sends: not five, a max of 0 or
/// above `ratelimit_vocab::limits::MAX_CONCURRENT`, a lease outside a millisecond to a day
/// (`MIN_LEASE_US` to `MAX_LEASE_US`), `queue` other than 0 or 1, or a cost above the max.
///
/// ```
/// use ratelimit_algorithms::concurrency::{self, Params};
///
/// let p = Params { max: 2, lease_us: 30_000_000, holder: u64::MAX, queue: true };
/// assert_eq!(concurrency::from_args(&concurrency::args(p, 1)), Some((p, 1)));
/// assert_eq!(concurrency::from_args(&[2, 30_000_000, 7, 2, 1]), None, "queue is 0 or 1");
/// ```
#[must_use]
pub fn from_args(args: &[u64]) -> Option<(Params, u64)> {
    let &[max, lease_us, holder, queue, cost] = args else {
        return None;
    };
    let queue = match queue {
        0 => false,
        1 => true,
        _ => return None,
    };
    let slots = 1..=u64::from(limits::MAX_CONCURRENT);
    let lease = limits::MIN_LEASE_US..=limits::MAX_LEASE_US;
    if !slots.contains(&max) || !lease.contains(&lease_us) || cost > max {
        return None;
    }
    let p = Params {
        max,
        lease_us,
        holder,
        queue,
    };
    Some((p, cost))
}

/// One member of the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// A slot held by `holder`, the `n`th of its call.
    Held {
        /// The call's id.
        holder: u64,
        /// Which of the call's slots, from 1.
        n: u64,
    },
    /// A call waiting for `cost` slots since `arrival` (server microseconds).
    Waiting {
        /// When it first asked.
        arrival: u64,
        /// The call's id.
        holder: u64,
        /// The slots it asks for.
        cost: u64,
    },
}

impl Member {
    /// Its holder.
    pub const fn holder(self) -> u64 {
        match self {
            Member::Held { holder, .. } | Member::Waiting { holder, .. } => holder,
        }
    }

    /// Its text in the sorted set.
    pub fn to_text(self) -> String {
        match self {
            Member::Held { holder, n } => format!("h:{holder}:{n}"),
            Member::Waiting {
                arrival,
                holder,
                cost,
            } => format!("w:{arrival:017}:{}:{cost}", padded_holder(holder)),
        }
    }

    /// The member a text names, `None` for one no script writes.
    pub fn parse(text: &str) -> Option<Member> {
        let mut parts = text.split(':');
        let member = match parts.next()? {
            "h" => Member::Held {
                holder: parts.next()?.parse().ok()?,
                n: parts.next()?.parse().ok()?,
            },
            "w" => Member::Waiting {
                arrival: parts.next()?.parse().ok()?,
                holder: parts.next()?.parse().ok()?,
                cost: parts.next()?.parse().ok()?,
            },
            _ => return None,
        };
        parts.next().is_none().then_some(member)
    }
}

/// A holder as a ticket names it: 20 digits, zero-padded (the scripts find a holder's
/// ticket by these 20 bytes of its member).
#[must_use]
pub fn padded_holder(holder: u64) -> String {
    format!("{holder:020}")
}

/// A member and the instant (us) its lease ends.
pub type Entry = (Member, u64);

/// Decides a call of `cost` slots at `now` on `entries` (the set as stored, expired members
/// included). A cost of 0 takes nothing and writes nothing: it answers the slots free now.
pub fn decide(now: u64, entries: &[Entry], p: Params, cost: u64) -> Outcome<Vec<Entry>> {
    let live = || entries.iter().filter(move |e| e.1 > now);
    let held = live()
        .filter(|e| matches!(e.0, Member::Held { .. }))
        .count() as u64;
    let first_ticket = live()
        .filter_map(|e| match e.0 {
            Member::Waiting {
                arrival, holder, ..
            } => Some((arrival, holder)),
            Member::Held { .. } => None,
        })
        .min();
    let last_arrival = live()
        .filter_map(|e| match e.0 {
            Member::Waiting { arrival, .. } => Some(arrival),
            Member::Held { .. } => None,
        })
        .max();
    let mine = live().find_map(|e| match e.0 {
        Member::Waiting {
            arrival, holder, ..
        } if holder == p.holder => Some((arrival, holder)),
        _ => None,
    });
    let latest = live().map(|e| e.1).max();
    if cost == 0 {
        return Outcome {
            allowed: true,
            remaining: p.max.saturating_sub(held),
            retry_after_us: 0,
            reset_after_us: latest.map_or(0, |l| l - now),
            new_state: None,
        };
    }
    let until = now + p.lease_us;
    let ahead = match (first_ticket, mine) {
        (Some(first), Some(mine)) => first < mine,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if held + cost <= p.max && !ahead {
        // The call's ticket goes, and its slots 1 ..= cost are written anew.
        let mut next: Vec<Entry> = live()
            .filter(|e| match e.0 {
                Member::Held { holder, n } => holder != p.holder || n > cost,
                Member::Waiting { holder, .. } => holder != p.holder,
            })
            .copied()
            .collect();
        next.extend((1..=cost).map(|n| {
            (
                Member::Held {
                    holder: p.holder,
                    n,
                },
                until,
            )
        }));
        return Outcome {
            allowed: true,
            remaining: p.max - held - cost,
            retry_after_us: 0,
            reset_after_us: latest.map_or(until, |l| l.max(until)) - now,
            new_state: Some(next),
        };
    }
    let retry = live()
        .map(|e| e.1 - now)
        .min()
        .unwrap_or(1)
        .clamp(1, RETRY_HINT_US);
    let new_state = p.queue.then(|| {
        // After every ticket there, even one of the same microsecond: tickets never tie.
        let arrival = mine.map_or_else(|| now.max(last_arrival.map_or(0, |a| a + 1)), |m| m.0);
        let mut next: Vec<Entry> = live()
            .filter(|e| !matches!(e.0, Member::Waiting { holder, .. } if holder == p.holder))
            .copied()
            .collect();
        next.push((
            Member::Waiting {
                arrival,
                holder: p.holder,
                cost,
            },
            until,
        ));
        next
    });
    let reset = match &new_state {
        Some(_) => Some(latest.map_or(until, |l| l.max(until))),
        None => latest,
    };
    Outcome {
        allowed: false,
        remaining: p.max.saturating_sub(held),
        retry_after_us: retry,
        reset_after_us: reset.map_or(0, |l| l - now),
        new_state,
    }
}

/// Whether `e` is one of the slots 1 ..= `cost` of `holder`.
fn slot_of(e: &Entry, holder: u64, cost: u64) -> bool {
    matches!(e.0, Member::Held { holder: h, n } if h == holder && n <= cost)
}

/// The set once `holder`'s slots (1 ..= `cost`) and ticket are given back (and expired
/// members dropped).
pub fn release(now: u64, entries: &[Entry], holder: u64, cost: u64) -> Vec<Entry> {
    entries
        .iter()
        .filter(|e| {
            e.1 > now
                && !slot_of(e, holder, cost)
                && !matches!(e.0, Member::Waiting { holder: h, .. } if h == holder)
        })
        .copied()
        .collect()
}

/// Renews the leases of `holder`'s slots (1 ..= `cost`) to end at `now + lease_us` (a
/// ticket is renewed by asking again), writing them whether or not they are there: the call
/// runs, so a slot whose lease ended, one the store lost or one it never granted (the
/// fallback did) is counted again, even above the max. Returns how many were live (0: the
/// holder had lost its slots, or never had them here).
pub fn renew(now: u64, entries: &mut Vec<Entry>, holder: u64, cost: u64, lease_us: u64) -> u64 {
    let mut renewed = 0;
    entries.retain(|e| {
        let mine = slot_of(e, holder, cost);
        renewed += u64::from(mine && e.1 > now);
        !mine
    });
    entries.extend((1..=cost).map(|n| (Member::Held { holder, n }, now + lease_us)));
    renewed
}

/// When the set carries no information any more, in milliseconds (its key's expiry).
pub fn expire_ms(entries: &[Entry]) -> u64 {
    entries
        .iter()
        .map(|e| e.1)
        .max()
        .unwrap_or(0)
        .div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000_000;

    fn p(holder: u64, queue: bool) -> Params {
        Params {
            max: 2,
            lease_us: 1_000_000,
            holder,
            queue,
        }
    }

    fn keep(state: &mut Vec<Entry>, o: &Outcome<Vec<Entry>>) {
        if let Some(s) = &o.new_state {
            state.clone_from(s);
        }
    }

    #[test]
    fn at_most_max_are_held_and_a_release_frees_one() {
        let mut s = Vec::new();
        for h in 1..=2 {
            let o = decide(T0, &s, p(h, false), 1);
            assert!(o.allowed);
            keep(&mut s, &o);
        }
        let o = decide(T0, &s, p(3, false), 1);
        assert!(!o.allowed);
        assert_eq!((o.remaining, o.retry_after_us), (0, 1_000_000));
        s = release(T0, &s, 1, 1);
        assert!(decide(T0, &s, p(3, false), 1).allowed);
    }

    #[test]
    fn an_ended_lease_frees_its_slot_and_renewal_keeps_it() {
        let mut s = Vec::new();
        let o = decide(T0, &s, p(1, false), 2);
        keep(&mut s, &o);
        assert!(!decide(T0 + 999_999, &s, p(2, false), 1).allowed);
        assert!(decide(T0 + 1_000_000, &s, p(2, false), 1).allowed);
        assert_eq!(renew(T0 + 500_000, &mut s, 1, 2, 1_000_000), 2);
        assert!(!decide(T0 + 1_000_000, &s, p(2, false), 1).allowed);
    }

    #[test]
    fn waiters_are_served_in_arrival_order() {
        let mut s = Vec::new();
        let o = decide(T0, &s, p(1, false), 2);
        keep(&mut s, &o);
        // 9 then 5 queue; 5 (a lower id, later) is behind 9.
        let o = decide(T0 + 1, &s, p(9, true), 1);
        keep(&mut s, &o);
        let o = decide(T0 + 2, &s, p(5, true), 1);
        keep(&mut s, &o);
        s = release(T0 + 3, &s, 1, 2);
        assert!(!decide(T0 + 4, &s, p(5, true), 1).allowed, "9 is first");
        assert!(!decide(T0 + 4, &s, p(7, false), 1).allowed, "no overtaking");
        let o = decide(T0 + 4, &s, p(9, true), 1);
        assert!(o.allowed);
        keep(&mut s, &o);
        assert!(decide(T0 + 5, &s, p(5, true), 1).allowed);
    }

    proptest::proptest! {
        /// Whatever the calls (holders, costs, waits, releases, renewals, time passing), a call
        /// is admitted only when the live slots plus its own stay within the max and no live
        /// ticket arrived before its own; and while every running call renews within its
        /// lease, the live slots never exceed the max. (A renewal writes a running call's slots
        /// back even when its lease had ended: it re-counts a call, never admits one.)
        #[test]
        fn never_more_than_max_and_never_out_of_turn(
            ops in proptest::collection::vec((0u64..6, 0u64..4, 0u64..3, 0u64..2, 0u64..400_000), 1..120),
        ) {
            let max = 3;
            let mut s: Vec<Entry> = Vec::new();
            let mut now = T0;
            // The calls admitted and not released: holder, cost, and when each was renewed
            // last (admitted: renewed then).
            let mut running: Vec<(u64, u64, u64)> = Vec::new();
            let mut lapsed = false;
            for (holder, op, cost, queue, dt) in ops {
                now += dt;
                let lease_us = 1_000_000;
                lapsed |= running.iter().any(|r| r.2 + lease_us <= now);
                let p = Params { max, lease_us, holder: holder + 1, queue: queue == 1 };
                let live_held = |s: &[Entry]| {
                    s.iter().filter(|e| e.1 > now && matches!(e.0, Member::Held { .. })).count() as u64
                };
                match op {
                    0 | 1 => {
                        let earlier = s.iter().filter(|e| e.1 > now).filter_map(|e| match e.0 {
                            Member::Waiting { arrival, holder, .. } => Some((arrival, holder)),
                            Member::Held { .. } => None,
                        }).min();
                        let mine = s.iter().filter(|e| e.1 > now).find_map(|e| match e.0 {
                            Member::Waiting { arrival, holder, .. } if holder == p.holder => Some((arrival, holder)),
                            _ => None,
                        });
                        let already = running.iter().any(|r| r.0 == p.holder);
                        let before = live_held(&s);
                        let cost = cost.min(max);
                        let o = decide(now, &s, p, cost);
                        if o.allowed && cost > 0 && !already {
                            proptest::prop_assert!(earlier.is_none() || earlier == mine, "out of turn");
                            proptest::prop_assert!(before + cost <= max, "admitted {cost} beside {before}");
                            running.push((p.holder, cost, now));
                        }
                        if !already {
                            keep(&mut s, &o);
                        }
                    }
                    2 => {
                        s = release(now, &s, p.holder, max);
                        running.retain(|r| r.0 != p.holder);
                    }
                    _ => {
                        // A renewal is a running call's.
                        if let Some(r) = running.iter_mut().find(|r| r.0 == p.holder) {
                            renew(now, &mut s, r.0, r.1, lease_us);
                            r.2 = now;
                        }
                    }
                }
                if !lapsed {
                    let held = live_held(&s);
                    proptest::prop_assert!(held <= max, "{held} held");
                }
            }
        }
    }

    #[test]
    fn members_round_trip_their_text_and_order_by_arrival() {
        let a = Member::Waiting {
            arrival: T0,
            holder: u64::MAX,
            cost: 3,
        };
        let b = Member::Waiting {
            arrival: T0 + 1,
            holder: 1,
            cost: 1,
        };
        assert!(a.to_text() < b.to_text());
        for m in [a, b, Member::Held { holder: 42, n: 7 }] {
            assert_eq!(Member::parse(&m.to_text()), Some(m));
        }
        assert_eq!(Member::parse("x:1"), None);
    }

    proptest::proptest! {
        /// Every call's arguments read back as its parameters and cost, whatever the holder.
        #[test]
        fn args_read_back(
            max in 1u64..=u64::from(limits::MAX_CONCURRENT),
            lease_us in limits::MIN_LEASE_US..=limits::MAX_LEASE_US,
            holder: u64,
            queue: bool,
            cost: u64,
        ) {
            let p = Params { max, lease_us, holder, queue };
            let cost = cost % (max + 1);
            proptest::prop_assert_eq!(from_args(&args(p, cost)), Some((p, cost)));
        }
    }

    #[test]
    fn arguments_no_limit_sends_are_refused() {
        assert!(from_args(&[2, 1_000, 0, 0, 2]).is_some());
        assert_eq!(from_args(&[2, 1_000, 0, 0]), None);
        assert_eq!(from_args(&[0, 1_000, 1, 0, 0]), None, "no slot");
        assert_eq!(
            from_args(&[1_000_001, 1_000, 1, 0, 1]),
            None,
            "above MAX_CONCURRENT"
        );
        assert_eq!(
            from_args(&[2, 999, 1, 0, 1]),
            None,
            "a lease under a millisecond"
        );
        assert_eq!(
            from_args(&[2, 86_400_000_001, 1, 0, 1]),
            None,
            "a lease over a day"
        );
        assert_eq!(from_args(&[2, 1_000, 1, 2, 1]), None, "queue is 0 or 1");
        assert_eq!(from_args(&[2, 1_000, 1, 0, 3]), None, "more than the max");
    }
}
