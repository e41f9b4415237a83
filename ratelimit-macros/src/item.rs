//! The annotated function: its signature parsed, its body kept as tokens (so a body that does
//! not parse, mid-edit in an IDE, still expands).

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Signature, Token, Visibility, braced, token};

pub(crate) struct ItemFn {
    pub(crate) outer_attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    pub(crate) brace: token::Brace,
    pub(crate) inner_attrs: Vec<Attribute>,
    pub(crate) body: TokenStream,
}

impl Parse for ItemFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let outer_attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig: Signature = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("`#[rate_limit]` goes on an `async fn`: {e}"),
            )
        })?;
        if input.peek(Token![;]) {
            return Err(input.error(
                "`#[rate_limit]` needs the function's body: put it on the function's \
                 implementation, not on a declaration",
            ));
        }
        let content;
        let brace = braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body = content.parse()?;
        Ok(ItemFn {
            outer_attrs,
            vis,
            sig,
            brace,
            inner_attrs,
            body,
        })
    }
}
