//! A `redis-server` that also serves TLS, with a certificate authority of its own made by the
//! `openssl` command line (Debian: `apt-get install openssl`) in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{RedisServer, free_port};

/// A server with a plain port (for the test's own commands) and a TLS port whose certificate,
/// for `127.0.0.1`, is signed by [`TlsServer::ca`].
#[derive(Debug)]
pub struct TlsServer {
    /// The server; its plain port answers as usual.
    pub server: RedisServer,
    tls_port: u16,
    certs: tempfile::TempDir,
}

impl TlsServer {
    /// Makes a CA and a server certificate, then starts the server.
    ///
    /// # Panics
    /// If `openssl` or `redis-server` cannot run, or the server has no TLS support.
    pub fn start() -> TlsServer {
        let certs = tempfile::Builder::new()
            .prefix("ratelimit-tls-")
            .tempdir()
            .expect("create a temporary directory");
        let dir = certs.path();
        let ext = dir.join("ext");
        std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\n").expect("write the extension");
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-subj",
                "/CN=ratelimit test CA",
            ],
        );
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                "server.crt",
                "-extfile",
                "ext",
            ],
        );
        let tls_port = free_port();
        let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
        let (port, cert, key, ca) = (
            tls_port.to_string(),
            path("server.crt"),
            path("server.key"),
            path("ca.crt"),
        );
        let server = RedisServer::start_with(&[
            "--tls-port",
            &port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
        ]);
        TlsServer {
            server,
            tls_port,
            certs,
        }
    }

    /// `rediss://127.0.0.1:<tls port>`.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// The CA certificate (PEM) that signed the server's.
    pub fn ca(&self) -> PathBuf {
        self.certs.path().join("ca.crt")
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian: apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
