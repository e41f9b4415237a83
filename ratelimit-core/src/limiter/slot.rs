//! The guard of an admitted call's concurrency slots ([`Slot`]): it renews their leases while
//! the call runs and gives them back however the call ends, where they are held (the memory
//! store, the failure policy's fallback, Redis).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::decision::Decision;
use crate::decision::Source;
use crate::errors::Error;
use crate::fleet::waiters::wake;
use crate::limiter::inner::Engine;
use crate::limiter::inner::RateLimiter;
use crate::limiter::inner::Remote;
use crate::limiter::inner::RemoteStore;
use crate::limiter::inner::on_tokio;
use crate::naming::key_slot;
use crate::pipeline::check::Check;

/// The slots of one admitted call under its concurrency limits: given back when dropped
/// (whether the call returned, failed, panicked or was cancelled), by one script per limit
/// on Redis, spawned on the current Tokio runtime (with none, the lease frees them). While
/// it lives, a task renews the slots' leases every third of the lease, so that a long call
/// keeps them. [`release`](Slot::release) gives them back and says whether that worked.
#[must_use = "the slots are given back when this guard is dropped: keep it while the call runs"]
pub struct Slot {
    pub(crate) held: Option<Held>,
}

pub(crate) struct Held {
    pub(crate) limiter: RateLimiter,
    pub(crate) holder: u64,
    pub(crate) parts: Arc<[Part]>,
    pub(crate) renewal: Option<tokio::task::AbortHandle>,
}

/// One concurrency limit of the call: its bucket, its lease, and where the call may hold
/// members of it (the store, the failure policy's fallback).
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) bucket: Box<str>,
    pub(crate) lease_us: u64,
    /// The slots the call takes (its members 1 ..= cost).
    pub(crate) cost: u64,
    /// Whether the call may hold members in the store: while it is being asked (a call
    /// cancelled then may have left a ticket), and once it answered.
    pub(crate) in_store: bool,
    /// Whether the store has answered this call (its members are there).
    pub(crate) answered: bool,
    /// Whether the call holds members in this process's fallback: the fallback admitted it,
    /// or the store did and they are its copy here (so that a fallback counts the calls this
    /// process runs under the store's slots).
    pub(crate) in_fallback: bool,
    /// Set before the first renewal that may write the call's members to the store (a call
    /// the fallback admitted, written back when the store returns): from then on a release
    /// asks the store too.
    pub(crate) told_store: Arc<AtomicBool>,
}

impl RateLimiter {
    /// Gives back the call `holder`'s members of `part` where they live in this process (the
    /// memory store, the fallback); `true` when the store is remote and still to be asked.
    fn release_here(&self, holder: u64, part: &Part) -> bool {
        if part.in_fallback {
            self.inner
                .resilience
                .release(&part.bucket, holder, part.cost);
        }
        let remote = match &self.inner.engine {
            Engine::Local(store) => {
                store.release(&part.bucket, holder, part.cost);
                false
            }
            Engine::Remote(Remote {
                store: RemoteStore::Redis(_),
                ..
            }) => part.in_store || part.told_store.load(Ordering::Acquire),
            _ => false,
        };
        if !remote {
            wake(&part.bucket);
        }
        remote
    }

    /// Gives back the call `holder`'s members of `bucket` in Redis: one script.
    async fn release_remote(&self, holder: u64, part: &Part) -> Result<(), Error> {
        let bucket = &*part.bucket;
        let Engine::Remote(Remote {
            store: RemoteStore::Redis(store),
            fleet,
            ..
        }) = &self.inner.engine
        else {
            return Ok(());
        };
        on_tokio()?;
        let channel = match fleet {
            Some(member) => member.channel().to_owned(),
            None => crate::fleet::resets_channel(&self.inner.prefix),
        };
        let resilience = &self.inner.resilience;
        let circuit = resilience.circuit_of(|| key_slot(bucket.as_bytes()));
        let released = resilience
            .call(
                circuit,
                store.release_slot(bucket, holder, part.cost, &channel),
            )
            .await;
        wake(bucket);
        released.map(drop)
    }

    /// Renews the leases of the call `holder`'s slots of `part` (writing them where they are
    /// missing: the call runs); the slots that were live in the store, or in memory.
    async fn renew_part(&self, holder: u64, part: &Part) -> Result<u64, Error> {
        if part.in_fallback {
            self.inner
                .resilience
                .renew(&part.bucket, holder, part.cost, part.lease_us);
        }
        match &self.inner.engine {
            Engine::Local(store) => Ok(store.renew(&part.bucket, holder, part.cost, part.lease_us)),
            // The store's slots, and the fallback's too: a store that comes back (perhaps
            // without its data) learns of every call this process runs.
            Engine::Remote(Remote {
                store: RemoteStore::Redis(store),
                ..
            }) if part.in_store || part.in_fallback => {
                part.told_store.store(true, Ordering::Release);
                let resilience = &self.inner.resilience;
                let circuit = resilience.circuit_of(|| key_slot(part.bucket.as_bytes()));
                resilience
                    .call(
                        circuit,
                        store.renew_slot(&part.bucket, holder, part.cost, part.lease_us),
                    )
                    .await
            }
            _ => Ok(0),
        }
    }
}

/// How often a call whose slots only the fallback granted tries to write them to the store.
const TELL_STORE_EVERY: Duration = Duration::from_millis(200);

impl Slot {
    pub(crate) fn parts(&self) -> &[Part] {
        self.held.as_ref().map_or(&[], |h| &h.parts)
    }

    pub(crate) fn shortest_lease(&self) -> Duration {
        let us = self.parts().iter().map(|p| p.lease_us).min().unwrap_or(0);
        Duration::from_micros(us).max(Duration::from_millis(3))
    }

    pub(crate) fn parts_mut(&mut self) -> &mut [Part] {
        self.held
            .as_mut()
            .and_then(|h| Arc::get_mut(&mut h.parts))
            .map_or(&mut [], |parts| parts)
    }

    /// The store is being asked (`remote`): a call cancelled now may leave a ticket there.
    pub(crate) fn asking(&mut self, remote: bool) {
        for part in self.parts_mut() {
            part.in_store = remote;
        }
    }

    /// Records where each concurrency limit of the call was decided: the store, or the
    /// fallback (the other policies hold nothing anywhere).
    pub(crate) fn note_sources(&mut self, decisions: &[Decision], checks: &[Check<'_>]) {
        let parts = self.parts_mut();
        for (d, check) in decisions.iter().zip(checks) {
            if let Some(part) = parts.iter_mut().find(|p| *p.bucket == *check.bucket) {
                match d.source {
                    Source::Store => part.answered = true,
                    Source::Fallback => part.in_fallback = true,
                    _ => {}
                }
                part.in_store = part.answered;
            }
        }
    }

    /// Forgets the call's parts: it holds nothing.
    pub(crate) fn disarm(&mut self) {
        self.held = None;
    }

    /// Starts the task that renews the leases every third of the shortest one.
    pub(crate) fn renew_in_background(&mut self) {
        let every = self.shortest_lease() / 3;
        let Some(held) = &mut self.held else { return };
        let local = matches!(held.limiter.inner.engine, Engine::Local(_));
        // A call let through by a failure policy other than the fallback holds nothing.
        if !held
            .parts
            .iter()
            .any(|p| local || p.in_store || p.in_fallback)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            crate::observe::log!(
                warn,
                "redis-ratelimit cannot renew a concurrency slot's lease without a Tokio runtime: a call longer than the lease may lose its slot"
            );
            return;
        };
        let limiter = held.limiter.clone();
        let parts = Arc::clone(&held.parts);
        let holder = held.holder;
        let mut back = limiter
            .inner
            .resilience
            .recovery
            .as_ref()
            .map(|r| r.watch());
        // Slots that only the fallback granted are written to the store as soon as it
        // answers, not a third of a lease later: until then it may grant them again.
        let mut unknown_to_store = !local && parts.iter().any(|p| p.in_fallback && !p.answered);
        let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            // Each trouble is logged once, not every third of a lease while it lasts.
            let (mut lost, mut failing) = (false, false);
            loop {
                let pause = if unknown_to_store {
                    every.min(TELL_STORE_EVERY)
                } else {
                    every
                };
                match &mut back {
                    // The store came back: tell it of the call at once.
                    Some(back) => {
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            changed = back.changed() => if changed.is_err() {
                                tokio::time::sleep(pause).await;
                            },
                        }
                    }
                    None => tokio::time::sleep(pause).await,
                }
                let mut all_told = true;
                for part in parts.iter() {
                    match limiter.renew_part(holder, part).await {
                        // A slot the store granted and lost (its lease ended, or the store
                        // its data): written again.
                        Ok(0) if part.answered && !lost => {
                            lost = true;
                            failing = false;
                            crate::observe::log!(
                                warn,
                                "a call running under a concurrency limit had lost its slot in the store (its lease ended before it was renewed, or the store lost its data); it is counted again from now"
                            );
                        }
                        Ok(_) => failing = false,
                        Err(e) => {
                            all_told = false;
                            if !failing {
                                failing = true;
                                crate::observe::log!(warn, error = %e, "redis-ratelimit could not renew a concurrency slot's lease");
                            }
                        }
                    }
                }
                if all_told {
                    unknown_to_store = false;
                }
            }
        });
        held.renewal = Some(runtime.spawn(task).abort_handle());
    }

    /// Stops renewing the slots and never gives them back: they come back when their leases
    /// end, exactly as if this process had died holding them. For testing what a crash does
    /// to a fleet (`std::mem::forget` on the guard would keep renewing them).
    pub fn abandon(mut self) {
        if let Some(held) = self.held.take()
            && let Some(renewal) = &held.renewal
        {
            renewal.abort();
        }
    }

    /// Gives the slots back now, and says whether the store took them back (dropping the
    /// guard does the same, reporting a failure in the log only).
    ///
    /// # Errors
    /// The store's error; the lease then frees the slots.
    pub async fn release(mut self) -> Result<(), Error> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        if let Some(renewal) = &held.renewal {
            renewal.abort();
        }
        let mut result = Ok(());
        for part in held.parts.iter() {
            if held.limiter.release_here(held.holder, part)
                && let Err(e) = held.limiter.release_remote(held.holder, part).await
                && result.is_ok()
            {
                result = Err(e);
            }
        }
        result
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else { return };
        if let Some(renewal) = &held.renewal {
            renewal.abort();
        }
        let remote: Vec<Part> = held
            .parts
            .iter()
            .filter(|part| held.limiter.release_here(held.holder, part))
            .cloned()
            .collect();
        if remote.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            crate::observe::log!(
                warn,
                "redis-ratelimit could not give back a concurrency slot: no Tokio runtime to reach Redis; its lease frees it"
            );
            return;
        };
        let limiter = held.limiter;
        let holder = held.holder;
        let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            for part in remote {
                if let Err(e) = limiter.release_remote(holder, &part).await {
                    crate::observe::log!(warn, error = %e, "redis-ratelimit could not give back a concurrency slot; its lease frees it");
                }
            }
        });
        runtime.spawn(task);
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field(
                "buckets",
                &self.parts().iter().map(|p| &p.bucket).collect::<Vec<_>>(),
            )
            .field(
                "renewed",
                &self.held.as_ref().is_some_and(|h| h.renewal.is_some()),
            )
            .finish()
    }
}
