//! Where generated code is reported: at the user's tokens, yet as macro output.

use proc_macro2::Span;

/// A span that reports at the user's token but counts as macro output, so lints on the
/// user's code (clippy's pedantic ones included) do not fire on generated code.
pub(crate) fn at(user: Span) -> Span {
    Span::call_site().located_at(user)
}
