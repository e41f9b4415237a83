//! Time sources for the in-memory store. The Redis store never reads the caller's clock: its
//! script uses the Redis server's `TIME`.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A source of microseconds that never goes backwards.
pub trait Clock: Send + Sync + 'static {
    /// Microseconds since an arbitrary, fixed origin.
    fn now_micros(&self) -> u64;

    /// The wall clock now, in microseconds since the Unix epoch (UTC): where a quota by
    /// calendar period (`Limit::per_month`) finds its windows. The system's clock by default;
    /// a [`ManualClock`] tells its own.
    fn utc_micros(&self) -> u64 {
        system_utc_micros()
    }
}

/// The system's wall clock, in microseconds since the Unix epoch.
fn system_utc_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The process's monotonic clock (immune to wall-clock steps).
///
/// It reads the CPU's time-stamp counter where that is invariant (through `quanta`, the clock
/// governor uses too), a few nanoseconds against about 30 for `clock_gettime` on a VM, and the
/// operating system's monotonic clock elsewhere.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    /// The raw reading at the origin.
    origin: u64,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> MonotonicClock {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        MonotonicClock { clock, origin }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

/// Keeps the origin away from zero so that "expires at" arithmetic never underflows.
const ORIGIN_MICROS: u64 = 1 << 40;

impl Clock for MonotonicClock {
    #[inline]
    fn now_micros(&self) -> u64 {
        // The raw counter scaled to nanoseconds in one multiply and shift; no `Duration`.
        ORIGIN_MICROS + self.clock.delta_as_nanos(self.origin, self.clock.raw()) / 1000
    }
}

/// A clock that moves only when told to: deterministic tests of long units (an hour, a day)
/// without waiting. Clones share the same time.
///
/// ```
/// use ratelimit_core::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let t0 = clock.now_micros();
/// clock.advance(Duration::from_secs(3600));
/// assert_eq!(clock.now_micros() - t0, 3_600_000_000);
/// ```
#[derive(Clone)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
    /// The wall clock (µs since the epoch, UTC) at the origin.
    utc_at_origin: u64,
}

impl ManualClock {
    /// A clock at an arbitrary, fixed starting time, whose wall clock starts at the system's
    /// now.
    pub fn new() -> ManualClock {
        ManualClock::starting_at_utc(system_utc_micros())
    }

    /// A clock whose wall clock starts at `utc_micros` (µs since the Unix epoch, UTC): a
    /// quota by calendar period tested at any date, its month's last second included.
    ///
    /// ```
    /// use ratelimit_core::clock::{Clock, ManualClock};
    /// use std::time::Duration;
    ///
    /// // 2028-02-29 23:59:59 UTC.
    /// let clock = ManualClock::starting_at_utc(1_835_481_599_000_000);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(clock.utc_micros(), 1_835_481_600_000_000);
    /// ```
    pub fn starting_at_utc(utc_micros: u64) -> ManualClock {
        ManualClock {
            micros: Arc::new(AtomicU64::new(ORIGIN_MICROS)),
            utc_at_origin: utc_micros,
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_micros()).unwrap_or(u64::MAX >> 1);
        self.micros.fetch_add(by, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("micros", &self.micros.load(Ordering::SeqCst))
            .finish()
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> u64 {
        self.micros.load(Ordering::SeqCst)
    }

    fn utc_micros(&self) -> u64 {
        self.utc_at_origin + (self.now_micros() - ORIGIN_MICROS)
    }
}
