//! The `name = value, ...` lists both macros take, and what they share in reporting errors.

use proc_macro2::{Span, TokenStream};
use quote::format_ident;
use ratelimit_vocab::{Quoted, Word};
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream, Parser as _};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Ident, Lit, Token};

/// One `name = value` (or a bare `name`, which is always an error) as written.
pub(crate) struct RawArg {
    pub(crate) name: Ident,
    pub(crate) value: Option<Expr>,
}

impl Parse for RawArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // Any identifier, keywords included, so that `type = ..` is reported as an unknown
        // argument rather than as a syntax error.
        let name = Ident::parse_any(input)?;
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Some(input.parse()?)
        } else {
            None
        };
        Ok(RawArg { name, value })
    }
}

/// One item of the list: an argument, or a value written without its name.
enum Item {
    Arg(RawArg),
    Bare(syn::Lit),
}

impl Parse for Item {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(syn::Lit) {
            return input.parse().map(Item::Bare);
        }
        input.parse().map(Item::Arg)
    }
}

/// Splits `a = 1, b = "x"` into its arguments; only a syntax error fails. A value written
/// without its name (`#[rate_limit(3)]`) is reported with `meant`'s guess at the argument.
pub(crate) fn parse_list(
    tokens: TokenStream,
    meant: fn(&syn::Lit) -> String,
) -> syn::Result<Vec<RawArg>> {
    let list = Punctuated::<Item, Token![,]>::parse_terminated.parse2(tokens)?;
    list.into_iter()
        .map(|item| match item {
            Item::Arg(arg) => Ok(arg),
            Item::Bare(lit) => Err(syn::Error::new(
                lit.span(),
                format!(
                    "arguments are written `name = value`: did you mean `{}`?",
                    meant(&lit)
                ),
            )),
        })
        .collect()
}

/// A literal as `name = literal`, for the guess of [`parse_list`].
pub(crate) fn literal_text(lit: &syn::Lit) -> String {
    match lit {
        syn::Lit::Int(i) => i.base10_digits().to_owned(),
        syn::Lit::Str(s) => format!("{:?}", s.value()),
        _ => "..".to_owned(),
    }
}

/// Every error found, so that one compile shows them all.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// One argument a macro takes: its name, a value to show when it is written without one,
/// how its value is read into the macro's arguments `A`, and what else the macro knows of it
/// (`R`: which limits take it, for `#[rate_limit]`).
pub(crate) struct Argument<A, R = ()> {
    pub(crate) name: &'static str,
    pub(crate) example: &'static str,
    /// Reads the value into its field of `A`, reporting on it what is wrong with it.
    pub(crate) read: fn(&mut A, &Ident, Expr, &mut Errors),
    pub(crate) rules: R,
}

impl<A> Argument<A> {
    /// An argument with nothing more to know of it.
    pub(crate) const fn new(
        name: &'static str,
        example: &'static str,
        read: fn(&mut A, &Ident, Expr, &mut Errors),
    ) -> Argument<A> {
        Argument {
            name,
            example,
            read,
            rules: (),
        }
    }
}

/// Reads `list` into `args`, each argument by its entry that `known` finds. An argument written
/// twice or without a value is reported on its name and not read again; a name `known` does not
/// find goes to `unknown`, which reports it. Returns the known names written, in order.
pub(crate) fn read<'t, A: 't, R: 't>(
    list: Vec<RawArg>,
    known: impl Fn(&str) -> Option<&'t Argument<A, R>>,
    args: &mut A,
    errors: &mut Errors,
    mut unknown: impl FnMut(&mut A, &Ident, Option<&Expr>, &mut Errors),
) -> Vec<Ident> {
    let mut written: Vec<Ident> = Vec::new();
    for RawArg { name, value } in list {
        let Some(argument) = known(&name.to_string()) else {
            unknown(args, &name, value.as_ref(), errors);
            continue;
        };
        if written.contains(&name) {
            errors.at(
                name.span(),
                format_args!("`{name}` is specified more than once; keep one"),
            );
            continue;
        }
        written.push(name.clone());
        match value {
            Some(value) => (argument.read)(args, &name, value, errors),
            None => errors.at(
                name.span(),
                format_args!("`{name}` needs a value: `{name} = {}`", argument.example),
            ),
        }
    }
    written
}

/// The error for an argument no macro knows: names the closest known one, or lists them all.
///
/// `aliases` maps names users bring from elsewhere (Spring's `burstCapacity`) to ours.
pub(crate) fn unknown(
    what: &str,
    name: &Ident,
    known: &[&str],
    aliases: &[(&str, &str)],
) -> syn::Error {
    let written = name.to_string();
    let suggestion = aliases
        .iter()
        .find(|(alias, _)| *alias == written)
        .map(|(_, ours)| *ours)
        .or_else(|| nearest(&written, known));
    let message = match suggestion {
        Some(ours) => format!("unknown {what} `{written}`; did you mean `{ours}`?"),
        None => format!(
            "unknown {what} `{written}`; expected one of {}",
            Quoted(known)
        ),
    };
    syn::Error::new(name.span(), message)
}

/// The known name closest to `written`, if it is close enough to be a typo.
///
/// rustc's rule (`find_best_match_for_name`): at most one edit per three characters written,
/// so `bursts` finds `burst` but `wait` (two edits from `unit`) finds nothing. A name that
/// starts the other (`limit`, `limiter`) counts as one edit, unless one is more than twice as
/// long as the other.
pub(crate) fn nearest<'a>(written: &str, known: &[&'a str]) -> Option<&'a str> {
    let written = written.to_ascii_lowercase();
    let most = written.chars().count().max(3) / 3;
    known
        .iter()
        .map(|k| (distance(&written, k), *k))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// [`edit_distance`], with a prefix of alike length counted as one edit.
fn distance(a: &str, b: &str) -> usize {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let alike = short.len() >= 3 && short.len() * 2 >= long.len();
    if alike && short != long && long.starts_with(short) {
        1
    } else {
        edit_distance(a, b)
    }
}

/// Levenshtein distance, counting an adjacent transposition as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j]; three rows suffice for transpositions.
    let mut before = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let substitution = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(prev[j] + 1).min(cur[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            cur[j] = best;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// `value` as a string literal, or `help` reported on it.
pub(crate) fn string<'v>(
    value: &'v Expr,
    errors: &mut Errors,
    help: impl std::fmt::Display,
) -> Option<&'v syn::LitStr> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Str(s), ..
    }) = value
    {
        return Some(s);
    }
    errors.at(value.span(), help);
    None
}

/// A word of `W` written as a string literal (`policy = "deny"`), with its span.
pub(crate) fn word<W: Word>(name: &Ident, value: &Expr, errors: &mut Errors) -> Option<(W, Span)> {
    let help = format!(
        "`{name}` takes a string, one of {}: `{name} = \"{}\"`",
        Quoted(W::NAMES),
        W::NAMES.first().copied().unwrap_or_default()
    );
    let s = string(value, errors, help)?;
    match W::from_name(&s.value()) {
        Ok(word) => Some((word, s.span())),
        Err(unknown) => {
            errors.at(s.span(), unknown);
            None
        }
    }
}

/// The runtime's variant of a word, spanned where the word was written, for generated code:
/// `::redis_ratelimit::Algorithm::#variant`.
pub(crate) fn variant<W: Word>((word, span): (W, Span)) -> Ident {
    format_ident!("{}", word.variant(), span = span)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The argument of `#[rate_limit]` closest to `written`.
    fn nearest_argument(written: &str) -> Option<&'static str> {
        nearest(written, &crate::attr::Site::Function.names())
    }

    #[test]
    fn typos_find_the_argument() {
        assert_eq!(nearest_argument("bursts"), Some("burst"));
        assert_eq!(nearest_argument("replinish"), Some("replenish"));
        assert_eq!(nearest_argument("Unit"), Some("unit"));
        assert_eq!(nearest_argument("limit"), Some("limiter"));
        assert_eq!(nearest_argument("cots"), Some("cost"));
        assert_eq!(nearest_argument("frobnicate"), None);
        assert_eq!(nearest_argument("x"), None);
    }

    #[test]
    fn only_close_names_are_suggested() {
        // Two edits in four letters is another word, not a typo.
        assert_eq!(nearest_argument("mode"), None);
        assert_eq!(nearest_argument("kind"), None);
        assert_eq!(nearest_argument("node"), None);
        assert_eq!(nearest_argument("cast"), Some("cost"));
        assert_eq!(nearest_argument("nam"), Some("name"));
        // A prefix counts when the lengths are alike, not when one name swallows the other.
        assert_eq!(nearest_argument("burst_size"), Some("burst"));
        assert_eq!(nearest_argument("keyboard"), None);
        assert_eq!(nearest_argument("li"), None);
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("abc", "acb"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
