//! What Envoy 1.40 sends for `apply_on_stream_done` with a `hits_addend` read from the
//! response: the calls a recording rate-limit service receives.

use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use testkit::envoy::{
    Action, Bootstrap, Envoy, HitsAddend, RateLimitFilter, RateLimitPolicy, Upstream,
};
use tonic::{Request, Response, Status};

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<RateLimitRequest>>>);

#[tonic::async_trait]
impl RateLimitService for Recorder {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        let deny = request
            .descriptors
            .iter()
            .any(|d| d.entries.iter().any(|e| e.value == "deny"));
        self.0.lock().expect("the recorded calls").push(request);
        Ok(Response::new(RateLimitResponse {
            overall_code: if deny { 2 } else { 1 },
            ..RateLimitResponse::default()
        }))
    }
}

async fn recorder() -> (Recorder, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let addr = listener.local_addr().expect("bound");
    let r = Recorder::default();
    let served = r.clone();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(served))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (r, addr)
}

/// Each call as `(user, stream-done?, the descriptor's hits_addend, the request's)`.
fn calls(r: &Recorder) -> Vec<(String, bool, Option<u64>, u32)> {
    let calls = r.0.lock().expect("the recorded calls");
    calls
        .iter()
        .flat_map(|c| {
            c.descriptors.iter().map(|d| {
                let user = d.entries[0].value.clone();
                let done = d.entries.iter().any(|e| e.key == "ratelimit.stream_done");
                (user, done, d.hits_addend.map(|h| h.value), c.hits_addend)
            })
        })
        .collect()
}

/// Sends one request per case (a user, and the `x-tokens-used` its response carries), then
/// a last one whose stream-done call is waited for: the calls of the others were made
/// before it.
async fn probe(filter_level: bool) -> Vec<(String, bool, Option<u64>, u32)> {
    let (r, addr) = recorder().await;
    let seen = r.clone();
    tokio::task::spawn_blocking(move || {
        let upstream = Upstream::start();
        let user = || Action::request_headers("x-user", "user");
        let request_path = RateLimitPolicy::new([user()]);
        let stream_done =
            RateLimitPolicy::new([user(), Action::generic_key_as("ratelimit.stream_done", "0")])
                .hits_addend(HitsAddend::Format("%RESP(x-tokens-used)%".into()))
                .apply_on_stream_done();
        let mut filter = RateLimitFilter::new("edge", addr);
        let mut b = Bootstrap::new(upstream.addr());
        if filter_level {
            filter = filter.rate_limit(request_path).rate_limit(stream_done);
        } else {
            b = b
                .route_rate_limit(request_path)
                .route_rate_limit(stream_done);
        }
        let envoy = Envoy::start(&b.rate_limit_filter(filter));
        let cases = [
            ("a", Some("7")),
            ("b", None),
            ("c", Some("0")),
            ("d", Some("abc")),
            ("deny", Some("5")),
            ("f", Some("99999999999999")),
            ("last", Some("1")),
        ];
        for (user, tokens) in cases {
            let mut h = vec![("x-user", user)];
            if let Some(t) = tokens {
                h.push(("x-upstream-respond-x-tokens-used", t));
            }
            let status = envoy.get("/", &h).status;
            assert_eq!(status, if user == "deny" { 429 } else { 200 }, "{user}");
        }
        testkit::wait::poll_blocking(testkit::wait::PATIENCE, || {
            if calls(&seen).iter().any(|c| c.0 == "last" && c.1) {
                Ok(())
            } else {
                Err("no stream-done call for the last request")
            }
        })
        .expect("the last stream-done call");
    })
    .await
    .expect("the requests through Envoy");
    calls(&r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_level_stream_done_carries_the_response_value_and_nothing_without_one() {
    let calls = probe(true).await;
    let done: Vec<_> = calls.iter().filter(|c| c.1).collect();
    let request_path: Vec<_> = calls.iter().filter(|c| !c.1).collect();
    assert_eq!(request_path.len(), 7, "{calls:?}");
    assert!(request_path.iter().all(|c| c.2.is_none() && c.3 == 0));
    // The value read from the response (0 included), the request's hits_addend unset: no
    // mark but the descriptor's own entries. No header, a value that is no number or too
    // large, or a request refused: no call at stream end.
    let as_sent: Vec<_> = done.iter().map(|c| (c.0.as_str(), c.2, c.3)).collect();
    assert_eq!(
        as_sent,
        [("a", Some(7), 0), ("c", Some(0), 0), ("last", Some(1), 0)],
        "{calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_level_stream_done_ignores_hits_addend_and_follows_refusals_too() {
    let calls = probe(false).await;
    let done: Vec<_> = calls.iter().filter(|c| c.1).collect();
    // Every request, the refused one included, and never a hits_addend.
    let users: Vec<_> = done.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        users,
        ["a", "b", "c", "d", "deny", "f", "last"],
        "{calls:?}"
    );
    assert!(done.iter().all(|c| c.2.is_none() && c.3 == 0), "{calls:?}");
}
