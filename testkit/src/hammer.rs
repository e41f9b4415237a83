//! The one-line report of the `hammer` binary (`src/bin/hammer.rs`), shared by the binary that
//! prints it and the accuracy tests that parse it.

use std::fmt;

/// What one `hammer` process saw: its decisions, and the Redis server's clock around them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HammerReport {
    /// Calls admitted by the store.
    pub admitted: u64,
    /// Calls denied (by the store or by the failure policy).
    pub denied: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Decisions whose source was not the store (the failure policy decided).
    pub nonstore: u64,
    /// The server's `TIME`, in microseconds, taken before the process's first call.
    pub t_first_us: u64,
    /// The server's `TIME`, in microseconds, taken by each task after its last call returned:
    /// the latest of these.
    pub t_last_us: u64,
    /// The server's `TIME` after the earliest of the tasks' last calls returned: until then,
    /// every task was asking.
    pub t_stop_us: u64,
    /// The process's own wall clock (`SystemTime::now`) at the end, in Unix microseconds.
    pub local_unix_us: u64,
    /// Microseconds in which the process had no call in flight (a process the machine did
    /// not run starts none). The bucket can fill up and lose tokens only while every process
    /// pauses.
    pub paused_us: u64,
}

/// The first word of a report line.
pub const REPORT_TAG: &str = "HAMMER";

impl HammerReport {
    /// Every call the process made.
    pub fn calls(&self) -> u64 {
        self.admitted + self.denied + self.errors
    }

    /// Parses the report line among the process's stdout lines.
    ///
    /// # Errors
    /// A message naming what is missing or malformed.
    pub fn parse(stdout: &str) -> Result<HammerReport, String> {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(REPORT_TAG))
            .ok_or_else(|| format!("no `{REPORT_TAG} ...` line in hammer output: {stdout:?}"))?;
        let mut r = HammerReport::default();
        let mut seen = 0u32;
        for field in line.split_whitespace().skip(1) {
            let (name, value) = field
                .split_once('=')
                .ok_or_else(|| format!("malformed field `{field}` in `{line}`"))?;
            let value: u64 = value
                .parse()
                .map_err(|e| format!("field `{name}` in `{line}`: {e}"))?;
            let slot = match name {
                "admitted" => &mut r.admitted,
                "denied" => &mut r.denied,
                "errors" => &mut r.errors,
                "nonstore" => &mut r.nonstore,
                "t_first_us" => &mut r.t_first_us,
                "t_last_us" => &mut r.t_last_us,
                "t_stop_us" => &mut r.t_stop_us,
                "local_unix_us" => &mut r.local_unix_us,
                "paused_us" => &mut r.paused_us,
                _ => continue,
            };
            *slot = value;
            seen += 1;
        }
        if seen != 9 {
            return Err(format!("expected 9 known fields in `{line}`, found {seen}"));
        }
        Ok(r)
    }
}

impl fmt::Display for HammerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{REPORT_TAG} admitted={} denied={} errors={} nonstore={} t_first_us={} t_last_us={} t_stop_us={} local_unix_us={} paused_us={}",
            self.admitted,
            self.denied,
            self.errors,
            self.nonstore,
            self.t_first_us,
            self.t_last_us,
            self.t_stop_us,
            self.local_unix_us,
            self.paused_us
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips() {
        let r = HammerReport {
            admitted: 1,
            denied: 2,
            errors: 3,
            nonstore: 4,
            t_first_us: 5,
            t_last_us: 6,
            t_stop_us: 6,
            local_unix_us: 7,
            paused_us: 8,
        };
        let out = format!("noise\n{r}\n");
        assert_eq!(HammerReport::parse(&out), Ok(r));
        assert_eq!(r.calls(), 6);
        assert!(HammerReport::parse("HAMMER admitted=1").is_err());
        assert!(HammerReport::parse("nothing").is_err());
    }
}
