//! `layer_limit!`: a limit an HTTP layer decides for every request it serves, declared with
//! the attribute's own arguments (and checked as they are), listed with the functions' limits.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Expr;
use syn::spanned::Spanned as _;

use crate::args::Errors;
use crate::attr::{RateLimitArgs, Site};
use crate::expand::declaration::declaration;
use crate::span::at;
use crate::valid;

pub(crate) fn layer_limit(tokens: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = match RateLimitArgs::parse(tokens, Site::Layer, &mut errors) {
        Ok(args) => args,
        Err(e) => {
            errors.push(e);
            return failed(errors, None);
        }
    };
    valid::check(&args, None, &mut errors);
    if args.written_name().is_none() && args.shared.is_none() {
        errors.at(
            Span::call_site(),
            "a layer's limit needs a `name = \"..\"` (there is no function to name it after), \
             or `shared = \"..\"` to draw from a limit declared elsewhere",
        );
    }
    let key = match &args.key {
        Some(key) if errors.is_empty() => key,
        Some(key) => return failed(errors, Some(key)),
        None => {
            errors.at(
                Span::call_site(),
                "a layer's limit needs a `key = ..`: a `KeyResolver` such as `Ip`, `Route` or \
                 `Header(\"x-api-key\")`, since there are no arguments to key it by",
            );
            return failed(errors, None);
        }
    };
    let sig: syn::Signature = syn::parse_quote!(fn layer());
    let declaration = declaration(&args, &sig, 1, None);
    let key = quote_spanned!(at(key.span())=> #key);
    // What a handler's limit reads from its call, a layer's reads from the request: each is
    // a function of it, set on the limit by its builder method (the compiler checks its type
    // at the expression).
    let mut features = TokenStream::new();
    if let Some(exempt) = &args.exempt {
        features.extend(quote_spanned!(at(exempt.span())=> .exempt(#exempt)));
    }
    if let Some(tier) = &args.tier {
        features.extend(
            quote_spanned!(at(tier.span())=> .tier(::redis_ratelimit::__private::layer_tier(#tier))),
        );
    }
    if let Some(count) = &args.count {
        features.extend(quote_spanned!(at(count.span())=> .count(#count)));
    }
    quote! {
        {
            static __RL_LAYER_DECL: ::redis_ratelimit::LimitDeclaration = #declaration;
            ::redis_ratelimit::__private::inventory::submit! {
                ::redis_ratelimit::__private::Registration(&__RL_LAYER_DECL)
            }
            ::redis_ratelimit::__private::layer_limit(&__RL_LAYER_DECL, #key) #features
        }
    }
}

/// The errors in place of the expression, which then has the type rustc gives an error: no
/// "unreachable" warning after it, no type error around it. The key is kept, so that what it
/// names is still used (no "unused import" beside the errors).
fn failed(errors: Errors, key: Option<&Expr>) -> TokenStream {
    let errors = errors.finish().err().map(syn::Error::into_compile_error);
    let key = key.map(|key| quote!(let _ = &(#key);));
    quote!({ #key #errors })
}
