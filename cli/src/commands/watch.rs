//! `ratelimit watch`: per limit, how many buckets are held and how many are empty, sampled
//! every interval. The library keeps no counts of its decisions, so this samples the
//! buckets' state: a bucket drained and refilled between two samples is not seen.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::args::Watch;
use crate::commands::scan;
use crate::decide;
use crate::failure::Failure;
use crate::output::{Out, Style, duration_us, table};

/// One sample (one line of `watch --json`).
#[derive(Debug, Serialize)]
struct Sample {
    /// 1, 2, ...
    sample: u64,
    /// Milliseconds since the first sample started.
    elapsed_ms: u64,
    /// Buckets under the prefix (not full).
    buckets: u64,
    /// Per limit name, in name order (unnamed buckets, of `RateLimiter::check`, first).
    limits: Vec<PerLimit>,
}

#[derive(Debug, Clone, Serialize)]
struct PerLimit {
    /// The limit's name; `null` for unnamed buckets.
    name: Option<String>,
    /// Its buckets that are not full.
    buckets: u64,
    /// Its buckets that would refuse a call of cost 1 now; `null` unless --config gives the
    /// limit.
    empty: Option<u64>,
    /// The longest time until one of its buckets is full again, in ms.
    longest_full_in_ms: u64,
}

pub(crate) async fn run(args: Watch, out: Out) -> Result<(), Failure> {
    let Watch {
        common,
        interval_ms,
        count,
        config: file,
        scan_count,
    } = args;
    // A sliding log's decision needs its times; without limits, its size is enough.
    let (redis, limits, mode) = scan::open(&common, file.as_deref()).await?;
    let prefix = common.prefix.as_str();
    let interval = Duration::from_millis(interval_ms);
    let start = Instant::now();
    let mut previous: BTreeMap<Option<String>, PerLimit> = BTreeMap::new();
    let mut n = 0;
    loop {
        n += 1;
        let began = Instant::now();
        let mut per: BTreeMap<Option<String>, PerLimit> = BTreeMap::new();
        let seen = scan::buckets(&redis, prefix, scan_count, mode, |_, bucket, read| {
            let name = bucket.name.as_ref().map(ToString::to_string);
            let limit = bucket.name.as_ref().and_then(|n| limits.get(n.text()?));
            let entry = per.entry(name.clone()).or_insert_with(|| PerLimit {
                name,
                buckets: 0,
                empty: limit.map(|_| 0),
                longest_full_in_ms: 0,
            });
            entry.buckets += 1;
            entry.longest_full_in_ms = entry.longest_full_in_ms.max(read.ttl_ms.unwrap_or(0));
            if let (Some(limit), Some(empty)) = (limit, entry.empty.as_mut())
                && decide::decide(limit, 1, read).is_ok_and(|d| !d.allowed)
            {
                *empty += 1;
            }
        })
        .await?;
        if n == 1 {
            scan::known(&redis, prefix, seen).await?;
        }
        let sample = Sample {
            sample: n,
            elapsed_ms: u64::try_from(began.duration_since(start).as_millis()).unwrap_or(u64::MAX),
            buckets: seen.buckets,
            limits: per.values().cloned().collect(),
        };
        if out.json {
            out.json(&sample)?;
        } else {
            human(&out, &sample, &previous)?;
        }
        previous = per;
        if count.is_some_and(|c| n >= c) {
            return Ok(());
        }
        tokio::time::sleep(interval.saturating_sub(began.elapsed())).await;
    }
}

/// `v`, and its change since the last sample.
fn with_change(out: &Out, v: u64, before: Option<u64>) -> String {
    match before {
        Some(b) if b < v => format!("{v} {}", out.paint(Style::Red, &format!("(+{})", v - b))),
        Some(b) if b > v => format!("{v} {}", out.paint(Style::Green, &format!("(-{})", b - v))),
        _ => v.to_string(),
    }
}

fn human(
    out: &Out,
    s: &Sample,
    previous: &BTreeMap<Option<String>, PerLimit>,
) -> Result<(), Failure> {
    out.line(&out.paint(
        Style::Bold,
        &format!(
            "sample {} at +{:.1} s: {} bucket{} not full",
            s.sample,
            Duration::from_millis(s.elapsed_ms).as_secs_f64(),
            s.buckets,
            if s.buckets == 1 { "" } else { "s" }
        ),
    ))?;
    let mut rows: Vec<Vec<String>> = vec![
        ["LIMIT", "BUCKETS", "EMPTY", "LONGEST UNTIL FULL"]
            .iter()
            .map(|h| out.paint(Style::Dim, h))
            .collect(),
    ];
    for l in &s.limits {
        let before = previous.get(&l.name);
        rows.push(vec![
            l.name.clone().unwrap_or_else(|| "(unnamed)".to_owned()),
            with_change(
                out,
                l.buckets,
                (s.sample > 1).then(|| before.map_or(0, |b| b.buckets)),
            ),
            match l.empty {
                Some(e) => with_change(out, e, before.and_then(|b| b.empty)),
                None => "?".to_owned(),
            },
            duration_us(l.longest_full_in_ms.saturating_mul(1000)),
        ]);
    }
    // Limits whose buckets all refilled since the last sample.
    for (name, b) in previous {
        if !s.limits.iter().any(|l| &l.name == name) {
            rows.push(vec![
                name.clone().unwrap_or_else(|| "(unnamed)".to_owned()),
                with_change(out, 0, Some(b.buckets)),
                b.empty
                    .map_or_else(|| "?".to_owned(), |e| with_change(out, 0, Some(e))),
                "full".to_owned(),
            ]);
        }
    }
    for line in table(&rows) {
        out.line(&format!("  {line}"))?;
    }
    Ok(())
}
