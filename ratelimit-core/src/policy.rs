//! What happens when the store fails: the failure policy, the per-call deadline, a circuit
//! breaker (an outage costs one deadline, not one per call), and the degraded-mode log lines.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::algorithm::OfLimit as _;
use crate::decision::Decision;
use crate::decision::Source;
use crate::deny_cache::DenyCache;
use crate::errors::Error;
use crate::limit::{FailurePolicy, Limit};
use crate::pipeline::check::Check;
use crate::store::MemoryStore;

/// `"deny"`, `"allow"` or `"fallback"`, as a policy's name is written.
impl std::str::FromStr for FailurePolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        FailurePolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let unknown = ratelimit_vocab::Unknown::<ratelimit_vocab::FailurePolicy>::new(s);
                Error::Config(unknown.to_string())
            })
    }
}

/// The per-call deadline when none is set.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);

/// How long the circuit stays open after a failure before one call probes the store again.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_millis(200);

/// Whether a call may go to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// The store is healthy.
    Closed,
    /// The store failed recently; this call tests whether it is back.
    Probe,
    /// The store failed recently; decide without it.
    Open,
}

/// How long after the store came back this process grants no more than its share of a
/// concurrency limit (as the fallback would), on top of what the store grants: long enough
/// for every instance to have told the store again of the calls it runs (its next heartbeat,
/// which may wait out a timeout, and one more: asserted in `fleet`), should the store have
/// come back without them.
pub(crate) const HOLD_OFF: Duration = Duration::from_secs(3);

/// When the store came back after failing, as this process saw it (a call or a heartbeat that
/// failed, then one that was answered; or a heartbeat that found this instance missing from
/// the set of live instances: the store lost its data). A store that comes back may have lost
/// the concurrency slots it granted, and never knew of those the fallback granted: the guards
/// of the calls that hold them renew them at once (a renewal writes back a slot it does not
/// find), and until [`HOLD_OFF`] has passed the store's grants are also held to this
/// instance's share.
#[derive(Debug)]
pub(crate) struct Recovery {
    origin: std::time::Instant,
    /// Milliseconds since `origin` of the last return, 0 for never.
    at_ms: std::sync::atomic::AtomicU64,
    /// Bumped at each return: what the guards of running calls wait on.
    back: tokio::sync::watch::Sender<u64>,
}

impl Default for Recovery {
    fn default() -> Recovery {
        Recovery {
            origin: std::time::Instant::now(),
            at_ms: std::sync::atomic::AtomicU64::new(0),
            back: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Recovery {
    /// The store is back (or may have lost what it held).
    pub(crate) fn came_back(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.at_ms.store(ms, Ordering::Release);
        self.back.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether the store came back less than [`HOLD_OFF`] ago.
    pub(crate) fn holding_off(&self) -> bool {
        let at = self.at_ms.load(Ordering::Acquire);
        at != 0 && u128::from(at) + HOLD_OFF.as_millis() > self.origin.elapsed().as_millis()
    }

    /// A receiver that sees each return of the store from now on.
    pub(crate) fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.back.subscribe()
    }
}

/// One circuit breaker.
#[derive(Debug, Default)]
struct Circuit {
    /// Milliseconds since `origin` until which the circuit is open; 0 when closed.
    open_until: AtomicU64,
    probing: AtomicBool,
    /// Failures on this circuit so far in which the store's answer never came
    /// ([`Error::is_unreachable`]): a call's success speaks for the store's health only if
    /// none came after the call was sent (see [`Resilience::succeeded`]).
    unreachable: AtomicU64,
    /// What this process hears of the store on this circuit ([`silent_for`]).
    hearing: Hearing,
}

/// Hash slots per circuit on Redis Cluster: nodes own contiguous slot ranges, so a failed
/// node opens its own circuits and at most two it shares with a neighbour.
pub(crate) const SLOTS_PER_CIRCUIT: u16 = 64;

/// The failure handling of one limiter.
#[derive(Debug)]
pub(crate) struct Resilience {
    pub(crate) policy: FailurePolicy,
    pub(crate) deadline: Option<Duration>,
    cooldown: Option<Duration>,
    origin: Instant,
    /// One circuit per group of hash slots on Redis Cluster (a failed master opens only the
    /// circuits of its own slots), one in all elsewhere.
    circuits: Box<[Circuit]>,
    /// How many circuits are open.
    open: AtomicUsize,
    degraded: AtomicBool,
    fallback: OnceLock<MemoryStore>,
    /// Live instances sharing the store, as last seen by the heartbeat (at least 1).
    pub(crate) instances: Arc<AtomicU32>,
    /// The fleet's record of the store's returns, which leaving degraded mode adds to.
    pub(crate) recovery: Option<Arc<Recovery>>,
    label: Box<str>,
}

impl Resilience {
    pub(crate) fn new(
        policy: FailurePolicy,
        deadline: Option<Duration>,
        cooldown: Option<Duration>,
        circuits: usize,
        label: &str,
        fallback: Option<MemoryStore>,
    ) -> Resilience {
        let fallback = fallback.map(OnceLock::from).unwrap_or_default();
        if let Some(store) = fallback.get() {
            store.keep_full_buckets();
        }
        Resilience {
            policy,
            deadline,
            cooldown,
            origin: Instant::now(),
            circuits: (0..circuits.max(1)).map(|_| Circuit::default()).collect(),
            open: AtomicUsize::new(0),
            degraded: AtomicBool::new(false),
            fallback,
            instances: Arc::new(AtomicU32::new(1)),
            recovery: None,
            label: label.into(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    pub(crate) fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Relaxed)
    }

    /// The circuit of a call: of its slot group on Redis Cluster, else the only one.
    pub(crate) fn circuit_of(&self, slot: impl FnOnce() -> u16) -> usize {
        if self.circuits.len() == 1 {
            return 0;
        }
        usize::from(slot() / SLOTS_PER_CIRCUIT) % self.circuits.len()
    }

    pub(crate) fn gate(&self, circuit: usize) -> Gate {
        let c = &self.circuits[circuit];
        let until = c.open_until.load(Ordering::Acquire);
        if until == 0 {
            return Gate::Closed;
        }
        if self.now_ms() < until || c.probing.swap(true, Ordering::AcqRel) {
            return Gate::Open;
        }
        Gate::Probe
    }

    /// Where a call on `circuit` under `limit` would take its tokens now, read without claiming
    /// the circuit's probe ([`gate`](Self::gate) does): the store while the circuit is closed,
    /// or due a probe that nobody makes yet; the limit's failure policy while it is open.
    pub(crate) fn source_now(&self, circuit: usize, limit: &Limit) -> Source {
        let c = &self.circuits[circuit];
        let until = c.open_until.load(Ordering::Acquire);
        if until == 0 || (self.now_ms() >= until && !c.probing.load(Ordering::Acquire)) {
            return Source::Store;
        }
        match limit.failure_policy().unwrap_or(self.policy) {
            FailurePolicy::Fallback => Source::Fallback,
            FailurePolicy::Allow => Source::FailOpen,
            FailurePolicy::Deny => Source::FailClosed,
        }
    }

    /// Runs a store call on `circuit` within the deadline, as this process could see it: the
    /// store is given up on only once it has answered none of this process's calls on that
    /// circuit for the deadline while this process was running ([`silent_for`]).
    pub(crate) async fn call<T>(
        &self,
        circuit: usize,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match self.deadline {
            Some(deadline) => silent_for(deadline, &self.circuits[circuit].hearing, call).await,
            None => call.await,
        }
    }

    /// How many times `circuit` found the store unreachable: read before a call is sent, and
    /// given back to [`succeeded`](Self::succeeded) with its answer.
    pub(crate) fn unreachable_count(&self, circuit: usize) -> u64 {
        self.circuits[circuit].unreachable.load(Ordering::Acquire)
    }

    /// A call on `circuit` that passed `gate` when the circuit had found the store
    /// unreachable `unreachable_before` times was answered by the store. A probe closes the
    /// circuit (the store answers again) and so, when no circuit is left open, ends degraded
    /// mode. Any other call closes nothing if the store was found unreachable while it was on
    /// its way: sent before Redis went away and answered after, its answer says nothing of
    /// the store now (closing on it would leave degraded mode and enter it again on the next
    /// failure of the same outage). After a failure the server answered (`NOPERM` for one
    /// key, a script's error), the answers of other calls do close it: the server is up.
    pub(crate) fn succeeded(&self, gate: Gate, circuit: usize, unreachable_before: u64) {
        let c = &self.circuits[circuit];
        if gate == Gate::Probe {
            c.probing.store(false, Ordering::Release);
        } else if c.unreachable.load(Ordering::Acquire) != unreachable_before {
            return;
        }
        if c.open_until.load(Ordering::Relaxed) != 0 && c.open_until.swap(0, Ordering::AcqRel) != 0
        {
            self.open.fetch_sub(1, Ordering::AcqRel);
        }
        if self.degraded.load(Ordering::Relaxed)
            && self.open.load(Ordering::Acquire) == 0
            && self.degraded.swap(false, Ordering::Relaxed)
        {
            // The fallback's buckets stay: a next outage goes on from what this one left
            // (or from what the store says since, if less), never from a fresh share.
            crate::observe::log!(info, limiter = %self.label, "rate-limit store is back; leaving degraded mode");
            crate::observe::degraded(&self.label, false);
            if let Some(recovery) = &self.recovery {
                recovery.came_back();
            }
        }
    }

    pub(crate) fn failed(&self, gate: Gate, circuit: usize, error: &Error) {
        let c = &self.circuits[circuit];
        if error.is_unreachable() {
            c.unreachable.fetch_add(1, Ordering::AcqRel);
        }
        if let Some(cooldown) = self.cooldown {
            let cooldown = u64::try_from(cooldown.as_millis()).unwrap_or(u64::MAX);
            let until = self.now_ms().saturating_add(cooldown);
            if c.open_until.swap(until, Ordering::AcqRel) == 0 {
                self.open.fetch_add(1, Ordering::AcqRel);
            }
        }
        if gate == Gate::Probe {
            c.probing.store(false, Ordering::Release);
        }
        if !self.degraded.load(Ordering::Relaxed) && !self.degraded.swap(true, Ordering::Relaxed) {
            crate::observe::log!(warn, limiter = %self.label,
                policy = ?self.policy,
                instances = self.instances.load(Ordering::Relaxed),
                %error,
                "rate-limit store failed; entering degraded mode"
            );
            crate::observe::degraded(&self.label, true);
        }
    }

    /// [`decide`](Self::decide) for several limits of one call, each by its own policy, all
    /// or nothing: a limit refused by `deny` vetoes the call, and the fallback's limits then
    /// take nothing either (they answer as they would).
    pub(crate) fn decide_all(
        &self,
        checks: &[Check<'_>],
        known: Option<&DenyCache>,
    ) -> Vec<Decision> {
        let policy = |limit: &Limit| limit.failure_policy().unwrap_or(self.policy);
        let veto = checks
            .iter()
            .any(|c| policy(c.limit) == FailurePolicy::Deny && !c.limit.is_shadow());
        let fallback: Vec<Check<'_>> = checks
            .iter()
            .filter(|c| policy(c.limit) == FailurePolicy::Fallback)
            .copied()
            .collect();
        let mut decided = if fallback.is_empty() {
            Vec::new()
        } else {
            let now = Instant::now();
            let short_of_full: Vec<Option<u64>> =
                fallback.iter().map(|c| self.seed(known, c, now)).collect();
            self.fallback_store().check_all_shared(
                &fallback,
                self.share(),
                veto,
                Some(&short_of_full),
            )
        }
        .into_iter();
        checks
            .iter()
            .map(|&check| match policy(check.limit) {
                FailurePolicy::Fallback => decided.next().map_or_else(
                    || self.decide(check, known),
                    |d| d.with_source(Source::Fallback),
                ),
                _ => self.decide(check, known),
            })
            .collect()
    }

    /// Gives back to the fallback what a call took there and gave up (a wait, a refund).
    pub(crate) fn give_back(&self, bucket: &str, limit: &Limit, cost: u32) {
        self.fallback_store()
            .give_back(bucket, limit, cost, self.share());
    }

    /// Settles in the fallback a call that took its estimate there (`(estimate, actual)`):
    /// this instance's share of the limit, as it took it.
    pub(crate) fn settle(&self, bucket: &str, limit: &Limit, settle: (u32, u32)) -> (u64, u64) {
        // A share is a token bucket's, which needs no time of the take.
        self.fallback_store()
            .settle(bucket, limit, self.share(), settle, 0)
    }

    /// Counts the concurrency slots a call the store admitted holds (the checks carry its
    /// holder) in the fallback, within each limit's whole max, or within this instance's
    /// share of it when `share`. The slots are written when every limit admits them.
    pub(crate) fn count_slots(&self, checks: &[Check<'_>], share: bool) -> Vec<Decision> {
        let instances = if share { self.share() } else { 1 };
        self.fallback_store()
            .check_all_shared(checks, instances, false, None)
    }

    /// Gives back the concurrency slots the call `holder` took in the fallback.
    pub(crate) fn release(&self, bucket: &str, holder: u64, cost: u64) {
        if let Some(store) = self.fallback.get() {
            store.release(bucket, holder, cost);
        }
    }

    /// Renews the leases of the concurrency slots the call `holder` holds in the fallback.
    pub(crate) fn renew(&self, bucket: &str, holder: u64, cost: u64, lease_us: u64) -> u64 {
        self.fallback
            .get()
            .map_or(0, |store| store.renew(bucket, holder, cost, lease_us))
    }

    /// Forgets what the fallback holds of `bucket` (it was reset).
    pub(crate) fn forget(&self, bucket: &str) {
        if let Some(store) = self.fallback.get() {
            store.remove(bucket);
        }
    }

    /// Where the fallback starts `bucket` under `limit` from, by what the store last said of
    /// it at `now`: for a bucket, how far from full it is (owed reservations included), in
    /// fine units of the limit's token bucket; for a concurrency limit, the most slots this
    /// instance may hold.
    ///
    /// A concurrency limit's share is not `max / n` on top of what the store granted: an
    /// instance that held 6 of 8 when Redis died, beside three that each took their 2, made
    /// 12 (issue 44). Each instance keeps the slots it held at the store's last answer and
    /// takes its part of what was free then: together, when the answers are recent, no more
    /// than the max. The slots of this instance's calls come back to it as they end.
    fn seed(&self, known: Option<&DenyCache>, check: &Check<'_>, now: Instant) -> Option<u64> {
        let (bucket, limit, cost) = (check.bucket, check.limit, check.cost);
        let known = known?.known(bucket, limit, now)?;
        if limit.is_concurrent() {
            let free = known.remaining / u64::from(self.share());
            return Some(known.held_here.saturating_add(free));
        }
        let p = crate::algorithm::token_bucket::Params::of(limit);
        let short = known.short_of_full(&p, now);
        let n = self.share();
        if n > 1 && limit.reserves() && short > p.tau {
            // Waiters queued when the store last answered this instance; other instances'
            // waiters may have queued behind them since, as far as the limit lets a call
            // wait, and this instance cannot know how far (issue 44: 434 and 420 departures
            // of at most 402 after a pause, 4 instances each starting from its own last
            // answer). So the fallback's first turn leaves where the longest wait the store
            // could have granted ends, and its share's pace goes on from there.
            let share = p.shared(n, cost);
            let first_turn = (share.tau + share.reach)
                .saturating_sub(u64::from(cost).saturating_mul(share.interval));
            return Some(short.max(first_turn));
        }
        Some(short)
    }

    /// The concurrency slots of `bucket` under `limit` that the store granted and this
    /// instance's calls hold now (their copies in the fallback).
    pub(crate) fn held_here(&self, bucket: &str, limit: &Limit) -> u64 {
        self.fallback.get().map_or(0, |store| {
            let held = store.peek_now(bucket, limit, 0);
            u64::from(limit.burst_capacity()).saturating_sub(held.remaining)
        })
    }

    /// How many instances the fallback divides a limit between.
    fn share(&self) -> u32 {
        self.instances.load(Ordering::Relaxed).max(1)
    }

    fn fallback_store(&self) -> &MemoryStore {
        self.fallback.get_or_init(|| {
            let store = MemoryStore::new();
            store.keep_full_buckets();
            store
        })
    }

    /// The failure policy's decision for a call the store could not take: the limit's own
    /// policy if it has one, else the limiter's. The fallback starts from what the store last
    /// said of the bucket (`known`), if anything.
    pub(crate) fn decide(&self, check: Check<'_>, known: Option<&DenyCache>) -> Decision {
        let (limit, cost) = (check.limit, check.cost);
        match limit.failure_policy().unwrap_or(self.policy) {
            FailurePolicy::Fallback => {
                let short_of_full = self.seed(known, &check, Instant::now());
                self.fallback_store()
                    .check_share(check, self.share(), short_of_full)
                    .with_source(Source::Fallback)
            }
            FailurePolicy::Allow => Decision::new(
                true,
                u64::from(limit.burst_capacity()),
                *limit,
                cost,
                Duration::ZERO,
                Duration::ZERO,
            )
            .with_source(Source::FailOpen),
            FailurePolicy::Deny => Decision::new(
                false,
                0,
                *limit,
                cost,
                self.cooldown
                    .unwrap_or(DEFAULT_COOLDOWN)
                    .max(Duration::from_secs(1)),
                Duration::ZERO,
            )
            .with_source(Source::FailClosed),
        }
    }
}

/// A store that answers nothing at all for this many deadlines is given up on, whatever this
/// process saw of its own running.
pub(crate) const OVERTIME_CAP: u32 = 20;

/// How many times its slowest recent answer the store may stay silent before it is given up
/// on (as TCP waits several round trips before it retransmits).
const PATIENCE: u32 = 4;

/// What this process hears of the store on one circuit: its answers to any of this process's
/// calls, and how long the slowest of them took in this second and the last.
#[derive(Debug)]
pub(crate) struct Hearing {
    origin: Instant,
    answers: AtomicU64,
    /// The second (since `origin`) `slowest_us[0]` is of; `slowest_us[1]` is the one before.
    second: AtomicU64,
    slowest_us: [AtomicU64; 2],
}

impl Default for Hearing {
    fn default() -> Hearing {
        Hearing {
            origin: Instant::now(),
            answers: AtomicU64::new(0),
            second: AtomicU64::new(0),
            slowest_us: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }
}

impl Hearing {
    /// The store answered a call that took `took`.
    fn heard(&self, took: Duration) {
        self.answers.fetch_add(1, Ordering::AcqRel);
        let second = self.origin.elapsed().as_secs();
        let was = self.second.load(Ordering::Acquire);
        if second != was && self.second.swap(second, Ordering::AcqRel) == was {
            // A new second: this one's slowest starts afresh; the last one's is kept only if
            // it was the second just before.
            let last = if second == was + 1 {
                self.slowest_us[0].load(Ordering::Acquire)
            } else {
                0
            };
            self.slowest_us[1].store(last, Ordering::Release);
            self.slowest_us[0].store(0, Ordering::Release);
        }
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.slowest_us[0].fetch_max(us, Ordering::AcqRel);
    }

    /// How long the store may stay silent before it is given up on: the deadline, or
    /// [`PATIENCE`] times the slowest answer of this second and the last if that is longer.
    fn patience(&self, deadline: Duration) -> Duration {
        let slowest = self.slowest_us[0]
            .load(Ordering::Acquire)
            .max(self.slowest_us[1].load(Ordering::Acquire));
        deadline.max(Duration::from_micros(slowest).saturating_mul(PATIENCE))
    }
}

/// `call`'s answer, or [`Error::Timeout`] once the store has answered none of this process's
/// calls on the circuit (`hearing`) while this process ran, for the deadline or, when its
/// answers have lately been slower, for [`PATIENCE`] times the slowest; or once it has
/// answered nothing at all for [`OVERTIME_CAP`] deadlines.
///
/// A busy host is not a dead store (issue 44: 509 fallback admissions beside 1,724 by Redis
/// on one key in 10 s of a loaded 2-core machine). A plain timeout gave up on a store that
/// was answering, and every call the failure policy then decided was admitted by the fallback
/// beside what the store admitted to everyone else. Three things made it give up:
/// - This process was not running. When it runs again, the reply is waiting in the socket,
///   but the timer's task is often polled before the connection's reader has read it (Tokio
///   runs the task it woke last first). So the deadline is counted in steps of a tenth of it
///   (1 to 20 ms): a step whose timer fired late (by more than a step) says this process was
///   not running, and the silence starts again. Only steps on time in a row, this process
///   running all along and hearing nothing, count.
/// - The store had a queue before this call: any answer to any of this process's calls on
///   the circuit starts the silence again. The store is alive, and this call's turn comes.
/// - Redis was not running: starved of CPU beside a build, it answers in bursts tens of
///   milliseconds apart, while this process, mostly waiting, runs on time. So the silence
///   allowed grows with how slow the store's answers have been in the last second or two.
///
/// A store that answers nothing while this process runs (gone, paused, partitioned) is given
/// up on at the deadline, as before, when its answers were quick. An answer that comes after
/// the deadline still decides: the store took its tokens, and deciding by the failure policy
/// beside it would take twice. A call given up on may still reach the store and take its
/// tokens there: that leaves the bucket emptier than the calls admitted say, never fuller.
pub(crate) async fn silent_for<T>(
    deadline: Duration,
    hearing: &Hearing,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut call = std::pin::pin!(call);
    let step = (deadline / 10).clamp(Duration::from_millis(1), Duration::from_millis(20));
    let cap = deadline.saturating_mul(OVERTIME_CAP);
    let sent = tokio::time::Instant::now();
    let mut heard = hearing.answers.load(Ordering::Acquire);
    let mut since = sent;
    let mut silent = Duration::ZERO;
    loop {
        let armed = tokio::time::Instant::now();
        match tokio::time::timeout(step, call.as_mut()).await {
            Ok(answer) => {
                if answer
                    .as_ref()
                    .map_or_else(|e| !e.is_unreachable(), |_| true)
                {
                    hearing.heard(sent.elapsed());
                }
                return answer;
            }
            Err(_) => {
                let now = hearing.answers.load(Ordering::Acquire);
                if now != heard {
                    heard = now;
                    since = tokio::time::Instant::now();
                    silent = Duration::ZERO;
                } else if armed.elapsed() <= step * 2 + Duration::from_millis(1) {
                    silent += step;
                } else {
                    // This process was not running: what it heard before says nothing of now.
                    silent = Duration::ZERO;
                }
                if silent >= hearing.patience(deadline) || since.elapsed() >= cap {
                    return Err(Error::Timeout(deadline));
                }
            }
        }
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;
    use std::io::Write as _;
    use tokio::io::AsyncReadExt as _;

    /// The runtime of a busy host's process: one worker, which a task can hold as the kernel
    /// would by not scheduling the process.
    fn one_worker() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    /// The reply reaches the socket in time, while this process does not run (its only worker
    /// held past the deadline); the connection's reader is a task of its own, as redis-rs's
    /// is. When the worker is free, the timer and the reader wake together: the answer decides,
    /// not the deadline. (A plain `tokio::time::timeout` polls the timer's task first and gave
    /// up on it every time.)
    #[test]
    fn an_answer_that_came_while_this_process_was_not_running_decides() {
        one_worker().block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut store = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut socket, _) = listener.accept().await.unwrap();
            let (reply, replied) = tokio::sync::oneshot::channel::<u8>();
            // The connection's reader.
            tokio::spawn(async move {
                let mut byte = [0u8; 1];
                socket.read_exact(&mut byte).await.unwrap();
                let _ = reply.send(byte[0]);
            });
            let deadline = Duration::from_millis(50);
            let hearing: &'static Hearing = Box::leak(Box::default());
            let asked = tokio::spawn(silent_for(deadline, hearing, async move {
                replied
                    .await
                    .map_err(|_| Error::BadReply("no reply".to_owned()))
            }));
            // Let the call arm its timer, then hold the worker past the deadline while the
            // store answers.
            tokio::task::yield_now().await;
            let (answered, held) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                held.recv().unwrap();
                store.write_all(&[7]).unwrap();
            });
            tokio::spawn(async move {
                answered.send(()).unwrap();
                std::thread::sleep(deadline * 4);
            })
            .await
            .unwrap();
            assert_eq!(asked.await.unwrap().unwrap(), 7);
        });
    }

    /// A store that stays silent while this process runs is given up on at the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_silent_store_is_given_up_on_at_the_deadline() {
        let deadline = Duration::from_millis(50);
        let hearing = Hearing::default();
        let started = tokio::time::Instant::now();
        let answer = silent_for(
            deadline,
            &hearing,
            std::future::pending::<Result<(), Error>>(),
        );
        assert!(matches!(answer.await, Err(Error::Timeout(d)) if d == deadline));
        // On the paused clock every step fires on time: exactly the deadline, in steps.
        assert_eq!(started.elapsed(), deadline);
        // An answer after the deadline, on a running process, from a store silent meanwhile.
        let late = silent_for(deadline, &hearing, async {
            tokio::time::sleep(deadline + Duration::from_millis(5)).await;
            Ok(())
        });
        assert!(late.await.is_err());
        // An answer before it decides, and counts as the store's.
        let early = silent_for(deadline, &hearing, async {
            tokio::time::sleep(deadline - Duration::from_millis(5)).await;
            Ok(3)
        });
        assert_eq!(early.await.unwrap(), 3);
        assert_eq!(hearing.answers.load(Ordering::Relaxed), 1);
    }

    /// A store that answers this process's other calls while one waits (a queue before it)
    /// is alive: the call is waited for, past the deadline, and its answer decides.
    #[tokio::test(start_paused = true)]
    async fn a_store_that_answers_other_calls_is_waited_for() {
        let deadline = Duration::from_millis(50);
        let hearing: &'static Hearing = Box::leak(Box::default());
        let others = tokio::spawn(async move {
            for _ in 0..40 {
                tokio::time::sleep(Duration::from_millis(30)).await;
                hearing.heard(Duration::from_micros(100));
            }
        });
        let slow = silent_for(deadline, hearing, async {
            tokio::time::sleep(deadline * 10).await;
            Ok(7)
        });
        assert_eq!(slow.await.unwrap(), 7);
        others.abort();
    }

    /// A store whose answers have lately taken 60 ms (Redis starved of CPU) may stay silent
    /// for 4 times that before it is given up on; one that was quick, for the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_store_that_has_been_slow_is_given_more_time() {
        let deadline = Duration::from_millis(50);
        let hearing = Hearing::default();
        hearing.heard(Duration::from_millis(60));
        assert_eq!(hearing.patience(deadline), Duration::from_millis(240));
        let slow = silent_for(deadline, &hearing, async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(5)
        });
        assert_eq!(slow.await.unwrap(), 5);
        let quick = Hearing::default();
        quick.heard(Duration::from_micros(300));
        assert_eq!(quick.patience(deadline), deadline);
        let started = tokio::time::Instant::now();
        let silent = silent_for(
            deadline,
            &quick,
            std::future::pending::<Result<(), Error>>(),
        );
        assert!(silent.await.is_err());
        assert_eq!(started.elapsed(), deadline);
    }
}

#[cfg(test)]
mod fallback_tests {
    use super::*;
    use crate::clock::ManualClock;

    /// `n` instances in fallback, each with its own memory on one shared clock.
    fn fleet(n: u32, clock: &ManualClock) -> Vec<Resilience> {
        (0..n)
            .map(|_| {
                let store = MemoryStore::with_clock(clock.clone());
                let r =
                    Resilience::new(FailurePolicy::Fallback, None, None, 1, "test", Some(store));
                r.instances.store(n, Ordering::Relaxed);
                r
            })
            .collect()
    }

    /// However many instances share a limit, and whatever a call costs, the fleet admits no
    /// more than the limit (burst + rate x elapsed), and every refusal's retry_after, waited
    /// exactly, is admitted.
    #[test]
    fn shares_never_over_admit_and_every_retry_after_comes_true() {
        let limit = Limit::per_second(10).burst(9);
        for n in [2, 3, 7, 9, 10, 100] {
            for cost in [1, 2, 4, 9] {
                let clock = ManualClock::new();
                let instances = fleet(n, &clock);
                let mut admitted = 0u64;
                // Per instance: when it was promised a token.
                let mut promised: Vec<Option<u64>> = vec![None; instances.len()];
                let step_us = 1_000;
                for t in 0..3_000u64 {
                    for (i, r) in instances.iter().enumerate() {
                        let d = r.decide(Check::new("k", &limit, cost), None);
                        if let Some(at) = promised[i]
                            && t * step_us >= at
                        {
                            assert!(d.allowed, "n {n} cost {cost}: promised at {at} us");
                        }
                        if d.allowed {
                            admitted += u64::from(cost);
                            promised[i] = None;
                        } else if promised[i].is_none() {
                            let wait = u64::try_from(d.retry_after.as_micros()).unwrap();
                            assert!(wait > 0, "a refusal says when");
                            assert!(wait < 100_000_000, "n {n} cost {cost}: {wait} us");
                            promised[i] = Some(t * step_us + wait);
                        }
                    }
                    let elapsed_us = (t + 1) * step_us;
                    let bound = 9 + (elapsed_us * 10).div_ceil(1_000_000);
                    assert!(
                        admitted <= bound,
                        "n {n} cost {cost}: {admitted} admitted by {elapsed_us} us, bound {bound}"
                    );
                    clock.advance(Duration::from_micros(step_us));
                }
                // An instance earns `cost` tokens, from its share of 9, at 10/n per second.
                if u64::from(cost * n) <= 9 + 25 {
                    assert!(
                        admitted > 0,
                        "n {n} cost {cost}: the fallback admits at the rate"
                    );
                }
            }
        }
    }

    /// A call sent before the store was found unreachable and answered after says nothing of
    /// the store now: it neither closes the circuit nor ends degraded mode. A probe sent after
    /// does, and so (with no circuit breaker) does any call sent after the failure.
    #[test]
    fn an_answer_to_a_call_sent_before_a_failure_leaves_the_store_failed() {
        let timeout = Error::Timeout(Duration::ZERO);
        // A cooldown of zero: the next call after a failure is the probe.
        let r = Resilience::new(
            FailurePolicy::Fallback,
            None,
            Some(Duration::ZERO),
            1,
            "t",
            None,
        );
        let before = r.unreachable_count(0);
        assert_eq!(r.gate(0), Gate::Closed);
        r.failed(Gate::Closed, 0, &timeout);
        assert!(r.is_degraded());
        r.succeeded(Gate::Closed, 0, before);
        assert!(r.is_degraded(), "a stale answer ends nothing");
        let probe = r.unreachable_count(0);
        assert_eq!(r.gate(0), Gate::Probe, "the circuit is still open");
        r.succeeded(Gate::Probe, 0, probe);
        assert!(!r.is_degraded(), "the probe's answer ends it");
        assert_eq!(r.gate(0), Gate::Closed);

        let r = Resilience::new(FailurePolicy::Fallback, None, None, 1, "t", None);
        let before = r.unreachable_count(0);
        r.failed(Gate::Closed, 0, &timeout);
        r.succeeded(Gate::Closed, 0, before);
        assert!(
            r.is_degraded(),
            "no circuit: a stale answer ends nothing either"
        );
        r.succeeded(Gate::Closed, 0, r.unreachable_count(0));
        assert!(
            !r.is_degraded(),
            "an answer to a call sent after the failure ends it"
        );

        // An error the server answered (here a reply of the wrong shape) says it is up: the
        // answers of calls sent before it still count.
        let r = Resilience::new(FailurePolicy::Fallback, None, None, 1, "t", None);
        let before = r.unreachable_count(0);
        r.failed(
            Gate::Closed,
            0,
            &Error::BadReply("a wrong shape".to_owned()),
        );
        assert!(r.is_degraded());
        r.succeeded(Gate::Closed, 0, before);
        assert!(!r.is_degraded(), "the server answered both");
    }

    /// 4 instances share a concurrency limit of 8; Redis granted 6 slots to one of them, whose
    /// calls still run when it dies, and told each instance so in its last answer (2 free).
    /// The fallback then holds the fleet to 8, not to 6 plus a share of 2 for each of the
    /// three others (issue 44: 10 held at once, of at most 8 + 3 x 2); the busy instance's
    /// slots come back to it as its calls end.
    #[test]
    fn a_concurrency_limit_stays_within_its_max_when_redis_dies() {
        let clock = ManualClock::new();
        let limit = Limit::concurrent(8);
        let instances = fleet(4, &clock);
        let mut holder = 0u64;
        let mut next = || {
            holder += 1;
            holder
        };
        // The store's grants to the busy instance, counted in its fallback as they ran.
        let busy: Vec<u64> = (0..6).map(|_| next()).collect();
        for h in &busy {
            let copies = instances[0].count_slots(&[Check::new("k", &limit, 1).held_by(*h)], false);
            assert!(copies[0].allowed);
        }
        let now = Instant::now();
        let caches: Vec<DenyCache> = instances
            .iter()
            .map(|r| {
                let cache = DenyCache::new(16);
                let answer = answered(limit, true, 2, Duration::from_secs(30));
                cache.remember_slots("k", &answer, now, r.held_here("k", &limit));
                cache
            })
            .collect();
        let mut granted = 0;
        for (r, cache) in instances.iter().zip(&caches) {
            for _ in 0..10 {
                let d = r.decide(Check::new("k", &limit, 1).held_by(next()), Some(cache));
                assert_eq!(d.source, Source::Fallback);
                granted += u32::from(d.allowed);
            }
        }
        assert!(
            6 + granted <= 8,
            "{granted} granted by the fallbacks beside the 6 Redis granted"
        );
        // Two of the busy instance's calls end: their slots are its to give again.
        for h in &busy[..2] {
            instances[0].release("k", *h, 1);
        }
        let again = (0..4)
            .filter(|_| {
                instances[0]
                    .decide(Check::new("k", &limit, 1).held_by(next()), Some(&caches[0]))
                    .allowed
            })
            .count();
        assert_eq!(again, 2, "the slots its calls gave back");
        // Without what the store said, each instance has its share, as before.
        let fresh = fleet(4, &clock);
        let alone = (0..4)
            .filter(|_| {
                fresh[1]
                    .decide(Check::new("k", &limit, 1).held_by(next()), None)
                    .allowed
            })
            .count();
        assert_eq!(alone, 2);
    }

    /// Repeated short outages: each goes on from what the last left, never from a fresh share.
    #[test]
    fn an_outage_that_ends_leaves_the_next_where_it_was() {
        let clock = ManualClock::new();
        let r = &fleet(3, &clock)[0];
        let limit = Limit::per_second(3).burst(3);
        // The share: one token at once, one per second.
        assert!(r.decide(Check::new("k", &limit, 1), None).allowed);
        assert!(!r.decide(Check::new("k", &limit, 1), None).allowed);
        r.failed(Gate::Closed, 0, &Error::Timeout(Duration::ZERO));
        r.succeeded(Gate::Closed, 0, r.unreachable_count(0));
        r.failed(Gate::Closed, 0, &Error::Timeout(Duration::ZERO));
        assert!(
            !r.decide(Check::new("k", &limit, 1), None).allowed,
            "no fresh share"
        );
        clock.advance(Duration::from_secs(1));
        assert!(
            r.decide(Check::new("k", &limit, 1), None).allowed,
            "the share's rate"
        );
        // A reset of the bucket empties what the fallback held of it.
        r.forget("k");
        assert!(r.decide(Check::new("k", &limit, 1), None).allowed);
    }

    fn answered(limit: Limit, allowed: bool, remaining: u64, reset_after: Duration) -> Decision {
        let retry = if allowed { Duration::ZERO } else { reset_after };
        Decision::new(allowed, remaining, limit, 1, retry, reset_after)
    }

    /// What the store last said of a bucket carries into the fallback: an exhausted bucket
    /// stays exhausted, and one with tokens left gives this instance its part of them.
    #[test]
    fn the_fallback_starts_from_what_the_store_last_said() {
        let clock = ManualClock::new();
        let limit = Limit::per_hour(20).burst(20);
        let now = Instant::now();
        let cache = DenyCache::new(1024);
        // Used up in Redis (the last admitted call left 0; 3 minutes to the next token).
        cache.remember(
            "global",
            &answered(limit, true, 0, Duration::from_secs(3_600)),
            now,
            now,
        );
        // 6 of 20 left.
        cache.remember(
            "user",
            &answered(limit, true, 6, Duration::from_secs(2_520)),
            now,
            now,
        );
        for n in [1, 2, 3] {
            let instances = fleet(n, &clock);
            let mut global = 0;
            let mut user = 0;
            for r in &instances {
                for _ in 0..40 {
                    global += u32::from(
                        r.decide(Check::new("global", &limit, 1), Some(&cache))
                            .allowed,
                    );
                    user += u32::from(
                        r.decide(Check::new("user", &limit, 1), Some(&cache))
                            .allowed,
                    );
                }
            }
            assert_eq!(global, 0, "{n} instances: nothing left to admit");
            // Each instance gets its part of what was left: 6/n tokens.
            assert_eq!(user, 6, "{n} instances: {user} admitted of 6 left");
            // Without what the store said: a fresh share each.
            let fresh: u32 = fleet(n, &clock)
                .iter()
                .map(|r| {
                    (0..40)
                        .map(|_| u32::from(r.decide(Check::new("global", &limit, 1), None).allowed))
                        .sum::<u32>()
                })
                .sum();
            assert!(fresh >= 18, "{n}: {fresh}");
        }
    }

    /// Calls a bucket reserved in the store (waiters leaving on their instants) are owed by
    /// the fallback too: it seeds the bucket as owing them, not as merely empty (issue 33:
    /// 20 reserved in Redis, then 10 paced from an empty bucket, an excess of 10).
    #[test]
    fn a_bucket_that_owes_reservations_is_seeded_owing_them() {
        let clock = ManualClock::new();
        let limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(10));
        let cache = DenyCache::new(16);
        let now = Instant::now();
        // The store's last answer: admitted, nothing left, full again in 2 s (20 reservations
        // of 100 ms queued ahead).
        cache.remember(
            "k",
            &answered(limit, true, 0, Duration::from_secs(2)),
            now,
            now,
        );
        for n in [1, 2] {
            let r = &fleet(n, &clock)[0];
            let d = r.decide(Check::new("k", &limit, 1), Some(&cache));
            assert!(d.allowed, "{n}: the call reserves its turn");
            // Its turn comes after the 20 owed, 2 s from the store's answer.
            assert!(
                d.retry_after + now.elapsed() >= Duration::from_secs(2),
                "{n} instances: the new call waits behind the 20 owed, not {:?}",
                d.retry_after
            );
        }
    }

    /// Waiters queue across 4 instances; the store's last answer to each was before the others
    /// queued more (here: 1 s owed, of the 2 s the limit lets a call wait). No departure the
    /// fallbacks grant comes before one the store could have promised, 2 s away.
    #[test]
    fn waiters_of_the_fleet_leave_before_any_the_fallback_grants() {
        let clock = ManualClock::new();
        let limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(2));
        let cache = DenyCache::new(16);
        let now = Instant::now();
        cache.remember(
            "k",
            &answered(limit, true, 0, Duration::from_secs(1)),
            now,
            now,
        );
        let mut earliest = Duration::MAX;
        for r in &fleet(4, &clock) {
            for _ in 0..40 {
                let d = r.decide(Check::new("k", &limit, 1), Some(&cache));
                if d.allowed {
                    earliest = earliest.min(d.retry_after + now.elapsed());
                }
            }
        }
        assert!(earliest < Duration::MAX, "the fallbacks grant turns");
        assert!(
            earliest >= Duration::from_secs(2),
            "a departure granted {earliest:?} from the store's answer, before its own waiters'"
        );
    }

    /// On one instance, an interval-refill bucket starts from what the store said (issue 33:
    /// 20 per hour used up, then 20 more from a fallback bucket that started full), and so
    /// does every algorithm: the windows too.
    #[test]
    fn every_algorithm_starts_from_what_the_store_said_on_one_instance() {
        use crate::limit::Algorithm;
        use crate::limit::Refill;
        let limits = [
            Limit::per_hour(20).refill(Refill::Interval),
            Limit::per_hour(20).algorithm(Algorithm::FixedWindow),
            Limit::per_hour(20).algorithm(Algorithm::SlidingWindow),
            Limit::per_hour(20).algorithm(Algorithm::SlidingLog),
            Limit::per_hour(20).algorithm(Algorithm::LeakyBucket),
        ];
        for limit in limits {
            let clock = ManualClock::new();
            let r = &fleet(1, &clock)[0];
            let cache = DenyCache::new(16);
            let now = Instant::now();
            // Used up, full again at the next refill, 30 minutes away.
            cache.remember(
                "k",
                &answered(limit, false, 0, Duration::from_secs(1_800)),
                now,
                now,
            );
            let admitted = (0..40)
                .filter(|_| r.decide(Check::new("k", &limit, 1), Some(&cache)).allowed)
                .count();
            assert_eq!(admitted, 0, "{limit:?}: nothing left until the refill");
        }
    }

    /// A fallback bucket left by an earlier outage that holds more than the store has said
    /// since (the fleet drained the bucket between the outages) starts from the store's word.
    #[test]
    fn the_store_drained_since_the_last_outage_wins() {
        let clock = ManualClock::new();
        let r = &fleet(1, &clock)[0];
        let limit = Limit::per_hour(10).burst(10);
        assert!(
            r.decide(Check::new("k", &limit, 1), None).allowed,
            "9 left in the fallback"
        );
        let cache = DenyCache::new(16);
        let now = Instant::now();
        cache.remember(
            "k",
            &answered(limit, false, 0, Duration::from_secs(3_600)),
            now,
            now,
        );
        assert!(!r.decide(Check::new("k", &limit, 1), Some(&cache)).allowed);
    }

    /// What another instance took after an instance's last answer is unknown to it: its share
    /// starts from what it heard, and the fleet's shares add up to what the bucket held when
    /// the store died plus that instance's part (1/n) of those takes, each share rounded down
    /// to whole tokens. This pins the bound docs/operations.md states: exactly this, so a
    /// share that started fresh, or from another instance's word, fails it.
    ///
    /// No share computed from an instance's own word alone can do better: with one instance
    /// that heard `held` and another that heard any more, the shares must add up to at most
    /// `held` whatever the second heard, so the second's share could only be nothing.
    #[test]
    fn takes_after_an_instance_last_heard_are_over_by_its_part_of_them() {
        let clock = ManualClock::new();
        let limit = Limit::per_hour(40).burst(40);
        let now = Instant::now();
        // 40 an hour: one token every 90 s, so nothing refills within the test.
        let heard = |remaining: u64| {
            let cache = DenyCache::new(16);
            let short = Duration::from_secs(90 * (40 - remaining));
            cache.remember("k", &answered(limit, true, remaining, short), now, now);
            cache
        };
        for (held, unheard) in [
            (29, 0),
            (29, 1),
            (29, 2),
            (28, 1),
            (28, 2),
            (28, 3),
            (20, 7),
        ] {
            let instances = fleet(2, &clock);
            // The first instance last heard `held + unheard` left; the second took `unheard`
            // after that, and heard `held`; then the store died.
            let caches = [heard(held + unheard), heard(held)];
            let admitted: u64 = instances
                .iter()
                .zip(&caches)
                .map(|(r, cache)| {
                    (0..80)
                        .filter(|_| r.decide(Check::new("k", &limit, 1), Some(cache)).allowed)
                        .count() as u64
                })
                .sum();
            assert_eq!(
                admitted,
                (held + unheard) / 2 + held / 2,
                "{held} held, {unheard} taken unheard"
            );
            assert!(admitted <= held + unheard / 2);
        }
    }
}
