//! `#[rate_limit]` code generation: the user's function, with the check before its body.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::visit_mut::VisitMut;
use syn::{Expr, ReturnType, Signature, Type};

use crate::args::Errors;
use crate::attr::{RateLimitArgs, Site};
use crate::item::ItemFn;
use crate::span::at;
use crate::stack::{self, Stacked};
use crate::valid;

mod call;
pub(crate) mod declaration;
mod outcome;

use call::{call, key, tier_of};
use declaration::{declaration, same_name_check};
use outcome::{After, counting, output_annotation};

/// The attribute: parse, validate, expand; on any error, the function as written plus every
/// error, so the rest of the crate (and an IDE) still sees the function.
///
/// Other `#[rate_limit]` attributes below this one (stacked limits) are taken off the function
/// and expanded here with it: every limit in one check, all or nothing.
pub(crate) fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(e) => return with_errors(item, e),
    };
    let stacked = stack::take(&mut func.outer_attrs);
    let mut errors = Errors::default();
    valid::check_function(&func.sig, &mut errors);
    let mut limits = Vec::with_capacity(1 + stacked.len());
    match RateLimitArgs::parse(args, Site::Function, &mut errors) {
        Ok(args) => {
            valid::check(&args, None, &mut errors);
            limits.push(Stacked { args, attr: None });
        }
        Err(e) => errors.push(e),
    }
    if stacked.is_empty() {
        return match limits.pop() {
            Some(limit) if errors.is_empty() => {
                let limiter = limit.args.limiter.clone();
                expand(&[limit], limiter.as_ref(), &[], &func)
            }
            _ => item_with(item, errors),
        };
    }
    for attr in stacked {
        match stack::arguments(&attr)
            .and_then(|tokens| RateLimitArgs::parse(tokens, Site::Function, &mut errors))
        {
            Ok(args) => {
                valid::check(&args, Some(&attr), &mut errors);
                limits.push(Stacked {
                    args,
                    attr: Some(attr),
                });
            }
            Err(e) => errors.push(e),
        }
    }
    let same_name = stack::check_names(&limits, &mut errors);
    let limiter = stack::limiter(&limits, &mut errors);
    if errors.is_empty() {
        expand(&limits, limiter.as_ref(), &same_name, &func)
    } else {
        // Without the stacked attributes: they are reported here, not expanded again.
        item_with(as_written(&func), errors)
    }
}

/// tokio-macros' `token_stream_with_error`: the input unchanged, and the errors.
fn with_errors(mut item: TokenStream, error: syn::Error) -> TokenStream {
    item.extend(error.into_compile_error());
    item
}

fn item_with(item: TokenStream, errors: Errors) -> TokenStream {
    match errors.finish() {
        Ok(()) => item,
        Err(e) => with_errors(item, e),
    }
}

/// The function as the user wrote it (less the attributes taken off it).
fn as_written(func: &ItemFn) -> TokenStream {
    let ItemFn {
        outer_attrs,
        vis,
        sig,
        brace,
        inner_attrs,
        body,
    } = func;
    let mut block = Group::new(Delimiter::Brace, quote!(#(#inner_attrs)* #body));
    block.set_span(brace.span.join());
    quote!(#(#outer_attrs)* #vis #sig #block)
}

/// The function with its limits checked before its body: one limit by `check`, several
/// together by `check_all`. `same_name` lists the pairs of limits (by position) whose names
/// only the compiler can compare.
fn expand(
    limits: &[Stacked],
    limiter: Option<&Expr>,
    same_name: &[(usize, usize)],
    func: &ItemFn,
) -> TokenStream {
    let ItemFn {
        outer_attrs,
        vis,
        sig,
        brace,
        inner_attrs,
        body,
    } = func;
    // Locals are hygienic; the statics are items, so their names are only prefixed.
    let rejection = Ident::new("__rl_rejection", Span::mixed_site());
    let params = crate::params::bindings(sig);
    let limiter = match limiter {
        Some(expr) => {
            let span = at(expr.span());
            quote_spanned!(span=> ::redis_ratelimit::__private::AsLimiter::as_limiter(&(#expr)))
        }
        None => quote!(::redis_ratelimit::__private::global()),
    };
    let mut statics = TokenStream::new();
    let mut keys = TokenStream::new();
    let mut checked = Vec::with_capacity(limits.len());
    // The limits that count only some outcomes: their declaration, what the call took, and
    // the predicate.
    let mut counted: Vec<(Ident, Ident, After<'_>)> = Vec::new();
    for (i, limit) in limits.iter().enumerate() {
        let suffix = if i == 0 {
            String::new()
        } else {
            format!("_{}", i + 1)
        };
        let decl = Ident::new(&format!("__RL_DECL{suffix}"), Span::mixed_site());
        let key_arg = Ident::new(&format!("__rl_key{suffix}"), Span::mixed_site());
        let declaration = declaration(&limit.args, sig, i + 1, limit.line_span());
        statics.extend(quote! {
            static #decl: ::redis_ratelimit::LimitDeclaration = #declaration;
            ::redis_ratelimit::__private::inventory::submit! {
                ::redis_ratelimit::__private::Registration(&#decl)
            }
        });
        keys.extend(key(limit.args.key.as_ref(), &key_arg, &suffix));
        let mut call = call(&limit.args, &params);
        if let Some(tier) = &limit.args.tier {
            let tier_var = Ident::new(&format!("__rl_tier{suffix}"), Span::mixed_site());
            let tier = tier_of(tier);
            keys.extend(quote! {
                let #tier_var: ::core::option::Option<::redis_ratelimit::Tier> = #tier;
            });
            call.extend(quote!(.with_tier(&#tier_var)));
        }
        // `count` and `settle` (never both: a compile error) keep what the call took.
        let after = match (&limit.args.count, &limit.args.settle) {
            (Some(predicate), _) => Some(After::Count(predicate)),
            (None, Some(actual)) => Some(After::Settle(actual)),
            (None, None) => None,
        };
        if let Some(after) = after {
            let taken = Ident::new(&format!("__rl_taken{suffix}"), Span::mixed_site());
            // A counted call's tokens are held provisionally while it runs: a call refused
            // meanwhile waits for them (they come back if its outcome does not count).
            let made = match after {
                After::Count(_) => quote!(counting),
                After::Settle(_) => quote!(default),
            };
            keys.extend(quote! {
                let #taken = ::redis_ratelimit::__private::Taken::#made();
            });
            call.extend(quote!(.keeping(&#taken)));
            counted.push((decl.clone(), taken, after));
        }
        checked.push((decl, key_arg, call));
    }
    for &(earlier, later) in same_name {
        statics.extend(same_name_check(limits, earlier, later, sig));
    }
    // A function whose limits may hold concurrency slots (a `concurrent` limit, or a shared
    // use, whose declaration may be one) keeps them in a local of its future: given back, and
    // waited for, once its body is done (so that its caller, an HTTP client, finds them free
    // when the answer arrives), or in the background when the future is dropped first. The
    // first limit's call carries it.
    let mut holding = None;
    if limits
        .iter()
        .any(|l| l.args.concurrent.is_some() || l.args.shared.is_some())
        && let Some((.., call)) = checked.first_mut()
    {
        let held = Ident::new("__rl_holding", Span::mixed_site());
        keys.extend(quote! {
            let #held = ::redis_ratelimit::__private::Holding::default();
        });
        call.extend(quote!(.holding(&#held)));
        holding = Some(held);
    }
    let check = match checked.as_slice() {
        [(decl, key_arg, call)] => {
            quote!(::redis_ratelimit::__private::check_key(&#decl, &#key_arg, #call, #limiter))
        }
        _ => {
            let decls = checked.iter().map(|(decl, ..)| decl);
            let key_args = checked.iter().map(|(_, key_arg, _)| key_arg);
            let calls = checked.iter().map(|(.., call)| call);
            quote! {
                ::redis_ratelimit::__private::check_all(
                    &[#((&#decls, &#key_args, #calls)),*],
                    #limiter,
                )
            }
        }
    };
    let returned = return_type(sig);

    // The user wrote one pair of braces and the function keeps them; this second pair is
    // ours, so it is spanned as macro output: with the user's span, a one-line body reads as
    // `{ Ok(x) }` in tail position, and rustc's `unused_braces` fires on the user's code.
    let mut user_body = Group::new(Delimiter::Brace, body.clone());
    user_body.set_span(at(brace.span.join()));
    let user_body = if counted.is_empty() {
        quote!(#user_body)
    } else {
        counting(&counted, &user_body, sig, &limiter)
    };
    let user_body = match &holding {
        None => user_body,
        Some(holding) => {
            let output = Ident::new("__rl_released", Span::mixed_site());
            let annotation = output_annotation(sig);
            quote! {
                let #output #annotation = async move { #user_body }.await;
                #holding.release().await;
                #output
            }
        }
    };
    let mut new_body = Group::new(
        Delimiter::Brace,
        quote! {
            #(#inner_attrs)*
            #statics
            #keys
            if let ::core::result::Result::Err(#rejection) = #check.await {
                return #returned::rate_limited(#rejection);
            }
            #user_body
        },
    );
    new_body.set_span(brace.span.join());
    quote! {
        #(#outer_attrs)*
        #vis #sig #new_body
    }
}

/// `<ReturnType as RateLimitReturn>`, spanned at the user's return type so that a return
/// type the rejection cannot convert into is reported there. `impl Trait` cannot be named in
/// an expression, so it becomes `_` (inferred from the function's return type).
fn return_type(sig: &Signature) -> TokenStream {
    match &sig.output {
        ReturnType::Default => {
            quote_spanned!(at(sig.ident.span())=> <() as ::redis_ratelimit::__private::RateLimitReturn>)
        }
        ReturnType::Type(_, ty) => {
            let mut ty = (**ty).clone();
            ImplTraitToInfer.visit_type_mut(&mut ty);
            let span = at(ty.span());
            quote_spanned!(span=> <#ty as ::redis_ratelimit::__private::RateLimitReturn>)
        }
    }
}

struct ImplTraitToInfer;

impl VisitMut for ImplTraitToInfer {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(impl_trait) = ty {
            *ty = Type::Infer(syn::TypeInfer {
                underscore_token: syn::Token![_](impl_trait.impl_token.span),
            });
        } else {
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::rate_limit;

    #[test]
    fn the_check_goes_before_the_body_and_the_signature_is_kept() {
        let out = rate_limit(
            quote!(
                replenish = 3,
                burst = 300,
                unit = "minute",
                key = Header("x-api-key")
            ),
            quote! {
                /// Lists orders.
                pub async fn list_orders(&self, page: u32) -> ApiResult<Vec<Order>> {
                    #![allow(clippy::unused_async)]
                    Ok(self.page(page))
                }
            },
        )
        .to_string();
        let check = out.find("__private :: check_key").expect("the check");
        let body = out.find("self . page (page)").expect("the body");
        assert!(check < body, "{out}");
        assert!(out.starts_with("# [doc = r\" Lists orders.\"] pub async fn list_orders (& self , page : u32) -> ApiResult < Vec < Order > >"), "{out}");
        // The inner attribute stays first in the body.
        assert!(
            out.contains("{ # ! [allow (clippy :: unused_async)] static __RL_DECL"),
            "{out}"
        );
        assert!(out.contains(":: redis_ratelimit :: __private :: limit (3 , :: core :: option :: Option :: Some (300) , :: redis_ratelimit :: Unit :: Minute , :: redis_ratelimit :: Algorithm :: TokenBucket , :: redis_ratelimit :: Refill :: Smooth , :: core :: option :: Option :: None ,)"), "{out}");
        assert!(out.contains("< ApiResult < Vec < Order > > as :: redis_ratelimit :: __private :: RateLimitReturn > :: rate_limited"), "{out}");
    }

    #[test]
    fn stacked_attributes_expand_into_one_check_of_every_limit() {
        let out = rate_limit(
            quote!(replenish = 3, unit = "minute", key = Ip),
            quote! {
                #[inline]
                #[rate_limit(replenish = 300, unit = "day", key = Global, limiter = L)]
                /// Between.
                #[redis_ratelimit::rate_limit(replenish = 1, name = "f.third")]
                async fn f() -> Result<u32, E> { Ok(1) }
            },
        )
        .to_string();
        // The stacked attributes are gone; the others stay, in order.
        assert!(!out.contains("# [rate_limit"), "{out}");
        assert!(!out.contains("# [redis_ratelimit :: rate_limit"), "{out}");
        assert!(
            out.starts_with("# [inline] # [doc = r\" Between.\"] async fn f ()"),
            "{out}"
        );
        // One declaration each: default names for the first two, the written one for the third.
        for decl in [
            "static __RL_DECL :",
            "static __RL_DECL_2 :",
            "static __RL_DECL_3 :",
        ] {
            assert_eq!(out.matches(decl).count(), 1, "{out}");
        }
        assert_eq!(out.matches("Registration (&").count(), 3, "{out}");
        assert!(out.contains("\"::\" , \"f\")"), "{out}");
        assert!(out.contains("\"::\" , \"f#2\")"), "{out}");
        assert!(out.contains("(\"f.third\" ,"), "{out}");
        // One check, of every limit in order, with the limiter written on the second.
        assert!(!out.contains("__private :: check ("), "{out}");
        assert!(
            out.contains(
                "__private :: check_all (& [(& __RL_DECL , & __rl_key , :: redis_ratelimit :: \
             __private :: Call :: NONE) , (& __RL_DECL_2 , & __rl_key_2 , :: redis_ratelimit :: \
             __private :: Call :: NONE) , (& __RL_DECL_3 , & __rl_key_3 , :: redis_ratelimit :: \
             __private :: Call :: NONE)] , :: redis_ratelimit :: __private :: AsLimiter :: \
             as_limiter (& (L)) ,)"
            ),
            "{out}"
        );
        // No written name could equal a default one: nothing for the compiler to compare.
        assert!(!out.contains("const _"), "{out}");
    }

    #[test]
    fn a_written_name_beside_a_default_one_is_compared_by_the_compiler() {
        let out = rate_limit(
            quote!(replenish = 3),
            quote! {
                #[rate_limit(replenish = 300, name = "shop::f")]
                async fn f() -> Result<u32, E> { Ok(1) }
            },
        )
        .to_string();
        assert_eq!(out.matches("const _ : () =").count(), 1, "{out}");
        assert!(out.contains("\"shop::f\" . as_bytes ()"), "{out}");
    }

    #[test]
    fn stacked_errors_are_all_reported_and_no_attribute_is_left_to_expand() {
        let item = quote! {
            #[rate_limit(replenish = 1, name = "a", limiter = X)]
            #[rate_limit(replenish = 2, name = "a", limiter = Y)]
            #[rate_limit(burst = 2)]
            async fn f() -> Result<u32, E> { Ok(1) }
        };
        let out = rate_limit(quote!(replenish = 3, limiter = X), item).to_string();
        assert!(!out.contains("rate_limit ("), "{out}");
        assert!(!out.contains("__private"), "{out}");
        assert!(out.contains("already named `a`"), "{out}");
        assert!(out.contains("has `limiter = X`"), "{out}");
        assert!(out.contains("missing `replenish`"), "{out}");
        assert_eq!(out.matches("compile_error").count(), 3, "{out}");
    }

    #[test]
    fn on_error_the_function_is_kept_as_written() {
        let item = quote! {
            fn not_async() -> Result<(), E> { Ok(()) }
        };
        let out = rate_limit(quote!(replenish = 0, bursts = 1), item.clone()).to_string();
        assert!(out.starts_with(&item.to_string()), "{out}");
        assert_eq!(out.matches("compile_error").count(), 3, "{out}");
        assert!(!out.contains("__private"), "{out}");
    }
}
