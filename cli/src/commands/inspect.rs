//! `ratelimit inspect`: one bucket's state, and with a limit what a call would be told.

use crate::args::Inspect;
use crate::commands::{bucket_of, check_prefix};
use crate::config;
use crate::conn::{self, Redis};
use crate::failure::{self, Failure};
use crate::output::{Out, Style, table};
use crate::report::Report;
use crate::state::Mode;
use ratelimit_core::tools::{StateKind, StateKindExt as _, instances_key};

pub(crate) async fn run(args: Inspect, out: Out) -> Result<(), Failure> {
    let Inspect {
        common,
        which,
        limit: flags,
        config: file,
    } = args;
    check_prefix(&common.prefix)?;
    conn::check_url(&common.url)?;
    let mut limit = flags.limit()?;
    if limit.is_none()
        && let (Some(path), Some(name)) = (&file, &which.name)
    {
        limit = config::load(path)?.remove(name);
    }
    if let Some(l) = &limit
        && flags.cost > l.burst_capacity()
    {
        return Err(Failure::Usage(
            ratelimit_core::Error::CostExceedsBurst {
                cost: flags.cost,
                limit: *l,
            }
            .to_string(),
        ));
    }
    let given = match (limit, flags.algorithm) {
        (None, Some(a)) => Some(StateKind::from_parts(a, flags.refill.unwrap_or_default())),
        _ => None,
    };
    let (bucket, names) = bucket_of(&common.prefix, &which)?;
    let redis = Redis::connect(&common.url).await?;
    let read = redis.read(&bucket, Mode::Full).await?;
    let names = names.as_ref().map(|(n, k)| (n.as_deref(), k.as_str()));
    let mut report = Report::new(
        &common.prefix,
        &bucket,
        &read,
        limit.as_ref().map(|l| (l, flags.cost)),
        given,
        names,
    );
    if !report.exists && !redis.exists(&instances_key(&common.prefix)).await? {
        let hint = format!(
            "no instance of a limiter with the prefix `{}` is running on {} (no `{}` key): is \
             --prefix right?",
            common.prefix,
            redis.shown,
            instances_key(&common.prefix)
        );
        report.note = Some(match report.note.take() {
            Some(n) => format!("{n}; {hint}"),
            None => hint,
        });
    }
    if out.json {
        out.json(&report)?;
    } else {
        human(&out, &common.prefix, &report)?;
    }
    if report.exists {
        Ok(())
    } else {
        Err(Failure::Reported(failure::NOT_FOUND))
    }
}

/// Milliseconds since the epoch as a UTC date and time (the calendar's civil date, the one
/// the quotas by calendar period use).
fn utc(ms: u64) -> String {
    let (days, ms_of_day) = (ms / 86_400_000, ms % 86_400_000);
    let (year, month, day) = ratelimit_core::tools::algorithms::calendar::civil_from_days(
        i64::try_from(days).unwrap_or(i64::MAX),
    );
    let s = ms_of_day / 1000;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03} UTC",
        s / 3600,
        s % 3600 / 60,
        s % 60,
        ms_of_day % 1000
    )
}

fn human(out: &Out, prefix: &str, r: &Report) -> Result<(), Failure> {
    let mut rows: Vec<Vec<String>> = vec![
        vec![out.paint(Style::Bold, "bucket"), r.bucket.clone()],
        vec![
            out.paint(Style::Bold, "limit"),
            format!("{}, key {}", r.name_shown(prefix), r.key_shown(prefix)),
        ],
    ];
    if r.exists {
        rows.push(vec![
            out.paint(Style::Bold, "algorithm"),
            r.algorithm_shown(),
        ]);
        if let Some(state) = &r.state {
            rows.push(vec![out.paint(Style::Bold, "state"), state.describe()]);
        }
        if let Some(debt) = r.debt_shown() {
            rows.push(vec![
                out.paint(Style::Bold, "debt"),
                out.paint(Style::Yellow, &debt),
            ]);
        }
        let full = match (r.full_at_ms, r.full_in_ms) {
            (Some(at), Some(_)) => format!("in {} ({})", r.full_in_shown(), utc(at)),
            _ => r.full_in_shown(),
        };
        rows.push(vec![out.paint(Style::Bold, "full again"), full]);
    } else {
        rows.push(vec![
            out.paint(Style::Bold, "state"),
            out.paint(
                Style::Green,
                "absent: the bucket is full (a bucket's key lives only while it is not full)",
            ),
        ]);
    }
    if let Some(d) = r.decision_shown(out) {
        rows.push(vec![out.paint(Style::Bold, "now"), d]);
    }
    if let Some(note) = &r.note {
        rows.push(vec![
            out.paint(Style::Bold, "note"),
            out.paint(Style::Yellow, note),
        ]);
    }
    for line in table(&rows) {
        out.line(&line)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_utc() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(super::utc(951_782_400_123), "2000-02-29 00:00:00.123 UTC");
        assert_eq!(super::utc(1_795_536_901_810), "2026-11-24 16:15:01.810 UTC");
    }
}
