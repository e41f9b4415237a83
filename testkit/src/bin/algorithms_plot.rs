//! Seed 001's scenario through each algorithm's script on a real Redis (which this program
//! starts itself, on a free loopback port): a limit of 1000 per 3 s, and 10, 10, 980, 900,
//! 100, 0 calls in seconds 1 to 6, spread evenly within each second, the first second starting
//! on a multiple of 3 s of the server clock (where the fixed windows start). Every call goes
//! to the four algorithms at once, each its own key. Prints, per algorithm, the admissions per
//! second and the most admitted in any 3 s span, and plots them into a PNG.
//!
//! ```text
//! cargo run --release -p testkit --features plots --bin algorithms_plot -- [--out docs/algorithms-seed001.png] [--font PATH]
//! ```
//! Seconds are the server's (each script returns the time it decided at), so a call that ran
//! late counts in the second it ran in; the program says how many did.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use plotters::prelude::*;
use ratelimit_core::tools::algorithms::{WindowParams, fixed_window, sliding_log, sliding_window};
use redis::{Connection, Script};
use testkit::RedisServer;

const PERIOD_US: u64 = 3_000_000;
const LIMIT: u64 = 1000;
const CALLS: [u64; 6] = [10, 10, 980, 900, 100, 0];
const SECOND: u64 = 1_000_000;
const COLORS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(31, 119, 180),
];

type Error = Box<dyn std::error::Error>;

#[derive(Debug)]
struct Algorithm {
    name: &'static str,
    script: Script,
    args: Vec<u64>,
    /// Server times (µs) of its admissions.
    admitted: Vec<u64>,
}

fn algorithms() -> Result<Vec<Algorithm>, Error> {
    let w = WindowParams::try_new(LIMIT, PERIOD_US).ok_or("1000 per 3 s is a valid window")?;
    let sw = sliding_window::SlidingParams::try_new(LIMIT, PERIOD_US)
        .ok_or("1000 per 3 s is a valid sliding window")?;
    // gcra.lua's fine units for 1000 per 3 s, burst 1000: one token every 3000 µs exactly.
    let gcra = vec![3000, 1, LIMIT * 3000, 1];
    let new = |name, text: &str, args: Vec<u64>| Algorithm {
        name,
        script: Script::new(text),
        args,
        admitted: Vec::new(),
    };
    Ok(vec![
        new(
            "fixed window",
            fixed_window::SCRIPT,
            fixed_window::args(w, 1).to_vec(),
        ),
        new(
            "sliding window",
            sliding_window::SCRIPT,
            sliding_window::args(sw, 1).to_vec(),
        ),
        new(
            "sliding log",
            sliding_log::SCRIPT,
            sliding_log::args(w, 1).to_vec(),
        ),
        new(
            "token bucket (GCRA, burst 1000)",
            ratelimit_core::tools::scripts::TOKEN_BUCKET,
            gcra,
        ),
    ])
}

fn server_micros(con: &mut Connection) -> Result<u64, Error> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con)?;
    Ok(secs * SECOND + micros)
}

/// Runs the scenario; returns its start (server µs) and the calls that ran in another second
/// than the one they were scheduled in.
fn run(con: &mut Connection, algos: &mut [Algorithm]) -> Result<(u64, usize), Error> {
    for (i, a) in algos.iter().enumerate() {
        a.script.prepare_invoke().load(con)?;
        redis::cmd("DEL")
            .arg(format!("seed001:{i}"))
            .query::<()>(con)?;
    }
    // Start on the next multiple of 3 s of the server clock, at least 0.5 s away.
    let now = server_micros(con)?;
    let start = (now + SECOND / 2).div_ceil(PERIOD_US) * PERIOD_US;
    let origin = Instant::now() - Duration::from_micros(now);
    let mut late = 0;
    for (second, &n) in (0u64..).zip(CALLS.iter()) {
        for i in 0..n {
            let due = start + second * SECOND + i * SECOND / n;
            let wait =
                (origin + Duration::from_micros(due)).saturating_duration_since(Instant::now());
            std::thread::sleep(wait);
            // One round trip for the four scripts, which Redis runs back to back.
            let calls: Vec<_> = (0..)
                .zip(algos.iter())
                .map(|(k, a)| {
                    let mut call = a.script.key(format!("seed001:{k}"));
                    for arg in &a.args {
                        call.arg(*arg);
                    }
                    call
                })
                .collect();
            let mut pipe = redis::pipe();
            for call in &calls {
                pipe.invoke_script(call);
            }
            let replies: Vec<Vec<u64>> = pipe.query(con)?;
            let mut last_at = due;
            for (a, reply) in algos.iter_mut().zip(replies) {
                // gcra.lua does not return its time: the script run just before stands in
                // (microseconds earlier).
                let at = reply.get(4).copied().unwrap_or(last_at);
                last_at = at;
                if (at - start) / SECOND != second {
                    late += 1;
                }
                if reply.first() == Some(&1) {
                    a.admitted.push(at);
                }
            }
        }
    }
    Ok((start, late))
}

/// Admissions in each of the six seconds.
fn per_second(admitted: &[u64], start: u64) -> [u64; 6] {
    let mut out = [0; 6];
    for &t in admitted {
        if let Some(slot) = usize::try_from((t - start) / SECOND)
            .ok()
            .and_then(|s| out.get_mut(s))
        {
            *slot += 1;
        }
    }
    out
}

/// The most admissions within any span of 3 s (`(t - 3 s, t]`).
fn most_in_a_period(admitted: &[u64]) -> usize {
    let mut first = 0;
    let mut best = 0;
    for (j, &t) in admitted.iter().enumerate() {
        while admitted[first] + PERIOD_US <= t {
            first += 1;
        }
        best = best.max(j + 1 - first);
    }
    best
}

fn draw(path: &PathBuf, rows: &[(&str, [u64; 6], usize)]) -> Result<(), Error> {
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Seed 001: a limit of 1000 per 3 s; 10, 10, 980, 900, 100, 0 calls in seconds 1-6",
            ("sans-serif", 24),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5f64..6.5, 0f64..1250.0)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(6)
        .x_label_formatter(&|x| format!("second {x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .y_desc("calls admitted (grey: calls made)")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 16))
        .draw()?;
    chart.draw_series((1u32..).zip(CALLS).map(|(s, n)| {
        let x = f64::from(s);
        Rectangle::new(
            [(x - 0.45, 0.0), (x + 0.45, n as f64)],
            RGBColor(200, 200, 200).filled(),
        )
    }))?;
    for (k, (name, seconds, most)) in rows.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let offset = -0.3 + 0.2 * k as f64;
        chart
            .draw_series((1u32..).zip(seconds).map(|(s, &n)| {
                let x = f64::from(s) + offset;
                Rectangle::new([(x - 0.09, 0.0), (x + 0.09, n as f64)], color.filled())
            }))?
            .label(format!("{name}: at most {most} in any 3 s"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 18))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() -> Result<(), Error> {
    let out = testkit::font::out_with_font("docs/algorithms-seed001.png")?;
    let server = RedisServer::start();
    let mut con = server.blocking_connection();
    let mut algos = algorithms()?;
    let (start, late) = run(&mut con, &mut algos)?;
    let rows: Vec<(&str, [u64; 6], usize)> = algos
        .iter()
        .map(|a| {
            (
                a.name,
                per_second(&a.admitted, start),
                most_in_a_period(&a.admitted),
            )
        })
        .collect();
    println!("| algorithm | s1 | s2 | s3 | s4 | s5 | s6 | most in any 3 s |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, s, most) in &rows {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {most} |",
            s[0], s[1], s[2], s[3], s[4], s[5]
        );
    }
    println!(
        "calls decided in another second than scheduled: {late} (of {})",
        4 * CALLS.iter().sum::<u64>()
    );
    draw(&out, &rows)?;
    println!("plot: {}", out.display());
    Ok(())
}
