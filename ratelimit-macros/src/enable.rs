//! `enable_redis_rate_limit!(...)`: options checked at compile time, expanded onto
//! `redis_ratelimit::enable::enable(EnableOptions::with_builder(<crate name>, <builder>...)...)`:
//! each option but `config` is a call on the limiter's builder, so the macro and
//! `RateLimiter::builder()` have one set of settings.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, ExprUnary, Lit, UnOp};

use ratelimit_vocab::{EmptyKeyPolicy, FailurePolicy};

use crate::args::{self, Argument, Errors, RawArg, variant, word};

/// Every option, how its value is read, and a value to show when it is written without one.
const OPTIONS: &[Argument<EnableArgs>] = &[
    Argument::new("url", "\"redis://127.0.0.1:6379\"", |o, _, v, _| {
        o.url = Some(v);
    }),
    Argument::new("prefix", "\"my-service\"", |o, _, v, _| o.prefix = Some(v)),
    Argument::new("policy", "\"fallback\"", |o, name, v, e| {
        o.policy = word(name, &v, e);
    }),
    Argument::new("empty_key", "\"deny\"", |o, name, v, e| {
        o.empty_key = word(name, &v, e);
    }),
    Argument::new("deadline_ms", "50", |o, _, v, e| {
        o.deadline_ms = millis(v, e);
    }),
    Argument::new("config", "\"ratelimit.toml\"", |o, _, v, _| {
        o.config = Some(v);
    }),
    Argument::new(
        "builder",
        "RateLimiter::builder().deny_cache(0)",
        |o, _, v, _| o.builder = Some(v),
    ),
];

const ALIASES: &[(&str, &str)] = &[
    ("redis_url", "url"),
    ("redis", "url"),
    ("key_prefix", "prefix"),
    ("failure_policy", "policy"),
    ("on_failure", "policy"),
    ("empty_key_policy", "empty_key"),
    ("deny_empty_key", "empty_key"),
    ("deadline", "deadline_ms"),
    ("timeout", "deadline_ms"),
    ("timeout_ms", "deadline_ms"),
    ("config_file", "config"),
    ("limiter", "builder"),
];

#[derive(Default)]
struct EnableArgs {
    url: Option<Expr>,
    prefix: Option<Expr>,
    policy: Option<(FailurePolicy, Span)>,
    empty_key: Option<(EmptyKeyPolicy, Span)>,
    deadline_ms: Option<TokenStream>,
    config: Option<Expr>,
    builder: Option<Expr>,
}

/// The macro: the `enable` call, or, with errors, the errors and a call with defaults (so the
/// surrounding `.await?` still type-checks and reports nothing more).
pub(crate) fn enable_redis_rate_limit(tokens: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    // A bare string is most likely the URL.
    let meant = |lit: &syn::Lit| format!("url = {}", args::literal_text(lit));
    let options = match args::parse_list(tokens, meant) {
        Ok(list) => parse(list, &mut errors),
        Err(e) => {
            errors.push(e);
            EnableArgs::default()
        }
    };
    let defaults = quote!(::redis_ratelimit::enable::EnableOptions::new(::core::env!(
        "CARGO_PKG_NAME"
    )));
    if let Err(e) = errors.finish() {
        let errors = e.into_compile_error();
        return quote!({ #errors ::redis_ratelimit::enable::enable(#defaults) });
    }
    let EnableArgs {
        url,
        prefix,
        policy,
        empty_key,
        deadline_ms,
        config,
        builder,
    } = options;
    let builder = builder.map_or_else(
        || quote!(::redis_ratelimit::RateLimiter::builder()),
        // In parentheses: the options below are method calls on it, whatever its precedence.
        |e| quote!((#e)),
    );
    let url = url.map(|e| quote!(.redis(#e)));
    let prefix = prefix.map(|e| quote!(.prefix(#e)));
    let policy = policy
        .map(variant)
        .map(|v| quote!(.failure_policy(::redis_ratelimit::FailurePolicy::#v)));
    let empty_key = empty_key
        .map(variant)
        .map(|v| quote!(.empty_key_policy(::redis_ratelimit::EmptyKeyPolicy::#v)));
    let deadline =
        deadline_ms.map(|ms| quote!(.deadline(::core::time::Duration::from_millis(#ms))));
    let config = config.map(|e| quote!(.config_file(#e)));
    quote! {
        ::redis_ratelimit::enable::enable(
            ::redis_ratelimit::enable::EnableOptions::with_builder(
                ::core::env!("CARGO_PKG_NAME"),
                #builder #url #prefix #policy #empty_key #deadline,
            )
            #config
        )
    }
}

fn parse(list: Vec<RawArg>, errors: &mut Errors) -> EnableArgs {
    let mut options = EnableArgs::default();
    let known = |name: &str| OPTIONS.iter().find(|o| o.name == name);
    args::read(list, known, &mut options, errors, |_, name, _, errors| {
        let names: Vec<&str> = OPTIONS.iter().map(|o| o.name).collect();
        errors.push(args::unknown("option", name, &names, ALIASES));
    });
    options
}

/// `deadline_ms = 50`: a positive literal, or an expression of type `u64`.
fn millis(value: Expr, errors: &mut Errors) -> Option<TokenStream> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => match lit.base10_parse::<u64>() {
            Ok(0) => {
                errors.at(
                    lit.span(),
                    "`deadline_ms` must be at least 1: with no time to answer, every call would \
                     fall to the failure policy",
                );
                None
            }
            Ok(_) if !matches!(lit.suffix(), "" | "u64") => {
                errors.at(
                    lit.span(),
                    format_args!(
                        "`deadline_ms` is a `u64`; drop the `{}` suffix",
                        lit.suffix()
                    ),
                );
                None
            }
            Ok(ms) => Some(lit_u64(ms, lit.span())),
            Err(_) => {
                errors.at(lit.span(), "`deadline_ms` must fit in a `u64`");
                None
            }
        },
        Expr::Lit(ExprLit { lit, .. }) => {
            errors.at(
                lit.span(),
                "`deadline_ms` takes a whole number of milliseconds: `deadline_ms = 50`",
            );
            None
        }
        Expr::Unary(
            negative @ ExprUnary {
                op: UnOp::Neg(_), ..
            },
        ) => {
            errors.at(
                negative.span(),
                "`deadline_ms` must be a positive number of milliseconds",
            );
            None
        }
        other => Some(quote!(#other)),
    }
}

fn lit_u64(n: u64, span: Span) -> TokenStream {
    let mut lit = proc_macro2::Literal::u64_unsuffixed(n);
    lit.set_span(span);
    quote!(#lit)
}
