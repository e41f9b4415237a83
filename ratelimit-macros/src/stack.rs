//! Stacked attributes: `#[rate_limit(..)] #[rate_limit(..)] async fn f()`.
//!
//! The outermost attribute expands first and sees the others as plain attributes of the item.
//! It takes them off the item and decides every limit in one check, all or nothing; the
//! others therefore never expand on their own.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens as _;
use syn::spanned::Spanned as _;
use syn::{Attribute, Expr, Meta};

use crate::args::Errors;
use crate::attr::RateLimitArgs;

/// One limit of the function: its arguments, and the attribute it was written in (`None` for
/// the outermost, the attribute being expanded, whose tokens rustc no longer shows).
pub(crate) struct Stacked {
    pub(crate) args: RateLimitArgs,
    pub(crate) attr: Option<Attribute>,
}

impl Stacked {
    /// Where `line!()` of this limit's declaration is spanned: the attribute's own line.
    /// `None` for the outermost, whose call site is already its attribute.
    pub(crate) fn line_span(&self) -> Option<Span> {
        self.attr.as_ref().map(|a| a.pound_token.span)
    }
}

/// Whether `attr` is `#[rate_limit(..)]`, by any path that ends in `rate_limit`
/// (`redis_ratelimit::rate_limit`).
fn is_rate_limit(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "rate_limit")
}

/// Takes every `#[rate_limit]` off `attrs`, in the order written.
pub(crate) fn take(attrs: &mut Vec<Attribute>) -> Vec<Attribute> {
    let (stacked, kept): (Vec<Attribute>, Vec<Attribute>) =
        std::mem::take(attrs).into_iter().partition(is_rate_limit);
    *attrs = kept;
    stacked
}

/// The argument list of a stacked attribute: `#[rate_limit(..)]`'s parenthesised tokens,
/// nothing for a bare `#[rate_limit]` (then `replenish` is reported missing).
pub(crate) fn arguments(attr: &Attribute) -> syn::Result<TokenStream> {
    match &attr.meta {
        Meta::List(list) => Ok(list.tokens.clone()),
        Meta::Path(_) => Ok(TokenStream::new()),
        Meta::NameValue(nv) => Err(syn::Error::new(
            nv.eq_token.span,
            "`#[rate_limit]` takes its arguments in parentheses: \
             `#[rate_limit(replenish = 10, unit = \"minute\")]`",
        )),
    }
}

/// The name of each limit as the macro knows it: written, or the default of its position.
enum Name {
    Written(String),
    /// `module::function` (1) or `module::function#n` (n ≥ 2).
    Default,
}

/// Reports two limits written with one name, and returns, for each pair of a written name and
/// a default one that the module path alone could make equal, a compile-time check of the
/// two (`(earlier, later)` positions).
pub(crate) fn check_names(limits: &[Stacked], errors: &mut Errors) -> Vec<(usize, usize)> {
    let names: Vec<Name> = limits
        .iter()
        .map(|l| match l.args.written_name() {
            Some(lit) => Name::Written(lit.value()),
            None => Name::Default,
        })
        .collect();
    let mut to_check = Vec::new();
    for (later, limit) in limits.iter().enumerate().skip(1) {
        for earlier in 0..later {
            match (&names[earlier], &names[later]) {
                (Name::Written(a), Name::Written(b)) if a == b => {
                    let span = limit
                        .args
                        .name
                        .as_ref()
                        .map_or_else(Span::call_site, |l| l.span());
                    errors.at(
                        span,
                        format_args!(
                            "another `#[rate_limit]` of this function is already named `{b}`: \
                             each limit needs a name of its own (its buckets, overrides and \
                             metrics go by it); give this one another `name = \"..\"`"
                        ),
                    );
                }
                // Defaults differ by their `#n`; a written name may equal one only by
                // spelling out the module path, which only the compiler knows.
                (Name::Written(w), Name::Default) | (Name::Default, Name::Written(w))
                    if w.contains("::") =>
                {
                    to_check.push((earlier, later));
                }
                _ => {}
            }
        }
    }
    to_check
}

/// The one limiter that decides every limit of the call: `limiter = ..` may be written on
/// any of the attributes, or on several with the same value.
pub(crate) fn limiter(limits: &[Stacked], errors: &mut Errors) -> Option<Expr> {
    let mut chosen: Option<(&Expr, String)> = None;
    for limit in limits {
        let Some(expr) = &limit.args.limiter else {
            continue;
        };
        let written = expr.to_token_stream().to_string();
        match &chosen {
            None => chosen = Some((expr, written)),
            Some((_, first)) if *first == written => {}
            Some((_, first)) => errors.at(
                expr.span(),
                format_args!(
                    "another `#[rate_limit]` of this function has `limiter = {first}`: the \
                     limits of one call are decided together, by one limiter; write the same \
                     `limiter` on each, or on one of them only"
                ),
            ),
        }
    }
    chosen.map(|(expr, _)| expr.clone())
}
