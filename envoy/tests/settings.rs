//! The reference's environment variables, read from a map.

use ratelimit_envoy::settings::{LogFormat, LogLevel, Settings};
use std::path::Path;

fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
    Settings::from_vars(vars.iter().copied()).map_err(|e| e.to_string())
}

#[test]
fn the_references_defaults() {
    let s = settings(&[]).unwrap();
    assert_eq!((s.port, s.grpc_port, s.debug_port), (8080, 8081, 6070));
    assert_eq!(
        s.config_dir(),
        Path::new("/srv/runtime_data/current/config")
    );
    assert_eq!(s.redis_url, "unix:///var/run/nutcracker/ratelimit.sock");
    assert_eq!(s.log_level, LogLevel::Warn);
    assert_eq!(s.log_format, LogFormat::Text);
    assert!(s.runtime_watch_root && !s.runtime_ignore_dot_files && !s.merge_domain_config);
    assert!(!s.shadow_mode && !s.use_prometheus);
    assert_eq!(s.near_limit_permille, 800);
    // Empty is unset, as envconfig reads it.
    assert_eq!(settings(&[("GRPC_PORT", "")]).unwrap().grpc_port, 8081);
}

#[test]
fn values_are_read_as_the_reference_reads_them() {
    let s = settings(&[
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_APPDIRECTORY", "rules"),
        ("RUNTIME_IGNOREDOTFILES", "T"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("MERGE_DOMAIN_CONFIG", "1"),
        ("GRPC_PORT", "9000"),
        ("LOG_LEVEL", "DEBUG"),
        ("LOG_FORMAT", "json"),
        ("SHADOW_MODE", "True"),
        ("NEAR_LIMIT_RATIO", "0.9"),
        ("USE_STATSD", "false"),
    ])
    .unwrap();
    assert_eq!(s.config_dir(), Path::new("/data/ratelimit/rules"));
    assert!(s.runtime_ignore_dot_files && !s.runtime_watch_root && s.merge_domain_config);
    let options = s.load_options();
    assert!(options.merge_domains && options.ignore_dot_files);
    assert_eq!(
        (s.grpc_port, s.log_level, s.log_format),
        (9000, LogLevel::Debug, LogFormat::Json)
    );
    assert!(s.shadow_mode);
    assert_eq!(s.near_limit_permille, 900);
}

#[test]
fn redis_variables_become_a_url_the_builder_takes() {
    let url = |vars: &[(&str, &str)]| settings(vars).map(|s| s.redis_url);
    let tcp = ("REDIS_SOCKET_TYPE", "tcp");
    assert_eq!(
        url(&[tcp, ("REDIS_URL", "redis:6379")]).unwrap(),
        "redis://redis:6379"
    );
    assert_eq!(
        url(&[
            tcp,
            ("REDIS_URL", "redis:6379"),
            ("REDIS_AUTH", "user:p@ss:w")
        ])
        .unwrap(),
        "redis://user:p%40ss%3Aw@redis:6379"
    );
    assert_eq!(
        url(&[
            ("REDIS_TYPE", "CLUSTER"),
            ("REDIS_URL", "a:7000,b:7001"),
            ("REDIS_AUTH", "pw")
        ])
        .unwrap(),
        "redis+cluster://:pw@a:7000,b:7001"
    );
    assert_eq!(
        url(&[
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_URL", "mymaster,s1:26379,s2:26379")
        ])
        .unwrap(),
        "redis+sentinel://s1:26379,s2:26379/mymaster"
    );
    assert_eq!(
        url(&[("REDIS_URL", "/tmp/redis.sock"), ("REDIS_AUTH", "pw")]).unwrap(),
        "unix:///tmp/redis.sock?pass=pw"
    );
    // A URL is taken as it is, whatever the socket type.
    assert_eq!(
        url(&[("REDIS_URL", "redis://10.0.0.1:6379/2")]).unwrap(),
        "redis://10.0.0.1:6379/2"
    );

    for (vars, complaint) in [
        (
            &[("REDIS_URL", "redis://h:1"), ("REDIS_AUTH", "pw")][..],
            "REDIS_AUTH",
        ),
        (&[("REDIS_TYPE", "ring")], "REDIS_TYPE"),
        (
            &[
                tcp,
                ("REDIS_URL", "redis:6379"),
                ("REDIS_SOCKET_TYPE", "udp"),
            ],
            "REDIS_SOCKET_TYPE",
        ),
        (
            &[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "s1:26379")],
            "REDIS_URL",
        ),
        (
            &[("REDIS_URL", "redis://h:1"), ("REDIS_TLS", "true")],
            "REDIS_TLS",
        ),
        (&[("REDIS_TLS", "yes")], "REDIS_TLS"),
        // host:port under the default socket type (unix): said at start-up.
        (&[("REDIS_URL", "127.0.0.1:6379")], "REDIS_URL"),
    ] {
        let err = url(vars).expect_err(complaint);
        assert!(err.starts_with(complaint), "{vars:?}: {err}");
    }
    // A password never shows in an error or in Debug.
    let err = url(&[("REDIS_URL", "redis://h:1"), ("REDIS_AUTH", "s3cret")]).unwrap_err();
    assert!(!err.contains("s3cret"), "{err}");
    let s = settings(&[tcp, ("REDIS_URL", "h:1"), ("REDIS_AUTH", "s3cret")]).unwrap();
    assert!(!format!("{s:?}").contains("s3cret"));
}

#[test]
fn what_this_service_does_not_do_is_an_error_that_says_so() {
    for (name, value, says) in [
        ("USE_STATSD", "true", "USE_PROMETHEUS"),
        ("REDIS_PERSECOND", "true", "one Redis"),
        ("BACKEND_TYPE", "memcache", "redis"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW", "FILE"),
        ("LOG_LEVEL", "loud", "trace"),
        ("LOG_FORMAT", "xml", "json"),
        ("GRPC_PORT", "70000", "port"),
        ("SHADOW_MODE", "maybe", "true or false"),
        ("NEAR_LIMIT_RATIO", "1.5", "ratio"),
    ] {
        let err = settings(&[(name, value)]).expect_err(name);
        assert!(
            err.starts_with(name) && err.contains(says),
            "{name}={value}: {err}"
        );
    }
}

#[test]
fn ratelimit_headers_are_off_unless_asked_for() {
    use ratelimit_envoy::service::ResponseHeaders;
    let headers = |vars: &[(&str, &str)]| settings(vars).map(|s| s.ratelimit_headers);
    assert_eq!(headers(&[]), Ok(ResponseHeaders::Off));
    assert_eq!(
        headers(&[("RATELIMIT_HEADERS", "")]),
        Ok(ResponseHeaders::Off)
    );
    assert_eq!(
        headers(&[("RATELIMIT_HEADERS", "off")]),
        Ok(ResponseHeaders::Off)
    );
    assert_eq!(
        headers(&[("RATELIMIT_HEADERS", "Draft11")]),
        Ok(ResponseHeaders::Draft11)
    );
    let e = headers(&[("RATELIMIT_HEADERS", "draft10")]).unwrap_err();
    assert!(
        e.contains("RATELIMIT_HEADERS") && e.contains("draft11"),
        "{e}"
    );
}
