//! `rediss://` against a real `redis-server` serving TLS with a certificate authority of the
//! test's own: trusted (through `SSL_CERT_FILE`, read by the system-roots loader), every call
//! is decided by Redis over TLS; not trusted, building the limiter fails with a clear error.
//! Each client is a child process, so that its environment is its own.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used)]

use std::process::Command;

use testkit::tls::TlsServer;

fn client(url: &str, ca: Option<&std::path::Path>) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tls_client"));
    cmd.arg(url).env_remove("SSL_CERT_DIR");
    match ca {
        Some(ca) => cmd.env("SSL_CERT_FILE", ca),
        None => cmd.env_remove("SSL_CERT_FILE"),
    };
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_trusted_tls_server_decides_every_call() {
    let tls = TlsServer::start();
    let (ok, out) = client(&tls.tls_url(), Some(&tls.ca()));
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["ALLOWED Store", "ALLOWED Store", "REFUSED Store"],
        "decided in Redis, over TLS"
    );
    // The bucket is in the server: the plain port sees it.
    let mut con = tls.server.blocking_connection();
    let exists: bool = redis::cmd("EXISTS")
        .arg("tls:{:k}")
        .query(&mut con)
        .unwrap();
    assert!(exists);
}

#[test]
fn an_untrusted_certificate_is_an_error_at_startup() {
    let tls = TlsServer::start();
    let (ok, out) = client(&tls.tls_url(), None);
    assert!(!ok, "{out}");
    assert!(out.starts_with("ERROR: "), "{out}");
    assert!(
        out.contains("rediss://127.0.0.1:"),
        "names the server: {out}"
    );
}
