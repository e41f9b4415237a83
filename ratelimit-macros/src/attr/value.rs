//! How each argument's value is read: counts, units, names, durations, statuses, flags, each
//! typed and kept with its span, a misuse reported on the token that caused it.

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitInt, LitStr, UnOp};

use ratelimit_vocab::{Quoted, Unit, WAIT_SYNTAX, Word as _};

use crate::args::{self, Errors};

/// A number of tokens: a literal the macro checked, or a constant expression the compiler
/// checks (`replenish = ORDERS_PER_MINUTE`). A `cost` written over the function's parameters
/// (`cost = files.len()`) is computed on each call instead (`expand::call::per_call_cost`).
pub(crate) enum Count {
    Literal(u32, LitInt),
    Const(Expr),
}

impl Count {
    /// The value, when written as a literal.
    pub(crate) fn literal(&self) -> Option<u32> {
        match self {
            Count::Literal(n, _) => Some(*n),
            Count::Const(_) => None,
        }
    }

    pub(crate) fn span(&self) -> Span {
        match self {
            Count::Literal(_, lit) => lit.span(),
            Count::Const(expr) => expr.span(),
        }
    }
}

/// `empty_key_status`, `limited_status`: an HTTP status code an error can be answered with
/// (400 to 599).
pub(super) fn status(name: &Ident, value: &Expr, errors: &mut Errors) -> Option<(u16, LitInt)> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(lit), ..
    }) = value
        && let Ok(status) = lit.base10_parse::<u16>()
        && (400..=599).contains(&status)
    {
        return Some((status, lit.clone()));
    }
    errors.at(
        value.span(),
        format_args!(
            "`{name}` is an HTTP error status, an integer from 400 to 599: `{name} = {}`",
            if name == "empty_key_status" { 401 } else { 402 }
        ),
    );
    None
}

/// What each count means, to say why 0 is refused.
fn zero_hint(argument: &str) -> &'static str {
    match argument {
        "replenish" => "it is the number of tokens added back per `unit`",
        "concurrent" => "it is the most calls of one key in flight at once",
        "burst" => {
            "it is the bucket's capacity, the most calls allowed at once; leave it out to use `replenish`"
        }
        _ => "it is the number of tokens one call takes; leave it out for the default of 1",
    }
}

/// `replenish`, `burst` or `cost`: a positive `u32` literal, or a constant expression.
pub(super) fn count(name: &Ident, value: Expr, errors: &mut Errors) -> Option<Count> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => {
            if !matches!(lit.suffix(), "" | "u32") {
                errors.at(
                    lit.span(),
                    format_args!(
                        "`{name}` is a `u32`; drop the `{}` suffix: `{name} = {}`",
                        lit.suffix(),
                        lit.base10_digits()
                    ),
                );
                return None;
            }
            match lit.base10_parse::<u32>() {
                // A bucket may start empty; a settlement may be allowed no debt.
                Ok(0) if name == "initial" || name == "max_debt" => Some(Count::Literal(0, lit)),
                Ok(0) => {
                    errors.at(
                        lit.span(),
                        format_args!(
                            "`{name}` must be at least 1: {}",
                            zero_hint(&name.to_string())
                        ),
                    );
                    None
                }
                Ok(n) => Some(Count::Literal(n, lit)),
                Err(_) => {
                    errors.at(
                        lit.span(),
                        format_args!("`{name}` must fit in a `u32` (at most {})", u32::MAX),
                    );
                    None
                }
            }
        }
        Expr::Lit(ExprLit { lit, .. }) => {
            errors.push(not_a_count(name, &lit));
            None
        }
        Expr::Unary(
            negative @ ExprUnary {
                op: UnOp::Neg(_), ..
            },
        ) => {
            errors.at(
                negative.span(),
                format_args!(
                    "`{name}` must be a positive integer; negative values mean nothing here"
                ),
            );
            None
        }
        other => Some(Count::Const(other)),
    }
}

/// The error for `replenish = 1.5`, `replenish = "3"` and the like.
fn not_a_count(name: &Ident, lit: &Lit) -> syn::Error {
    let message = match lit {
        Lit::Float(f) => format!(
            "`{name}` must be a whole number of tokens, not `{}`; to allow a fraction per unit, \
             use a longer `unit` (1.5 per second is 90 per minute)",
            f.base10_digits()
        ),
        Lit::Str(s) if s.value().trim().parse::<u32>().is_ok() => format!(
            "`{name}` takes an integer, not a string: `{name} = {}`",
            s.value().trim()
        ),
        _ => format!("`{name}` takes a positive integer: `{name} = 10`"),
    };
    syn::Error::new(lit.span(), message)
}

/// `unit = "minute"`.
pub(super) fn unit(value: &Expr, errors: &mut Errors) -> Option<(Unit, Span)> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => {
            let written = s.value();
            match Unit::from_name(&written) {
                Ok(unit) => return Some((unit, s.span())),
                Err(unknown) => match args::nearest(&written, Unit::NAMES) {
                    Some(unit) => errors.at(
                        s.span(),
                        format_args!("unknown unit `{written}`; did you mean `{unit}`?"),
                    ),
                    None => errors.at(s.span(), unknown),
                },
            }
            None
        }
        other => {
            // `unit = minute` or `unit = Unit::Minute`: say how to write it.
            let last = match other {
                Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                _ => None,
            };
            let message = match last.map(|l| l.to_ascii_lowercase()) {
                Some(l) if Unit::from_name(&l).is_ok() => {
                    format!("`unit` takes a string: `unit = \"{l}\"`")
                }
                _ => format!(
                    "`unit` takes a string, one of {}: `unit = \"minute\"`",
                    Quoted(Unit::NAMES)
                ),
            };
            errors.at(other.span(), message);
            None
        }
    }
}

/// `name = "orders.list"`.
pub(super) fn limit_name(value: &Expr, errors: &mut Errors) -> Option<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => {
            // The one rule of names, which a layer's limit built at run time is held to too.
            if let Err(e) = ratelimit_vocab::check_name(&s.value()) {
                errors.at(
                    s.span(),
                    format_args!("`name` {e}; leave it out to use `module::function`"),
                );
                None
            } else {
                Some(s.clone())
            }
        }
        other => {
            errors.at(
                other.span(),
                "`name` takes a string literal: `name = \"orders.list\"`",
            );
            None
        }
    }
}

/// `wait = "2s"`, in the one wait syntax of macros and overrides; `wait = "none"` is no wait.
pub(super) fn wait(value: &Expr, errors: &mut Errors) -> Option<(Option<u64>, Span)> {
    let s = args::string(value, errors, WAIT_SYNTAX)?;
    match ratelimit_vocab::parse_wait(&s.value()) {
        Ok(us) => Some((us, s.span())),
        Err(e) => {
            errors.at(s.span(), e);
            None
        }
    }
}

/// `jitter = "50ms"`: a duration in the wait syntax, at most an hour (`"none"` means no
/// jitter and is better left out).
pub(super) fn jitter(value: &Expr, errors: &mut Errors) -> Option<(u64, Span)> {
    let help = "`jitter` takes a duration as `wait` does: `jitter = \"50ms\"`";
    let s = args::string(value, errors, help)?;
    let span = s.span();
    let us = match ratelimit_vocab::parse_wait(&s.value()) {
        Ok(us) => us,
        Err(e) => {
            errors.at(
                span,
                format_args!("`jitter` takes a duration as `wait` does: {e}"),
            );
            return None;
        }
    };
    match us {
        Some(us) if us <= ratelimit_vocab::limits::MAX_JITTER_US => Some((us, span)),
        Some(_) => {
            errors.at(span, "`jitter` spreads waits by at most an hour");
            None
        }
        None => {
            errors.at(span, "`jitter = \"none\"` is no jitter: remove it");
            None
        }
    }
}

/// `lease = "10s"`: a duration in the wait syntax, from a millisecond to a day.
pub(super) fn lease(value: &Expr, errors: &mut Errors) -> Option<(u64, Span)> {
    let help = "`lease` takes a duration as `wait` does: `lease = \"10s\"`";
    let s = args::string(value, errors, help)?;
    let span = s.span();
    match ratelimit_vocab::parse_lease(&s.value()) {
        Ok(us) => Some((us, span)),
        Err(why) => {
            errors.at(span, why);
            None
        }
    }
}

/// `shadow = true`.
pub(super) fn shadow(value: &Expr, errors: &mut Errors) -> Option<syn::LitBool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Some(b.clone()),
        other => {
            errors.at(
                other.span(),
                "`shadow` takes `true` or `false`: `shadow = true` decides and counts calls \
                 but never refuses them",
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `#[rate_limit(wait = "<written>")]` makes of it: microseconds (`None`: no wait),
    /// or the compile error's message.
    fn in_the_macro(written: &str) -> Result<Option<u64>, String> {
        let mut errors = Errors::default();
        let value: Expr = syn::parse_quote!(#written);
        match wait(&value, &mut errors) {
            Some((us, _)) if errors.is_empty() => Ok(us),
            _ => Err(errors
                .finish()
                .map_or_else(|e| e.to_string(), |()| String::new())),
        }
    }

    /// What an override makes of `wait=<written>` in the environment and `wait = "<written>"`
    /// in the file, which must agree; the message without the field's name.
    fn in_an_override(written: &str) -> Result<Option<u64>, String> {
        use redis_ratelimit::overrides;
        let env = overrides::parse_env(&format!("wait={written}"));
        let file = overrides::parse(&format!("[limits.a]\nwait = {written:?}\n"));
        match (env, file) {
            (Ok(o), Ok(limits)) => {
                assert_eq!(limits.get("a"), Some(&o), "{written:?}");
                let wait = o.wait.expect("the field was set");
                Ok(wait.map(|d| u64::try_from(d.as_micros()).expect("at most a day")))
            }
            (Err(env), Err(file)) => {
                let env = env.to_string();
                let why = env
                    .strip_prefix("field `wait`: ")
                    .unwrap_or_else(|| panic!("{env}"));
                assert!(file.to_string().contains(why), "{file}");
                Err(why.to_owned())
            }
            (env, file) => panic!("{written:?}: the environment says {env:?}, the file {file:?}"),
        }
    }

    #[test]
    fn the_macro_and_overrides_take_the_same_waits() {
        for written in [
            "2s",
            "500ms",
            "1m",
            "1440m",
            "86400000ms",
            " 2s ",
            "none",
            "NONE",
            "",
            "2",
            "ms",
            "2h",
            "2 hours",
            "2 s",
            "+2s",
            "-2s",
            "1.5s",
            "0ms",
            "0s",
            "1441m",
            "5000000000ms",
            "99999999999999999999999s",
        ] {
            let ours = in_the_macro(written);
            assert_eq!(ours, in_an_override(written), "{written:?}");
            assert_eq!(
                ours,
                ratelimit_vocab::parse_wait(written).map_err(|e| e.to_string()),
                "{written:?}"
            );
        }
        assert_eq!(in_the_macro("2s"), Ok(Some(2_000_000)));
        assert_eq!(in_the_macro("none"), Ok(None));
        assert!(in_the_macro("2h").is_err());
    }
}
