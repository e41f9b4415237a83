//! The function's parameters, as the expressions an attribute argument may compute per call
//! (`key = tenant_id`, `cost = files.len()`) see them.

use proc_macro2::{TokenStream, TokenTree};
use syn::ext::IdentExt as _;
use syn::{FnArg, Pat, Signature};

/// The names the function's parameters bind, `self` included.
pub(crate) fn bindings(sig: &Signature) -> Vec<String> {
    let mut names = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(typed) => bound_by(&typed.pat, &mut names),
        }
    }
    names
}

/// The names `pat` binds (`Path(tenant_id)`, `Json(Upload { files, .. })`, `(a, b)`).
fn bound_by(pat: &Pat, names: &mut Vec<String>) {
    match pat {
        Pat::Ident(ident) => {
            names.push(ident.ident.unraw().to_string());
            if let Some((_, sub)) = &ident.subpat {
                bound_by(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| bound_by(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| bound_by(p, names)),
        Pat::Struct(s) => s.fields.iter().for_each(|f| bound_by(&f.pat, names)),
        Pat::Reference(r) => bound_by(&r.pat, names),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| bound_by(p, names)),
        Pat::Type(typed) => bound_by(&typed.pat, names),
        Pat::Paren(paren) => bound_by(&paren.pat, names),
        Pat::Or(or) => or.cases.iter().for_each(|p| bound_by(p, names)),
        _ => {}
    }
}

/// Whether `tokens` name one of `bindings` anywhere (in a macro's arguments too). A field or
/// method that shares a parameter's name counts as well: the value is then computed per call,
/// which is right for a constant too, only checked later.
pub(crate) fn mentions(tokens: &impl quote::ToTokens, bindings: &[String]) -> bool {
    fn walk(tokens: TokenStream, bindings: &[String]) -> bool {
        tokens.into_iter().any(|tt| match tt {
            TokenTree::Ident(ident) => {
                let ident = ident.to_string();
                let ident = ident.strip_prefix("r#").unwrap_or(&ident);
                bindings.iter().any(|b| b == ident)
            }
            TokenTree::Group(group) => walk(group.stream(), bindings),
            _ => false,
        })
    }
    !bindings.is_empty() && walk(tokens.to_token_stream(), bindings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_bind_through_patterns() {
        let sig: Signature = syn::parse_quote! {
            async fn upload(
                &self,
                Path((tenant_id, r#ref)): Path<(u64, String)>,
                Json(Upload { files, .. }): Json<Upload>,
                whole @ Query(_): Query<Q>,
            ) -> Result<(), E>
        };
        assert_eq!(
            bindings(&sig),
            ["self", "tenant_id", "ref", "files", "whole"]
        );
    }

    #[test]
    fn an_expression_mentions_a_parameter_or_not() {
        let names = vec!["files".to_owned(), "self".to_owned()];
        let per_call: syn::Expr = syn::parse_quote!(files.len());
        assert!(mentions(&per_call, &names));
        let in_macro: syn::Expr = syn::parse_quote!(cost_of!(self.size));
        assert!(mentions(&in_macro, &names));
        let constant: syn::Expr = syn::parse_quote!(UPLOAD_COST * 2);
        assert!(!mentions(&constant, &names));
        assert!(!mentions(&per_call, &[]));
    }
}
