//! Medians and ranges over runs.

/// A count as a float (counts here stay far below 2^53).
#[allow(clippy::cast_precision_loss)]
pub(crate) fn us(v: u64) -> f64 {
    v as f64
}

/// The median of several runs and their range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut v: Vec<f64> = values.into_iter().collect();
        assert!(!v.is_empty(), "a spread of nothing");
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            f64::midpoint(v[mid - 1], v[mid])
        };
        Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// `median (min–max)` with `decimals` decimals.
    pub(crate) fn show(&self, decimals: usize) -> String {
        format!(
            "{:.d$} ({:.d$}–{:.d$})",
            self.median,
            self.min,
            self.max,
            d = decimals
        )
    }

    /// `median (min–max)` with thousands separators.
    pub(crate) fn show_count(&self) -> String {
        format!(
            "{} ({}–{})",
            thousands(self.median),
            thousands(self.min),
            thousands(self.max)
        )
    }
}

pub(crate) fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The 1-minute load average, to show how busy the machine was (other processes included).
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}
