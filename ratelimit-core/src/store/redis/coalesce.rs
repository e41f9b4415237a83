//! Coalesced decisions (group commit): concurrent calls bound for one Redis node go as one
//! `batch.lua` call, which decides each of them as if it were alone.
//!
//! Every `EVALSHA` costs Redis the command itself (reading it, looking the script up, setting
//! up its run, writing the reply) on top of the script's work, and costs the client a
//! command and a reply. Here, a call that finds fewer than [`RedisStore::batch_after`] script
//! calls in flight on its node (16 unless told) sends its own script at once, exactly as without coalescing (a lone
//! caller, or a few, wait no longer); otherwise it joins the node's queue. Whenever a script
//! call of the node returns, the queue (up to the batch limit) leaves as one `batch.lua`
//! call. The queue holds at most one entry per waiting caller, so it is bounded by the
//! callers' own concurrency.
//!
//! Per call, nothing changes: each is decided exactly as alone, in arrival order; a call
//! whose caller gave up before its batch left is not sent (it takes nothing); an error
//! raised while deciding one call (a key of another type, a key the node no longer serves)
//! is that call's alone; a failure of the whole batch (the connection) reaches each of its
//! calls, whose own failure policy decides.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use ratelimit_vocab::native;
use redis::{RedisError, RedisWrite, ToRedisArgs, Value};
use tokio::sync::oneshot;

use super::RedisStore;
use super::scripts::{Native, PackedArgs, unpacked_each};
use super::spec::{Call, Spec};
use crate::algorithm::library::Lua;

/// Script calls of one node in flight at once before calls queue, unless told
/// ([`RedisStore::batch_after`]). Batching only pays once Redis is the bottleneck: gathered
/// calls wait for a reply before they leave, which costs more than it saves while Redis still
/// has time to spare. With 2 or 8, 16 concurrent calls were slower than sent one by one; with
/// 16 they were not, and more were faster (benches/results/history.md 3.6).
pub(super) const DEFAULT_BATCH_AFTER: usize = 16;

/// The batch limit by default: the most calls one `batch.lua` call decides (see
/// [`RedisStore::batch_limit`]; docs/benchmarks.md measures the choice).
pub(crate) const DEFAULT_BATCH_LIMIT: usize = 64;

/// Marks a node's lane of calls the Redis module decides (a node's number is below 2^17).
const NATIVE_LANE: u32 = 1 << 30;

/// A call waiting in a node's queue: owned, and the way back to its caller.
struct Queued {
    keys: Vec<Box<str>>,
    specs: Vec<Spec>,
    reply: oneshot::Sender<Result<Value, RedisError>>,
}

/// Each node's queue and script calls in flight. A node is named by a number: 0 on one
/// server or Sentinel; on a cluster, its lowest slot (or the key's slot plus 2^16 while the
/// slots' masters are unknown).
#[derive(Default)]
pub(super) struct Lanes {
    lanes: Mutex<Vec<Lane>>,
    /// Script calls by the number of calls each decided: 1, 2–3, 4–7, ..., 128 and more.
    sizes: [AtomicU64; BATCH_SIZE_CLASSES],
}

/// The classes of [`RedisStore::batch_sizes`]: powers of two, the last open.
pub(crate) const BATCH_SIZE_CLASSES: usize = 8;

impl Lanes {
    /// Counts one script call that decided `calls` calls.
    fn sent(&self, calls: usize) {
        let class = (usize::BITS - 1 - calls.max(1).leading_zeros()) as usize;
        self.sizes[class.min(BATCH_SIZE_CLASSES - 1)].fetch_add(1, Ordering::Relaxed);
    }
}

struct Lane {
    node: u32,
    in_flight: usize,
    queue: Vec<Queued>,
}

impl Lanes {
    /// Takes a place in flight on `node`, or queues `call` and returns the way its reply
    /// comes.
    fn enter(
        &self,
        node: u32,
        call: Call<'_>,
        batch_after: usize,
    ) -> Option<oneshot::Receiver<Result<Value, RedisError>>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let lane = match lanes.iter().position(|l| l.node == node) {
            Some(i) => &mut lanes[i],
            None => {
                lanes.push(Lane {
                    node,
                    in_flight: 0,
                    queue: Vec::new(),
                });
                lanes.last_mut()?
            }
        };
        if lane.in_flight < batch_after && lane.queue.is_empty() {
            lane.in_flight += 1;
            return None;
        }
        let (reply, replied) = oneshot::channel();
        lane.queue.push(Queued {
            keys: call.keys.iter().map(|k| Box::from(*k)).collect(),
            specs: call.specs.to_vec(),
            reply,
        });
        Some(replied)
    }

    /// A script call of `node` returned: the next batch (the queue's calls whose callers
    /// still wait, up to `limit`) keeps its place in flight, or, with none, the place is
    /// given up.
    fn next(&self, node: u32, limit: usize) -> Option<Vec<Queued>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let lane = lanes.iter_mut().find(|l| l.node == node)?;
        lane.queue.retain(|q| !q.reply.is_closed());
        if lane.queue.is_empty() {
            lane.in_flight = lane.in_flight.saturating_sub(1);
            return None;
        }
        let take = lane.queue.len().min(limit);
        Some(lane.queue.drain(..take).collect())
    }
}

/// A place in flight on a node, held by a caller sending its own script. When it is given
/// up (the reply came, or the caller gave up), it passes to the node's queue, if any: a task
/// sends it, so no caller's future carries another's call and a caller that goes away
/// strands no one.
struct Place<'a> {
    store: &'a RedisStore,
    node: u32,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let (store, node) = (self.store, self.node);
        let Some(batch) = store.lanes.next(node, store.batch_limit) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // The store is cloned only here, for the task that sends the queue.
                runtime.spawn(store.clone().flush(node, batch));
            }
            // No runtime to send them from (it is shutting down): the callers are told
            // their reply is lost, and the place is given up.
            Err(_) => {
                drop(batch);
                while let Some(rest) = store.lanes.next(node, usize::MAX) {
                    drop(rest);
                }
            }
        }
    }
}

impl RedisStore {
    /// Decides `call` on `node`: at once if the node has room in flight, else in the next
    /// batch. The reply is what the call's own script returns.
    pub(super) async fn coalesced(&self, node: u32, call: Call<'_>) -> Result<Value, RedisError> {
        if self.batch_limit <= 1 {
            return self.send_alone(call).await;
        }
        // A call the Redis module decides natively is gathered only with calls the module
        // decides (in a lane of their own), into one `batch` command of the module: a batch
        // script costs Redis more per decision than the command alone. On a cluster, where a
        // batch command would name keys of several slots, it is sent alone, pipelined.
        let node = if self.is_native(call) {
            if self.is_cluster() {
                return self.send_alone(call).await;
            }
            node | NATIVE_LANE
        } else {
            node
        };
        match self.lanes.enter(node, call, self.batch_after) {
            None => {
                let _place = Place { store: self, node };
                self.lanes.sent(1);
                self.send_alone(call).await
            }
            Some(replied) => replied.await.unwrap_or_else(|_| {
                Err(RedisError::from((
                    redis::ErrorKind::Io,
                    "the batch this call was in was lost (the runtime is shutting down)",
                )))
            }),
        }
    }

    /// Sends batches on `node` until its queue is empty, then gives up its place in flight.
    async fn flush(self, node: u32, mut batch: Vec<Queued>) {
        loop {
            self.lanes.sent(batch.len());
            match batch.as_slice() {
                [one] => {
                    let keys: Vec<&str> = one.keys.iter().map(|k| &**k).collect();
                    let reply = self
                        .send_alone(Call {
                            keys: &keys,
                            specs: &one.specs,
                        })
                        .await;
                    if let Some(one) = batch.pop() {
                        let _ = one.reply.send(reply);
                    }
                }
                _ => match self.send_batch(&batch, node & NATIVE_LANE != 0).await {
                    Ok(replies) => {
                        for (queued, reply) in batch.drain(..).zip(replies) {
                            let _ = queued.reply.send(call_reply(reply));
                        }
                    }
                    // The server refused the batch before running it, for its first key
                    // (an ACL that denies that key): each call alone, so that the refusal
                    // is that call's only.
                    Err(e) if e.code() == Some("NOPERM") => {
                        for queued in batch.drain(..) {
                            let keys: Vec<&str> = queued.keys.iter().map(|k| &**k).collect();
                            let call = Call {
                                keys: &keys,
                                specs: &queued.specs,
                            };
                            if !queued.reply.is_closed() {
                                let _ = queued.reply.send(self.send_alone(call).await);
                            }
                        }
                    }
                    Err(e) => {
                        for queued in batch.drain(..) {
                            let _ = queued.reply.send(Err(e.clone()));
                        }
                    }
                },
            }
            match self.lanes.next(node, self.batch_limit) {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// How many script calls this store (and its clones) sent, by the number of calls each
    /// decided: `[1, 2–3, 4–7, 8–15, 16–31, 32–63, 64–127, 128 and more]`. Coalescing at work:
    /// a lone caller's calls are all in the first class; under load, most calls should ride in
    /// the larger ones. Counted from the store's creation, while coalescing is on
    /// ([`batch_limit`](RedisStore::batch_limit) above 1).
    ///
    /// ```
    /// # fn f(store: &ratelimit_core::store::RedisStore) {
    /// let sizes = store.batch_sizes();
    /// let script_calls: u64 = sizes.iter().sum();
    /// let alone = sizes[0];
    /// # let _ = (script_calls, alone); }
    /// ```
    #[must_use]
    pub fn batch_sizes(&self) -> [u64; BATCH_SIZE_CLASSES] {
        self.lanes
            .sizes
            .each_ref()
            .map(|n| n.load(Ordering::Relaxed))
    }

    /// One call's own script: the algorithm's for one limit, `multi.lua` (mode 0) for
    /// several.
    pub(super) async fn send_alone(&self, call: Call<'_>) -> Result<Value, RedisError> {
        match (call.keys, call.specs) {
            ([key], [spec]) => self.alone(key, spec).await,
            (keys, specs) => self.multi(keys, specs, native::Mode::Decide, &[]).await,
        }
    }

    /// One `batch.lua` call for `batch`, routed by its first key; with `native` (calls the
    /// Redis module decides), the module's `batch` command instead, which declares every
    /// call's keys and answers each call's numbers packed (`ratelimit_vocab::native`), with
    /// `batch.lua` as its fallback where the node has lost the module.
    async fn send_batch(&self, batch: &[Queued], native: bool) -> Result<Vec<Value>, RedisError> {
        let first: &str = batch
            .first()
            .and_then(|q| q.keys.first())
            .map_or("", |k| &**k);
        // A one-limit call under the previous one-limit call's limit (the usual case: one
        // limit, many keys) goes as 0 and its key: its spec is in place. `with_keys`: each
        // call's keys among the arguments (`batch.lua`), else declared (the module's).
        let script = |cmd: &mut redis::Cmd| write_calls(cmd, batch, true);
        let packed = |out: &mut PackedArgs| write_calls(out, batch, false);
        // Every call's keys, declared: only for the module's command (empty, unallocated,
        // for `batch.lua`).
        let keys: Vec<&str> = if native {
            batch
                .iter()
                .flat_map(|q| q.keys.iter().map(|k| &**k))
                .collect()
        } else {
            Vec::new()
        };
        let native = Lua::Batch
            .native()
            .filter(|_| native && batch.len() <= ratelimit_vocab::native::MAX_BATCH)
            .map(|command| Native {
                command,
                keys: &keys,
                counted: true,
                args: &packed,
                after: &[],
                reply: unpacked_each,
            });
        let reply: Value = self
            .eval_or_native(Lua::Batch, &[first], &script, native)
            .await?;
        match reply {
            Value::Array(items) if items.len() == batch.len() => Ok(items),
            other => Err(RedisError::from((
                redis::ErrorKind::Parse,
                "batch.lua answered in an unexpected shape",
                format!("{other:?}"),
            ))),
        }
    }
}

/// A batch's calls as `batch.lua` and the module's `batch` read them: their number, then per
/// call the number of its limits and its specs; a one-limit call under the previous
/// one-limit call's limit (the usual case: one limit, many keys) goes as 0, its spec being in
/// place. `with_keys`: each call's keys among them (`batch.lua`), else declared apart (the
/// module's).
fn write_calls<W: RedisWrite + ?Sized>(out: &mut W, batch: &[Queued], with_keys: bool) {
    batch.len().write_redis_args(out);
    let mut previous: Option<&[Spec]> = None;
    for queued in batch {
        match queued.keys.as_slice() {
            [key] if previous == Some(queued.specs.as_slice()) => {
                0.write_redis_args(out);
                if with_keys {
                    out.write_arg(key.as_bytes());
                }
            }
            keys => {
                keys.len().write_redis_args(out);
                if with_keys {
                    for key in keys {
                        out.write_arg(key.as_bytes());
                    }
                }
                queued.specs.as_slice().write_redis_args(out);
                previous = (keys.len() == 1).then_some(queued.specs.as_slice());
            }
        }
    }
}

/// One call's entry in `batch.lua`'s reply: its own script's reply, or the text of the error
/// its decision raised.
fn call_reply(item: Value) -> Result<Value, RedisError> {
    let failed = |text: String| {
        RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "the decision script failed",
            text,
        ))
    };
    match item {
        // The module's `batch` answers a call's error as an error.
        Value::ServerError(e) => Err(e.into()),
        Value::BulkString(text) => Err(failed(String::from_utf8_lossy(&text).into_owned())),
        Value::SimpleString(text) => Err(failed(text)),
        reply => Ok(reply),
    }
}
