//! What `#[rate_limit]` computes on each call beside its declaration: a key or a cost written
//! as an expression over the function's arguments, and whether the call is exempt.

use std::borrow::Cow;
use std::fmt::Display;
use std::sync::{Arc, Mutex, PoisonError};

use crate::async_key::{AsyncKeyResolver, ErasedAsync};
use crate::decision::{Label, Source};
use crate::registry::{LimitDeclaration, Warning};
use crate::request::{resolving, with_current};
use crate::{Decision, KeyResolver, Limit, RateLimiter, RequestContext, Tier};

/// What one call brings to its limit's check, beside the declaration: a cost computed from
/// the arguments (`cost = files.len()`), whether the call is exempt (`exempt = ..`), its tier
/// (`tier = ..`), and where to keep what it took, for a refund when its outcome does not
/// count (`count = ..`). Small and `Copy`: the check of a call with none of them passes
/// `Call::NONE`.
#[derive(Debug, Clone, Copy)]
pub struct Call<'t> {
    pub(crate) cost: Option<Cost>,
    pub(crate) exempt: bool,
    /// Whether the call chose a tier (`tier = ..`), and which: none means the declared limit.
    pub(crate) tiered: bool,
    pub(crate) tier: Option<&'t Tier>,
    pub(crate) taken: Option<&'t Taken>,
    /// Where the call keeps the concurrency slots it takes, while its function runs.
    pub(crate) holding: Option<&'t Holding>,
    /// The key's resolver failed, or did not answer within the deadline: the failure policy
    /// decides (set by the check, once an async key is settled).
    pub(crate) key_failed: bool,
}

impl<'t> Call<'t> {
    /// A call with nothing of its own: the declaration decides.
    pub const NONE: Call<'static> = Call {
        cost: None,
        exempt: false,
        tiered: false,
        tier: None,
        taken: None,
        holding: None,
        key_failed: false,
    };

    /// Keeps what this call takes in `taken`, to give it back if its outcome does not count.
    #[must_use]
    pub fn keeping<'u>(self, taken: &'u Taken) -> Call<'u>
    where
        't: 'u,
    {
        Call {
            taken: Some(taken),
            ..self
        }
    }

    /// The tier this call is decided under (its `tier = ..`, converted by [`IntoTier`]):
    /// `None` for the declared limit.
    #[must_use]
    pub fn with_tier<'u>(self, tier: &'u Option<Tier>) -> Call<'u>
    where
        't: 'u,
    {
        Call {
            tiered: true,
            tier: tier.as_ref(),
            ..self
        }
    }

    /// Keeps the concurrency slots this call takes in `holding`, a local of the function's
    /// future: given back when it ends, however it ends.
    #[must_use]
    pub fn holding<'u>(self, holding: &'u Holding) -> Call<'u>
    where
        't: 'u,
    {
        Call {
            holding: Some(holding),
            ..self
        }
    }

    /// This call's cost, computed from its arguments.
    #[must_use]
    pub fn with_cost(mut self, cost: Cost) -> Call<'t> {
        self.cost = Some(cost);
        self
    }

    /// Whether this call is exempt from the limit.
    #[must_use]
    pub fn with_exempt(mut self, exempt: bool) -> Call<'t> {
        self.exempt = exempt;
        self
    }

    /// The limit `name` as this call is told under: with its tier, if it was given one.
    pub(crate) fn label(&self, name: &'static str) -> Label {
        Label {
            name,
            tier: self.tier.map(Tier::name),
        }
    }
}

/// The concurrency slots a call holds while its function runs (`#[rate_limit(concurrent =
/// ..)]`, or a layer's concurrency limit decided with the function's): dropped with the
/// function's future, which gives them back.
#[derive(Debug, Default)]
pub struct Holding(Mutex<Vec<crate::Slot>>);

impl Holding {
    /// Keeps `slot` until this is dropped.
    pub(crate) fn keep(&self, slot: crate::Slot) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(slot);
    }
}

/// What a `tier = ..` expression may be: a [`Tier`], or `None` for the declared limit.
///
/// The macro reaches it through a trait it declares in the user's crate, which carries the
/// error message: rustc would name this one by its hidden path.
pub trait IntoTier {
    /// The tier, or `None` for the declared limit.
    fn into_tier(self) -> Option<Tier>;
}

impl IntoTier for Tier {
    fn into_tier(self) -> Option<Tier> {
        Some(self)
    }
}

impl IntoTier for &Tier {
    fn into_tier(self) -> Option<Tier> {
        Some(*self)
    }
}

impl<T: IntoTier> IntoTier for Option<T> {
    fn into_tier(self) -> Option<Tier> {
        self.and_then(IntoTier::into_tier)
    }
}

/// The tokens a call took under one limit, kept until its outcome says whether it counts.
#[derive(Debug, Clone, Default)]
pub struct Taken(Arc<Mutex<Vec<TakenPart>>>);

/// One bucket's tokens a call took, and who decided it (a refund goes back to the same).
#[derive(Debug)]
pub(crate) struct TakenPart {
    pub(crate) bucket: String,
    pub(crate) limit: Limit,
    pub(crate) cost: u32,
    pub(crate) source: Source,
}

impl Taken {
    /// Keeps the tokens `decision` took from `bucket`, if it took any: an admitted call,
    /// decided by the store or the fallback, not let through by a limit in shadow mode (a
    /// shadowed refusal took nothing; a refund is never more than was taken).
    pub(crate) fn keep(&self, bucket: impl FnOnce() -> String, decision: &Decision) {
        let took = decision.allowed
            && !decision.shadowed
            && matches!(decision.source, Source::Store | Source::Fallback);
        if took {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(TakenPart {
                    bucket: bucket(),
                    limit: decision.limit,
                    cost: decision.cost,
                    source: decision.source,
                });
        }
    }

    /// What was kept, taken out.
    pub(crate) fn take(&self) -> Vec<TakenPart> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Whether a call's `output` counts, by the limit's `count = ..` predicate: written so that a
/// closure's argument type is known from the function's return type.
pub fn counts<T>(output: &T, predicate: impl FnOnce(&T) -> bool) -> bool {
    predicate(output)
}

/// A cost computed per call: the tokens asked for, or `None` when the value does not fit a
/// `u32` (or is negative), which no burst can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost(pub(crate) Option<u32>);

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

/// A key as the check takes it: a resolver to run against the request context, the value an
/// argument displayed as, a resolver that awaits (settled by the check, on its path for a
/// store that does not answer at once), or a key that could not be found out.
#[allow(missing_debug_implementations)]
pub enum KeyArg<'a> {
    /// A [`KeyResolver`], resolved against the request context.
    Resolver(&'a dyn KeyResolver),
    /// A key computed from the call's arguments, or by an async resolver.
    Value(Fixed),
    /// An [`AsyncKeyResolver`], to be settled.
    Async(&'a dyn ErasedAsync),
    /// An async resolver failed, or did not answer in time.
    Failed,
}

impl KeyArg<'_> {
    /// The key as the check takes it.
    pub fn resolver(&self) -> &dyn KeyResolver {
        match self {
            KeyArg::Resolver(resolver) => *resolver,
            KeyArg::Value(fixed) => fixed,
            KeyArg::Async(_) | KeyArg::Failed => &NoKey,
        }
    }
}

/// An [`AsyncKeyResolver`]'s answer within `limiter`'s deadline: the key (none is an empty
/// one), or [`KeyArg::Failed`] when it failed or did not answer in time (said once per limit).
pub(crate) async fn settle(
    resolver: &dyn ErasedAsync,
    decl: &'static LimitDeclaration,
    limiter: &RateLimiter,
) -> KeyArg<'static> {
    let ctx = with_current(|ctx, _| ctx.clone());
    let resolving = resolving(decl.name(), || resolver.resolve_boxed(&ctx));
    let answer = match limiter.deadline() {
        Some(deadline) if tokio::runtime::Handle::try_current().is_ok() => {
            tokio::time::timeout(deadline, resolving)
                .await
                .map_err(|_| format!("no answer within the deadline of {deadline:?}").into())
                .and_then(|answer| answer)
        }
        _ => resolving.await,
    };
    match answer {
        Ok(key) => KeyArg::Value(Fixed(key.unwrap_or_default())),
        Err(e) => {
            decl.warn_once(
                Warning::CannotResolve,
                &format_args!(
                    "the key of `{}` could not be resolved, so its failure policy decides its \
                     calls (said once): {e}",
                    decl.name()
                ),
            );
            KeyArg::Failed
        }
    }
}

/// The resolver of a key not found: no key.
struct NoKey;

impl KeyResolver for NoKey {
    fn resolve<'a>(&'a self, _: &'a RequestContext) -> Option<Cow<'a, str>> {
        None
    }
}

/// A key computed before the check: the same for every context.
#[derive(Debug)]
pub struct Fixed(String);

impl KeyResolver for Fixed {
    fn resolve<'a>(&'a self, _: &'a RequestContext) -> Option<Cow<'a, str>> {
        Some(Cow::Borrowed(&self.0))
    }
}

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
    use crate::{Global, Header};

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
