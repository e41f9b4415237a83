//! Key resolvers that await: a session store, a token introspection, a tenant lookup.

use std::future::Future;

use crate::request::RequestContext;

/// The error an [`AsyncKeyResolver`] fails with.
pub type ResolveError = Box<dyn std::error::Error + Send + Sync>;

/// A key resolver that awaits (a session store, a token introspection endpoint): the async
/// counterpart of [`KeyResolver`](crate::KeyResolver), for `#[rate_limit(key = ..)]`.
///
/// It runs before the limit is checked, under the limiter's deadline (the one a store's
/// answer has, 50 ms unless configured): `Ok(None)` (or an empty key) means the call has no
/// key, and the limit's empty-key policy decides; an error, or no answer within the
/// deadline, means the key could not be found out, and the limit's failure policy decides, as
/// when the store fails (`allow` admits the call; `deny`, and `fallback`, which has no key to
/// keep a bucket of, refuse it).
///
/// ```
/// use ratelimit_core::RequestContext;
/// use ratelimit_core::key::{AsyncKeyResolver, ResolveError};
///
/// /// The account behind the request's session cookie, from the session store.
/// struct Account;
///
/// impl AsyncKeyResolver for Account {
///     async fn resolve(&self, ctx: &RequestContext) -> Result<Option<String>, ResolveError> {
///         let Some(session) = ctx.headers().get("cookie") else {
///             return Ok(None);
///         };
///         // A lookup that awaits, as a session store's would.
///         tokio::task::yield_now().await;
///         Ok(Some(format!("account-of-{}", session.len())))
///     }
/// }
///
/// // On a function: #[rate_limit(replenish = 10, unit = "minute", key = Account)]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let ctx = RequestContext::new().with_header("cookie", "s=1");
/// assert_eq!(Account.resolve(&ctx).await.unwrap().as_deref(), Some("account-of-3"));
/// assert_eq!(Account.resolve(&RequestContext::new()).await.unwrap(), None);
/// # }
/// ```
pub trait AsyncKeyResolver: Send + Sync + 'static {
    /// The key of this call: `Ok(None)` when it has none, an error when it could not be
    /// found out.
    fn resolve(
        &self,
        ctx: &RequestContext,
    ) -> impl Future<Output = Result<Option<String>, ResolveError>> + Send;
}

/// [`AsyncKeyResolver`] behind a pointer: its future boxed, for the generated code's key.
pub trait ErasedAsync: Send + Sync {
    /// The key, as [`AsyncKeyResolver::resolve`] finds it.
    fn resolve_boxed<'a>(
        &'a self,
        ctx: &'a RequestContext,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Option<String>, ResolveError>> + Send + 'a>>;
}

impl<T: AsyncKeyResolver> ErasedAsync for T {
    fn resolve_boxed<'a>(
        &'a self,
        ctx: &'a RequestContext,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Option<String>, ResolveError>> + Send + 'a>>
    {
        Box::pin(self.resolve(ctx))
    }
}
