//! What runs once the body has: the limits that read its outcome (`count`, `settle`) give
//! tokens back or settle, and the type the body's output is held as meanwhile.

use proc_macro2::{Group, Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{Expr, ReturnType, Signature, Type};

use crate::span::at;

/// The call's actual cost, by the user's `settle = closure` over its `output`, converted by the
/// runtime's `IntoActual` through a trait of the user's crate, as
/// [`tier_of`](super::call::tier_of) does (so that a closure that returns no integer is told
/// so in the user's terms, at the closure, not by a trait of `__private` and its impls).
/// Called through a function, so that the closure's argument type is known from the
/// function's return type.
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

/// What a limit does with a call's output once its body ran: gives its tokens back when the
/// `count` predicate says it does not count, or settles its cost at the `settle` closure's
/// actual cost.
#[derive(Clone, Copy)]
pub(super) enum After<'a> {
    Count(&'a Expr),
    Settle(&'a Expr),
}

/// The body of a function with limits that read its outcome (`count`, `settle`): the user's
/// body runs in an `async move` block (so that its `return`s and `?`s end the block, not the
/// function), then each such limit reads the output: a limit whose predicate says the call
/// does not count gives its tokens back, one that settles settles at the actual cost, before
/// the output is returned. A body that panics or is dropped counts, and keeps its estimate.
pub(super) fn counting(
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
pub(super) fn output_annotation(sig: &Signature) -> TokenStream {
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
