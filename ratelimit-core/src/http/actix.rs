//! actix-web integration.
//!
//! ```no_run
//! use actix_web::{App, HttpServer};
//! use ratelimit_core::RateLimitMiddleware;
//!
//! # async fn run() -> std::io::Result<()> {
//! HttpServer::new(|| App::new().wrap(RateLimitMiddleware::new()))
//!     .bind(("127.0.0.1", 3000))?
//!     .run()
//!     .await
//! # }
//! ```

use std::future::{Ready, ready};
use std::rc::Rc;
use std::sync::Arc;

use actix_web::HttpMessage as _;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::StatusCode as ActixStatus;
use actix_web::http::header::{
    HeaderMap as ActixHeaders, HeaderName as ActixName, HeaderValue as ActixValue,
};
use actix_web::{HttpResponse, ResponseError};
use futures_util::future::LocalBoxFuture;

use super::{Config, OnRejection, SharedConfig, config_methods};
use crate::headers::{HeaderFamilies, render_verdict};
use crate::http::layered::{self, Handoff, Plan, Refusing, route_key};
use crate::pipeline::scope::{CONTEXT, Scope, described_finished};
use crate::pipeline::verdict::Described;
use crate::pipeline::verdict::RateLimited;
use crate::request::Origin;
use crate::request::RequestContext;
use crate::resolvers::Principal;

type CopyExtension = fn(&actix_web::dev::Extensions, &mut http::Extensions);

/// actix-web middleware that gives `#[rate_limit]` handlers their request context (method,
/// path, matched pattern, headers, client address, and a [`Principal`] found in the request's
/// extensions) and adds the rate-limit headers to their responses.
///
/// # A client that goes away
///
/// The concurrency slots a request holds (a handler's `concurrent = ..`, this middleware's
/// `layer_limit!(concurrent = ..)`) come back when the request's future ends or is dropped.
/// actix-web does not drop it when the client leaves: by default it runs the handler of an
/// HTTP/1.1 request whose client closed the connection to its end (it allows half-closed
/// connections), and it runs every HTTP/2 request to its end whatever the client does; this
/// middleware sees neither the connection nor the stream, so the slots stay taken until the
/// handler returns. `HttpServer::h1_allow_half_closed(false)` makes actix-web drop an HTTP/1.1
/// request's future as soon as it reads that the client closed the connection (as hyper, under
/// axum, does by default), and a deadline middleware (`tokio::time::timeout` around the app,
/// in `actix_web::middleware::from_fn`) bounds the rest: the guide's "When a client goes away"
/// shows both.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RateLimitMiddleware {
    config: SharedConfig,
    copies: Arc<Vec<CopyExtension>>,
    on_rejection: Option<OnRejection<HttpResponse>>,
}

impl RateLimitMiddleware {
    /// A middleware trusting no proxy, grouping IPv6 clients by /64, sending every header
    /// family, and passing on a [`Principal`] from the request's extensions.
    pub fn new() -> RateLimitMiddleware {
        RateLimitMiddleware {
            config: Arc::new(Config::default()),
            copies: Arc::new(vec![copy::<Principal>]),
            on_rejection: None,
        }
    }

    /// Also pass values of type `T` from actix's request extensions to key resolvers
    /// (`ctx.extensions().get::<T>()`).
    pub fn extension<T: Clone + Send + Sync + 'static>(mut self) -> Self {
        Arc::make_mut(&mut self.copies).push(copy::<T>);
        self
    }

    config_methods!();

    /// Renders the refusals of the middleware's own limits with `render`, in place of the
    /// `application/problem+json` body: a 429 when they refuse a request, a 503 when the
    /// limiter could not decide and the policy refuses, a 403 (or the limit's
    /// `empty_key_status`) when a request has no key; [`RateLimited::status`] says which. The
    /// rate-limit headers (`Retry-After` and the families of [`headers`](Self::headers)) are
    /// added to `render`'s response as to the default one, replacing any of the same name.
    ///
    /// ```
    /// use actix_web::{App, HttpResponse, web};
    /// use ratelimit_core::http::LayerLimit;
    /// use ratelimit_core::{Ip, Limit, RateLimitMiddleware};
    ///
    /// # fn main() -> Result<(), ratelimit_core::Error> {
    /// let middleware = RateLimitMiddleware::new()
    ///     .limit(LayerLimit::new("api", Limit::per_minute(100), Ip)?)
    ///     .on_rejection(|rejected| {
    ///         let status = actix_web::http::StatusCode::from_u16(rejected.status().as_u16())
    ///             .unwrap_or(actix_web::http::StatusCode::TOO_MANY_REQUESTS);
    ///         HttpResponse::build(status).body("Slow down, please.")
    ///     });
    /// let app = App::new()
    ///     .wrap(middleware)
    ///     .route("/", web::get().to(|| async { "hello" }));
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    ///
    /// A refusal decided in a handler's own check is the handler's to render (its error type,
    /// `E: From<RateLimited>`), and so is a refusal of the middleware's limits on a route
    /// whose handler has `#[rate_limit]` limits of its own, once the middleware has seen it
    /// check: they are decided with the handler's, in its check (see the guide, "A limit on
    /// a whole router"). Give that error type the same rendering.
    pub fn on_rejection(
        mut self,
        render: impl Fn(&RateLimited) -> HttpResponse + Send + Sync + 'static,
    ) -> Self {
        self.on_rejection = Some(OnRejection::new(render));
        self
    }
}

fn copy<T: Clone + Send + Sync + 'static>(
    from: &actix_web::dev::Extensions,
    to: &mut http::Extensions,
) {
    if let Some(v) = from.get::<T>() {
        to.insert(v.clone());
    }
}

impl<S, B> Transform<S, ServiceRequest> for RateLimitMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    S::Future: 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = RateLimitActixService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitActixService {
            service: Rc::new(service),
            config: Arc::clone(&self.config),
            copies: Arc::clone(&self.copies),
            on_rejection: self.on_rejection.clone(),
        }))
    }
}

/// The service of [`RateLimitMiddleware`].
#[derive(Debug)]
pub struct RateLimitActixService<S> {
    service: Rc<S>,
    config: SharedConfig,
    copies: Arc<Vec<CopyExtension>>,
    on_rejection: Option<OnRejection<HttpResponse>>,
}

impl<S, B> Service<ServiceRequest> for RateLimitActixService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    S::Future: 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let handed = req.extensions_mut().remove::<Handoff>();
        let plan = Plan::new(&self.config, handed, || {
            req.match_pattern()
                .and_then(|pattern| route_key(req.method().as_str(), &pattern))
        });
        let scope = self.scope_of(&req);
        let families = self.config.families;
        let Some(plan) = plan else {
            let fut = CONTEXT.scope(scope, self.service.call(req));
            return Box::pin(async move {
                let mut fut = std::pin::pin!(fut);
                let mut response = (&mut fut).await?;
                // A rejection's response took the verdict with it (`rejection_rendering`).
                let verdict = described_finished(fut.as_mut());
                render(verdict, response.headers_mut(), families);
                Ok(response.map_into_left_body())
            });
        };
        // The limits of this middleware (and of those above): decided before the service
        // below is called.
        req.extensions_mut().insert(plan.handoff());
        let service = Rc::clone(&self.service);
        let on_rejection = self.on_rejection.clone();
        Box::pin(async move {
            let (out, verdict) = layered::serve(
                scope,
                plan,
                req,
                move |req| async move {
                    service
                        .call(req)
                        .await
                        .map(ServiceResponse::map_into_left_body)
                },
                |rejection, refusing| {
                    let response = refusal(&rejection, on_rejection.as_ref());
                    match refusing {
                        Refusing::Request(req) => req.into_response(response),
                        Refusing::Response(served) => {
                            ServiceResponse::new(served.into_parts().0, response)
                        }
                    }
                    .map_into_right_body()
                },
                // actix-web's `http` is an older major version than the `StatusCode` of
                // `LayerLimit::count`.
                |response| {
                    http::StatusCode::from_u16(response.status().as_u16())
                        .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
                },
            )
            .await;
            let mut response = out?;
            render(verdict, response.headers_mut(), families);
            Ok(response)
        })
    }
}

/// The response to a refusal of the middleware's own limits: the service's own, if it chose
/// one ([`RateLimitMiddleware::on_rejection`]), with the rate-limit headers; else the
/// rejection's.
fn refusal(
    rejection: &RateLimited,
    on_rejection: Option<&OnRejection<HttpResponse>>,
) -> HttpResponse {
    let Some(on_rejection) = on_rejection else {
        return rejection.error_response();
    };
    // Rendered first: what `render` does with the rejection cannot take them from the scope.
    let headers = super::served_rate_limit_headers(rejection);
    let mut response = on_rejection.render(rejection);
    copy_headers(&headers, response.headers_mut());
    response
}

/// The rate-limit headers of `verdict`, when there is one, added to a response's.
fn render(verdict: Described, to: &mut ActixHeaders, families: HeaderFamilies) {
    if verdict.last.is_some() || !verdict.first.is_empty() {
        let mut headers = http::HeaderMap::new();
        render_verdict(verdict, &mut headers, families);
        copy_headers(&headers, to);
    }
}

impl<S> RateLimitActixService<S> {
    /// The scope of `req`: its context as key resolvers see it, served by this middleware.
    fn scope_of(&self, req: &ServiceRequest) -> Scope {
        let mut headers = http::HeaderMap::with_capacity(req.headers().len());
        for (name, value) in req.headers() {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(name.as_str().as_bytes()),
                http::HeaderValue::from_bytes(value.as_bytes()),
            ) {
                headers.append(n, v);
            }
        }
        let mut extensions = http::Extensions::new();
        {
            let from = req.extensions();
            for copy in self.copies.iter() {
                copy(&from, &mut extensions);
            }
        }
        let mut ctx = RequestContext::new()
            .with_path(req.path())
            .with_headers(headers)
            .with_extensions(extensions);
        if let Ok(method) = http::Method::from_bytes(req.method().as_str().as_bytes()) {
            ctx = ctx.with_method(method);
        }
        if let Some(pattern) = req.match_pattern() {
            ctx = ctx.with_route(pattern);
        }
        if let Some(peer) = req.peer_addr() {
            ctx = ctx.with_peer(peer);
        }
        self.config.finish(ctx, Origin::Actix)
    }
}

fn copy_headers(from: &http::HeaderMap, to: &mut ActixHeaders) {
    for (name, value) in from {
        if let (Ok(n), Ok(v)) = (
            ActixName::from_bytes(name.as_str().as_bytes()),
            ActixValue::from_bytes(value.as_bytes()),
        ) {
            to.insert(n, v);
        }
    }
}

impl ResponseError for RateLimited {
    fn status_code(&self) -> ActixStatus {
        ActixStatus::from_u16(self.status().as_u16()).unwrap_or(ActixStatus::TOO_MANY_REQUESTS)
    }

    /// 429 (403 without a key, 503 when the limiter could not decide), an
    /// `application/problem+json` body, and the rate-limit headers: the families the serving
    /// [`RateLimitMiddleware`] was configured with, or every family outside one.
    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code()).body(self.problem_json());
        copy_headers(&super::served_headers(self), response.headers_mut());
        response
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use actix_web::{App, test as actix_test, web};

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

    async fn login() -> Result<&'static str, Limited> {
        limited_call().await
    }

    /// actix's headers as `http`'s, for the shared assertions.
    fn to_http(headers: &actix_web::http::header::HeaderMap) -> http::HeaderMap {
        let mut out = http::HeaderMap::new();
        for (name, value) in headers {
            out.append(
                http::HeaderName::from_bytes(name.as_str().as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            );
        }
        out
    }

    /// The rejection carries the families the middleware was configured with.
    #[actix_web::test]
    async fn a_rejection_carries_only_the_configured_families() {
        let app = actix_test::init_service(
            App::new()
                .wrap(RateLimitMiddleware::new().headers(HeaderFamilies::ALL.without_spring()))
                .route("/login", web::get().to(login)),
        )
        .await;
        let ok = actix_test::call_service(
            &app,
            actix_test::TestRequest::get().uri("/login").to_request(),
        )
        .await;
        assert_eq!(ok.status(), 200);
        assert!(ok.headers().get("ratelimit").is_some());
        assert!(ok.headers().get("x-ratelimit-remaining").is_none());
        let refused = actix_test::call_service(
            &app,
            actix_test::TestRequest::get().uri("/login").to_request(),
        )
        .await;
        assert_eq!(refused.status(), 429);
        assert!(refused.headers().get("ratelimit").is_some());
        assert!(refused.headers().get("retry-after").is_some());
        for name in SPRING_HEADERS {
            assert!(refused.headers().get(name).is_none(), "{name}");
        }
    }

    /// A limit in shadow mode serves every call, and its headers say it is spent.
    #[actix_web::test]
    async fn a_shadow_limit_serves_and_describes_the_call() {
        let app = actix_test::init_service(
            App::new()
                .wrap(RateLimitMiddleware::new())
                .route("/trial", web::get().to(shadowed_call)),
        )
        .await;
        let get = || actix_test::TestRequest::get().uri("/trial").to_request();
        assert_eq!(actix_test::call_service(&app, get()).await.status(), 200);
        let over = actix_test::call_service(&app, get()).await;
        assert_shadowed(over.status().as_u16(), &to_http(over.headers()));
    }

    /// A call under several limits: the headers list each, allowed or refused.
    #[actix_web::test]
    async fn every_limit_of_a_call_is_described() {
        let (decl, daily) = twice("actix::twice", "actix::twice#2");
        let app = actix_test::init_service(
            App::new()
                .wrap(RateLimitMiddleware::new())
                .route("/twice", web::get().to(move || limited_twice(decl, daily))),
        )
        .await;
        let call = || actix_test::TestRequest::get().uri("/twice").to_request();
        let ok = actix_test::call_service(&app, call()).await;
        assert_eq!(ok.status(), 200);
        let refused = actix_test::call_service(&app, call()).await;
        assert_eq!(refused.status(), 429);
        let (ok, refused_headers) = (to_http(ok.headers()), to_http(refused.headers()));
        let body = actix_test::read_body(refused).await;
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert_two_limits_described("actix::twice", &ok, &refused_headers, &body);
    }

    /// Behind a trusted proxy, over real HTTP: only the header the proxy writes names the
    /// client, and a proxy that forwards `unknown` is the client, not "no key".
    #[actix_web::test]
    async fn a_client_behind_a_trusted_proxy_cannot_pick_its_bucket() {
        let by_ip = twice_a_minute_by_ip("actix::behind_proxy");
        let serve = |proxies: TrustedProxies| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = actix_web::HttpServer::new(move || {
                App::new()
                    .wrap(RateLimitMiddleware::new().trusted_proxies(proxies.clone()))
                    .route("/ip", web::get().to(move || limited_by_ip(by_ip)))
            })
            .workers(1)
            .disable_signals()
            .listen(listener)
            .unwrap()
            .run();
            let handle = server.handle();
            actix_web::rt::spawn(server);
            (addr, handle)
        };
        let trusted = TrustedProxies::new(["127.0.0.0/8"]).unwrap();
        let (xff, xff_server) = serve(trusted.clone());
        let (forwarded, forwarded_server) = serve(trusted.header(ClientIpHeader::Forwarded));
        assert_a_client_cannot_pick_its_bucket(xff, forwarded).await;
        xff_server.stop(false).await;
        forwarded_server.stop(false).await;
    }

    /// Without the middleware there is no request context at all: one error names it.
    #[test]
    fn a_forgotten_middleware_is_logged_once() {
        let by_ip = declaration("actix::by_ip", "Ip");
        let errors = errors_while(by_ip.name(), async move {
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async {
                    let app = actix_test::init_service(
                        App::new().route("/ip", web::get().to(|| limited_by_ip(by_ip))),
                    )
                    .await;
                    for _ in 0..10 {
                        let request = actix_test::TestRequest::get()
                            .uri("/ip")
                            .peer_addr("192.0.2.8:4000".parse().unwrap())
                            .to_request();
                        assert_eq!(actix_test::call_service(&app, request).await.status(), 403);
                    }
                })
                .await;
        });
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("RateLimitMiddleware"), "{errors:?}");
    }
}
