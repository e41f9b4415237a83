//! Output: lines for people (coloured only on a terminal, never with `NO_COLOR`), or one JSON
//! document per command for scripts.

use std::io::{IsTerminal, Write};

use serde::Serialize;

use crate::failure::{self, Failure};

/// Where a command writes its result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    pub(crate) json: bool,
    color: bool,
}

/// A style of text for people.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Style {
    Bold,
    Dim,
    Red,
    Yellow,
    Green,
}

impl Out {
    pub(crate) fn new(json: bool) -> Out {
        let color = !json
            && std::io::stdout().is_terminal()
            && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Out { json, color }
    }

    /// `text` in `style`, when colours are on.
    pub(crate) fn paint(&self, style: Style, text: &str) -> String {
        if !self.color {
            return text.to_owned();
        }
        let code = match style {
            Style::Bold => "1",
            Style::Dim => "2",
            Style::Red => "31",
            Style::Yellow => "33",
            Style::Green => "32",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    /// Writes one line.
    pub(crate) fn line(&self, text: &str) -> Result<(), Failure> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(|e| written(&e))
    }

    /// Writes `doc` as one line of JSON.
    pub(crate) fn json(&self, doc: &impl Serialize) -> Result<(), Failure> {
        let text = serde_json::to_string(doc)
            .map_err(|e| Failure::Redis(format!("cannot write the JSON output: {e}")))?;
        self.line(&text)
    }
}

/// A failed write: a closed pipe (`ratelimit watch | head`) ends the command quietly.
fn written(e: &std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::Reported(failure::OK)
    } else {
        Failure::Redis(format!("cannot write the output: {e}"))
    }
}

/// Microseconds for people: `850 µs`, `12.5 ms`, `19.73 s`, `1 m 39 s`, `2 h 03 m`, `3 d 04 h`.
pub(crate) fn duration_us(us: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    duration_f(us as f64)
}

/// [`duration_us`] of a fractional number of microseconds.
pub(crate) fn duration_f(us: f64) -> String {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let secs = (us / 1e6).floor() as u64;
    if us < 1e3 {
        format!("{} µs", trim(us, 3))
    } else if us < 1e6 {
        format!("{} ms", trim(us / 1e3, 3))
    } else if us < 60e6 {
        format!("{} s", trim(us / 1e6, 3))
    } else if secs < 3600 {
        format!("{} m {:02} s", secs / 60, secs % 60)
    } else if secs < 86_400 {
        format!("{} h {:02} m", secs / 3600, secs % 3600 / 60)
    } else {
        format!("{} d {:02} h", secs / 86_400, secs % 86_400 / 3600)
    }
}

/// `v` with at most `digits` significant digits, no trailing zeros.
fn trim(v: f64, digits: usize) -> String {
    let whole = if v >= 100.0 {
        3
    } else if v >= 10.0 {
        2
    } else {
        1
    };
    let text = format!("{v:.*}", digits.saturating_sub(whole));
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// Pads `cells` into columns, two spaces apart (the last column unpadded); widths count
/// characters, ignoring colour codes.
pub(crate) fn table(rows: &[Vec<String>]) -> Vec<String> {
    let visible = |s: &str| {
        let mut n = 0;
        let mut in_code = false;
        for c in s.chars() {
            match c {
                '\x1b' => in_code = true,
                'm' if in_code => in_code = false,
                _ if in_code => {}
                _ => n += 1,
            }
        }
        n
    };
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| visible(c))
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    line.push_str(&" ".repeat(widths[i] - visible(cell) + 2));
                }
            }
            line
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration_us(850), "850 µs");
        assert_eq!(duration_us(12_500), "12.5 ms");
        assert_eq!(duration_us(19_730_000), "19.7 s");
        assert_eq!(duration_us(99_000_000), "1 m 39 s");
        assert_eq!(duration_us(7_380_000_000), "2 h 03 m");
        assert_eq!(duration_us(273_600_000_000), "3 d 04 h");
        assert_eq!(duration_f(333_333.3), "333 ms");
    }

    #[test]
    fn tables_align_past_colours() {
        let rows = vec![
            vec![
                "a".to_owned(),
                "\x1b[31mbb\x1b[0m".to_owned(),
                "x".to_owned(),
            ],
            vec!["ccc".to_owned(), "d".to_owned(), "y".to_owned()],
        ];
        assert_eq!(table(&rows), ["a    \x1b[31mbb\x1b[0m  x", "ccc  d   y"]);
    }
}
