//! The decision scripts: one limit per call (`check`), or several (`multi.lua`, across the
//! nodes of a cluster when their buckets are on several); a peek, a give-back, a settlement,
//! a concurrency slot's release and renewal; and their replies read.

use std::time::Duration;

use ratelimit_vocab::native;
use redis::{RedisError, ToRedisArgs as _, Value};

use super::RedisStore;
use super::scripts::{Native, PackedArgs};
use super::spec::{Call, Spec};
use crate::algorithm::library::Lua;
use crate::decision::Decision;
use crate::errors::Error;
use crate::limit::Limit;
use crate::pipeline::check::Check;

impl RedisStore {
    /// Gives back the concurrency slots (and the ticket) of the call `holder` on `key`: one
    /// script. Returns the members removed.
    ///
    /// When calls still wait for a slot, the script publishes `key` on `channel` (the
    /// fleet's), so that their instances ask again at once.
    pub(crate) async fn release_slot(
        &self,
        key: &str,
        holder: u64,
        cost: u64,
        channel: &str,
    ) -> Result<u64, Error> {
        let keys = [key];
        let packed = |out: &mut PackedArgs| (holder, cost).write_redis_args(out);
        let after = [channel];
        let native = Lua::Release.native().map(|command| Native {
            command,
            keys: &keys,
            counted: false,
            args: &packed,
            after: &after,
            reply: std::convert::identity,
        });
        let script = |cmd: &mut redis::Cmd| {
            cmd.arg(holder).arg(cost).arg(channel);
        };
        Ok(self
            .eval_or_native(Lua::Release, &keys, &script, native)
            .await?)
    }

    /// Renews the leases of the concurrency slots of the call `holder` on `key` for
    /// `lease_us` from now: one script. Returns the slots renewed (0: the call lost them).
    pub(crate) async fn renew_slot(
        &self,
        key: &str,
        holder: u64,
        cost: u64,
        lease_us: u64,
    ) -> Result<u64, Error> {
        let keys = [key];
        let packed = |out: &mut PackedArgs| (holder, lease_us, cost).write_redis_args(out);
        let native = Lua::Renew.native().map(|command| Native {
            command,
            keys: &keys,
            counted: false,
            args: &packed,
            after: &[],
            reply: std::convert::identity,
        });
        let script = |cmd: &mut redis::Cmd| {
            cmd.arg(holder).arg(lease_us).arg(cost);
        };
        Ok(self
            .eval_or_native(Lua::Renew, &keys, &script, native)
            .await?)
    }
}

impl RedisStore {
    /// The pipeline's way in: one check by its limit's own script, several together by
    /// `multi.lua`, all or nothing.
    pub(crate) async fn decide_all(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, Error> {
        match checks {
            [check] => Ok(vec![self.check_one(*check).await?]),
            _ => self.check_several(checks).await,
        }
    }

    /// [`Store::check`](crate::store::Store::check): the limit's own script, one `EVALSHA`.
    pub(crate) async fn check_one(&self, check: Check<'_>) -> Result<Decision, Error> {
        let call = Call {
            keys: &[check.bucket],
            specs: &[Spec::of(&check)],
        };
        let node = self.node_of(check.bucket);
        let reply = match self.coalesced(node, call).await {
            // The slots moved: alone, routed by the key.
            Err(e) if self.is_cluster() && is_non_local_redis(&e) => {
                self.forget_masters();
                self.send_alone(call).await?
            }
            other => other?,
        };
        parse_reply(&reply, *check.limit, check.cost)
    }
}

/// What `multi.lua` answers for one group of limits: each limit's four numbers, the server
/// time, and in reserve mode what each limit answered before the call.
#[derive(Debug, Default)]
pub(super) struct GroupReply {
    pub(super) numbers: Vec<[u64; 4]>,
    /// The server time the script ran at (us).
    pub(super) now: u64,
    /// In reserve mode, each limit's remaining and reset_after before the call.
    pub(super) as_was: Vec<[u64; 2]>,
}

impl RedisStore {
    /// [`Store::check_all`](crate::store::Store::check_all): one script, `multi.lua`, for every limit of the call. On a
    /// cluster whose node does not serve every bucket, the buckets are decided per slot in
    /// slot order, each group reserved, and what was reserved is given back when a later
    /// group refuses (see the guide's "Several limits").
    pub(super) async fn check_several(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, Error> {
        let keys: Vec<&str> = checks.iter().map(|c| c.bucket).collect();
        // On a cluster, a call whose buckets several masters serve is decided across them
        // from the start: a script that reaches a key its node does not serve fails only
        // when it writes it, after it wrote the limits before it, and those would be taken
        // again across the nodes.
        if self.is_cluster() && !self.one_master(&keys).await {
            let (numbers, ats) = self.across_nodes(checks).await?;
            return Ok(decisions(&numbers, checks, &ats));
        }
        let specs = Spec::all(checks);
        let call = Call {
            keys: &keys,
            specs: &specs,
        };
        let decided = match self.coalesced(self.node_of(keys[0]), call).await {
            Ok(reply) => parse_group(&reply, checks.len()),
            Err(e) => Err(Error::from(e)),
        };
        // Decided across nodes, each limit at its node's time.
        let (numbers, ats) = match decided {
            Ok(group) => {
                let ats = vec![group.now; checks.len()];
                (group.numbers, ats)
            }
            // The slots moved since they were read (a resharding): across the nodes.
            Err(e) if self.is_cluster() && is_non_local(&e) => {
                self.forget_masters();
                self.across_nodes(checks).await?
            }
            Err(e) => return Err(e),
        };
        Ok(decisions(&numbers, checks, &ats))
    }

    /// Whether one master serves every key (by the map of the masters, read once; without
    /// it, whether they share a slot).
    async fn one_master(&self, keys: &[&str]) -> bool {
        let slot = |k: &str| crate::naming::key_slot(k.as_bytes());
        let first = slot(keys[0]);
        if keys.iter().all(|k| slot(k) == first) {
            return true;
        }
        match self.slot_masters().await {
            Some(masters) => {
                let master = |k: &str| masters.get(usize::from(slot(k))).copied();
                keys.iter().all(|k| master(k) == master(keys[0]))
            }
            None => false,
        }
    }

    /// [`check_across_nodes`](Self::check_across_nodes) by master, or by slot once the slots
    /// moved since the map was read.
    async fn across_nodes(&self, checks: &[Check<'_>]) -> Result<(Vec<[u64; 4]>, Vec<u64>), Error> {
        match self.check_across_nodes(checks, true).await {
            Err(e) if is_non_local(&e) => {
                // By slot, which needs no map.
                self.forget_masters();
                self.check_across_nodes(checks, false).await
            }
            other => other,
        }
    }

    /// Gives back the `cost` tokens a call reserved on the bucket `key` and gave up waiting
    /// for: the bucket as it is now, less those tokens, floored at full (calls that reserved
    /// after it keep their turns; the next call may take the place it left).
    pub(crate) async fn give_back_reserved(
        &self,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<(), Error> {
        // The token bucket's give-back does not read the reservation's time.
        self.run_group(&[Check::new(key, limit, cost)], Mode::GiveBack(0))
            .await
            .map(drop)
    }

    /// [`Store::peek`](crate::store::Store::peek): `multi.lua` in peek mode, one `EVALSHA` on the key's node.
    pub(super) async fn peek_one(
        &self,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<Decision, Error> {
        let checks = [Check::new(key, limit, cost)];
        let group = self.run_group(&checks, Mode::Peek).await?;
        decisions(&group.numbers, &checks, &[group.now])
            .pop()
            .ok_or_else(|| Error::BadReply("no decision".to_owned()))
    }

    /// One `multi.lua` call for limits whose keys one node serves.
    pub(super) async fn run_group(
        &self,
        checks: &[Check<'_>],
        mode: Mode,
    ) -> Result<GroupReply, Error> {
        let keys: Vec<&str> = checks.iter().map(|c| c.bucket).collect();
        let specs = Spec::all(checks);
        let code = match mode {
            Mode::Reserve => native::Mode::Reserve,
            Mode::Veto => native::Mode::Veto,
            Mode::GiveBack(_) => native::Mode::GiveBack,
            Mode::Peek => native::Mode::Peek,
        };
        // After the specs, a give-back's reservation time.
        let reserved_at = match mode {
            Mode::GiveBack(at) => vec![at],
            _ => Vec::new(),
        };
        let reply: Value = self.multi(&keys, &specs, code, &reserved_at).await?;
        match mode {
            Mode::GiveBack(_) => Ok(GroupReply::default()),
            _ => parse_group(&reply, checks.len()),
        }
    }
}

impl RedisStore {
    /// Settles the limits of a call that took `checks` (each its estimate as its cost) at
    /// server time `at` on one node: each limit's `(actual, debt)` gives back or takes the
    /// difference (`multi.lua`'s mode 5, or the module's). Answers, per limit, the tokens
    /// taken and those given back.
    pub(crate) async fn settle_group(
        &self,
        checks: &[Check<'_>],
        at: u64,
        settle: &[(u64, u64)],
    ) -> Result<Vec<(u64, u64)>, Error> {
        let keys: Vec<&str> = checks.iter().map(|c| c.bucket).collect();
        let specs = Spec::all(checks);
        let mut tail = Vec::with_capacity(1 + 2 * settle.len());
        tail.push(at);
        tail.extend(settle.iter().flat_map(|&(actual, debt)| [actual, debt]));
        let reply: Value = self
            .multi(&keys, &specs, native::Mode::Settle, &tail)
            .await?;
        let numbers = integers(&reply, &[2 * checks.len() + 1])?;
        Ok(numbers[..2 * checks.len()]
            .chunks(2)
            .map(|c| (c[0], c[1]))
            .collect())
    }
}

/// What one `multi.lua` call does (see the script).
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode {
    /// Decide, and say what each limit answered before the call, for a give-back.
    Reserve,
    /// Another node refused the call: answer, take nothing.
    Veto,
    /// Return what a reservation made at this server time (us) took.
    GiveBack(u64),
    /// Answer as `Decide` would; write nothing.
    Peek,
}

/// Whether a cluster node refused a script for a key it does not serve.
fn is_non_local(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if is_non_local_redis(r))
}

fn is_non_local_redis(e: &RedisError) -> bool {
    e.to_string().contains("non local key")
}

/// A reply of `multi.lua` (or the module's `multi`): an array of one of the lengths `lens`,
/// of integers none below 0.
fn integers(reply: &Value, lens: &[usize]) -> Result<Vec<u64>, Error> {
    let bad = || Error::BadReply(format!("{reply:?}"));
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    if !lens.contains(&items.len()) {
        return Err(bad());
    }
    items
        .iter()
        .map(|v| match v {
            Value::Int(v) => u64::try_from(*v).map_err(|_| bad()),
            _ => Err(bad()),
        })
        .collect()
}

/// `multi.lua`'s reply: four numbers per limit, the server time, and in reserve mode two
/// more per limit.
fn parse_group(reply: &Value, n: usize) -> Result<GroupReply, Error> {
    let numbers = integers(reply, &[n * 4 + 1, n * 6 + 1])?;
    let (decided, rest) = numbers.split_at(n * 4);
    Ok(GroupReply {
        numbers: decided
            .chunks(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
        now: rest[0],
        as_was: rest[1..].chunks(2).map(|c| [c[0], c[1]]).collect(),
    })
}

/// Each limit's decision from its four numbers (a limit that would have admitted a refused
/// call answers as it stands: it kept its tokens).
/// Each decided at its `ats` on its server's clock (0: not told).
fn decisions(numbers: &[[u64; 4]], checks: &[Check<'_>], ats: &[u64]) -> Vec<Decision> {
    numbers
        .iter()
        .zip(checks)
        .zip(ats.iter().copied().chain(std::iter::repeat(0)))
        .map(|((n, check), at)| {
            Decision::new(
                n[0] == 1,
                n[1],
                *check.limit,
                check.cost,
                Duration::from_micros(n[2]),
                Duration::from_micros(n[3]),
            )
            .decided_at(at)
        })
        .collect()
}

fn parse_reply(reply: &Value, limit: Limit, cost: u32) -> Result<Decision, Error> {
    let bad = || Error::BadReply(format!("{reply:?}"));
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    // Every script answers four numbers and the server time it decided at (which a window's
    // settlement reads).
    let mut n = [0u64; 5];
    if items.len() != 5 {
        return Err(bad());
    }
    for (slot, item) in n.iter_mut().zip(items) {
        match item {
            Value::Int(v) => *slot = u64::try_from(*v).map_err(|_| bad())?,
            _ => return Err(bad()),
        }
    }
    Ok(Decision::new(
        n[0] == 1,
        n[1],
        limit,
        cost,
        Duration::from_micros(n[2]),
        Duration::from_micros(n[3]),
    )
    .decided_at(n[4]))
}
