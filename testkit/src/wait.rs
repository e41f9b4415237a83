//! Waiting for an event in a test: the one way the tests wait for something to happen (a
//! heartbeat, a slot given back, a replica in sync), by asking until it has happened, never by
//! letting a fixed time pass.
//!
//! [`eventually`] (in a runtime) and [`eventually_blocking`] (outside one) wait for a
//! condition and fail the test, naming what was waited for, when it does not hold within
//! [`PATIENCE`]. [`poll`] and [`poll_blocking`] are the same wait with a bound of the
//! caller's that returns its value, or its last error, instead of failing: for a test that
//! times the event, or a setup that says what went wrong.
//!
//! The condition is asked at once, then after a pause that grows with the time waited (a
//! millisecond at first, a tenth of the time waited later, 20 ms at the most): an event that
//! comes at once is seen within a millisecond, and a slow one costs a server a few queries a
//! second.

use std::fmt::Display;
use std::panic::Location;
use std::time::{Duration, Instant};

/// How long [`eventually`] and [`eventually_blocking`] wait: generous, for what takes
/// milliseconds on an idle machine and may take seconds on a loaded one. The bound is for an
/// event that never comes, never a measure of how soon it came.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The pause before the next look, after `waited`.
fn pause(waited: Duration) -> Duration {
    (waited / 10).clamp(Duration::from_millis(1), Duration::from_millis(20))
}

/// What a wait that ran out says: the bound and the last thing `attempt` said, if anything.
fn ran_out(within: Duration, last: impl Display) -> String {
    match last.to_string() {
        last if last.is_empty() => format!("not within {within:?}"),
        last => format!("not within {within:?}: {last}"),
    }
}

/// Asks `attempt` until it returns `Ok`, for at most `within`: its value, or (`Err`) its last
/// error after the bound, as `not within <bound>: <error>`.
///
/// # Errors
/// When `attempt` returned no `Ok` within `within`.
pub async fn poll<T, E: Display>(
    within: Duration,
    mut attempt: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, String> {
    let start = Instant::now();
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(e) if start.elapsed() >= within => return Err(ran_out(within, e)),
            Err(_) => tokio::time::sleep(pause(start.elapsed())).await,
        }
    }
}

/// [`poll`] outside a runtime: the thread sleeps between two looks.
///
/// # Errors
/// When `attempt` returned no `Ok` within `within`.
pub fn poll_blocking<T, E: Display>(
    within: Duration,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<T, String> {
    let start = Instant::now();
    loop {
        match attempt() {
            Ok(value) => return Ok(value),
            Err(e) if start.elapsed() >= within => return Err(ran_out(within, e)),
            Err(_) => std::thread::sleep(pause(start.elapsed())),
        }
    }
}

/// Waits until `condition` holds, for at most [`PATIENCE`].
///
/// # Panics
/// When it does not: `<what>: not within 30s (waited at <the caller's file:line>)`.
#[track_caller]
pub fn eventually(
    what: impl Display,
    mut condition: impl AsyncFnMut() -> bool,
) -> impl Future<Output = ()> {
    let at = Location::caller();
    async move {
        if let Err(e) = poll(PATIENCE, async || condition().await.then_some(()).ok_or("")).await {
            panic!("{what}: {e} (waited at {at})");
        }
    }
}

/// Waits until `attempt` returns `Ok`, for at most [`PATIENCE`]; its value. Its error says
/// what was seen instead, for the message of a wait that ran out.
///
/// # Panics
/// When it does not: `<what>: not within 30s: <its last error> (waited at <file:line>)`.
#[track_caller]
pub fn eventually_ok<T, E: Display>(
    what: impl Display,
    attempt: impl AsyncFnMut() -> Result<T, E>,
) -> impl Future<Output = T> {
    let at = Location::caller();
    async move {
        match poll(PATIENCE, attempt).await {
            Ok(value) => value,
            Err(e) => panic!("{what}: {e} (waited at {at})"),
        }
    }
}

/// [`eventually`] outside a runtime; a failure is reported at the caller's line.
///
/// # Panics
/// When `condition` does not hold within [`PATIENCE`]: `<what>: not within 30s`.
#[track_caller]
pub fn eventually_blocking(what: impl Display, mut condition: impl FnMut() -> bool) {
    if let Err(e) = poll_blocking(PATIENCE, || condition().then_some(()).ok_or("")) {
        panic!("{what}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_grows_with_the_wait_within_bounds() {
        assert_eq!(pause(Duration::ZERO), Duration::from_millis(1));
        assert_eq!(pause(Duration::from_millis(50)), Duration::from_millis(5));
        assert_eq!(pause(Duration::from_secs(5)), Duration::from_millis(20));
    }

    #[test]
    fn a_wait_returns_the_value_once_it_comes_and_the_last_error_when_it_does_not() {
        let mut asked = 0;
        let got = poll_blocking(Duration::from_secs(5), || {
            asked += 1;
            if asked == 3 { Ok(asked) } else { Err("early") }
        });
        assert_eq!(got, Ok(3));
        let never = poll_blocking(Duration::from_millis(10), || Err::<(), _>("still 1 of 2"));
        assert_eq!(never, Err("not within 10ms: still 1 of 2".to_owned()));
        let silent = poll_blocking(Duration::from_millis(1), || Err::<(), _>(""));
        assert_eq!(silent, Err("not within 1ms".to_owned()));
    }

    #[test]
    fn an_async_wait_runs_out_with_what_was_seen_last() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let mut seen = 0;
        let never = rt.block_on(poll(Duration::from_millis(10), async || {
            seen += 1;
            Err::<(), _>(format!("seen {seen}"))
        }));
        assert_eq!(never, Err(format!("not within 10ms: seen {seen}")));
        assert!(seen > 1, "asked again");
    }
}
