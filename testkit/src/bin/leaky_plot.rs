//! The leaky bucket against the token bucket, through the public `RateLimiter` on a real
//! Redis (which this program starts itself, on a free loopback port): a limit of 10 per
//! second as a token bucket of burst 10 whose refused calls are dropped (`check`), the same
//! bucket whose calls wait up to 1 s (`acquire`), and a leaky bucket with a queue of 10
//! (`check`). The offered load: 30 calls at 0 s, then 2 calls every 100 ms from 1.0 s to
//! 3.0 s (twice the rate), then none until 4.5 s; each call is its own task, started at its
//! instant, on one key per algorithm. Prints, per algorithm, the calls admitted and refused,
//! the admissions per 100 ms and per 0.5 s, the most admitted in any 1 s span and the smallest
//! gap between two departures, and plots them into a PNG.
//!
//! ```text
//! cargo run --release -p testkit --features plots --bin leaky_plot -- [--out docs/algorithms-leaky.png] [--font PATH]
//! ```
//! A call departs when `check` or `acquire` returns it admitted (after its wait, if it
//! waited), measured on this process's clock from the scenario's start.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use plotters::prelude::*;
use ratelimit_core::{Algorithm, Limit, RateLimiter};
use testkit::RedisServer;

const LIMIT: Limit = Limit::per_second(10).burst(10);
const LEAKY: Limit = LIMIT.algorithm(Algorithm::LeakyBucket);
const MAX_WAIT: Duration = Duration::from_secs(1);
/// One token's time at 10 per second: the leaky bucket's gap between departures.
const INTERVAL: Duration = Duration::from_millis(100);
const BIN: Duration = Duration::from_millis(100);
const HALF: Duration = Duration::from_millis(500);
const END: Duration = Duration::from_millis(4500);
const SPAN: Duration = Duration::from_secs(1);
/// Time before the scenario starts, for the tasks to be spawned and asleep.
const LEAD: Duration = Duration::from_millis(300);
const COLORS: [RGBColor; 3] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(31, 119, 180),
];
const OFFERED_COLOR: RGBColor = RGBColor(190, 190, 190);

type Error = Box<dyn std::error::Error>;

/// One way of limiting the offered load.
#[derive(Debug)]
struct Contender {
    name: &'static str,
    key: &'static str,
    limit: Limit,
    /// `acquire`'s wait; `None`: `check`.
    wait: Option<Duration>,
    /// Calls the limit lets through at once: with `rate x span`, the most it may admit in a
    /// span.
    burst: u32,
}

static CONTENDERS: [Contender; 3] = [
    Contender {
        name: "token bucket, burst 10 (check)",
        key: "token-bucket",
        limit: LIMIT,
        wait: None,
        burst: 10,
    },
    Contender {
        name: "token bucket, burst 10 (acquire, wait 1 s)",
        key: "token-bucket-wait",
        limit: LIMIT,
        wait: Some(MAX_WAIT),
        burst: 10,
    },
    Contender {
        name: "leaky bucket, queue 10 (check)",
        key: "leaky-bucket",
        limit: LEAKY,
        wait: None,
        burst: 1,
    },
];

/// What one contender did with the offered load.
#[derive(Debug, Default)]
struct Outcome {
    /// Departures from the scenario's start, earliest first.
    departures: Vec<Duration>,
    refused: usize,
    /// The latest any call started after its instant.
    late: Duration,
    /// When the first call on the key started: the server decided every call after this.
    first_start: Option<Duration>,
}

/// The instants of the offered calls, from the scenario's start.
fn offered() -> Vec<Duration> {
    let mut at = vec![Duration::ZERO; 30];
    for step in 0..20 {
        let t = Duration::from_millis(1000 + 100 * step);
        at.extend([t, t]);
    }
    at
}

async fn run(limiter: &RateLimiter) -> Result<Vec<Outcome>, Error> {
    // Connect and load the script before the clock starts.
    for c in &CONTENDERS {
        limiter
            .check(&format!("warm-up:{}", c.key), &c.limit)
            .await?;
    }
    let start = Instant::now() + LEAD;
    let mut tasks = Vec::new();
    for (k, c) in CONTENDERS.iter().enumerate() {
        for at in offered() {
            let limiter = limiter.clone();
            tasks.push((
                k,
                tokio::spawn(async move {
                    tokio::time::sleep_until((start + at).into()).await;
                    let started = Instant::now().saturating_duration_since(start);
                    let decision = match c.wait {
                        Some(wait) => limiter.acquire(c.key, &c.limit, wait).await?,
                        None => limiter.check(c.key, &c.limit).await?,
                    };
                    let went = Instant::now().saturating_duration_since(start);
                    Ok::<_, ratelimit_core::Error>((decision.allowed.then_some(went), at, started))
                }),
            ));
        }
    }
    let mut outcomes: Vec<Outcome> = CONTENDERS.iter().map(|_| Outcome::default()).collect();
    for (k, task) in tasks {
        let (went, at, started) = task.await??;
        let o = &mut outcomes[k];
        o.late = o.late.max(started - at);
        o.first_start = Some(o.first_start.map_or(started, |f| f.min(started)));
        match went {
            Some(t) => o.departures.push(t),
            None => o.refused += 1,
        }
    }
    for o in &mut outcomes {
        o.departures.sort();
    }
    Ok(outcomes)
}

/// Departures in each `bin` from the start, up to `END`.
fn per_bin(departures: &[Duration], bin: Duration) -> Vec<usize> {
    let n = usize::try_from(END.as_micros() / bin.as_micros()).unwrap_or(0);
    let mut out = vec![0; n];
    for t in departures {
        let i = usize::try_from(t.as_micros() / bin.as_micros()).unwrap_or(usize::MAX);
        if let Some(slot) = out.get_mut(i) {
            *slot += 1;
        }
    }
    out
}

/// The most departures within any span of `SPAN` (`(t - 1 s, t]`).
fn most_in_a_span(departures: &[Duration]) -> usize {
    let mut first = 0;
    let mut best = 0;
    for (j, &t) in departures.iter().enumerate() {
        while departures[first] + SPAN <= t {
            first += 1;
        }
        best = best.max(j + 1 - first);
    }
    best
}

fn smallest_gap(departures: &[Duration]) -> Option<Duration> {
    departures.windows(2).map(|w| w[1] - w[0]).min()
}

/// How far the departures stayed behind the limit's bound, in ms, and at which departure the
/// least: a bucket full at `first_start` lets the `j`-th admitted call (from 0) go no sooner
/// than `(j + 1 - burst) x INTERVAL` later. Every departure here is at or after its slot (it
/// left when its reply came and its wait ran out) and no slot was decided before the first
/// call started, so a margin below zero is a call that left early.
fn least_margin(
    departures: &[Duration],
    burst: u32,
    first_start: Duration,
) -> Option<(f64, usize)> {
    (0u32..)
        .zip(departures)
        .map(|(j, &t)| {
            let due = first_start + INTERVAL * (j + 1).saturating_sub(burst);
            (ms(t) - ms(due), j as usize)
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `(seconds, count)` points of a step curve rising by one at each instant.
fn steps(instants: &[Duration]) -> Vec<(f64, f64)> {
    let mut points = vec![(0.0, 0.0)];
    for (n, t) in (0u32..).zip(instants) {
        let x = t.as_secs_f64();
        points.push((x, f64::from(n)));
        points.push((x, f64::from(n + 1)));
    }
    let total = points.last().map_or(0.0, |p| p.1);
    points.push((END.as_secs_f64(), total));
    points
}

fn draw(path: &PathBuf, outcomes: &[Outcome]) -> Result<(), Error> {
    let root = BitMapBackend::new(path, (1200, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "10 per second: 30 calls at 0 s, then 20 per second from 1 s to 3 s",
        ("sans-serif", 26),
    )?;
    let (top, bottom) = root.split_vertically(470);
    let offered = offered();
    let bin_s = BIN.as_secs_f64();

    let top_max = 12.0;
    let mut chart = ChartBuilder::on(&top)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..END.as_secs_f64(), 0f64..top_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(10)
        .x_label_formatter(&|x| format!("{x:.1} s"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .y_desc("departures per 100 ms (grey: calls made)")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 16))
        .draw()?;
    chart.draw_series(
        (0u32..)
            .zip(per_bin(&offered, BIN))
            .filter(|&(_, n)| n > 0)
            .map(|(i, n)| {
                let x = f64::from(i) * bin_s;
                let y = (n as f64).min(top_max);
                Rectangle::new(
                    [(x + 0.004, 0.0), (x + bin_s - 0.004, y)],
                    OFFERED_COLOR.filled(),
                )
            }),
    )?;
    chart.draw_series(std::iter::once(Text::new(
        "30 calls at 0 s",
        (0.11, top_max - 0.4),
        ("sans-serif", 16),
    )))?;
    for (k, (c, o)) in CONTENDERS.iter().zip(outcomes).enumerate() {
        let color = COLORS[k];
        let width = (bin_s - 0.016) / 3.0;
        let offset = 0.008 + width * k as f64;
        chart
            .draw_series(
                (0u32..)
                    .zip(per_bin(&o.departures, BIN))
                    .filter(|&(_, n)| n > 0)
                    .map(|(i, n)| {
                        let x = f64::from(i) * bin_s + offset;
                        Rectangle::new([(x, 0.0), (x + width * 0.9, n as f64)], color.filled())
                    }),
            )?
            .label(c.name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 18))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;

    let mut chart = ChartBuilder::on(&bottom)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..END.as_secs_f64(), 0f64..75.0)?;
    chart
        .configure_mesh()
        .x_labels(10)
        .x_label_formatter(&|x| format!("{x:.1} s"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .y_desc("departures so far")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 16))
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            steps(&offered),
            OFFERED_COLOR.stroke_width(3),
        ))?
        .label(format!("calls made: {}", offered.len()))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], OFFERED_COLOR.stroke_width(3)));
    for (k, (c, o)) in CONTENDERS.iter().zip(outcomes).enumerate() {
        let color = COLORS[k];
        chart
            .draw_series(LineSeries::new(steps(&o.departures), color.stroke_width(2)))?
            .label(format!(
                "{}: {} admitted, {} refused",
                c.name,
                o.departures.len(),
                o.refused
            ))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 18))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() -> Result<(), Error> {
    let out = testkit::font::out_with_font("docs/algorithms-leaky.png")?;
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcomes = runtime.block_on(async {
        let limiter = RateLimiter::builder()
            .redis(server.url())
            .prefix("plot")
            .deny_cache(0)
            .build()
            .await?;
        run(&limiter).await
    })?;

    println!(
        "| algorithm | admitted | refused | most in any 1 s | smallest gap between departures |"
    );
    println!("|---|---|---|---|---|");
    for (c, o) in CONTENDERS.iter().zip(&outcomes) {
        let gap =
            smallest_gap(&o.departures).map_or("-".to_owned(), |g| format!("{:.1} ms", ms(g)));
        println!(
            "| {} | {} | {} | {} | {gap} |",
            c.name,
            o.departures.len(),
            o.refused,
            most_in_a_span(&o.departures)
        );
    }
    let halves: Vec<String> = (0..END.as_millis() / HALF.as_millis())
        .map(|i| format!("{:.1}-{:.1} s", i as f64 * 0.5, (i + 1) as f64 * 0.5))
        .collect();
    println!();
    println!("| departures per 0.5 s | {} |", halves.join(" | "));
    println!("|---|{}", "---|".repeat(halves.len()));
    println!("| calls made | {} |", join(&per_bin(&offered(), HALF)));
    for (c, o) in CONTENDERS.iter().zip(&outcomes) {
        println!("| {} | {} |", c.name, join(&per_bin(&o.departures, HALF)));
    }
    println!();
    println!("departures per 100 ms, 0 to 4.5 s:");
    for (c, o) in CONTENDERS.iter().zip(&outcomes) {
        let bins: Vec<String> = per_bin(&o.departures, BIN)
            .iter()
            .map(usize::to_string)
            .collect();
        println!("  {}: {}", c.name, bins.join(" "));
    }
    println!();
    for (c, o) in CONTENDERS.iter().zip(&outcomes) {
        let first_start = o.first_start.unwrap_or_default();
        if let Some((margin, j)) = least_margin(&o.departures, c.burst, first_start) {
            println!(
                "{}: least margin behind burst {} + 10/s from the first call's start ({:.2} ms): \
                 {margin:.2} ms, departure {j} (below 0: left early); latest call start {:.2} ms \
                 after its instant",
                c.name,
                c.burst,
                ms(first_start),
                ms(o.late)
            );
        }
    }
    // Measured here, a departure is late by its reply's latency and the timer's lag: a gap
    // under the interval is a departure that left later than the next one did.
    let short: Vec<String> = outcomes[2]
        .departures
        .windows(2)
        .filter(|w| w[1] - w[0] < INTERVAL)
        .map(|w| format!("{:.2}->{:.2}", ms(w[0]), ms(w[1])))
        .collect();
    println!("leaky bucket: gaps under 100 ms (ms): {}", short.join(", "));
    draw(&out, &outcomes)?;
    println!("plot: {}", out.display());
    Ok(())
}

fn join(counts: &[usize]) -> String {
    counts
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" | ")
}
