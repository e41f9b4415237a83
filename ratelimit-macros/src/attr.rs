//! `#[rate_limit(...)]` arguments, parsed into [`RateLimitArgs`]: each value typed and kept
//! with its span, every misuse reported on the token that caused it.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitInt, LitStr, UnOp};

use ratelimit_vocab::{
    Algorithm, EmptyKeyPolicy, FailurePolicy, Quoted, Refill, Unit, WAIT_SYNTAX, Word,
};

use crate::args::{self, Argument, Errors};

/// Every argument `#[rate_limit]` takes: how its value is read, and which limits take it
/// besides a function's rate limit, which takes them all. `layer_limit!` takes those a layer's
/// limit takes, by the same table.
pub(crate) const ARGUMENTS: &[Arg] = &[
    arg("replenish", "10", |a, n, v, e| a.replenish = count(n, v, e)),
    arg("burst", "10", |a, n, v, e| a.burst = count(n, v, e)),
    arg("unit", "\"minute\"", |a, _, v, e| a.unit = unit(&v, e)),
    arg("key", "Uri", |a, _, v, _| a.key = Some(v))
        .concurrent()
        .shared(),
    arg("cost", "1", |a, n, v, e| a.cost = count(n, v, e)).shared(),
    arg("name", "\"orders.list\"", |a, _, v, e| {
        a.name = limit_name(&v, e);
    })
    .concurrent(),
    arg("limiter", "MY_LIMITER", |a, _, v, _| a.limiter = Some(v))
        .concurrent()
        .shared()
        .not_on_a_layer("a layer's limit is decided on the enabled limiter"),
    arg("policy", "\"deny\"", |a, n, v, e| {
        a.policy = args::word(n, &v, e);
    })
    .concurrent(),
    arg("algorithm", "\"sliding_log\"", |a, n, v, e| {
        a.algorithm = args::word(n, &v, e);
    }),
    arg("refill", "\"interval\"", |a, n, v, e| {
        a.refill = args::word(n, &v, e);
    }),
    arg("initial", "0", |a, n, v, e| a.initial = count(n, v, e)),
    arg("wait", "\"2s\"", |a, _, v, e| a.wait = wait(&v, e))
        .concurrent()
        .not_on_a_layer("a layer's limit refuses at once"),
    arg("shadow", "true", |a, _, v, e| a.shadow = shadow(&v, e)).concurrent(),
    arg("exempt", "is_internal(&caller)", |a, _, v, _| {
        a.exempt = Some(v);
    })
    .shared()
    .concurrent(),
    arg("empty_key", "\"allow\"", |a, n, v, e| {
        a.empty_key = args::word(n, &v, e);
    })
    .concurrent()
    .shared(),
    arg("empty_key_status", "401", |a, n, v, e| {
        a.empty_key_status = status(n, &v, e);
    })
    .concurrent()
    .shared(),
    arg("limited_status", "402", |a, n, v, e| {
        a.limited_status = status(n, &v, e);
    })
    .concurrent()
    .shared(),
    arg("count", "Result::is_err", |a, _, v, _| a.count = Some(v)).shared(),
    arg(
        "settle",
        "|r| r.as_ref().map_or(0, |c| c.tokens)",
        |a, _, v, _| {
            a.settle = Some(v);
        },
    )
    .shared()
    .not_on_a_layer(
        "a layer sees a response before its body has streamed; settle from the handler, \
         with `RateLimiter::check_estimate` and the `Usage` it returns",
    ),
    arg("max_debt", "4_000", |a, n, v, e| {
        a.max_debt = count(n, v, e);
    })
    .not_on_a_layer(
        "a layer's limit does not settle, so it owes nothing: `max_debt` bounds what a \
         `settle = ..` of a function's limit may leave owing",
    ),
    arg("tier", "user.plan()", |a, _, v, _| a.tier = Some(v))
        .concurrent()
        .shared(),
    arg("tiers", "[FREE, PRO]", |a, _, v, _| a.tiers = Some(v))
        .concurrent()
        .shared(),
    arg("jitter", "\"50ms\"", |a, _, v, e| a.jitter = jitter(&v, e))
        .not_on_a_layer("a layer's limit refuses at once"),
    arg("shared", "\"search\"", |a, _, v, e| {
        a.shared = limit_name(&v, e);
    })
    .shared(),
    arg("concurrent", "2", |a, n, v, e| {
        a.concurrent = count(n, v, e);
    })
    .concurrent(),
    arg("lease", "\"10s\"", |a, _, v, e| a.lease = lease(&v, e)).concurrent(),
];

/// An entry of [`ARGUMENTS`].
pub(crate) type Arg = Argument<RateLimitArgs, Takes>;

/// Which limits other than a function's rate limit take an argument.
pub(crate) struct Takes {
    /// A concurrency limit (`concurrent = n`).
    pub(crate) concurrent: bool,
    /// A shared use (`shared = ".."`): what a use says of itself, the rest being the
    /// declaration's.
    pub(crate) shared: bool,
    /// A layer's limit (`layer_limit!`): `Err(why)` when it refuses the argument.
    pub(crate) layer: Result<(), &'static str>,
}

/// An argument that a function's rate limit takes, and only it until said otherwise.
const fn arg(
    name: &'static str,
    example: &'static str,
    read: fn(&mut RateLimitArgs, &Ident, Expr, &mut Errors),
) -> Arg {
    Argument {
        name,
        example,
        read,
        rules: Takes {
            concurrent: false,
            shared: false,
            layer: Ok(()),
        },
    }
}

impl Arg {
    const fn concurrent(mut self) -> Arg {
        self.rules.concurrent = true;
        self
    }

    const fn shared(mut self) -> Arg {
        self.rules.shared = true;
        self
    }

    const fn not_on_a_layer(mut self, why: &'static str) -> Arg {
        self.rules.layer = Err(why);
        self
    }
}

/// Where the arguments are written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Site {
    /// `#[rate_limit(..)]` on a function.
    Function,
    /// `layer_limit!(..)`.
    Layer,
}

impl Site {
    /// The entry of `name`, if the arguments written here may take it.
    fn find(self, name: &str) -> Option<&'static Arg> {
        ARGUMENTS
            .iter()
            .find(|a| a.name == name && (self == Site::Function || a.rules.layer.is_ok()))
    }

    /// The names of every argument the arguments written here may take.
    pub(crate) fn names(self) -> Vec<&'static str> {
        ARGUMENTS
            .iter()
            .filter(|a| self == Site::Function || a.rules.layer.is_ok())
            .map(|a| a.name)
            .collect()
    }
}

/// Names from Spring's `RedisRateLimiter` and other limiters, mapped to ours.
const ALIASES: &[(&str, &str)] = &[
    ("replenishRate", "replenish"),
    ("replenish_rate", "replenish"),
    ("rate", "replenish"),
    ("burstCapacity", "burst"),
    ("burst_capacity", "burst"),
    ("capacity", "burst"),
    ("requestedTokens", "cost"),
    ("requested_tokens", "cost"),
    ("tokens", "cost"),
    ("period", "unit"),
    ("per", "unit"),
    ("key_resolver", "key"),
    ("keyResolver", "key"),
    ("failure_policy", "policy"),
    ("on_failure", "policy"),
];

/// The arguments of one `#[rate_limit(...)]`, as written; `None` when left to the default.
pub(crate) struct RateLimitArgs {
    pub(crate) replenish: Option<Count>,
    pub(crate) burst: Option<Count>,
    pub(crate) unit: Option<(Unit, Span)>,
    pub(crate) key: Option<Expr>,
    pub(crate) cost: Option<Count>,
    pub(crate) name: Option<LitStr>,
    pub(crate) limiter: Option<Expr>,
    /// `policy = ".."`.
    pub(crate) policy: Option<(FailurePolicy, Span)>,
    /// `algorithm = ".."`.
    pub(crate) algorithm: Option<(Algorithm, Span)>,
    /// `refill = ".."`.
    pub(crate) refill: Option<(Refill, Span)>,
    /// Tokens in a new bucket (0 allowed).
    pub(crate) initial: Option<Count>,
    /// `max_debt = n`: the most tokens a settlement may leave the bucket owing (0 allowed).
    pub(crate) max_debt: Option<Count>,
    /// `wait = "2s"`: the longest a call waits for its tokens, in microseconds; `None` for
    /// `wait = "none"`.
    pub(crate) wait: Option<(Option<u64>, Span)>,
    /// `shadow = true`.
    pub(crate) shadow: Option<syn::LitBool>,
    /// `shared = "search"`: the limit is declared by another function, named so; this one
    /// draws from its buckets.
    pub(crate) shared: Option<LitStr>,
    /// `jitter = "50ms"`: the most a wait is lengthened by, in microseconds.
    pub(crate) jitter: Option<(u64, Span)>,
    /// `exempt = expr`: a `bool` per call; `true` lets the call through unchecked.
    pub(crate) exempt: Option<Expr>,
    /// `count = predicate`: which outcomes count (`Result::is_err`, a closure over
    /// `&Output`); the tokens of the others are given back.
    pub(crate) count: Option<Expr>,
    /// `settle = closure`: the call's actual cost from its output (`&Output`), which settles
    /// the cost it took (an estimate) once it ends.
    pub(crate) settle: Option<Expr>,
    /// `tier = expr`: the tier of each call (a `Tier`, or `None` for the declared rate).
    pub(crate) tier: Option<Expr>,
    /// `tiers = [FREE, PRO]`: the tiers a call may be given, listed by `declared_limits()`.
    pub(crate) tiers: Option<Expr>,
    /// `empty_key = ".."`: this limit's own empty-key policy.
    pub(crate) empty_key: Option<(EmptyKeyPolicy, Span)>,
    /// `empty_key_status = 401`: the HTTP status of a refusal for want of a key.
    pub(crate) empty_key_status: Option<(u16, LitInt)>,
    /// `limited_status = 402`: the HTTP status of a refusal by the limit's bucket.
    pub(crate) limited_status: Option<(u16, LitInt)>,
    /// `concurrent = 2`: a concurrency limit, at most this many calls of a key in flight.
    pub(crate) concurrent: Option<Count>,
    /// `lease = "10s"`: a concurrency slot's lease, in microseconds.
    pub(crate) lease: Option<(u64, Span)>,
    /// Every known argument written, valid or not (a bad `replenish` is not also a missing
    /// one), as written: errors about an argument sit on its name.
    written: Vec<Ident>,
    /// The arguments an unknown name was reported as meaning (`rate` for `replenish`): not
    /// also reported missing.
    meant: Vec<&'static str>,
}

/// A number of tokens: a literal the macro checked, or a constant expression the compiler
/// checks (`replenish = ORDERS_PER_MINUTE`). A `cost` written over the function's parameters
/// (`cost = files.len()`) is computed on each call instead (`expand::per_call_cost`).
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

impl RateLimitArgs {
    /// Parses the arguments written at `site`. Each bad argument adds its error to `errors`
    /// and is left out; only a syntax error (a list that is not `name = value, ...`) stops
    /// early.
    pub(crate) fn parse(
        tokens: TokenStream,
        site: Site,
        errors: &mut Errors,
    ) -> syn::Result<RateLimitArgs> {
        let mut args = RateLimitArgs {
            replenish: None,
            burst: None,
            unit: None,
            key: None,
            cost: None,
            name: None,
            limiter: None,
            policy: None,
            algorithm: None,
            refill: None,
            initial: None,
            max_debt: None,
            wait: None,
            shadow: None,
            jitter: None,
            shared: None,
            exempt: None,
            count: None,
            settle: None,
            tier: None,
            tiers: None,
            empty_key: None,
            empty_key_status: None,
            limited_status: None,
            concurrent: None,
            lease: None,
            written: Vec::new(),
            meant: Vec::new(),
        };
        // A bare number is most likely the rate, a bare string the unit.
        let meant = |lit: &Lit| match lit {
            Lit::Str(_) => format!("unit = {}", args::literal_text(lit)),
            _ => format!("replenish = {}", args::literal_text(lit)),
        };
        let list = args::parse_list(tokens, meant)?;
        args.written = args::read(
            list,
            |name| site.find(name),
            &mut args,
            errors,
            |args, name, value, errors| {
                unknown(args, name, value, site, errors);
            },
        );
        Ok(args)
    }

    /// The limit's name as written: `name = ".."`, or the shared limit's, `shared = ".."`.
    pub(crate) fn written_name(&self) -> Option<&LitStr> {
        self.name.as_ref().or(self.shared.as_ref())
    }

    /// Whether `argument` was written, even with a value that was refused.
    pub(crate) fn written(&self, argument: &str) -> bool {
        self.written_at(argument).is_some() || self.meant.contains(&argument)
    }

    /// Where `argument`'s name was written, if it was.
    pub(crate) fn written_at(&self, argument: &str) -> Option<Span> {
        self.written
            .iter()
            .find(|w| *w == argument)
            .map(Ident::span)
    }
}

/// Reports `name`, which the arguments written at `site` do not take: an argument of a
/// function's limit on a layer, a name from elsewhere (`burstCapacity`), a typo, or a name
/// nothing means.
fn unknown(
    args: &mut RateLimitArgs,
    name: &Ident,
    value: Option<&Expr>,
    site: Site,
    errors: &mut Errors,
) {
    let written = name.to_string();
    if let Some(Err(why)) = Site::Function.find(&written).map(|a| &a.rules.layer) {
        errors.at(
            name.span(),
            format_args!("`{name}` is for `#[rate_limit]` on a function: {why}"),
        );
        return;
    }
    // `limit = 5` means a count, `limit = MY_LIMITER` a limiter.
    let meant = match (written.as_str(), value) {
        (
            "limit",
            Some(Expr::Lit(ExprLit {
                lit: Lit::Int(_), ..
            })),
        ) => Some("replenish"),
        _ => ALIASES
            .iter()
            .find(|(alias, _)| *alias == written)
            .map(|(_, ours)| *ours),
    };
    match meant {
        Some(ours) => {
            errors.at(
                name.span(),
                format_args!("unknown argument `{name}`; did you mean `{ours}`?"),
            );
            // Reported here: not also as a missing `replenish`.
            args.meant.push(ours);
        }
        None => errors.push(args::unknown("argument", name, &site.names(), ALIASES)),
    }
}

/// `empty_key_status`, `limited_status`: an HTTP status code an error can be answered with
/// (400 to 599).
fn status(name: &Ident, value: &Expr, errors: &mut Errors) -> Option<(u16, LitInt)> {
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
fn count(name: &Ident, value: Expr, errors: &mut Errors) -> Option<Count> {
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
fn unit(value: &Expr, errors: &mut Errors) -> Option<(Unit, Span)> {
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
fn limit_name(value: &Expr, errors: &mut Errors) -> Option<LitStr> {
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
fn wait(value: &Expr, errors: &mut Errors) -> Option<(Option<u64>, Span)> {
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
fn jitter(value: &Expr, errors: &mut Errors) -> Option<(u64, Span)> {
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
fn lease(value: &Expr, errors: &mut Errors) -> Option<(u64, Span)> {
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
fn shadow(value: &Expr, errors: &mut Errors) -> Option<syn::LitBool> {
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

    /// The value an argument written without one is told to take is one it takes.
    #[test]
    fn every_example_is_a_value_its_argument_takes() {
        for argument in ARGUMENTS {
            let written = format!("{} = {}", argument.name, argument.example);
            let mut errors = Errors::default();
            let tokens: TokenStream = written.parse().expect("tokens");
            let args = RateLimitArgs::parse(tokens, Site::Function, &mut errors).expect("a list");
            assert!(errors.is_empty(), "{written}: {:?}", errors.finish().err());
            assert!(args.written(argument.name), "{written}");
        }
    }

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
