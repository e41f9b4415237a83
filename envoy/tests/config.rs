//! The configuration beyond the reference's own files: buckets that never collide, the
//! extensions, errors with their place, loading a directory, and hostile input.

use std::collections::HashSet;
use std::time::Duration;

use ratelimit_core::{Algorithm, FailurePolicy, Limit, Unit};
use ratelimit_envoy::config::{
    Action, Bucket, Config, ConfigErrors, LoadOptions, Lookup, MAX_DEPTH, ReferenceUnit,
};

/// A descriptor's entries.
type Entries<'a> = &'a [(&'a str, &'a str)];

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse("test.yaml", text)
}

fn bucket(config: &Config, entries: &[(&str, &str)]) -> Option<Bucket> {
    match config.lookup("d", entries.iter().copied()) {
        Lookup::Rule(found) => Some(found.bucket().clone()),
        _ => None,
    }
}

/// The limit of the one rule of `rate_limit`, a block's body, under `key: k`.
fn limit_of(rate_limit: &str) -> Result<Limit, String> {
    let text = format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n");
    let config = parse(&text).map_err(|e| e.to_string())?;
    match config.lookup("d", [("k", "v")]) {
        Lookup::Rule(found) => match found.rule().action() {
            Action::Limit(limit) => Ok(*limit),
            other => Err(format!("{other:?}")),
        },
        other => Err(format!("{other:?}")),
    }
}

#[test]
fn two_descriptors_never_share_a_bucket_whatever_their_values_hold() {
    let config = parse(
        "domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a=b
    rate_limit: {unit: second, requests_per_unit: 1}
",
    )
    .unwrap();
    // Each pair would meet under a naive `key=value` joined by `&` (or `key_value` joined by
    // `_`, the reference's cache key).
    let pairs: [(Entries<'_>, Entries<'_>); 4] = [
        (&[("a", "b&c=d")], &[("a", "b"), ("c", "d")]),
        (&[("a", "b=c")], &[("a=b", "c")]),
        (&[("a", "b%26c%3Dd")], &[("a", "b&c=d")]),
        (&[("a", "x~y")], &[("a", "x%7Ey")]),
    ];
    for (one, other) in pairs {
        let (b1, b2) = (
            bucket(&config, one).unwrap(),
            bucket(&config, other).unwrap(),
        );
        assert_ne!(b1, b2, "{one:?} and {other:?} share {b1:?}");
    }
    // Many hostile values: all distinct buckets.
    let values = [
        "", "=", "&", "~", "%", "%3D", "a&c=", "&c=", "a=", "{x}", "b&c=d", "b",
    ];
    let mut seen = HashSet::new();
    for v1 in values {
        assert!(
            seen.insert(bucket(&config, &[("a", v1)]).unwrap()),
            "{v1:?}"
        );
        for v2 in values {
            let b = bucket(&config, &[("a", v1), ("c", v2)]).unwrap();
            assert!(seen.insert(b), "{v1:?} {v2:?}");
        }
    }
}

#[test]
fn domains_have_their_own_buckets_and_each_value_of_a_key_only_rule_its_own() {
    let text = |domain: &str| {
        format!(
            "domain: {domain}\ndescriptors:\n  - key: ip\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    let config = Config::from_sources(
        [("a.yaml", text("d")), ("b.yaml", text("e"))],
        &LoadOptions::new(),
    )
    .unwrap();
    let Lookup::Rule(d) = config.lookup("d", [("ip", "1.2.3.4")]) else {
        panic!()
    };
    let Lookup::Rule(e) = config.lookup("e", [("ip", "1.2.3.4")]) else {
        panic!()
    };
    assert_eq!(
        (d.bucket().name(), d.bucket().key()),
        ("envoy:d", "ip=1.2.3.4")
    );
    assert_ne!(d.bucket(), e.bucket());
    assert_ne!(
        bucket(&config, &[("ip", "1.2.3.4")]),
        bucket(&config, &[("ip", "1.2.3.5")])
    );
}

#[test]
fn a_shared_rule_draws_from_the_bucket_a_rust_service_names() {
    let config = parse(
        "domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, shared: search}
  - key: route
    value: /export
    descriptors:
      - key: remote_address
        rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, shared: search}
",
    )
    .unwrap();
    let b = bucket(&config, &[("remote_address", "10.0.0.1")]).unwrap();
    assert_eq!((b.name(), b.key()), ("search", "10.0.0.1"));
    // The name is shared on purpose: both rules draw from it, by the address.
    let nested = bucket(
        &config,
        &[("route", "/export"), ("remote_address", "10.0.0.1")],
    );
    assert_eq!(nested, Some(b));
    let err = parse(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, shared: 'envoy:d'}\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("service's own buckets"), "{err}");
}

#[test]
fn without_extensions_a_rule_is_the_references_fixed_window() {
    for unit in ReferenceUnit::ALL {
        let limit = limit_of(&format!("{{unit: {unit}, requests_per_unit: 7}}")).unwrap();
        assert_eq!(limit.algorithm_kind(), Algorithm::FixedWindow, "{unit}");
        assert_eq!(
            limit.period(),
            Duration::from_secs(unit.seconds()),
            "{unit}"
        );
        assert_eq!((limit.replenish(), limit.burst_capacity()), (7, 7));
        assert!(
            limit.calendar().is_none(),
            "{unit}: 30 days, not a calendar month"
        );
        assert_eq!(limit.failure_policy(), None);
    }
    let limit = limit_of("{unit: MINUTE, requests_per_unit: 1}").unwrap();
    assert_eq!(limit.period(), Duration::from_secs(60));
}

#[test]
fn the_extensions_build_the_limit_they_name() {
    let bucket =
        limit_of("{unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 50}")
            .unwrap();
    assert_eq!(bucket, Limit::per_minute(10).burst(50));

    let log = limit_of("{period: 30s, requests_per_unit: 5, algorithm: sliding_log}").unwrap();
    assert_eq!(
        log,
        Limit::per(5, Duration::from_secs(30)).algorithm(Algorithm::SlidingLog)
    );
    let days = limit_of("{period: 10d, requests_per_unit: 5}").unwrap();
    assert_eq!(
        limit_of("{period: 10 day, requests_per_unit: 5}")
            .unwrap()
            .period(),
        days.period()
    );
    assert_eq!(days.period(), Duration::from_secs(864_000));
    assert_eq!(days.algorithm_kind(), Algorithm::FixedWindow);

    let billing = limit_of(
        "{unit: month, calendar: true, anchor: 15, utc_offset: 120, requests_per_unit: 10000}",
    )
    .unwrap();
    assert_eq!(billing, Limit::per_month(10_000).anchor(15).utc_offset(120));
    let week = limit_of("{unit: week, calendar: true, requests_per_unit: 3}").unwrap();
    assert_eq!(week.unit(), Some(Unit::Week));

    let debt =
        limit_of("{unit: minute, requests_per_unit: 1000, algorithm: token_bucket, max_debt: 200}")
            .unwrap();
    assert_eq!(debt.debt_bound(), 200);

    let closed = limit_of("{unit: second, requests_per_unit: 1, failure_policy: deny}").unwrap();
    assert_eq!(closed.failure_policy(), Some(FailurePolicy::Deny));

    // A valid concurrency limit is read, and refused: the service cannot release its slots
    // reliably through Envoy.
    let leases = limit_of("{concurrent: 4, lease: 10s}").unwrap_err();
    assert!(
        leases.contains("rate_limit.concurrent") && leases.contains("not served through Envoy"),
        "{leases}"
    );
}

#[test]
fn zero_refuses_everything_and_unlimited_admits_everything() {
    let config = parse(
        "domain: d
descriptors:
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true, requests_per_unit: 25}
",
    )
    .unwrap();
    let action = |key: &str| match config.lookup("d", [(key, "x")]) {
        Lookup::Rule(found) => *found.rule().action(),
        other => panic!("{other:?}"),
    };
    assert_eq!(action("blocked"), Action::Block);
    assert_eq!(action("free"), Action::Unlimited);
}

#[test]
fn invalid_combinations_are_errors_at_their_field() {
    let cases = [
        (
            "{unit: minute, requests_per_unit: 10, burst: 50}",
            "rate_limit.burst",
            "algorithm: token_bucket",
        ),
        (
            "{unit: minute}",
            "rate_limit.requests_per_unit",
            "needs `requests_per_unit`",
        ),
        (
            "{requests_per_unit: 5}",
            "rate_limit.unit",
            "invalid rate limit unit ''",
        ),
        (
            "{unit: minute, period: 30s, requests_per_unit: 5}",
            "rate_limit.period",
            "either `unit`",
        ),
        (
            "{period: 10w, requests_per_unit: 5}",
            "rate_limit.period",
            "unknown period `10w`",
        ),
        (
            "{unit: minute, requests_per_unit: 5, algorithm: gcra}",
            "rate_limit.algorithm",
            "unknown algorithm `gcra`",
        ),
        (
            "{unit: day, calendar: true, requests_per_unit: 5}",
            "rate_limit.calendar",
            "neither",
        ),
        (
            "{unit: year, calendar: true, requests_per_unit: 5}",
            "rate_limit.calendar",
            "no calendar year",
        ),
        (
            "{unit: month, anchor: 3, requests_per_unit: 5}",
            "rate_limit.anchor",
            "calendar: true",
        ),
        (
            "{unit: month, calendar: true, anchor: 32, requests_per_unit: 5}",
            "rate_limit.anchor",
            "got an anchor of 32",
        ),
        (
            "{unit: month, calendar: true, algorithm: token_bucket, requests_per_unit: 5}",
            "rate_limit.algorithm",
            "calendar period",
        ),
        (
            "{unit: second, requests_per_unit: 5, failure_policy: open}",
            "rate_limit.failure_policy",
            "open",
        ),
        (
            "{concurrent: 4, unit: second}",
            "rate_limit.unit",
            "concurrency rule",
        ),
        ("{concurrent: 0}", "rate_limit.concurrent", "concurrency"),
        (
            "{concurrent: 2, max_debt: 1}",
            "rate_limit.concurrent",
            "concurrency",
        ),
        (
            "{unit: second, requests_per_unit: 5, lease: 1s}",
            "rate_limit.lease",
            "concurrent",
        ),
        (
            "{unit: second, requests_per_unit: 0, algorithm: token_bucket}",
            "rate_limit.algorithm",
            "refuses every request",
        ),
        (
            "{unlimited: true, burst: 3}",
            "rate_limit.burst",
            "unlimited rule",
        ),
        (
            "{unit: second, requests_per_unit: -1}",
            "rate_limit.requests_per_unit",
            "out of range",
        ),
        (
            "{unit: second, requests_per_unit: '5'}",
            "rate_limit.requests_per_unit",
            "expected a whole number",
        ),
        (
            "{unit: second, requests_per_unit: 4294967296}",
            "rate_limit.requests_per_unit",
            "out of range",
        ),
        (
            "{unit: second, requests_per_unit: 5, shadow_mode: true}",
            "rate_limit.shadow_mode",
            "belongs in a descriptor",
        ),
        (
            "{unit: second, unit: minute, requests_per_unit: 5}",
            "rate_limit.unit",
            "given twice",
        ),
        (
            "{unit: [second], requests_per_unit: 5}",
            "rate_limit.unit",
            "expected a string",
        ),
        ("[1, 2]", "rate_limit", "must be a map"),
    ];
    for (block, path, message) in cases {
        let err = limit_of(block).expect_err(block);
        assert!(err.starts_with("test.yaml:4:"), "{block}: {err}");
        assert!(
            err.contains(&format!(": descriptors[0].{path}: ")),
            "{block}: wanted {path} in {err}"
        );
        assert!(
            err.contains(message),
            "{block}: wanted {message:?} in {err}"
        );
    }
}

#[test]
fn every_error_of_a_file_is_reported_with_its_line() {
    let errors = parse(
        "domain: d
descriptors:
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: b
    shadow_mode: maybe
    descriptors:
      - key: c
        rate_limit:
          unit: second
          requests_per_unit: 1
          ratelimit: 3
",
    )
    .unwrap_err();
    let places: Vec<(&str, Option<usize>)> = errors
        .errors()
        .iter()
        .map(|e| (e.path(), e.line()))
        .collect();
    assert_eq!(
        places,
        [
            ("descriptors[0].rate_limit.unit", Some(4)),
            ("descriptors[1].shadow_mode", Some(6)),
            (
                "descriptors[1].descriptors[0].rate_limit.ratelimit",
                Some(12)
            ),
        ],
        "{errors}"
    );
}

#[test]
fn yaml_1_1_booleans_and_null_values_read_as_the_references_reader_reads_them() {
    let config = parse(
        "domain: d
descriptors:
  - key: a
    value:
    shadow_mode: yes
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    value: 5
    rate_limit: {unit: second, requests_per_unit: 1}
",
    )
    .unwrap();
    let Lookup::Rule(a) = config.lookup("d", [("a", "anything")]) else {
        panic!()
    };
    assert!(a.rule().shadow_mode());
    assert!(matches!(config.lookup("d", [("b", "5")]), Lookup::Rule(_)));
    assert!(matches!(config.lookup("d", [("b", "6")]), Lookup::NoRule));
}

#[test]
fn more_entries_than_the_rule_is_deep_find_no_rule() {
    let config = parse(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    assert!(matches!(config.lookup("d", [("a", "1")]), Lookup::Rule(_)));
    assert!(matches!(
        config.lookup("d", [("a", "1"), ("b", "2")]),
        Lookup::NoRule
    ));
    // Thousands of entries: the walk stops at the tree's depth.
    let many: Vec<(String, String)> = (0..10_000)
        .map(|i| ("a".to_owned(), i.to_string()))
        .collect();
    let lookup = config.lookup("d", many.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert!(matches!(lookup, Lookup::NoRule));
}

#[test]
fn hostile_files_get_a_bounded_error_or_load() {
    // Descriptors nested deeper than MAX_DEPTH.
    let mut text = String::from("domain: d\ndescriptors:\n");
    for level in 0..=MAX_DEPTH {
        let pad = "  ".repeat(2 * level);
        text += &format!("{pad}  - key: k{level}\n{pad}    descriptors:\n");
    }
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains(&format!("nest more than {MAX_DEPTH} levels")),
        "{err}"
    );

    // Exactly MAX_DEPTH levels load, and the deepest rule is found.
    let mut text = String::from("domain: d\ndescriptors:\n");
    let mut entries = Vec::new();
    for level in 0..MAX_DEPTH {
        let pad = "  ".repeat(2 * level);
        text += &format!("{pad}  - key: k{level}\n");
        if level + 1 == MAX_DEPTH {
            text += &format!("{pad}    rate_limit: {{unit: second, requests_per_unit: 1}}\n");
        } else {
            text += &format!("{pad}    descriptors:\n");
        }
        entries.push((format!("k{level}"), "v".to_owned()));
    }
    let config = parse(&text).unwrap();
    let found = config.lookup("d", entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert!(matches!(found, Lookup::Rule(_)));

    // Deep flow nesting, and a billion laughs: errors, not a crash.
    let deep = format!(
        "domain: d\ndescriptors: {}{}\n",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    assert!(parse(&deep).is_err());
    let mut laughs = String::from("a: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        laughs += &format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n",
            p = i - 1
        );
    }
    assert!(parse(&laughs).is_err());

    // A 100 KB value, in the file and in a request: read, and a bucket of its own.
    let big = "x".repeat(100 * 1024);
    let config = parse(&format!(
        "domain: d\ndescriptors:\n  - key: k\n    value: {big}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n  - key: any\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
    ))
    .unwrap();
    assert!(matches!(
        config.lookup("d", [("k", big.as_str())]),
        Lookup::Rule(_)
    ));
    let other = format!("{big}y");
    let b1 = bucket(&config, &[("any", big.as_str())]).unwrap();
    let b2 = bucket(&config, &[("any", other.as_str())]).unwrap();
    assert_ne!(b1, b2);

    // Thousands of descriptors.
    let mut text = String::from("domain: d\ndescriptors:\n");
    for i in 0..5_000 {
        text += &format!(
            "  - key: k\n    value: v{i}\n    rate_limit: {{unit: minute, requests_per_unit: {}}}\n",
            i + 1
        );
    }
    let config = parse(&text).unwrap();
    let Lookup::Rule(found) = config.lookup("d", [("k", "v4999")]) else {
        panic!()
    };
    assert_eq!(found.rule().requests_per_unit(), 5_000);

    // Not a map, a scalar, binary-ish text.
    for text in ["- a\n- b\n", "just text", "domain: [d]\n", "\u{0}\u{1}"] {
        assert!(parse(text).is_err(), "{text:?}");
    }
}

#[test]
fn a_directory_loads_whole_or_reports_every_error() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write(
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    write("b.yml", "domain: b\n");
    write(".hidden.yaml", "domain: hidden\n");
    write("notes.txt", "domain: [not, yaml, read]\n");
    std::fs::create_dir(dir.path().join("sub.yaml")).unwrap();
    let all = Config::load_dir(dir.path(), &LoadOptions::new()).unwrap();
    assert_eq!(all.domains().collect::<Vec<_>>(), ["a", "b", "hidden"]);
    let visible = Config::load_dir(dir.path(), &LoadOptions::new().ignore_dot_files(true)).unwrap();
    assert_eq!(visible.domains().collect::<Vec<_>>(), ["a", "b"]);

    write("c.yaml", "domain: a\n");
    write("d.yaml", "domain: d\ndescriptors: {}\n");
    let errors = Config::load_dir(dir.path(), &LoadOptions::new()).unwrap_err();
    let files: Vec<String> = errors
        .errors()
        .iter()
        .map(|e| {
            std::path::Path::new(e.file())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(files, ["c.yaml", "d.yaml"], "{errors}");

    let missing = Config::load_dir(&dir.path().join("nowhere"), &LoadOptions::new()).unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("cannot read the configuration directory")
    );
}
