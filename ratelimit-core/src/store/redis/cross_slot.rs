//! A call under several limits whose buckets live on several masters of a Redis Cluster:
//! reserved master by master in a fixed order (the lowest slot each serves, from
//! `CLUSTER SLOTS`), and given back when a later master refuses. No script can span masters,
//! so this protocol is what keeps such a call all or nothing (see the guide's "Several
//! limits").

use std::sync::Arc;

use redis::Value;

use super::RedisStore;
use super::decide::{GroupReply, Mode};
use crate::errors::Error;
use crate::pipeline::check::Check;

impl RedisStore {
    /// Reserves master by master (or slot by slot, without `by_master` or a map of the
    /// masters), in a fixed order: the lowest slot each serves. Gives back on the first
    /// refusal, and asks the rest without taking, so that every limit still answers. Answers
    /// each limit's four numbers and the server time its node decided it at.
    pub(super) async fn check_across_nodes(
        &self,
        checks: &[Check<'_>],
        by_master: bool,
    ) -> Result<(Vec<[u64; 4]>, Vec<u64>), Error> {
        let masters = if by_master {
            self.slot_masters().await
        } else {
            None
        };
        let group_of = |i: usize| {
            let slot = crate::naming::key_slot(checks[i].bucket.as_bytes());
            masters
                .as_ref()
                .and_then(|m| m.get(usize::from(slot)).copied())
                .unwrap_or(slot)
        };
        let mut order: Vec<usize> = (0..checks.len()).collect();
        order.sort_by_key(|&i| (group_of(i), i));
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for i in order {
            match groups.last_mut() {
                Some(g) if group_of(g[0]) == group_of(i) => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        let mut numbers = vec![[0u64; 4]; checks.len()];
        let mut ats = vec![0u64; checks.len()];
        let mut reserved: Vec<(Vec<usize>, GroupReply)> = Vec::new();
        let mut refused = false;
        for group in groups {
            let part: Vec<Check<'_>> = group.iter().map(|&i| checks[i]).collect();
            let reply = self
                .run_group(&part, if refused { Mode::Veto } else { Mode::Reserve })
                .await;
            let reply = match reply {
                Ok(r) => r,
                Err(e) => {
                    self.give_back(checks, &reserved).await;
                    return Err(e);
                }
            };
            for (&i, n) in group.iter().zip(&reply.numbers) {
                numbers[i] = *n;
                ats[i] = reply.now;
            }
            if reply
                .numbers
                .iter()
                .zip(&part)
                .any(|(n, check)| n[0] == 0 && !check.limit.is_shadow())
            {
                refused = true;
                self.give_back(checks, &reserved).await;
                // Given back, the reserved limits answer as they stood before the call.
                for (group, reply) in reserved.drain(..) {
                    for (&i, as_was) in group.iter().zip(&reply.as_was) {
                        numbers[i][1] = as_was[0];
                        numbers[i][3] = as_was[1];
                    }
                }
            } else if !refused {
                reserved.push((group, reply));
            }
        }
        Ok((numbers, ats))
    }

    /// Each slot's master, as the lowest slot it serves, from `CLUSTER SLOTS` (read once, kept
    /// until a script finds the slots moved); `None` when it cannot be read.
    pub(super) async fn slot_masters(&self) -> Option<Arc<[u16]>> {
        if let Some(map) = self.masters.read().ok().and_then(|m| m.clone()) {
            return Some(map);
        }
        let reply: Value = self
            .run(
                |mut c| async move { redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut c).await },
            )
            .await
            .ok()?;
        let map: Arc<[u16]> = slot_map(&reply)?.into();
        if let Ok(mut cached) = self.masters.write() {
            *cached = Some(Arc::clone(&map));
        }
        Some(map)
    }

    pub(super) fn forget_masters(&self) {
        if let Ok(mut cached) = self.masters.write() {
            *cached = None;
        }
    }

    /// Gives back what `reserved` took: each group's tokens returned to its buckets as they
    /// are now (best effort: a failure leaves the tokens taken, so the buckets are emptier,
    /// never fuller, and is logged).
    pub(super) async fn give_back(
        &self,
        checks: &[Check<'_>],
        reserved: &[(Vec<usize>, GroupReply)],
    ) {
        for (group, reply) in reserved {
            let part: Vec<Check<'_>> = group.iter().map(|&i| checks[i]).collect();
            if let Err(e) = self.run_group(&part, Mode::GiveBack(reply.now)).await {
                crate::observe::log!(warn, error = %e, "redis-ratelimit could not give back the tokens a refused call reserved");
            }
        }
    }
}

/// One range of slots in a `CLUSTER SLOTS` reply, with its master's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    /// The first slot of the range.
    pub start: u16,
    /// The last slot of the range (inclusive; at most 16,383).
    pub end: u16,
    /// Its master's `host:port`, as [`node_url`](crate::tools::node_url) takes it.
    pub master: String,
}

/// The ranges of a `CLUSTER SLOTS` reply, in its order: the one reading of that reply, for
/// the store (which limits a call's buckets may share a node) and the command line (which
/// nodes to read). `None` for a reply of another shape.
///
/// ```
/// use ratelimit_core::tools::cluster_slots;
/// use redis::Value;
///
/// let node = |host: &str, port| Value::Array(vec![Value::BulkString(host.into()), Value::Int(port)]);
/// let reply = Value::Array(vec![
///     Value::Array(vec![Value::Int(0), Value::Int(8191), node("10.0.0.1", 7000)]),
///     Value::Array(vec![Value::Int(8192), Value::Int(16383), node("10.0.0.2", 7000)]),
/// ]);
/// let ranges = cluster_slots(&reply).unwrap();
/// assert_eq!(ranges[1].master, "10.0.0.2:7000");
/// assert_eq!((ranges[1].start, ranges[1].end), (8192, 16383));
/// assert!(cluster_slots(&Value::Nil).is_none());
/// ```
pub fn cluster_slots(reply: &Value) -> Option<Vec<SlotRange>> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    ranges
        .iter()
        .map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            // A master is its first address and port.
            let host = match master.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => return None,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return None;
            };
            Some(SlotRange {
                start: u16::try_from(*start).ok()?,
                end: u16::try_from(*end).ok()?.min(16_383),
                master: format!("{host}:{port}"),
            })
        })
        .collect()
}

/// `CLUSTER SLOTS`' reply as a map from each slot to the lowest slot its master serves;
/// `None` for a reply of another shape or one that leaves a slot unserved.
fn slot_map(reply: &Value) -> Option<Vec<u16>> {
    let ranges = cluster_slots(reply)?;
    let mut map = vec![u16::MAX; 16_384];
    for range in &ranges {
        let lowest = ranges
            .iter()
            .filter(|r| r.master == range.master)
            .map(|r| r.start)
            .min()
            .unwrap_or(range.start);
        map[usize::from(range.start)..=usize::from(range.end)].fill(lowest);
    }
    map.iter().all(|&m| m != u16::MAX).then_some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
            ]),
        ])
    }

    #[test]
    fn each_slot_maps_to_the_lowest_slot_of_its_master() {
        // A master with two ranges, after a resharding.
        let reply = Value::Array(vec![
            range(0, 99, "10.0.0.2", 7001),
            range(100, 8_191, "10.0.0.1", 7000),
            range(8_192, 16_383, "10.0.0.2", 7001),
        ]);
        let map = slot_map(&reply).unwrap();
        assert_eq!((map[0], map[99], map[100], map[8_191]), (0, 0, 100, 100));
        assert_eq!((map[8_192], map[16_383]), (0, 0));
        // A slot no master serves: no map (calls go slot by slot).
        let partial = Value::Array(vec![range(0, 8_191, "10.0.0.1", 7000)]);
        assert!(slot_map(&partial).is_none());
        assert!(slot_map(&Value::Int(1)).is_none());
    }
}
