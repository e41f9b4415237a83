//! envoyproxy/ratelimit's own test configurations (tests/data/reference, Apache-2.0), read as
//! its `test/config/config_test.go` reads them, with the outcomes it expects.

use ratelimit_core::Algorithm;
use ratelimit_envoy::config::{
    Action, Config, ConfigErrors, Found, LoadOptions, Lookup, ReferenceUnit,
};
use std::time::Duration;

fn text(name: &str) -> String {
    let path = format!("{}/tests/data/reference/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn load(names: &[&str], options: &LoadOptions) -> Result<Config, ConfigErrors> {
    let sources: Vec<(String, String)> = names.iter().map(|n| ((*n).to_owned(), text(n))).collect();
    Config::from_sources(sources, options)
}

fn config(name: &str) -> Config {
    load(&[name], &LoadOptions::new()).unwrap_or_else(|e| panic!("{name}:\n{e}"))
}

/// The rule found for `entries`, or `None` for no rule.
fn find<'c>(config: &'c Config, domain: &str, entries: &[(&str, &str)]) -> Option<Found<'c>> {
    match config.lookup(domain, entries.iter().copied()) {
        Lookup::Rule(found) => Some(found),
        Lookup::NoRule => None,
        Lookup::UnknownDomain => panic!("unknown domain {domain}"),
        other => panic!("{other:?}"),
    }
}

/// `requests_per_unit` and `unit` of the rule found, checking that its limit is the
/// reference's fixed window of that unit.
fn per_unit(found: &Found<'_>) -> (u32, ReferenceUnit) {
    let rule = found.rule();
    let unit = rule.unit().expect("a unit");
    let Action::Limit(limit) = rule.action() else {
        panic!("a limit: {rule:?}")
    };
    assert_eq!(limit.algorithm_kind(), Algorithm::FixedWindow);
    assert_eq!(limit.period(), Duration::from_secs(unit.seconds()));
    assert_eq!(limit.replenish(), rule.requests_per_unit());
    assert_eq!(limit.burst_capacity(), rule.requests_per_unit());
    (rule.requests_per_unit(), unit)
}

/// The single error of loading `names`, as text.
fn error_of(names: &[&str], options: &LoadOptions) -> String {
    let errors = load(names, options).expect_err("an error");
    assert_eq!(errors.errors().len(), 1, "{errors}");
    errors.errors()[0].to_string()
}

#[test]
fn basic_config() {
    let c = config("basic_config.yaml");
    assert!(!c.is_empty());
    assert!(matches!(c.lookup("foo_domain", []), Lookup::UnknownDomain));
    assert!(matches!(c.lookup("test-domain", []), Lookup::NoRule));
    for none in [
        &[("key1", "something")][..],
        &[("key1", "value1")],
        &[("key2", "value2"), ("subkey", "subvalue")],
        &[("key5", "value5"), ("subkey5", "subvalue")],
        // A whitelisted value: a descriptor without rate_limit nor children.
        &[("key2", "value3")],
    ] {
        assert!(find(&c, "test-domain", none).is_none(), "{none:?}");
    }

    let f = find(
        &c,
        "test-domain",
        &[("key1", "value1"), ("subkey1", "something")],
    )
    .unwrap();
    assert_eq!(per_unit(&f), (5, ReferenceUnit::Second));
    assert_eq!(f.metric_key(), "test-domain.key1_value1.subkey1");
    assert_eq!(f.rule().stats_key(), "test-domain.key1_value1.subkey1");

    let f = find(
        &c,
        "test-domain",
        &[("key1", "value1"), ("subkey1", "subvalue1")],
    )
    .unwrap();
    assert_eq!(per_unit(&f), (10, ReferenceUnit::Second));
    assert_eq!(f.metric_key(), "test-domain.key1_value1.subkey1_subvalue1");

    let f = find(&c, "test-domain", &[("key2", "something")]).unwrap();
    assert_eq!(per_unit(&f), (20, ReferenceUnit::Minute));
    assert_eq!(f.metric_key(), "test-domain.key2");

    let f = find(&c, "test-domain", &[("key2", "value2")]).unwrap();
    assert_eq!(per_unit(&f), (30, ReferenceUnit::Minute));
    assert_eq!(f.metric_key(), "test-domain.key2_value2");

    let f = find(&c, "test-domain", &[("key3", "foo")]).unwrap();
    assert_eq!(per_unit(&f), (1, ReferenceUnit::Hour));
    assert_eq!(f.rule().name(), None);

    let f = find(&c, "test-domain", &[("key4", "foo")]).unwrap();
    assert_eq!(per_unit(&f), (1, ReferenceUnit::Day));
    assert_eq!(f.rule().name(), Some("key4_rate_limit"));

    // key5's own limit applies to it alone; a deeper entry needs a deeper rule.
    let f = find(&c, "test-domain", &[("key5", "value5")]).unwrap();
    assert_eq!(per_unit(&f), (15, ReferenceUnit::Day));
    let f = find(
        &c,
        "test-domain",
        &[("key5", "value5"), ("subkey5", "subvalue5")],
    )
    .unwrap();
    assert_eq!(per_unit(&f), (25, ReferenceUnit::Day));

    let f = find(&c, "test-domain", &[("key6", "foo")]).unwrap();
    assert_eq!(f.rule().action(), &Action::Unlimited);
    assert_eq!(f.rule().limit(), None);

    // detailed_metric: the request's value in the metric's key.
    let f = find(&c, "test-domain", &[("key7", "unspecified_value")]).unwrap();
    assert_eq!(per_unit(&f), (70, ReferenceUnit::Minute));
    assert_eq!(f.metric_key(), "test-domain.key7_unspecified_value");
    let f = find(&c, "test-domain", &[("key7", "another_value")]).unwrap();
    assert_eq!(f.metric_key(), "test-domain.key7_another_value");
}

#[test]
fn domains_merge_only_when_asked_and_never_a_descriptor_twice() {
    let files = ["merge_domain_key1.yaml", "merge_domain_key2.yaml"];
    let merged = load(&files, &LoadOptions::new().merge_domains(true)).unwrap();
    let f = find(&merged, "test-domain", &[("key1", "value1")]).unwrap();
    assert_eq!(per_unit(&f), (10, ReferenceUnit::Minute));
    let f = find(&merged, "test-domain", &[("key2", "value2")]).unwrap();
    assert_eq!(per_unit(&f), (20, ReferenceUnit::Minute));

    assert_eq!(
        error_of(&files, &LoadOptions::new()),
        "merge_domain_key2.yaml: domain: duplicate domain 'test-domain' in config file"
    );
    let twice = ["merge_domain_key1.yaml", "merge_domain_key1.yaml"];
    assert_eq!(
        error_of(&twice, &LoadOptions::new().merge_domains(true)),
        "merge_domain_key1.yaml:5:5: descriptors[0]: duplicate descriptor composite key \
         'test-domain.key1_value1'"
    );
    assert_eq!(
        error_of(
            &["basic_config.yaml", "duplicate_domain.yaml"],
            &LoadOptions::new()
        ),
        "duplicate_domain.yaml: domain: duplicate domain 'test-domain' in config file"
    );
}

#[test]
fn the_invalid_files_fail_with_the_references_message_and_where() {
    let cases = [
        (
            "empty_domain.yaml",
            "empty_domain.yaml:1:1: domain: config file cannot have empty domain",
        ),
        (
            "empty_key.yaml",
            "empty_key.yaml:3:5: descriptors[0]: descriptor has empty key",
        ),
        (
            "duplicate_key.yaml",
            "duplicate_key.yaml:6:5: descriptors[1]: duplicate descriptor composite key \
             'test-domain.key1_value1'",
        ),
        (
            "bad_limit_unit.yaml",
            "bad_limit_unit.yaml:6:13: descriptors[0].rate_limit.unit: invalid rate limit unit \
             'foo'",
        ),
        (
            "replaces_self.yaml",
            "replaces_self.yaml:10:21: descriptors[0].descriptors[0].rate_limit.replaces[0].name: \
             replaces should not contain name of same descriptor",
        ),
        (
            "replaces_empty.yaml",
            "replaces_empty.yaml:10:15: descriptors[0].descriptors[0].rate_limit.replaces[0]: \
             should not have an empty replaces entry",
        ),
        (
            "misspelled_key.yaml",
            "misspelled_key.yaml:5:5: descriptors[0].ratelimit: config error, unknown key \
             'ratelimit'",
        ),
        (
            "misspelled_key2.yaml",
            "misspelled_key2.yaml:7:7: descriptors[0].rate_limit.requestsperunit: config error, \
             unknown key 'requestsperunit'",
        ),
        (
            "non_string_key.yaml",
            "non_string_key.yaml:1:1: 0.25: config error, unknown key '0.25'",
        ),
        (
            "non_map_list.yaml",
            "non_map_list.yaml:3:5: descriptors[0]: config error, yaml file contains list of type \
             other than map: `a`",
        ),
        (
            "unlimited_with_unit.yaml",
            "unlimited_with_unit.yaml:6:13: descriptors[0].rate_limit.unit: should not specify \
             rate limit unit when unlimited",
        ),
        (
            "bad_yaml.yaml",
            "bad_yaml.yaml:1:1: error loading config file: while scanning a quoted scalar, found \
             unexpected end of stream",
        ),
    ];
    for (file, expected) in cases {
        let errors = load(&[file], &LoadOptions::new()).expect_err(file);
        let first = errors.errors()[0].to_string();
        assert!(
            first.starts_with(expected),
            "{file}:\n  got      {first}\n  expected {expected}..."
        );
        assert_eq!(errors.errors()[0].file(), file);
    }
    // Every error of a file, not the first alone: `b`, `c` of the same list too.
    let errors = load(&["non_map_list.yaml"], &LoadOptions::new()).unwrap_err();
    assert_eq!(errors.errors().len(), 3, "{errors}");
    assert_eq!(errors.errors()[2].path(), "descriptors[2]");
}

#[test]
fn shadow_mode() {
    let c = config("shadowmode_config.yaml");
    let shadow = |entries: &[(&str, &str)]| {
        let f = find(&c, "test-domain", entries).unwrap();
        let limit = *f.rule().limit().unwrap();
        assert_eq!(limit.is_shadow(), f.rule().shadow_mode());
        f.rule().shadow_mode()
    };
    assert!(!shadow(&[("key1", "value1"), ("subkey1", "something")]));
    assert!(shadow(&[("key1", "value1"), ("subkey1", "subvalue1")]));
    assert!(shadow(&[("key2", "something")]));
    assert!(!shadow(&[("key2", "value2")]));
}

#[test]
fn wildcards() {
    let c = config("wildcard.yaml");
    let f1 = find(&c, "test-domain", &[("wild", "foo1")]).unwrap();
    let f2 = find(&c, "test-domain", &[("wild", "foo2")]).unwrap();
    assert_eq!(per_unit(&f1), (20, ReferenceUnit::Minute));
    // The statistics roll up under the pattern; the buckets are the values' own.
    assert_eq!(f1.metric_key(), "test-domain.wild_foo*");
    assert_eq!(f2.metric_key(), "test-domain.wild_foo*");
    assert_eq!(f1.bucket().key(), "wild=foo1");
    assert_eq!(f2.bucket().key(), "wild=foo2");
    assert!(find(&c, "test-domain", &[("wild", "bar")]).is_none());
    assert!(find(&c, "test-domain", &[("noWild", "foo1")]).is_none());
    assert!(find(&c, "test-domain", &[("noWild", "foo")]).is_some());
    let v1 = find(&c, "test-domain", &[("noVal", "foo")]).unwrap();
    assert_eq!(v1.metric_key(), "test-domain.noVal");
    assert_eq!(v1.bucket().key(), "noVal=foo");
    for (value, hit) in [
        ("bar123b", true),
        ("barb", true),
        ("bar", false),
        ("bar1c", false),
    ] {
        assert_eq!(
            find(&c, "test-domain", &[("midWild", value)]).is_some(),
            hit,
            "{value}"
        );
    }
    let m = find(&c, "test-domain", &[("multiWild", "foo1bar2baz")]).unwrap();
    assert_eq!(m.metric_key(), "test-domain.multiWild_foo*bar*baz");
    assert!(find(&c, "test-domain", &[("multiWild", "foobaz")]).is_none());
    let n = find(
        &c,
        "test-domain",
        &[("nestedWild", "val1"), ("wild", "goo1")],
    )
    .unwrap();
    assert_eq!(n.metric_key(), "test-domain.nestedWild_val1.wild_goo*");
    assert!(
        find(
            &c,
            "test-domain",
            &[("nestedWild", "val1"), ("wild", "foo1")]
        )
        .is_none()
    );
}

#[test]
fn share_threshold() {
    let c = config("share_threshold.yaml");
    let a = find(&c, "test-domain", &[("files", "files/a.pdf")]).unwrap();
    let b = find(&c, "test-domain", &[("files", "files/b.csv")]).unwrap();
    assert_eq!(a.bucket(), b.bucket());
    assert_eq!(a.bucket().key(), "files~files/*");
    assert_eq!(a.metric_key(), "test-domain.files_files/*");

    // An exact value wins over the wildcard, with its own bucket.
    let exact = find(&c, "test-domain", &[("file", "test1")]).unwrap();
    assert_eq!(exact.rule().requests_per_unit(), 50);
    assert_eq!(exact.metric_key(), "test-domain.file_test1");
    let w1 = find(&c, "test-domain", &[("file", "test2")]).unwrap();
    let w2 = find(&c, "test-domain", &[("file", "testing")]).unwrap();
    assert_eq!(w1.rule().requests_per_unit(), 100);
    assert_eq!(w1.bucket(), w2.bucket());
    assert_ne!(w1.bucket(), exact.bucket());
    // A value written as the pattern shares the pattern's bucket, as in the reference.
    let literal = find(&c, "test-domain", &[("file", "test*")]).unwrap();
    assert_eq!(literal.bucket(), w1.bucket());

    // Nested: both levels' patterns; the metric takes them over value_to_metric and
    // detailed_metric.
    let n = find(
        &c,
        "test-domain",
        &[("files", "top/x"), ("files", "nested/y")],
    )
    .unwrap();
    assert_eq!(n.rule().requests_per_unit(), 300);
    assert_eq!(n.metric_key(), "test-domain.files_top/*.files_nested/*");
    let r = find(&c, "test-domain", &[("route", "api/v1"), ("method", "GET")]).unwrap();
    assert_eq!(r.metric_key(), "test-domain.route_api/*.method");
    let s = find(
        &c,
        "test-domain",
        &[("service", "svc/a"), ("endpoint", "get")],
    )
    .unwrap();
    assert_eq!(s.metric_key(), "test-domain.service_svc/*.endpoint_get");
    let p = find(
        &c,
        "test-domain",
        &[("path", "path/a"), ("file", "file/b"), ("type", "pdf")],
    )
    .unwrap();
    assert_eq!(p.metric_key(), "test-domain.path_path/*.file_file/*.type");
    assert_eq!(p.bucket().key(), "path~path/*&file=file/b&type=pdf");
    let m = find(&c, "test-domain", &[("midpath", "/api/x/v1")]).unwrap();
    assert_eq!(m.metric_key(), "test-domain.midpath_/api*v1");
}

#[test]
fn metadata_is_read() {
    let c = config("metadata.yaml");
    assert!(find(&c, "test-domain", &[("key2", "x")]).is_some());
}
