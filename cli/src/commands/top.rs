//! `ratelimit top`: the most drained buckets, longest until full first.

use serde::Serialize;

use crate::args::Top;
use crate::commands::scan;
use crate::failure::Failure;
use crate::output::{Out, Style, duration_us, table};
use crate::report::Report;

/// What `top --json` prints.
#[derive(Debug, Serialize)]
struct Listing {
    prefix: String,
    /// Buckets found under the prefix (not full).
    buckets: u64,
    /// Other keys under `<prefix>:` (not buckets, not the heartbeat's `<prefix>:instances`).
    other_keys: u64,
    /// The most drained buckets, longest until full first, at most --limit.
    shown: Vec<Report>,
}

/// How drained a bucket is: how long until it is full again (a key without expiry, which no
/// script writes, last); then by key, for a stable order.
fn order(r: &Report) -> (std::cmp::Reverse<i64>, String) {
    let full_in = r
        .full_in_ms
        .map_or(-1, |ms| i64::try_from(ms).unwrap_or(i64::MAX));
    (std::cmp::Reverse(full_in), r.bucket.clone())
}

pub(crate) async fn run(args: Top, out: Out) -> Result<(), Failure> {
    let Top {
        common,
        limit: shown_max,
        config: file,
        scan_count,
    } = args;
    // A sliding log's decision needs its times; without limits, its size is enough.
    let (redis, limits, mode) = scan::open(&common, file.as_deref()).await?;
    let prefix = common.prefix.as_str();
    let mut reports: Vec<Report> = Vec::new();
    let seen = scan::buckets(&redis, prefix, scan_count, mode, |key, bucket, read| {
        let limit = bucket.name.as_ref().and_then(|n| limits.get(n.text()?));
        reports.push(Report::new(
            prefix,
            key,
            read,
            limit.map(|l| (l, 1)),
            None,
            None,
        ));
        // Keep at most twice what is shown, so that a large keyspace does not grow memory.
        if reports.len() >= 2 * shown_max.max(64) {
            reports.sort_by_key(order);
            reports.truncate(shown_max);
        }
    })
    .await?;
    scan::known(&redis, prefix, seen).await?;
    reports.sort_by_key(order);
    reports.truncate(shown_max);
    let listing = Listing {
        prefix: common.prefix.clone(),
        buckets: seen.buckets,
        other_keys: seen.others,
        shown: reports,
    };
    if out.json {
        return out.json(&listing);
    }
    human(&out, prefix, &listing, !limits.is_empty())
}

fn human(out: &Out, prefix: &str, l: &Listing, with_limits: bool) -> Result<(), Failure> {
    let mut head = vec!["FULL IN", "ALGORITHM", "STATE"];
    if with_limits {
        head.extend(["NOW", "REMAINING", "RETRY AFTER"]);
    }
    head.extend(["NAME", "KEY"]);
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|h| out.paint(Style::Bold, h)).collect()];
    for r in &l.shown {
        let mut row = vec![
            r.full_in_shown(),
            r.algorithm
                .map_or_else(|| "unknown".to_owned(), |k| k.name().to_owned())
                + if r.algorithm_inferred { "?" } else { "" },
            r.state.as_ref().map_or_else(String::new, |s| s.describe()),
        ];
        if with_limits {
            match &r.decision {
                Some(d) => row.extend([
                    if d.allowed {
                        out.paint(Style::Green, "admit")
                    } else {
                        out.paint(Style::Red, "refuse")
                    },
                    d.remaining.to_string(),
                    if d.allowed {
                        "-".to_owned()
                    } else {
                        duration_us(d.retry_after_us)
                    },
                ]),
                None => row.extend(["-".to_owned(), "-".to_owned(), "-".to_owned()]),
            }
        }
        row.extend([r.name_shown(prefix), r.key_shown(prefix)]);
        rows.push(row);
    }
    for line in table(&rows) {
        out.line(&line)?;
    }
    let others = match l.other_keys {
        0 => String::new(),
        n => format!(
            "; {n} other key{} under `{prefix}:`",
            if n == 1 { "" } else { "s" }
        ),
    };
    let footer = format!(
        "{} of {} bucket{} under `{prefix}` (not full){others}; `?`: algorithm guessed from \
         the state's shape",
        l.shown.len(),
        l.buckets,
        if l.buckets == 1 { "" } else { "s" },
    );
    out.line(&out.paint(Style::Dim, &footer))
}
