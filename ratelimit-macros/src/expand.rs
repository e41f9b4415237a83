//! `#[rate_limit]` code generation: the user's function, with the check before its body.

use proc_macro2::{Delimiter, Group, Ident, Literal, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt as _;
use syn::spanned::Spanned as _;
use syn::visit_mut::VisitMut;
use syn::{Expr, ReturnType, Signature, Type};

use ratelimit_vocab::{Algorithm, Refill, Unit};

use crate::args::Errors;
use crate::attr::{Count, RateLimitArgs, Site};
use crate::item::ItemFn;
use crate::stack::{self, Stacked};
use crate::valid;

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

/// The statements that bind `arg`, a `KeyArg`, to the limit's key: `Uri` when none is
/// written; a `KeyResolver` value as it is; an `AsyncKeyResolver`, for the check to await
/// under the limiter's deadline; any other value that displays (an argument,
/// `key = tenant_id`) as its text, computed here, before the body runs. Which is chosen by
/// method resolution (a resolver first), spanned at the user's expression so that a value
/// that is none of them is reported there.
fn key(expr: Option<&Expr>, arg: &Ident, suffix: &str) -> TokenStream {
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
fn tier_of(tier: &Expr) -> TokenStream {
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

/// The call's actual cost, by the user's `settle = closure` over its `output`, converted by the
/// runtime's `IntoActual` through a trait of the user's crate, as [`tier_of`] does (so that a
/// closure that returns no integer is told so in the user's terms, at the closure, not by a
/// trait of `__private` and its impls). Called through a function, so that the closure's
/// argument type is known from the function's return type.
fn actual_of(output: &Ident, settle: &Expr) -> TokenStream {
    let into_actual = Ident::new("IntoActual", Span::mixed_site());
    let actual = Ident::new("actual", Span::mixed_site());
    // The call, and the bound it requires, reported at the closure.
    let at_settle = Ident::new("actual", Span::mixed_site().located_at(settle.span()));
    let call = quote_spanned!(at(settle.span())=> #at_settle(&#output, #settle));
    quote! {{
        #[diagnostic::on_unimplemented(
            message = "`settle` must compute an integer, not `{Self}`",
            label = "the number of tokens this call used",
            note = "a settlement counts tokens: return an integer from the closure, such as \
                    `|r| r.as_ref().map_or(0, |c| c.tokens)`"
        )]
        trait #into_actual {
            fn into_actual(self) -> u32;
        }
        #[diagnostic::do_not_recommend]
        impl<C: ::redis_ratelimit::__private::IntoActual> #into_actual for C {
            fn into_actual(self) -> u32 {
                ::redis_ratelimit::__private::IntoActual::into_actual(self)
            }
        }
        fn #actual<T, C: #into_actual>(
            output: &T,
            settle: impl ::core::ops::FnOnce(&T) -> C,
        ) -> u32 {
            #into_actual::into_actual(settle(output))
        }
        #call
    }}
}

/// What the limit's check takes from this call: `Call::NONE` unless the cost is computed from
/// the arguments or the call may be exempt.
fn call(args: &RateLimitArgs, params: &[String]) -> TokenStream {
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

/// What a limit does with a call's output once its body ran: gives its tokens back when the
/// `count` predicate says it does not count, or settles its cost at the `settle` closure's
/// actual cost.
#[derive(Clone, Copy)]
enum After<'a> {
    Count(&'a Expr),
    Settle(&'a Expr),
}

/// The body of a function with limits that read its outcome (`count`, `settle`): the user's
/// body runs in an `async move` block (so that its `return`s and `?`s end the block, not the
/// function), then each such limit reads the output: a limit whose predicate says the call
/// does not count gives its tokens back, one that settles settles at the actual cost, before
/// the output is returned. A body that panics or is dropped counts, and keeps its estimate.
fn counting(
    counted: &[(Ident, Ident, After<'_>)],
    user_body: &Group,
    sig: &Signature,
    limiter: &TokenStream,
) -> TokenStream {
    let output = Ident::new("__rl_output", Span::mixed_site());
    let annotation = output_annotation(sig);
    let afterwards = counted.iter().map(|(decl, taken, after)| match after {
        After::Count(predicate) => {
            let span = at(predicate.span());
            let counts = quote_spanned! {span=>
                ::redis_ratelimit::__private::counts(&#output, #predicate)
            };
            quote! {
                if !#counts {
                    ::redis_ratelimit::__private::refund(&#decl, &#taken, #limiter).await;
                }
            }
        }
        After::Settle(actual) => {
            let actual = actual_of(&output, actual);
            quote! {
                ::redis_ratelimit::__private::settle(&#decl, &#taken, #actual, #limiter).await;
            }
        }
    });
    quote! {
        let #output #annotation = async move #user_body.await;
        #(#afterwards)*
        #output
    }
}

/// The type of the function's output for the `let` that holds it after its body ran in an
/// `async` block, where it can be named, so that `?` in the body knows its error type.
fn output_annotation(sig: &Signature) -> TokenStream {
    match &sig.output {
        ReturnType::Default => quote!(: ()),
        ReturnType::Type(_, ty) if !has_impl_trait(ty) => quote!(: #ty),
        ReturnType::Type(..) => quote!(),
    }
}

/// Whether `ty` holds an `impl Trait`, which cannot be named in a `let`.
fn has_impl_trait(ty: &Type) -> bool {
    struct Find(bool);
    impl<'ast> syn::visit::Visit<'ast> for Find {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut find = Find(false);
    syn::visit::Visit::visit_type(&mut find, ty);
    find.0
}

/// The limit's name: the one written, else `module::function` for the first (outermost)
/// limit and `module::function#n` for the n-th.
fn limit_name(args: &RateLimitArgs, sig: &Signature, ordinal: usize) -> TokenStream {
    match args.written_name() {
        Some(lit) => quote!(#lit),
        None => {
            let mut function = sig.ident.unraw().to_string();
            if ordinal > 1 {
                function = format!("{function}#{ordinal}");
            }
            quote!(::core::concat!(::core::module_path!(), "::", #function))
        }
    }
}

/// A written name that may equal another limit's default one (`name = "shop::search"` beside
/// a default `shop::search`): compared by the compiler, which knows the module path, and
/// reported on the later limit.
fn same_name_check(
    limits: &[Stacked],
    earlier: usize,
    later: usize,
    sig: &Signature,
) -> TokenStream {
    let first = limit_name(&limits[earlier].args, sig, earlier + 1);
    let second = limit_name(&limits[later].args, sig, later + 1);
    let limit = &limits[later];
    let span = match (limit.args.written_name(), &limit.attr) {
        (Some(lit), _) => lit.span(),
        (None, Some(attr)) => attr.path().span(),
        (None, None) => Span::call_site(),
    };
    let [a, b, same, i] = ["a", "b", "same", "i"].map(|n| Ident::new(n, Span::mixed_site()));
    quote_spanned! {at(span)=>
        const _: () = {
            let (#a, #b) = (#first.as_bytes(), #second.as_bytes());
            let mut #same = #a.len() == #b.len();
            let mut #i = 0;
            while #same && #i < #a.len() {
                #same = #a[#i] == #b[#i];
                #i += 1;
            }
            ::core::assert!(
                !#same,
                "two `#[rate_limit]` attributes of this function give their limits one name (a \
                 written `name` equal to another limit's default, `module::function` or \
                 `module::function#n`): each limit needs a name of its own, for its buckets, \
                 overrides and metrics; give this one another `name = \"..\"`",
            );
        };
    }
}

/// The `static` initialiser: the limit and its metadata, evaluated at compile time.
///
/// `ordinal` is the limit's position among the function's attributes, from 1 (outermost);
/// `line` spans `line!()` at a stacked attribute, so each limit records its own line.
pub(crate) fn declaration(
    args: &RateLimitArgs,
    sig: &Signature,
    ordinal: usize,
    line: Option<Span>,
) -> TokenStream {
    let params = &crate::params::bindings(sig);
    let name = limit_name(args, sig, ordinal);
    if args.shared.is_some() {
        return shared_declaration(args, params, &name, line);
    }
    let line = match line {
        Some(span) => quote_spanned!(span=> ::core::line!()),
        None => quote!(::core::line!()),
    };
    if let Some(concurrent) = &args.concurrent {
        return concurrent_declaration(args, concurrent, &name, &line);
    }
    let unit = crate::args::variant(args.unit.unwrap_or((Unit::Second, Span::call_site())));
    let key = match &args.key {
        Some(expr) => quote!(::core::stringify!(#expr)),
        None => quote!("Uri"),
    };

    // Literals were checked by the macro. Constants are bound and checked here, when the
    // compiler evaluates the static, each failure reported on the user's expression.
    let mut checks = TokenStream::new();
    let one = Count::Literal(1, syn::LitInt::new("1", Span::call_site()));
    // `valid::check` guarantees `replenish` is present.
    let replenish = args.replenish.as_ref().unwrap_or(&one);
    let replenish_value = bind(replenish, "replenish", &mut checks);
    let burst = args.burst.as_ref();
    let burst_value = burst.map(|b| bind(b, "burst", &mut checks));
    // A cost computed per call is checked on each call; the declaration says 1.
    let cost = match &args.cost {
        Some(Count::Const(expr)) if crate::params::mentions(expr, params) => &one,
        Some(cost) => cost,
        None => &one,
    };
    let cost_value = bind(cost, "cost", &mut checks);
    let capacity = burst_value.as_ref().unwrap_or(&replenish_value);
    let constant = [Some(cost), burst, Some(replenish)]
        .into_iter()
        .flatten()
        .find(|c| c.literal().is_none());
    if let Some(constant) = constant {
        checks.extend(quote_spanned! {at(constant.span())=>
            ::core::assert!(
                #cost_value <= #capacity,
                "`cost` exceeds the burst, so no call could ever pass; raise `burst` or lower `cost`",
            );
        });
    }

    let burst = match &burst_value {
        Some(b) => quote!(::core::option::Option::Some(#b)),
        None => quote!(::core::option::Option::None),
    };
    // A calendar period's limit is a fixed window (another algorithm was refused).
    let default = if args.unit.is_some_and(|(unit, _)| unit.is_calendar()) {
        Algorithm::FixedWindow
    } else {
        Algorithm::TokenBucket
    };
    let algorithm = crate::args::variant(args.algorithm.unwrap_or((default, Span::call_site())));
    let refill = crate::args::variant(args.refill.unwrap_or((Refill::Smooth, Span::call_site())));
    // May be 0, so not bound like the counts: a constant's type error lands on it.
    let initial = match &args.initial {
        Some(Count::Literal(n, lit)) => {
            let mut n = Literal::u32_unsuffixed(*n);
            n.set_span(lit.span());
            quote!(::core::option::Option::Some(#n))
        }
        Some(Count::Const(expr)) => {
            let local = Ident::new("initial", Span::mixed_site());
            checks.extend(quote_spanned! {at(expr.span())=>
                let #local: ::core::primitive::u32 = #expr;
                ::core::assert!(
                    #local <= #capacity,
                    "`initial` exceeds the burst; a bucket holds at most its burst",
                );
            });
            quote!(::core::option::Option::Some(#local))
        }
        None => quote!(::core::option::Option::None),
    };
    let (policy, wait, shadow) = settings(args);
    let jitter = args.jitter.map(|(us, span)| {
        let mut us = Literal::u64_unsuffixed(us);
        us.set_span(span);
        quote!(.jitter(::core::time::Duration::from_micros(#us)))
    });
    // A debt bound of 0 is one: never through `bind`, which asks for at least 1.
    let max_debt = args.max_debt.as_ref().map(|debt| match debt {
        Count::Literal(n, lit) => {
            let mut n = Literal::u32_unsuffixed(*n);
            n.set_span(lit.span());
            quote!(.max_debt(#n))
        }
        Count::Const(expr) => quote_spanned!(at(expr.span())=> .max_debt(#expr)),
    });
    let declaration = quote! {
        ::redis_ratelimit::__private::declaration(
            #name,
            ::redis_ratelimit::__private::limit(
                #replenish_value,
                #burst,
                ::redis_ratelimit::Unit::#unit,
                ::redis_ratelimit::Algorithm::#algorithm,
                ::redis_ratelimit::Refill::#refill,
                #initial,
            )#policy #wait #shadow #jitter #max_debt,
            #cost_value,
            #key,
            ::core::file!(),
            #line,
        )
    };
    let declaration = with_empty_key(args, declaration);
    let declaration = match &args.tiers {
        Some(tiers) => {
            // `[FREE, PRO]` is borrowed; anything else is a slice already. Through a constant
            // of its own: a tier's name may be shared, so a tier needs dropping, and a borrowed
            // array of tiers is not promoted to `'static` as a call's argument, but a
            // constant's outermost borrow lives as long as the program.
            let slice = match tiers {
                Expr::Array(_) => quote!(&#tiers),
                _ => quote!(#tiers),
            };
            let tiers = Ident::new("__RL_TIERS", Span::mixed_site());
            quote!(::redis_ratelimit::__private::with_tiers(#declaration, {
                const #tiers: &[::redis_ratelimit::Tier] = #slice;
                #tiers
            }))
        }
        None => declaration,
    };
    if checks.is_empty() {
        declaration
    } else {
        quote!({ #checks #declaration })
    }
}

/// What a rate limit and a concurrency limit are both given: the failure policy, the wait,
/// and shadow mode, as calls on the `Limit` being built (each empty when not written).
fn settings(
    args: &RateLimitArgs,
) -> (
    Option<TokenStream>,
    Option<TokenStream>,
    Option<TokenStream>,
) {
    let policy = args.policy.map(|policy| {
        let v = crate::args::variant(policy);
        quote!(.on_failure(::redis_ratelimit::FailurePolicy::#v))
    });
    let wait = args
        .wait
        .and_then(|(us, span)| Some((us?, span)))
        .map(|(us, span)| {
            let mut us = Literal::u64_unsuffixed(us);
            us.set_span(span);
            quote!(.wait(::core::time::Duration::from_micros(#us)))
        });
    let shadow = args.shadow.as_ref().map(|b| quote!(.with_shadow(#b)));
    (policy, wait, shadow)
}

/// The `static` initialiser of a concurrency limit's declaration: `Limit::concurrent(n)`
/// with its lease, wait, policy and shadow mode, a cost of 1.
fn concurrent_declaration(
    args: &RateLimitArgs,
    concurrent: &Count,
    name: &TokenStream,
    line: &TokenStream,
) -> TokenStream {
    let mut checks = TokenStream::new();
    let max = bind(concurrent, "concurrent", &mut checks);
    let key = match &args.key {
        Some(expr) => quote!(::core::stringify!(#expr)),
        None => quote!("Uri"),
    };
    let lease = args.lease.map(|(us, span)| {
        let mut us = Literal::u64_unsuffixed(us);
        us.set_span(span);
        quote!(.lease(::core::time::Duration::from_micros(#us)))
    });
    let (policy, wait, shadow) = settings(args);
    let declaration = quote! {
        ::redis_ratelimit::__private::declaration(
            #name,
            ::redis_ratelimit::Limit::concurrent(#max)#lease #policy #wait #shadow,
            1,
            #key,
            ::core::file!(),
            #line,
        )
    };
    let declaration = with_empty_key(args, declaration);
    if checks.is_empty() {
        declaration
    } else {
        quote!({ #checks #declaration })
    }
}

/// The `static` initialiser of a shared use: the name, this function's cost and key, and its
/// place; the limit is the declaring function's, found at enable.
fn shared_declaration(
    args: &RateLimitArgs,
    params: &[String],
    name: &TokenStream,
    line: Option<Span>,
) -> TokenStream {
    let line = match line {
        Some(span) => quote_spanned!(span=> ::core::line!()),
        None => quote!(::core::line!()),
    };
    let key = match &args.key {
        Some(expr) => quote!(::core::stringify!(#expr)),
        None => quote!("Uri"),
    };
    let mut checks = TokenStream::new();
    let one = Count::Literal(1, syn::LitInt::new("1", Span::call_site()));
    let cost = match &args.cost {
        Some(Count::Const(expr)) if crate::params::mentions(expr, params) => &one,
        Some(cost) => cost,
        None => &one,
    };
    let cost_value = bind(cost, "cost", &mut checks);
    let declaration = quote! {
        ::redis_ratelimit::__private::shared(#name, #cost_value, #key, ::core::file!(), #line)
    };
    let declaration = with_empty_key(args, declaration);
    if checks.is_empty() {
        declaration
    } else {
        quote!({ #checks #declaration })
    }
}

/// `declaration` with what this attribute says of its calls: whether they settle their
/// actual cost, the limit's own empty-key policy and the statuses of its refusals (for want
/// of a key, by its bucket), when it has any.
fn with_empty_key(args: &RateLimitArgs, declaration: TokenStream) -> TokenStream {
    let declaration = match &args.settle {
        Some(_) => quote!(::redis_ratelimit::__private::settling(#declaration)),
        None => declaration,
    };
    let status_of = |status: &Option<(u16, syn::LitInt)>| match status {
        Some((status, lit)) => {
            let mut n = Literal::u16_unsuffixed(*status);
            n.set_span(lit.span());
            quote!(::core::option::Option::Some(#n))
        }
        None => quote!(::core::option::Option::None),
    };
    let declaration = match &args.limited_status {
        None => declaration,
        limited => {
            let status = status_of(limited);
            quote!(::redis_ratelimit::__private::with_limited_status(#declaration, #status))
        }
    };
    if args.empty_key.is_none() && args.empty_key_status.is_none() {
        return declaration;
    }
    let policy = match &args.empty_key {
        Some(policy) => {
            let v = crate::args::variant(*policy);
            quote!(::core::option::Option::Some(::redis_ratelimit::EmptyKeyPolicy::#v))
        }
        None => quote!(::core::option::Option::None),
    };
    let status = status_of(&args.empty_key_status);
    quote!(::redis_ratelimit::__private::with_empty_key(#declaration, #policy, #status))
}

/// A count's value in the initialiser: a literal as is; a constant bound to a local, typed
/// `u32` and asserted non-zero where the user wrote it.
fn bind(count: &Count, argument: &str, checks: &mut TokenStream) -> TokenStream {
    match count {
        Count::Literal(n, lit) => {
            let mut n = Literal::u32_unsuffixed(*n);
            n.set_span(lit.span());
            quote!(#n)
        }
        Count::Const(expr) => {
            let local = Ident::new(argument, Span::mixed_site());
            let message = format!("`{argument}` must be at least 1");
            let span = at(expr.span());
            checks.extend(quote_spanned! {span=>
                let #local: ::core::primitive::u32 = #expr;
                ::core::assert!(#local >= 1, #message);
            });
            quote!(#local)
        }
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

/// A span that reports at the user's token but counts as macro output, so lints on the
/// user's code (clippy's pedantic ones included) do not fire on generated code.
pub(crate) fn at(user: Span) -> Span {
    Span::call_site().located_at(user)
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
