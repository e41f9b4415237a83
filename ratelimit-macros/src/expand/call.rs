//! What each call hands its limit's check: the key, the tier, and the `Call` (a cost computed
//! from the arguments, an exemption).

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Expr;
use syn::spanned::Spanned as _;

use crate::attr::{Count, RateLimitArgs};
use crate::span::at;

/// The statements that bind `arg`, a `KeyArg`, to the limit's key: `Uri` when none is
/// written; a `KeyResolver` value as it is; an `AsyncKeyResolver`, for the check to await
/// under the limiter's deadline; any other value that displays (an argument,
/// `key = tenant_id`) as its text, computed here, before the body runs. Which is chosen by
/// method resolution (a resolver first), spanned at the user's expression so that a value
/// that is none of them is reported there.
pub(super) fn key(expr: Option<&Expr>, arg: &Ident, suffix: &str) -> TokenStream {
    let Some(expr) = expr else {
        return quote! {
            let #arg = ::redis_ratelimit::__private::KeyArg::Resolver(&::redis_ratelimit::Uri);
        };
    };
    let span = at(expr.span());
    let value = Ident::new(&format!("__rl_key_value{suffix}"), Span::mixed_site());
    let pick = quote_spanned! {span=>
        (&&&&::redis_ratelimit::__private::KeyOf(#value)).rate_limit_key()
    };
    quote! {
        let #value = &(#expr);
        let #arg = {
            #[allow(unused_imports)]
            use ::redis_ratelimit::__private::{
                ViaAsync as _, ViaDisplay as _, ViaNeither as _, ViaResolver as _,
            };
            #pick
        };
    }
}

/// The call's tier, from the user's `tier = expr`, converted by the runtime's `IntoTier`
/// through a trait of the user's crate, spanned at the expression: a value that is no tier is
/// reported there with this trait's message, in the user's terms. (The runtime's trait sits in
/// a hidden module, so rustc would name it by its `__private` path and list its impls with
/// their source; a local trait is named by its name alone, and `do_not_recommend` keeps rustc
/// from looking through it.) The expression is borrowed, not moved: a `Tier` is not `Copy`
/// (its name may be shared), and `tier = caller.plan` reads a field of a borrowed argument.
pub(super) fn tier_of(tier: &Expr) -> TokenStream {
    let into_tier = Ident::new("IntoTier", Span::mixed_site());
    let convert = quote_spanned!(at(tier.span())=> #into_tier::to_tier(&(#tier)));
    quote! {{
        #[diagnostic::on_unimplemented(
            message = "`tier` must be a `Tier`, a `&Tier` or an `Option` of one, not `{Self}`",
            label = "the tier of this call",
            note = "declare tiers as `const PRO: Tier = Tier::new(\"pro\", Limit::per_hour(10_000));` \
                    (or `Tier::try_new(name, limit)?` for a name read at run time) and pick one \
                    per call; `None` keeps the attribute's own rate"
        )]
        trait #into_tier {
            fn to_tier(&self) -> ::core::option::Option<::redis_ratelimit::Tier>;
        }
        #[diagnostic::do_not_recommend]
        impl<T: ::redis_ratelimit::__private::IntoTier + ?::core::marker::Sized> #into_tier for T {
            fn to_tier(&self) -> ::core::option::Option<::redis_ratelimit::Tier> {
                ::redis_ratelimit::__private::IntoTier::to_tier(self)
            }
        }
        #convert
    }}
}

/// What the limit's check takes from this call: `Call::NONE` unless the cost is computed from
/// the arguments or the call may be exempt.
pub(super) fn call(args: &RateLimitArgs, params: &[String]) -> TokenStream {
    let mut call = quote!(::redis_ratelimit::__private::Call::NONE);
    if let Some(cost) = per_call_cost(args, params) {
        let span = at(cost.span());
        call.extend(quote_spanned! {span=>
            .with_cost(::redis_ratelimit::__private::IntoCost::into_cost(#cost))
        });
    }
    if let Some(exempt) = &args.exempt {
        let span = at(exempt.span());
        let exempt = quote_spanned!(span=> { let exempt: bool = #exempt; exempt });
        call.extend(quote!(.with_exempt(#exempt)));
    }
    call
}

/// The cost, when it is computed on each call: written over the function's parameters.
fn per_call_cost<'a>(args: &'a RateLimitArgs, params: &[String]) -> Option<&'a Expr> {
    match &args.cost {
        Some(Count::Const(expr)) if crate::params::mentions(expr, params) => Some(expr),
        _ => None,
    }
}
