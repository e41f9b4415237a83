//! axum (tower) integration.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{Router, routing::get};
//! use ratelimit_core::RateLimitLayer;
//!
//! # async fn run(app: Router) -> std::io::Result<()> {
//! let app = app.layer(RateLimitLayer::new());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // ConnectInfo gives `Ip` the peer address.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{ConnectInfo, MatchedPath};
use axum::response::{IntoResponse, Response};
use http::Request;
use tokio::task::futures::TaskLocalFuture;

use super::{Config, OnRejection, SharedConfig, config_methods};
use crate::headers::{HeaderFamilies, render_verdict};
use crate::http::layered::{self, Handoff, Plan, route_key};
use crate::pipeline::scope::{CONTEXT, Scope, described_finished};
use crate::pipeline::verdict::RateLimited;
use crate::request::Origin;
use crate::request::RequestContext;

/// A tower layer that gives `#[rate_limit]` handlers below it their request context (method,
/// path, matched route, headers, client address, extensions) and adds the rate-limit headers
/// to their responses, allowed or rejected.
///
/// Add it with `Router::layer` after authentication middleware, so `User` sees the principal;
/// serve with `into_make_service_with_connect_info::<SocketAddr>()` so `Ip` sees the peer.
///
/// A key resolver runs inside the handler, after the handler has taken the request, and may
/// read any header or extension: so the layer copies the request's headers and extensions
/// into its context, on every request it serves. Where only some routes have limits, add it
/// to those alone (`Router::route_layer` on a router of them, or on a nested one) and the
/// others do not pay for the copy.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RateLimitLayer {
    config: SharedConfig,
    on_rejection: Option<OnRejection<Response>>,
}

impl RateLimitLayer {
    /// A layer trusting no proxy, grouping IPv6 clients by /64, sending every header family.
    pub fn new() -> RateLimitLayer {
        RateLimitLayer {
            config: Arc::new(Config::default()),
            on_rejection: None,
        }
    }

    config_methods!();

    /// Renders the refusals of the layer's own limits with `render`, in place of the
    /// `application/problem+json` body: a 429 when they refuse a request, a 503 when the
    /// limiter could not decide and the policy refuses, a 403 (or the limit's
    /// `empty_key_status`) when a request has no key; [`RateLimited::status`] says which. The
    /// rate-limit headers (`Retry-After` and the families of [`headers`](Self::headers)) are
    /// added to `render`'s response as to the default one, replacing any of the same name.
    ///
    /// ```
    /// use axum::{Router, http::StatusCode, response::IntoResponse, routing::get};
    /// use ratelimit_core::http::LayerLimit;
    /// use ratelimit_core::{Ip, Limit, RateLimitLayer};
    ///
    /// # fn main() -> Result<(), ratelimit_core::Error> {
    /// let layer = RateLimitLayer::new()
    ///     .limit(LayerLimit::new("api", Limit::per_minute(100), Ip)?)
    ///     .on_rejection(|rejected| {
    ///         let message = match rejected.status() {
    ///             StatusCode::TOO_MANY_REQUESTS => "Slow down, please.",
    ///             _ => "Not now.",
    ///         };
    ///         (rejected.status(), message).into_response()
    ///     });
    /// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(layer);
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    ///
    /// A refusal decided in a handler's own check is the handler's to render (its error type,
    /// `E: From<RateLimited>`), and so is a refusal of the layer's limits on a route whose
    /// handler has `#[rate_limit]` limits of its own, once the layer has seen it check: they
    /// are decided with the handler's, in its check (see the guide, "A limit on a whole
    /// router"). Give that error type the same rendering.
    pub fn on_rejection(
        mut self,
        render: impl Fn(&RateLimited) -> Response + Send + Sync + 'static,
    ) -> Self {
        self.on_rejection = Some(OnRejection::new(render));
        self
    }
}

impl<S> tower_layer::Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            config: Arc::clone(&self.config),
            on_rejection: self.on_rejection.clone(),
        }
    }
}

/// The service of [`RateLimitLayer`].
#[derive(Debug, Clone)]
pub struct RateLimitService<S> {
    inner: S,
    config: SharedConfig,
    on_rejection: Option<OnRejection<Response>>,
}

impl<S, B> tower_service::Service<Request<B>> for RateLimitService<S>
where
    S: tower_service::Service<Request<B>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let handed = req.extensions_mut().remove::<Handoff>();
        let matched = req.extensions().get::<MatchedPath>();
        let plan = Plan::new(&self.config, handed, || {
            matched.and_then(|route| route_key(req.method().as_str(), route.as_str()))
        });
        let mut ctx = RequestContext::new()
            .with_method(req.method().clone())
            .with_path(req.uri().path())
            .with_headers(req.headers().clone())
            .with_extensions(req.extensions().clone());
        if let Some(route) = matched {
            ctx = ctx.with_route(route.as_str());
        }
        if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
            ctx = ctx.with_peer(*peer);
        }
        let scope = self.config.finish(ctx, Origin::Axum);
        let families = self.config.families;
        let Some(plan) = plan else {
            return ResponseFuture {
                state: State::Plain {
                    inner: CONTEXT.scope(scope, self.inner.call(req)),
                    families,
                },
            };
        };
        // The limits of this layer (and of those above): decided before the inner service
        // is called, which then runs in the returned future (the tower way: a ready clone
        // stays behind).
        req.extensions_mut().insert(plan.handoff());
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let on_rejection = self.on_rejection.clone();
        ResponseFuture {
            state: State::Layered {
                fut: Box::pin(async move {
                    let (out, verdict) = layered::serve(
                        scope,
                        plan,
                        req,
                        move |req| inner.call(req),
                        |rejection, _| refusal(*rejection, on_rejection.as_ref()),
                        Response::status,
                    )
                    .await;
                    out.map(|mut response| {
                        render_verdict(verdict, response.headers_mut(), families);
                        response
                    })
                }),
            },
        }
    }
}

/// The response to a refusal of the layer's own limits: the service's own, if it chose one
/// ([`RateLimitLayer::on_rejection`]), with the rate-limit headers; else the rejection's.
fn refusal(rejection: RateLimited, on_rejection: Option<&OnRejection<Response>>) -> Response {
    let Some(on_rejection) = on_rejection else {
        return rejection.into_response();
    };
    // Rendered first: what `render` does with the rejection cannot take them from the scope.
    let headers = super::served_rate_limit_headers(&rejection);
    let mut response = on_rejection.render(&rejection);
    response.headers_mut().extend(headers);
    response
}

/// A boxed response future, for a request whose layers have limits of their own.
type Boxed<O> = Pin<Box<dyn Future<Output = O> + Send>>;

pin_project_lite::pin_project! {
    /// The response future of [`RateLimitService`].
    pub struct ResponseFuture<F: Future> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F: Future> {
        /// A layer without limits of its own: the inner future in the request's scope.
        Plain {
            #[pin]
            inner: TaskLocalFuture<Scope, F>,
            families: HeaderFamilies,
        },
        /// A layer with limits: decided, then the inner service called, in one future.
        Layered { fut: Boxed<F::Output> },
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (mut inner, families) = match self.project().state.project() {
            StateProj::Plain { inner, families } => (inner, *families),
            StateProj::Layered { fut } => return fut.as_mut().poll(cx),
        };
        let result = std::task::ready!(inner.as_mut().poll(cx));
        Poll::Ready(result.map(|mut response| {
            // A rejection's response took the verdict with it (`rejection_rendering`).
            let verdict = described_finished(inner);
            render_verdict(verdict, response.headers_mut(), families);
            response
        }))
    }
}

impl<F: Future> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl IntoResponse for RateLimited {
    /// 429 (403 without a key, 503 when the limiter could not decide), an
    /// `application/problem+json` body, and the rate-limit headers: the families the serving
    /// [`RateLimitLayer`] (or actix middleware) was configured with, or every family when the
    /// rejection is turned into a response outside one.
    fn into_response(self) -> Response {
        (
            self.status(),
            super::served_headers(&self),
            self.problem_json(),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::future::poll_fn;

    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower_service::Service as _;

    use super::*;
    use crate::client_ip::ClientIpHeader;
    use crate::client_ip::TrustedProxies;
    use crate::headers::HeaderFamilies;
    use crate::http::test_support::{
        Limited, SPRING_HEADERS, assert_a_client_cannot_pick_its_bucket, assert_shadowed,
        assert_two_limits_described, errors_while, limited_by_ip, limited_call, limited_twice,
        shadowed_call, twice, twice_a_minute_by_ip,
    };
    use crate::pipeline::test_support::declaration;

    async fn get_path(app: &mut Router, path: &str) -> Response {
        poll_fn(|cx| tower_service::Service::<Request<Body>>::poll_ready(app, cx))
            .await
            .unwrap();
        app.call(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    async fn login() -> Result<&'static str, Limited> {
        limited_call().await
    }

    /// The rejection carries the families the layer was configured with, like an allowed call.
    #[tokio::test]
    async fn a_rejection_carries_only_the_configured_families() {
        let mut app = Router::new()
            .route("/some", get(login))
            .layer(RateLimitLayer::new().headers(HeaderFamilies::ALL.without_spring()));
        let ok = get_path(&mut app, "/some").await;
        assert_eq!(ok.status(), 200);
        assert!(ok.headers().get("ratelimit").is_some());
        assert!(ok.headers().get("x-ratelimit-remaining").is_none());
        let refused = get_path(&mut app, "/some").await;
        assert_eq!(refused.status(), 429);
        assert!(refused.headers().get("ratelimit").is_some());
        assert!(refused.headers().get("retry-after").is_some());
        for name in SPRING_HEADERS {
            assert!(refused.headers().get(name).is_none(), "{name}");
        }

        let mut app = Router::new()
            .route("/none", get(login))
            .layer(RateLimitLayer::new().headers(HeaderFamilies::NONE));
        let _ = get_path(&mut app, "/none").await;
        let refused = get_path(&mut app, "/none").await;
        assert_eq!(refused.status(), 429);
        assert_eq!(
            refused.headers().get("content-type").unwrap(),
            "application/problem+json"
        );
        assert_eq!(refused.headers().len(), 2, "{:?}", refused.headers());
    }

    /// A limit in shadow mode serves every call, and its headers say it is spent.
    #[tokio::test]
    async fn a_shadow_limit_serves_and_describes_the_call() {
        let mut app = Router::new()
            .route("/trial", get(shadowed_call))
            .layer(RateLimitLayer::new());
        assert_eq!(get_path(&mut app, "/trial").await.status(), 200);
        let over = get_path(&mut app, "/trial").await;
        assert_shadowed(over.status().as_u16(), over.headers());
    }

    /// A call under several limits: the headers list each, allowed or refused.
    #[tokio::test]
    async fn every_limit_of_a_call_is_described() {
        let (decl, daily) = twice("axum::twice", "axum::twice#2");
        let mut app = Router::new()
            .route("/twice", get(move || limited_twice(decl, daily)))
            .layer(RateLimitLayer::new());
        let ok = get_path(&mut app, "/twice").await;
        assert_eq!(ok.status(), 200);
        let refused = get_path(&mut app, "/twice").await;
        assert_eq!(refused.status(), 429);
        let headers = refused.headers().clone();
        let body = axum::body::to_bytes(refused.into_body(), 4096)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert_two_limits_described("axum::twice", ok.headers(), &headers, &body);
    }

    /// A rejection's response carries its headers already: the layer leaves them as the
    /// handler shaped them (here without Spring's remaining count), not rendered again.
    #[tokio::test]
    async fn the_layer_does_not_render_a_rejection_again() {
        async fn shaped() -> Response {
            match limited_call().await {
                Ok(ok) => ok.into_response(),
                Err(Limited(r)) => {
                    let mut response = r.into_response();
                    response.headers_mut().remove("x-ratelimit-remaining");
                    response
                }
            }
        }
        let mut app = Router::new()
            .route("/shaped", get(shaped))
            .layer(RateLimitLayer::new());
        let ok = get_path(&mut app, "/shaped").await;
        assert!(ok.headers().get("x-ratelimit-remaining").is_some());
        let refused = get_path(&mut app, "/shaped").await;
        assert_eq!(refused.status(), 429);
        assert!(refused.headers().get("ratelimit").is_some());
        assert!(refused.headers().get("x-ratelimit-remaining").is_none());
    }

    /// Outside a layer nothing configured the families: a rejection sends all of them.
    #[tokio::test]
    async fn outside_a_layer_a_rejection_sends_every_family() {
        let mut app = Router::new().route("/outside", get(login));
        let (_, refused) =
            crate::pipeline::scope::scope(RequestContext::new().with_path("/outside"), async {
                (
                    get_path(&mut app, "/outside").await,
                    get_path(&mut app, "/outside").await,
                )
            })
            .await;
        assert_eq!(refused.status(), 429);
        for name in ["ratelimit", "retry-after", "x-ratelimit-remaining"] {
            assert!(refused.headers().get(name).is_some(), "{name}");
        }
    }

    /// Behind a trusted proxy, over real HTTP: only the header the proxy writes names the
    /// client, and a proxy that forwards `unknown` is the client, not "no key".
    #[tokio::test]
    async fn a_client_behind_a_trusted_proxy_cannot_pick_its_bucket() {
        let by_ip = twice_a_minute_by_ip("axum::behind_proxy");
        let serve = |proxies: TrustedProxies| async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let app = Router::new()
                .route("/ip", get(move || limited_by_ip(by_ip)))
                .layer(RateLimitLayer::new().trusted_proxies(proxies))
                .into_make_service_with_connect_info::<SocketAddr>();
            tokio::spawn(async move { axum::serve(listener, app).await });
            addr
        };
        let trusted = TrustedProxies::new(["127.0.0.0/8"]).unwrap();
        let xff = serve(trusted.clone()).await;
        let forwarded = serve(trusted.header(ClientIpHeader::Forwarded)).await;
        assert_a_client_cannot_pick_its_bucket(xff, forwarded).await;
    }

    /// A call made before enable says so once; the same limit later run without its peer
    /// address still says what to add: one mistake's message never hides another's.
    #[test]
    fn an_early_call_does_not_silence_a_missing_piece() {
        let by_ip = declaration("axum::early_then_no_connect_info", "Ip");
        let errors = errors_while(by_ip.name(), async move {
            let peer = RequestContext::new().with_peer(([127, 0, 0, 1], 1).into());
            let early = async {
                crate::pipeline::check(
                    by_ip,
                    &crate::resolvers::Ip,
                    crate::pipeline::Call::NONE,
                    None,
                )
                .await
            };
            let _ = crate::pipeline::scope::scope(peer, early).await;
            let mut app = Router::new()
                .route("/ip", get(|| limited_by_ip(by_ip)))
                .layer(RateLimitLayer::new());
            for _ in 0..3 {
                assert_eq!(get_path(&mut app, "/ip").await.status(), 403);
            }
        });
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("not enabled"), "{errors:?}");
        assert!(
            errors[1].contains("into_make_service_with_connect_info"),
            "{errors:?}"
        );
    }

    /// Served without `ConnectInfo`, `Ip` never has a key: one error says what to add.
    #[test]
    fn a_layer_without_connect_info_is_logged_once() {
        let by_ip = declaration("axum::by_ip", "Ip");
        let errors = errors_while(by_ip.name(), async move {
            let mut app = Router::new()
                .route("/ip", get(|| limited_by_ip(by_ip)))
                .layer(RateLimitLayer::new());
            for _ in 0..10 {
                assert_eq!(get_path(&mut app, "/ip").await.status(), 403);
            }
        });
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("into_make_service_with_connect_info"),
            "{errors:?}"
        );
    }

    /// A layer's `Ip` limit is keyed as a handler's: a client that sends its own
    /// `X-Forwarded-For` to a layer trusting no proxy stays in its peer's bucket.
    #[tokio::test]
    async fn a_client_cannot_pick_its_layer_bucket() {
        async fn open() -> &'static str {
            "open"
        }
        let by_ip = declaration("axum::layer_by_ip", "Ip");
        let mut app = Router::new()
            .route("/open", get(open))
            .layer(
                RateLimitLayer::new().limit(crate::http::LayerLimit::declared(
                    by_ip,
                    crate::resolvers::Ip,
                )),
            );
        let mut send = async |forwarded: &str| {
            let mut req = Request::get("/open")
                .header("x-forwarded-for", forwarded)
                .body(Body::empty())
                .unwrap();
            let peer: SocketAddr = "192.0.2.7:4000".parse().unwrap();
            req.extensions_mut().insert(ConnectInfo(peer));
            poll_fn(|cx| tower_service::Service::<Request<Body>>::poll_ready(&mut app, cx))
                .await
                .unwrap();
            app.call(req).await.unwrap().status()
        };
        assert_eq!(send("198.51.100.1").await, 200);
        for spoofed in ["198.51.100.2", "203.0.113.9, 198.51.100.3", "unknown"] {
            assert_eq!(send(spoofed).await, 429, "{spoofed}");
        }
    }
}
