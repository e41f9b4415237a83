//! `layer_limit!`: a limit an HTTP layer decides for every request it serves, declared with
//! the attribute's own arguments (and checked as they are), listed with the functions' limits.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;

use crate::args::Errors;
use crate::attr::RateLimitArgs;
use crate::expand::{at, declaration};
use crate::valid;

/// The arguments only a function's limit may take: each is about one call of the function
/// (its arguments, its outcome, its limiter), which a layer's limit has none of.
const FUNCTION_ONLY: &[(&str, &str)] = &[
    ("count", "a layer's limit counts every request it serves"),
    ("tier", "a layer's limit has no call to give a tier"),
    ("tiers", "a layer's limit has no call to give a tier"),
    ("exempt", "a layer's limit has no call to exempt"),
    (
        "limiter",
        "a layer's limit is decided on the enabled limiter",
    ),
    ("wait", "a layer's limit refuses at once"),
    ("jitter", "a layer's limit refuses at once"),
];

pub(crate) fn layer_limit(tokens: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = match RateLimitArgs::parse(tokens, &mut errors) {
        Ok(args) => args,
        Err(e) => {
            errors.push(e);
            return failed(errors);
        }
    };
    valid::check(&args, None, &mut errors);
    for (argument, why) in FUNCTION_ONLY {
        if args.written(argument) {
            errors.at(
                Span::call_site(),
                format_args!("`{argument}` is for `#[rate_limit]` on a function: {why}"),
            );
        }
    }
    if args.written_name().is_none() && args.shared.is_none() {
        errors.at(
            Span::call_site(),
            "a layer's limit needs a `name = \"..\"` (there is no function to name it after), \
             or `shared = \"..\"` to draw from a limit declared elsewhere",
        );
    }
    let Some(key) = &args.key else {
        errors.at(
            Span::call_site(),
            "a layer's limit needs a `key = ..`: a `KeyResolver` such as `Ip`, `Route` or \
             `Header(\"x-api-key\")`, since there are no arguments to key it by",
        );
        return failed(errors);
    };
    if !errors.is_empty() {
        return failed(errors);
    }
    let sig: syn::Signature = syn::parse_quote!(fn layer());
    let declaration = declaration(&args, &sig, 1, None);
    let key = quote_spanned!(at(key.span())=> #key);
    quote! {
        {
            static __RL_LAYER_DECL: ::redis_ratelimit::LimitDeclaration = #declaration;
            ::redis_ratelimit::__private::inventory::submit! {
                ::redis_ratelimit::__private::Registration(&__RL_LAYER_DECL)
            }
            ::redis_ratelimit::__private::layer_limit(&__RL_LAYER_DECL, #key)
        }
    }
}

/// The errors, in place of the expression: one block, whatever their number.
fn failed(errors: Errors) -> TokenStream {
    let errors = errors.finish().err().map(syn::Error::into_compile_error);
    quote!({ #errors ::core::unreachable!() })
}
