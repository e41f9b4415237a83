//! The decision path of generated code: spans, recording, resolvers, missing pieces.
#![allow(clippy::unwrap_used)]

use super::scope::{CONTEXT, Scope, scope, with_current};
use super::test_support::{Capture, declaration};
use super::*;
use crate::headers::HeaderFamilies;
use crate::limit::Limit;
use crate::request::Origin;
use crate::request::RequestContext;
use crate::resolvers::Header;
use crate::resolvers::Ip;
use crate::resolvers::Uri;
use std::borrow::Cow;

/// Runs `calls` keyed calls of `decl` in scopes made by `ctx` (none when `None`) and
/// returns the errors logged about it.
fn errors_after_calls(
    decl: &'static LimitDeclaration,
    key: &dyn KeyResolver,
    ctx: Option<fn() -> Scope>,
) -> Vec<String> {
    let capture = Capture::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let limiter = runtime
        .block_on(RateLimiter::builder().memory().build())
        .unwrap();
    tracing::subscriber::with_default(capture.clone(), || {
        runtime.block_on(async {
            for _ in 0..20 {
                let call = async { check(decl, key, Call::NONE, Some(&limiter)).await };
                let _ = match ctx {
                    Some(ctx) => CONTEXT.scope(ctx(), call).await,
                    None => call.await,
                };
            }
        });
    });
    capture.errors_about(decl.name())
}

/// Every decision is a `rate_limit` span at DEBUG with the limit's name, the outcome, the
/// tokens left and who decided; the bucket's key only in a TRACE event within it.
#[test]
fn every_decision_is_a_rate_limit_span() {
    static TRACED: LimitDeclaration = LimitDeclaration::new(
        "t::traced",
        crate::limit::Limit::per_minute(1),
        1,
        "Uri",
        file!(),
        line!(),
    );
    let capture = Capture::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = runtime
        .block_on(RateLimiter::builder().memory().build())
        .unwrap();
    tracing::subscriber::with_default(capture.clone(), || {
        runtime.block_on(async {
            let ctx = || RequestContext::new().with_path("/traced/secret-user");
            for _ in 0..2 {
                let call = async { check(&TRACED, &Uri, Call::NONE, Some(&limiter)).await };
                let _ = scope(ctx(), call).await;
            }
            let _ = limiter
                .check("direct", &crate::limit::Limit::per_second(1))
                .await;
        });
    });
    let lines = capture.lines();
    let spans: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("SPAN DEBUG rate_limit"))
        .collect();
    assert_eq!(spans.len(), 3, "{lines:#?}");
    assert!(
        spans[0].contains("limit=\"t::traced\"")
            && spans[0].contains("outcome=\"allowed\"")
            && spans[0].contains("remaining=0")
            && spans[0].contains("source=Store"),
        "{}",
        spans[0]
    );
    assert!(spans[1].contains("outcome=\"limited\""), "{}", spans[1]);
    assert!(spans[2].contains("limit=\"-\""), "{}", spans[2]);
    // The key only at TRACE, never in the span or a DEBUG event.
    for line in &lines {
        if line.contains("secret-user") {
            assert!(line.starts_with("TRACE"), "{line}");
        }
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("TRACE") && l.contains("secret-user"))
    );
    // `check` on a memory limiter, whose bucket key is built on the stack: shown too.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("TRACE") && l.contains("ratelimit:{:direct}")),
        "{lines:#?}"
    );
}

/// In a scope the decision is recorded for the response; outside one the thread's empty
/// context, which every such call resolves its key against, is left as it was.
#[test]
fn a_decision_is_recorded_in_a_scope_and_nowhere_else() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let decl = declaration("t::recorded", "Global");
    runtime.block_on(async {
        let limiter = RateLimiter::builder().memory().build().await.unwrap();
        assert!(
            check(decl, &crate::resolvers::Global, Call::NONE, Some(&limiter))
                .await
                .is_ok()
        );
        assert!(with_current(|_, scope| scope.is_none()));
        let (refused, recorded) = super::scope::scope_returning(RequestContext::new(), async {
            check(decl, &crate::resolvers::Global, Call::NONE, Some(&limiter)).await
        })
        .await;
        assert!(refused.is_err());
        let recorded = recorded.unwrap();
        assert_eq!(recorded.name, "t::recorded");
        assert!(!recorded.decision.allowed);
    });
}

/// A resolver sees the name of the limit whose key it resolves (each its own, stacked),
/// and only while it resolves: nothing is written into the request's context.
#[test]
fn a_resolver_sees_the_limit_it_resolves_for() {
    struct ByHandler;
    impl KeyResolver for ByHandler {
        fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
            ctx.handler().map(Cow::Borrowed)
        }
    }
    let one = declaration("t::handler_one", "ByHandler");
    let two = declaration("t::handler_two", "ByHandler");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let limiter = RateLimiter::builder().memory().build().await.unwrap();
        let ctx = RequestContext::new();
        assert!(
            scope(ctx.clone(), async {
                check(one, &ByHandler, Call::NONE, Some(&limiter)).await
            })
            .await
            .is_ok()
        );
        let refused = scope(ctx.clone(), async {
            check(one, &ByHandler, Call::NONE, Some(&limiter)).await
        })
        .await
        .unwrap_err();
        assert_eq!(
            refused.key(),
            limiter.named_bucket_key("t::handler_one", "t::handler_one")
        );
        let stacked = [
            (two, &KeyArg::Resolver(&ByHandler), Call::NONE),
            (
                declaration("t::handler_three", "ByHandler"),
                &KeyArg::Resolver(&ByHandler),
                Call::NONE,
            ),
        ];
        assert!(
            scope(ctx.clone(), check_all(&stacked, Some(&limiter)))
                .await
                .is_ok()
        );
        let minute = Limit::per_minute(1);
        for name in ["t::handler_two", "t::handler_three"] {
            let d = limiter.peek_named(name, name, &minute).await.unwrap();
            assert_eq!(d.remaining, 0, "{name} took from its own key");
        }
        assert_eq!(ctx.handler(), None);
    });
}

#[test]
fn a_call_outside_any_context_logs_the_missing_layer_once() {
    let decl = declaration("t::no_layer", "Uri");
    let errors = errors_after_calls(decl, &Uri, None);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("RateLimitLayer"), "{errors:?}");
    assert!(errors[0].contains("RateLimitMiddleware"), "{errors:?}");
}

#[test]
fn a_layer_without_connect_info_logs_the_missing_peer_once() {
    let decl = declaration("t::no_peer", "Ip");
    let errors = errors_after_calls(
        decl,
        &Ip,
        Some(|| {
            Scope::served_by(
                RequestContext::new().with_path("/login"),
                Origin::Axum,
                HeaderFamilies::ALL,
            )
        }),
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{errors:?}"
    );
}

#[test]
fn a_request_without_the_header_is_not_a_misconfiguration() {
    let decl = declaration("t::no_header", "Header(\"x-api-key\")");
    let ctx = || {
        Scope::served_by(
            RequestContext::new().with_path("/x"),
            Origin::Axum,
            HeaderFamilies::ALL,
        )
    };
    assert_eq!(
        errors_after_calls(decl, &Header("x-api-key"), Some(ctx)),
        Vec::<String>::new()
    );
    let decl = declaration("t::with_peer", "Ip");
    let ctx = || Scope::new(RequestContext::new().with_peer("192.0.2.7:1000".parse().unwrap()));
    assert_eq!(
        errors_after_calls(decl, &Ip, Some(ctx)),
        Vec::<String>::new()
    );
}
