//! Reloads the rate-limit overrides when the process gets `SIGHUP` (`kill -HUP <pid>`), so
//! that quotas change without a restart: edit the overrides file (`RATE_LIMIT_CONFIG`), then
//! signal. (A running process's environment cannot change: its `RATE_LIMIT_OVERRIDE_*`
//! variables stay as they were when it started.)

/// Listens for `SIGHUP` for as long as the process runs; a reload that fails keeps the
/// limits in force and says why.
#[cfg(unix)]
pub(crate) fn on_sighup() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match redis_ratelimit::reload_overrides().await {
                Ok(()) => println!("rate limits: overrides reloaded"),
                Err(e) => println!("rate limits: reload refused, the limits in force stay: {e}"),
            }
        }
    });
    Ok(())
}

/// No `SIGHUP` here: nothing to listen for.
#[cfg(not(unix))]
pub(crate) fn on_sighup() -> std::io::Result<()> {
    Ok(())
}
