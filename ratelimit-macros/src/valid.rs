//! Checks that span several `#[rate_limit]` arguments.

use proc_macro2::Span;
use syn::{Attribute, Ident, Signature};

use crate::args::Errors;
use crate::attr::{Count, RateLimitArgs, Unit};

/// The largest quantity the runtime's exact arithmetic holds (see `Limit::try_new`).
const MAX_FINE: u128 = 1 << 51;

/// Reports a function the check cannot be put in front of.
pub(crate) fn check_function(sig: &Signature, errors: &mut Errors) {
    if sig.asyncness.is_none() {
        errors.at(
            sig.fn_token.span,
            "the `async` keyword is missing: `#[rate_limit]` awaits the limiter before the \
             body runs, so it goes on an `async fn`",
        );
    }
}

/// Reports what the arguments cannot mean together. Checks needing a value written as a
/// constant expression are left to the compiler, which evaluates the limit in a `static`.
///
/// `attr` is the attribute the arguments were written in, when it is not the one being
/// expanded (a stacked attribute): errors about the whole attribute go there.
pub(crate) fn check(args: &RateLimitArgs, attr: Option<&Attribute>, errors: &mut Errors) {
    let Some(replenish) = &args.replenish else {
        if args.written("replenish") {
            return; // already reported on its value
        }
        let message = "missing `replenish`: the tokens added back per `unit`, e.g. \
             `#[rate_limit(replenish = 10, unit = \"minute\")]`";
        errors.push(match attr {
            Some(attr) => syn::Error::new_spanned(attr, message),
            None => syn::Error::new(Span::call_site(), message),
        });
        return;
    };
    let unit = args.unit.map_or(Unit::Second, |(unit, _)| unit);
    // `burst` defaults to `replenish`.
    let (burst, burst_written) = match &args.burst {
        Some(b) => (b.literal(), true),
        None if args.written("burst") => return, // its error is reported already
        None => (replenish.literal(), false),
    };
    if let (Some(cost), Some(burst)) = (args.cost.as_ref().and_then(Count::literal), burst)
        && cost > burst
    {
        let capacity = if burst_written {
            format!("`burst = {burst}`")
        } else {
            format!("the burst of {burst} (`burst` defaults to `replenish`)")
        };
        errors.at(
            args.cost.as_ref().map_or_else(Span::call_site, Count::span),
            format_args!(
                "`cost = {cost}` exceeds {capacity}, so no call could ever pass; \
                 raise `burst` or lower `cost`"
            ),
        );
    }
    let algorithm = args.algorithm.as_ref().map(ToString::to_string);
    let window = algorithm
        .as_deref()
        .filter(|a| !matches!(*a, "TokenBucket" | "LeakyBucket"));
    let interval = args.refill.as_ref().is_some_and(|r| r == "Interval");
    if let Some((_, span)) = args.wait
        && (window.is_some() || interval)
    {
        errors.at(
            span,
            "only a token bucket refilled smoothly and the leaky bucket can wait: a window's \
             next tokens are the next window's, an interval refill's all come at once; remove \
             `wait`, or use `algorithm = \"token_bucket\"` or `\"leaky_bucket\"`",
        );
    }
    if let Some(window) = window {
        check_window(args, window, errors);
        return;
    }
    if algorithm.as_deref() == Some("LeakyBucket") {
        for (written, span) in [
            ("refill", args.refill.as_ref().map(Ident::span)),
            ("initial", args.initial.as_ref().map(Count::span)),
        ] {
            if let Some(span) = span {
                errors.at(
                    span,
                    format_args!(
                        "`{written}` is a token bucket's; a `leaky_bucket`'s queue starts empty \
                         and drains at the rate: remove it"
                    ),
                );
            }
        }
    }
    if let (Some(initial), Some(burst)) = (args.initial.as_ref(), burst)
        && let Some(n) = initial.literal()
        && n > burst
    {
        errors.at(
            initial.span(),
            format_args!(
                "`initial = {n}` exceeds the burst of {burst}; a bucket holds at most its burst"
            ),
        );
    }
    if let (Some(r), Some(b)) = (replenish.literal(), burst)
        && interval
        && (u64::from(b / r) + 2).saturating_mul(unit.as_micros()) > 1 << 51
    {
        errors.at(
            args.burst.as_ref().map_or(replenish.span(), Count::span),
            format_args!(
                "an interval refill of {r} per {} with burst {b} takes too long to fill for \
                 exact arithmetic; use a smaller `burst` or a larger `replenish`",
                unit.name()
            ),
        );
    }
    if let (Some(r), Some(b), Some((wait_us, span))) = (replenish.literal(), burst, args.wait)
        && !interval
        && !too_fine(r, b, unit)
        && let Some(max_us) = longest_wait(r, b, unit)
        && wait_us > max_us
    {
        errors.at(
            span,
            format_args!(
                "a limit of {r} per {} with burst {b} can wait at most {max_us} µs in exact \
                 arithmetic; use a shorter `wait` or a `replenish` that divides the unit more \
                 evenly",
                unit.name()
            ),
        );
    }
    if let (Some(r), Some(b)) = (replenish.literal(), burst)
        && !interval
        && too_fine(r, b, unit)
    {
        let span = args.burst.as_ref().map_or(replenish.span(), Count::span);
        errors.at(
            span,
            format_args!(
                "a limit of {r} per {} with burst {b} is too fine-grained to compute exactly; \
                 use a smaller `burst` or a `replenish` that divides the unit more evenly",
                unit.name()
            ),
        );
    }
}

/// A window algorithm's own rules: no burst, refill or initial fill; a sliding window's
/// weighted count must stay exact.
fn check_window(args: &RateLimitArgs, variant: &str, errors: &mut Errors) {
    let name = crate::args::ALGORITHMS
        .iter()
        .find(|(_, v)| *v == variant)
        .map_or(variant, |(written, _)| *written);
    if let Some(burst) = &args.burst {
        errors.at(
            burst.span(),
            format_args!(
                "a `{name}` admits `replenish` tokens per window and has no burst of its own; \
                 remove `burst`"
            ),
        );
    }
    if let Some(refill) = args.refill.as_ref().filter(|r| *r == "Interval") {
        errors.at(
            refill.span(),
            format_args!(
                "`refill = \"interval\"` is a token bucket's; a `{name}` counts each window \
                 from 0: remove it"
            ),
        );
    }
    if let Some(initial) = &args.initial {
        errors.at(
            initial.span(),
            format_args!(
                "`initial` is a token bucket's; a `{name}` counts each window from 0: remove it"
            ),
        );
    }
    let unit = args.unit.map_or(Unit::Second, |(unit, _)| unit);
    if variant == "SlidingWindow"
        && let Some(replenish) = args.replenish.as_ref()
        && let Some(r) = replenish.literal()
        && u64::from(r).saturating_mul(unit.as_micros() / 1000) > (1 << 51) / 4
    {
        errors.at(
            replenish.span(),
            format_args!(
                "a sliding window of {r} per {} is too large to weigh exactly; use a shorter \
                 `unit` or the `sliding_log` or `fixed_window` algorithm",
                unit.name()
            ),
        );
    }
}

/// Mirrors `Limit::try_new`: the bucket's refill time, in units of `1 / replenish` of a
/// microsecond, must stay far enough below 2^53 for Lua's doubles.
fn too_fine(replenish: u32, burst: u32, unit: Unit) -> bool {
    let period = unit.as_micros();
    let g = gcd(period, u64::from(replenish));
    let tau = u128::from(period / g) * u128::from(burst);
    let per_micro = u128::from(u64::from(replenish) / g);
    2 * tau + 2048 * per_micro > MAX_FINE
}

/// Mirrors `Limit::try_wait`: the longest wait, in microseconds, when it is shorter than a
/// day (the fine units a reservation may reach beyond the burst, `hold_for` in the runtime).
fn longest_wait(replenish: u32, burst: u32, unit: Unit) -> Option<u64> {
    let period = unit.as_micros();
    let g = gcd(period, u64::from(replenish));
    let tau = u128::from(period / g) * u128::from(burst);
    let per_micro = u128::from(u64::from(replenish) / g);
    let room = MAX_FINE.saturating_sub(2 * tau + 2048 * per_micro);
    let day = 86_400_000_000u128;
    (room < day * per_micro).then(|| u64::try_from(room / per_micro).unwrap_or(u64::MAX))
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_wait_matches_the_runtime() {
        // A day for usual limits; 2.619 s for u32::MAX per second with burst 1 (the runtime
        // says the same: tests/ui/fail/wait_not_a_duration.rs).
        assert_eq!(longest_wait(3, 300, Unit::Minute), None);
        assert_eq!(longest_wait(u32::MAX, 1, Unit::Second), Some(2_619_392));
    }

    #[test]
    fn too_fine_matches_the_runtime() {
        assert!(too_fine(1_000_003, u32::MAX, Unit::Day));
        assert!(!too_fine(1_000_000, 1_000_000, Unit::Day));
        assert!(!too_fine(u32::MAX, u32::MAX, Unit::Second));
        assert!(!too_fine(3, 300, Unit::Minute));
    }
}
