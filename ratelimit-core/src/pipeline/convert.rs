//! What the code of `#[rate_limit]` converts a call's expressions into, beside the types they
//! become ([`KeyArg`], [`Cost`], [`Tier`]): a key written as an expression (a resolver, an
//! async resolver, or a value that displays), a cost (any integer, without wrapping), a tier.
//! Reached through `__private`, which generated code alone names.

use std::fmt::Display;

use super::call::{Cost, Fixed, KeyArg};
use crate::async_key::AsyncKeyResolver;
use crate::limit::Tier;
use crate::resolvers::KeyResolver;

/// What a `tier = ..` expression may be: a [`Tier`], a reference to one, or an `Option` of
/// either (`None` for the declared limit).
///
/// Read through a reference: the macro converts `&(expr)`, so that a tier in a field of a
/// borrowed argument (`tier = caller.plan`) is cloned, not moved out (a [`Tier`] is not
/// `Copy`: its name may be shared). A clone copies a constant's name and shares a run-time
/// one: no allocation either way.
///
/// The macro reaches it through a trait it declares in the user's crate, which carries the
/// error message: rustc would name this one by its hidden path.
pub trait IntoTier {
    /// The tier, or `None` for the declared limit.
    fn to_tier(&self) -> Option<Tier>;
}

impl IntoTier for Tier {
    fn to_tier(&self) -> Option<Tier> {
        Some(self.clone())
    }
}

impl<T: IntoTier + ?Sized> IntoTier for &T {
    fn to_tier(&self) -> Option<Tier> {
        T::to_tier(self)
    }
}

impl<T: IntoTier> IntoTier for Option<T> {
    fn to_tier(&self) -> Option<Tier> {
        self.as_ref().and_then(T::to_tier)
    }
}

/// An integer a cost is computed as: any of Rust's integers, converted without wrapping.
#[diagnostic::on_unimplemented(
    message = "`cost` must be an integer, not `{Self}`",
    label = "the number of tokens this call takes",
    note = "a cost counts tokens: write an integer expression, such as `files.len()`"
)]
pub trait IntoCost {
    /// The cost, or a cost no limit can hold when the value does not fit a `u32`.
    fn into_cost(self) -> Cost;
}

macro_rules! into_cost {
    ($($t:ty),*) => {$(
        impl IntoCost for $t {
            fn into_cost(self) -> Cost {
                Cost(u32::try_from(self).ok())
            }
        }
        impl IntoCost for &$t {
            fn into_cost(self) -> Cost {
                (*self).into_cost()
            }
        }
    )*};
}

into_cost!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);

/// A key written as an expression (`key = tenant_id`): a [`KeyResolver`] or an
/// [`AsyncKeyResolver`] is used as one; any other value that displays is the key itself.
/// Chosen by method resolution, resolver first: `(&&&&KeyOf(&value)).rate_limit_key()` finds
/// [`ViaResolver`] on `&&&KeyOf` when the value is a resolver, else [`ViaAsync`] on `&&KeyOf`
/// when it is an async one, else [`ViaDisplay`] on `&KeyOf` when it displays, else
/// [`ViaNeither`] on `KeyOf`, whose bound reports the value as not a key resolver, on the
/// user's expression.
#[derive(Debug)]
pub struct KeyOf<'a, T>(pub &'a T);

/// The key of a [`KeyResolver`] value: the resolver itself.
pub trait ViaResolver<'a> {
    /// The key of this call.
    fn rate_limit_key(&self) -> KeyArg<'a>;
}

impl<'a, T: KeyResolver> ViaResolver<'a> for &&&KeyOf<'a, T> {
    fn rate_limit_key(&self) -> KeyArg<'a> {
        KeyArg::Resolver(self.0)
    }
}

/// The key of an [`AsyncKeyResolver`]: settled before the check.
pub trait ViaAsync<'a> {
    /// The key of this call.
    fn rate_limit_key(&self) -> KeyArg<'a>;
}

impl<'a, T: AsyncKeyResolver> ViaAsync<'a> for &&KeyOf<'a, T> {
    fn rate_limit_key(&self) -> KeyArg<'a> {
        KeyArg::Async(self.0)
    }
}

/// The key of any other value that displays: the text it displays as.
pub trait ViaDisplay<'a> {
    /// The key of this call.
    fn rate_limit_key(&self) -> KeyArg<'a>;
}

impl<'a, T: Display> ViaDisplay<'a> for &KeyOf<'a, T> {
    fn rate_limit_key(&self) -> KeyArg<'a> {
        KeyArg::Value(Fixed(self.0.to_string()))
    }
}

/// A value that is neither: chosen last, so that its bound reports what `key` must be.
pub trait ViaNeither<'a, T> {
    /// Never called: the bound fails to compile first.
    fn rate_limit_key(&self) -> KeyArg<'a>
    where
        T: KeyResolver;
}

impl<'a, T> ViaNeither<'a, T> for KeyOf<'a, T> {
    fn rate_limit_key(&self) -> KeyArg<'a>
    where
        T: KeyResolver,
    {
        KeyArg::Resolver(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::RequestContext;
    use crate::resolvers::Global;
    use crate::resolvers::Header;
    use std::borrow::Cow;

    fn key_of(arg: &KeyArg<'_>, ctx: &RequestContext) -> Option<String> {
        arg.resolver().resolve(ctx).map(Cow::into_owned)
    }

    // The borrows are the choice of the key's kind, as the macro writes it.
    #[allow(clippy::needless_borrow)]
    #[test]
    fn a_resolver_resolves_and_a_value_is_its_text() {
        let ctx = RequestContext::new().with_header("x-api-key", "k-1");
        let header = Header("x-api-key");
        assert_eq!(
            key_of(&(&&&&KeyOf(&header)).rate_limit_key(), &ctx).as_deref(),
            Some("k-1")
        );
        assert_eq!(
            key_of(&(&&&&KeyOf(&Global)).rate_limit_key(), &ctx).as_deref(),
            Some("global")
        );
        let tenant: u64 = 42;
        assert_eq!(
            key_of(&(&&&&KeyOf(&tenant)).rate_limit_key(), &ctx).as_deref(),
            Some("42")
        );
        let name = "a:b";
        assert_eq!(
            key_of(&(&&&&KeyOf(&name)).rate_limit_key(), &ctx).as_deref(),
            Some("a:b")
        );
    }

    #[test]
    fn costs_convert_without_wrapping() {
        assert_eq!(7_usize.into_cost(), Cost(Some(7)));
        assert_eq!(0_u8.into_cost(), Cost(Some(0)));
        assert_eq!((&3_i64).into_cost(), Cost(Some(3)));
        assert_eq!((-1_i32).into_cost(), Cost(None));
        assert_eq!((u64::from(u32::MAX) + 1).into_cost(), Cost(None));
        assert_eq!(u32::MAX.into_cost(), Cost(Some(u32::MAX)));
    }
}
