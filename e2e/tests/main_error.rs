//! What a user following the guide sees when start-up fails: its `main` returns
//! `Box<dyn Error>`, and the standard library prints the error's `Debug`. A bad override must
//! read as its message, with real line breaks, not as an escaped `Config("..\n..")`.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use testkit::RedisServer;

#[test]
fn a_bad_override_prints_a_readable_error() {
    let server = RedisServer::start();
    let config = server.dir().join("limits.toml");
    std::fs::write(
        &config,
        "[limits.\"guide_main::list_orders\"]\nreplinish = 5\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_guide_main"))
        .env("REDIS_URL", server.url())
        .env("RATE_LIMIT_CONFIG", &config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("Error: "), "{stderr}");
    assert!(stderr.contains("unknown field `replinish`"), "{stderr}");
    assert!(
        stderr.contains("\n2 | replinish = 5"),
        "the parser's excerpt on lines of its own: {stderr}"
    );
    assert!(
        !stderr.contains("Config(") && !stderr.contains("\\n"),
        "no Debug form: {stderr}"
    );
}
