//! The items the function's body declares: each limit's `static` declaration (a rate limit, a
//! concurrency limit or a shared use), its name, and the compile-time check that two limits'
//! names differ.

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt as _;
use syn::spanned::Spanned as _;
use syn::{Expr, Signature};

use ratelimit_vocab::{Algorithm, Refill, Unit};

use crate::attr::{Count, RateLimitArgs};
use crate::span::at;
use crate::stack::Stacked;

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
pub(super) fn same_name_check(
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
