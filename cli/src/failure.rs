//! Why a command failed, and the exit code that says so to a script.

use std::fmt;
use std::process::ExitCode;

/// Exit code: the command did what it was asked.
pub(crate) const OK: u8 = 0;
/// Exit code: Redis could not be reached, or failed a command.
pub(crate) const REDIS: u8 = 1;
/// Exit code: the command line is wrong (clap's own code for usage errors): an unknown flag,
/// a missing argument, a bad URL, an invalid limit.
pub(crate) const USAGE: u8 = 2;
/// Exit code: what was asked for is not there: an absent bucket (`inspect`), a prefix with no
/// key and no live instance (`top`, `watch`).
pub(crate) const NOT_FOUND: u8 = 3;

/// A failed command: what to tell the user, and the exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The command line is wrong.
    Usage(String),
    /// Redis could not be reached or answered with an error.
    Redis(String),
    /// What was asked for is not there.
    NotFound(String),
    /// Already reported on stdout (an absent bucket's document); only the code remains.
    Reported(u8),
}

impl Failure {
    /// The exit code scripts can rely on.
    pub(crate) fn code(&self) -> ExitCode {
        ExitCode::from(match self {
            Failure::Usage(_) => USAGE,
            Failure::Redis(_) => REDIS,
            Failure::NotFound(_) => NOT_FOUND,
            Failure::Reported(code) => *code,
        })
    }

    /// What to print on stderr, if anything.
    pub(crate) fn message(&self) -> Option<&str> {
        match self {
            Failure::Usage(m) | Failure::Redis(m) | Failure::NotFound(m) => Some(m),
            Failure::Reported(_) => None,
        }
    }

    /// A Redis error met while talking to `url`.
    pub(crate) fn redis(url: &str, e: &redis::RedisError) -> Failure {
        Failure::Redis(format!("Redis at {url} failed: {e}"))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message().unwrap_or("(reported)"))
    }
}

impl From<ratelimit_core::Error> for Failure {
    /// The library's errors say what to do already; only their kind picks the code.
    fn from(e: ratelimit_core::Error) -> Failure {
        use ratelimit_core::Error as E;
        match e {
            E::InvalidUrl { .. }
            | E::InvalidPrefix(_)
            | E::InvalidLimit(_)
            | E::CostExceedsBurst { .. }
            | E::ZeroCost
            | E::Config(_) => Failure::Usage(e.to_string()),
            _ => Failure::Redis(e.to_string()),
        }
    }
}
