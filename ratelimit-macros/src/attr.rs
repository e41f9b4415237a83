//! `#[rate_limit(...)]` arguments, parsed into [`RateLimitArgs`]: each value typed and kept
//! with its span, every misuse reported on the token that caused it.

use proc_macro2::{Span, TokenStream};
use syn::{Expr, ExprLit, Ident, Lit, LitInt, LitStr};

use ratelimit_vocab::{Algorithm, EmptyKeyPolicy, FailurePolicy, Refill, Unit};

use crate::args::{self, Argument, Errors};

mod value;

pub(crate) use value::Count;
use value::{count, jitter, lease, limit_name, shadow, status, unit, wait};

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
}
