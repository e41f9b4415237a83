//! The wait syntax: how long a call may wait for its tokens, as `#[rate_limit(wait = "..")]`
//! and config overrides (`wait = ".."` in the file, `wait=..` in the environment) take it.

use core::fmt;

use crate::limits::{MAX_LEASE_US, MAX_WAIT_US, MIN_LEASE_US};

/// How to write a wait, for messages.
pub const WAIT_SYNTAX: &str = "`wait` takes a duration: a whole number and `ms`, `s` or `m`, \
     such as `wait = \"2s\"`, `wait = \"500ms\"` or `wait = \"1m\"`";

/// Parses a wait: a whole number of milliseconds (`"500ms"`), seconds (`"2s"`) or minutes
/// (`"1m"`), more than 0 and at most a day, or `"none"` (in any case) for no wait at all.
/// Spaces around it are ignored; inside it, they are an error (`"2 s"`).
///
/// Returns the wait in microseconds, `None` for `"none"`.
///
/// # Errors
/// [`WaitError`], the same from the macro and from an override.
pub fn parse_wait(written: &str) -> Result<Option<u64>, WaitError<'_>> {
    let text = written.trim();
    if text.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let micros_per = match &text[digits.len()..] {
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        _ => return Err(WaitError::NotADuration(text)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(WaitError::NotADuration(text));
    }
    // Digit by digit, so that a number too large for any integer is too long, not unknown.
    let micros = digits.bytes().try_fold(0u64, |n, digit| {
        n.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    });
    match micros.and_then(|n| n.checked_mul(micros_per)) {
        Some(0) => Err(WaitError::Zero),
        Some(us) if us <= MAX_WAIT_US => Ok(Some(us)),
        _ => Err(WaitError::LongerThanADay(text)),
    }
}

/// How to write a limit's period, for messages.
pub const PERIOD_SYNTAX: &str = "a period is a whole number and `ms`, `s`, `m`, `h` or `d` \
     (`30s`, `500ms`, `90m`, `36h`, `10d`)";

/// Parses a limit's period (how long a window lasts, or a bucket takes to refill): a whole
/// number of milliseconds (`"500ms"`), seconds (`"30s"`), minutes (`"90m"`), hours
/// (`"36h"`) or days (`"10d"`), more than 0 and short enough to be a limit's
/// ([`period_is_valid`](crate::limits::period_is_valid)). The wait's syntax with two longer
/// units: a period may be longer than a day. Spaces around it are ignored; inside it, they
/// are an error.
///
/// Returns the period in microseconds.
///
/// # Errors
/// [`PERIOD_SYNTAX`], for anything else.
pub fn parse_period(written: &str) -> Result<u64, &'static str> {
    let text = written.trim();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let micros_per: u64 = match &text[digits.len()..] {
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => return Err(PERIOD_SYNTAX),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PERIOD_SYNTAX);
    }
    let micros = digits.bytes().try_fold(0u64, |n, digit| {
        n.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    });
    match micros.and_then(|n| n.checked_mul(micros_per)) {
        Some(us) if crate::limits::period_is_valid(u128::from(us)) => Ok(us),
        _ => Err(PERIOD_SYNTAX),
    }
}

/// How to write a concurrency slot's lease, for messages: the one the macro and an override
/// give for a lease that is not one.
pub const LEASE_SYNTAX: &str = "`lease` takes a duration from 1 ms to a day, written as `wait` \
     is (a whole number and `ms`, `s` or `m`): `lease = \"10s\"`";

/// Parses a concurrency slot's lease (`#[rate_limit(lease = "..")]`, an override's `lease`):
/// a wait's syntax, from [`MIN_LEASE_US`] to [`MAX_LEASE_US`], never `none`. Returns it in
/// microseconds.
///
/// # Errors
/// [`LEASE_SYNTAX`], for anything else.
pub fn parse_lease(written: &str) -> Result<u64, &'static str> {
    match parse_wait(written) {
        Ok(Some(us)) if (MIN_LEASE_US..=MAX_LEASE_US).contains(&us) => Ok(us),
        _ => Err(LEASE_SYNTAX),
    }
}

/// Why a wait as written is not one. Its message is the one users see from the macro and,
/// after the field's name, from an override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitError<'a> {
    /// Not a number and a known suffix (the text, trimmed).
    NotADuration(&'a str),
    /// `"0s"`, `"0ms"`: no wait is `"none"`.
    Zero,
    /// More than a day (the text, trimmed).
    LongerThanADay(&'a str),
}

impl fmt::Display for WaitError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::NotADuration(text) => {
                write!(f, "unknown duration `{text}`; {WAIT_SYNTAX}")
            }
            WaitError::Zero => f.write_str(
                "`wait` must be longer than 0; leave it out to refuse at once (in an override, \
                 `wait = \"none\"` removes a declared wait)",
            ),
            WaitError::LongerThanADay(text) => write!(
                f,
                "`wait = \"{text}\"` is longer than a day, the longest a call may wait"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn periods_are_waits_with_hours_and_days() {
        for (written, micros) in [
            ("500ms", 500_000),
            ("30s", 30_000_000),
            ("90m", 5_400_000_000),
            ("36h", 129_600_000_000),
            ("10d", 864_000_000_000),
            (" 2d ", 172_800_000_000),
        ] {
            assert_eq!(parse_period(written), Ok(micros), "{written:?}");
        }
        for bad in [
            "",
            "0s",
            "0d",
            "2",
            "d",
            "2 d",
            "1.5h",
            "-1d",
            "2w",
            "2D",
            "2days",
            "none",
            "99999999999d",
        ] {
            assert_eq!(parse_period(bad), Err(PERIOD_SYNTAX), "{bad:?}");
        }
    }

    #[test]
    fn leases_are_waits_from_a_millisecond_to_a_day() {
        assert_eq!(parse_lease("10s"), Ok(10_000_000));
        assert_eq!(parse_lease("1ms"), Ok(MIN_LEASE_US));
        assert_eq!(parse_lease("1440m"), Ok(MAX_LEASE_US));
        for bad in ["none", "0s", "1441m", "2d", "", "1 s"] {
            assert_eq!(parse_lease(bad), Err(LEASE_SYNTAX), "{bad}");
        }
    }

    #[test]
    fn good_waits() {
        for (written, micros) in [
            ("1ms", 1_000),
            ("500ms", 500_000),
            ("2s", 2_000_000),
            ("1m", 60_000_000),
            ("1440m", MAX_WAIT_US),
            ("86400s", MAX_WAIT_US),
            ("86400000ms", MAX_WAIT_US),
            ("007s", 7_000_000),
            (" 2s\t", 2_000_000),
        ] {
            assert_eq!(parse_wait(written), Ok(Some(micros)), "{written:?}");
        }
        for none in ["none", "None", "NONE", " none "] {
            assert_eq!(parse_wait(none), Ok(None), "{none:?}");
        }
    }

    #[test]
    fn bad_waits() {
        for bad in [
            "", " ", "2", "s", "ms", "2 s", "1.5s", "+2s", "-2s", "2h", "2 hours", "2S", "2Ms",
            "2sec", "1_000ms", "٣s", "nothing", "none2", "2s2s",
        ] {
            assert_eq!(
                parse_wait(bad),
                Err(WaitError::NotADuration(bad.trim())),
                "{bad:?}"
            );
        }
        for zero in ["0ms", "0s", "00m"] {
            assert_eq!(parse_wait(zero), Err(WaitError::Zero), "{zero:?}");
        }
        for long in [
            "1441m",
            "86401s",
            "86400001ms",
            "4294967296ms",
            "18446744073709551615ms",
            "99999999999999999999999999s",
        ] {
            assert_eq!(
                parse_wait(long),
                Err(WaitError::LongerThanADay(long)),
                "{long:?}"
            );
        }
    }

    #[test]
    fn errors_say_how_to_write_a_wait() {
        assert_eq!(
            parse_wait("2 hours").unwrap_err().to_string(),
            "unknown duration `2 hours`; `wait` takes a duration: a whole number and `ms`, `s` \
             or `m`, such as `wait = \"2s\"`, `wait = \"500ms\"` or `wait = \"1m\"`"
        );
        assert_eq!(
            parse_wait(" 1441m ").unwrap_err().to_string(),
            "`wait = \"1441m\"` is longer than a day, the longest a call may wait"
        );
        assert!(
            parse_wait("0s")
                .unwrap_err()
                .to_string()
                .starts_with("`wait` must be longer than 0")
        );
    }
}
