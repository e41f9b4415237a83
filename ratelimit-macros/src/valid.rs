//! Checks that span several `#[rate_limit]` arguments.

use proc_macro2::Span;
use ratelimit_vocab::limits::{self, bucket_is_exact};
use ratelimit_vocab::{Algorithm, Refill, Unit};
use syn::spanned::Spanned as _;
use syn::{Attribute, Signature};

use crate::args::Errors;
use crate::attr::{ARGUMENTS, Arg, Count, RateLimitArgs};

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
    if let Some(shared) = &args.shared {
        check_shared(args, shared, errors);
        return;
    }
    if let Some(concurrent) = &args.concurrent {
        check_concurrent(args, concurrent, errors);
        return;
    }
    if args.written("concurrent") {
        return; // its error is reported already
    }
    if let Some((_, span)) = args.lease {
        errors.at(
            span,
            "`lease` is a concurrency limit's: add `concurrent = ..` (the most calls in flight), \
             or remove it",
        );
    }
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
        && !limits::cost_fits(cost, burst)
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
    // A week or a month is a calendar period: a fixed window counts it, and nothing else.
    if unit.is_calendar()
        && let Some((algorithm, span)) = args.algorithm
        && algorithm != Algorithm::FixedWindow
    {
        errors.at(
            span,
            format_args!(
                "`unit = \"{}\"` is a calendar period, counted by a fixed window whose windows \
                 are its periods: remove `algorithm` (or write `\"fixed_window\"`), or use a \
                 unit of a fixed length (`\"day\"`)",
                unit.name()
            ),
        );
        return;
    }
    let algorithm = args
        .algorithm
        .map(|(algorithm, _)| algorithm)
        .or(unit.is_calendar().then_some(Algorithm::FixedWindow));
    let window = algorithm.filter(|a| a.is_window());
    let interval = matches!(args.refill, Some((Refill::Interval, _)));
    if let Some(settle) = &args.settle {
        check_settle(args, settle, window, interval, errors);
    }
    if let (Some(max_debt), Some(name)) = (&args.max_debt, cannot_owe(window, interval)) {
        errors.at(
            max_debt.span(),
            format_args!(
                "`max_debt` bounds what a settlement leaves owing, which a `{name}` cannot \
                 owe: remove it, or use `algorithm = \"token_bucket\"` (refilled smoothly), \
                 `\"leaky_bucket\"`, `\"fixed_window\"` or `\"sliding_log\"`"
            ),
        );
    }
    if let Some((Some(_), span)) = args.wait
        && (window.is_some() || interval)
    {
        errors.at(
            span,
            "only a token bucket refilled smoothly and the leaky bucket can wait: a window's \
             next tokens are the next window's, an interval refill's all come at once; remove \
             `wait`, or use `algorithm = \"token_bucket\"` or `\"leaky_bucket\"`",
        );
    }
    if let Some((_, span)) = args.jitter
        && !matches!(args.wait, Some((Some(_), _)))
        && algorithm != Some(Algorithm::LeakyBucket)
    {
        errors.at(
            span,
            "`jitter` spreads the waits of calls that wait: add `wait = \"..\"` (or use \
             `algorithm = \"leaky_bucket\"`, whose calls always wait)",
        );
    }
    if let Some(window) = window {
        check_window(args, window, errors);
        return;
    }
    if algorithm == Some(Algorithm::LeakyBucket) {
        for (written, span) in [
            ("refill", args.refill.map(|(_, span)| span)),
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
        && !limits::interval_is_exact(r.into(), b.into(), unit.micros())
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
    if let (Some(r), Some(b), Some((Some(wait_us), span))) = (replenish.literal(), burst, args.wait)
        && !interval
        && bucket_is_exact(r, b, unit.micros())
        && let max_us = limits::longest_wait_us(r, b, unit.micros())
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
        && !bucket_is_exact(r, b, unit.micros())
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

/// A shared use (`shared = "search"`): the limit is declared once, by the function that names
/// it with its rate; this one may only say how it draws from it.
fn check_shared(args: &RateLimitArgs, shared: &syn::LitStr, errors: &mut Errors) {
    let declared_once = ARGUMENTS.iter().filter(|a| !a.rules.shared);
    for (argument, span) in written(args, declared_once) {
        errors.at(
            span,
            format_args!(
                "`shared = \"{}\"` draws from a limit declared once, where it is named with its \
                 rate: remove `{argument}` here (set it where `name = \"{}\"` is declared)",
                shared.value(),
                shared.value()
            ),
        );
    }
}

/// Those of `arguments` that `args` has, each with where its name was written.
fn written<'a>(
    args: &'a RateLimitArgs,
    arguments: impl Iterator<Item = &'static Arg> + 'a,
) -> impl Iterator<Item = (&'static str, Span)> + 'a {
    arguments.filter_map(|a| Some((a.name, args.written_at(a.name)?)))
}

/// A concurrency limit (`concurrent = 2`): at most that many calls of a key in flight; it
/// takes the arguments `ARGUMENTS` marks `concurrent` (a key, a name, a lease, a wait, ...),
/// none of a rate limit's.
fn check_concurrent(args: &RateLimitArgs, concurrent: &Count, errors: &mut Errors) {
    let of_a_rate = ARGUMENTS.iter().filter(|a| !a.rules.concurrent);
    for (argument, span) in written(args, of_a_rate) {
        errors.at(
            span,
            format_args!(
                "`concurrent` limits the calls in flight, not a rate: remove `{argument}` (stack \
                 another `#[rate_limit]` for a rate, or use `RateLimiter::enter_all`)"
            ),
        );
    }
    if let Some(n) = concurrent.literal()
        && n > ratelimit_vocab::limits::MAX_CONCURRENT
    {
        errors.at(
            concurrent.span(),
            format_args!(
                "`concurrent` is at most {}: each call in flight is a member of a sorted set",
                ratelimit_vocab::limits::MAX_CONCURRENT
            ),
        );
    }
}

/// `settle`'s rules: a limit whose state can owe tokens (not a sliding window, whose counters
/// are read capped at the limit, not an interval refill), and not beside `count`.
fn check_settle(
    args: &RateLimitArgs,
    settle: &syn::Expr,
    window: Option<Algorithm>,
    interval: bool,
    errors: &mut Errors,
) {
    if args.count.is_some() {
        errors.at(
            settle.span(),
            "`settle` gives back what a call did not use and takes what it used beyond its \
             estimate, `count` gives back all of a call that does not count: use one of them \
             (an actual cost of 0 gives everything back)",
        );
    }
    if let Some(name) = cannot_owe(window, interval) {
        errors.at(
            settle.span(),
            format_args!(
                "`settle` takes an overdraft into debt, which a `{name}` cannot owe: use \
                 `algorithm = \"token_bucket\"` (refilled smoothly), `\"leaky_bucket\"`, \
                 `\"fixed_window\"` or `\"sliding_log\"`"
            ),
        );
    }
}

/// The name of a limit that cannot owe tokens (a sliding window reads its counters capped at
/// its limit, an interval refill's state is its last refill's slack), if this one is such.
fn cannot_owe(window: Option<Algorithm>, interval: bool) -> Option<&'static str> {
    match window {
        Some(w @ Algorithm::SlidingWindow) => Some(w.name()),
        _ if interval => Some("token bucket refilled at intervals"),
        _ => None,
    }
}

/// A window algorithm's own rules: no burst, refill or initial fill; a sliding window's
/// weighted count must stay exact.
fn check_window(args: &RateLimitArgs, window: Algorithm, errors: &mut Errors) {
    let name = window.name();
    if let Some(burst) = &args.burst {
        errors.at(
            burst.span(),
            format_args!(
                "a `{name}` admits `replenish` tokens per window and has no burst of its own; \
                 remove `burst`"
            ),
        );
    }
    if let Some((Refill::Interval, span)) = args.refill {
        errors.at(
            span,
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
    if let Some(count) = &args.count {
        errors.at(
            count.span(),
            format_args!(
                "`count` gives back the tokens of calls that do not count, which only a bucket \
                 can do exactly (a `{name}` would need the time each call was counted): use \
                 `algorithm = \"token_bucket\"` or `\"leaky_bucket\"`"
            ),
        );
    }
    let unit = args.unit.map_or(Unit::Second, |(unit, _)| unit);
    if window == Algorithm::SlidingWindow
        && let Some(replenish) = args.replenish.as_ref()
        && let Some(r) = replenish.literal()
        && !limits::sliding_is_exact(r.into(), unit.micros())
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
