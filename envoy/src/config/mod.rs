//! envoyproxy/ratelimit's configuration, read as it means it, and the rule each request
//! descriptor falls under.
//!
//! # The file
//!
//! One YAML file per domain, in the reference's format (its README's "Configuration"):
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: remote_address          # a descriptor without value: each address its own bucket
//!     rate_limit: { unit: minute, requests_per_unit: 60 }
//!   - key: path
//!     value: /api/*                # a wildcard: `*` stands for any run of characters
//!     rate_limit: { unit: second, requests_per_unit: 10, name: api }
//!     shadow_mode: true
//!   - key: path
//!     value: /health               # no rate_limit and no descriptors: never limited
//! ```
//!
//! Everything the reference accepts means what it meant there: `unit` is a fixed window of
//! that length aligned on the Unix epoch (a `month` is 30 days and a `year` 365, as there),
//! `requests_per_unit: 0` refuses every request, `unlimited: true` admits every one, `name`
//! and `replaces`, `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`,
//! `share_threshold` and `metadata` are read (the last is checked to be a map and not kept).
//! Unknown keys are errors, and so is a key in the wrong block (`shadow_mode` inside
//! `rate_limit`), which the reference ignores silently.
//!
//! # Extensions
//!
//! What the reference cannot say is said in the same `rate_limit` block, under this
//! library's names; each rule becomes one [`Limit`](ratelimit_core::Limit), built by its
//! checked constructors (a combination it refuses is an error naming the field):
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `algorithm` | `fixed_window` (default), `token_bucket` (GCRA), `sliding_window`, `sliding_log`, `leaky_bucket` | how the rule counts ([`Algorithm`](ratelimit_core::Algorithm)) |
//! | `burst` | integer ≥ 1 | a token or leaky bucket's capacity (default `requests_per_unit`) |
//! | `period` | `30s`, `500ms`, `90m`, `36h`, `10d`, or `10 day`, `36 hour` | any window length, instead of `unit` |
//! | `calendar` | `true` | `unit: week` is a calendar week (from Monday) and `unit: month` a calendar month, instead of 7 and 30 days |
//! | `anchor` | 1..31 (month), 1..7 (week) | with `calendar`: the day the period starts (a billing day) |
//! | `utc_offset` | minutes, -840..840 | with `calendar`: the clock the period starts on |
//! | `max_debt` | integer ≥ 0 | the most a settled charge may leave the bucket owing ([`Limit::max_debt`](ratelimit_core::Limit::max_debt)) |
//! | `concurrent` | integer ≥ 1 | a concurrency limit: read and checked, then refused, since the service cannot release a slot reliably through Envoy (docs/envoy.md) |
//! | `lease` | `30s` (1 ms to a day) | with `concurrent`: how long a slot is held without renewal |
//! | `failure_policy` | `fallback`, `allow`, `deny` | what to do when Redis fails ([`FailurePolicy`](ratelimit_core::FailurePolicy)) |
//! | `shared` | a limit's name | draw from the bucket a Rust service's `#[rate_limit(name = ..)]` uses (see [`Bucket`]) |
//!
//! # Matching
//!
//! [`Config::lookup`] walks a request's descriptor as the reference's `GetLimit` does and
//! answers the rule with the bucket to decide it in.

mod bucket;
mod error;
mod load;
mod parse;
mod rule;
mod tree;

use std::collections::BTreeMap;

pub use error::{ConfigError, ConfigErrors};
pub use load::MAX_FILE_BYTES;
pub use rule::{Action, ReferenceUnit, Rule, UnknownReferenceUnit};

/// How deep descriptors may nest in a file: Envoy builds a descriptor from one entry per
/// rate-limit action, and a route rarely has more than a handful. Deeper is an error, which
/// bounds the configuration's tree and so every lookup.
pub const MAX_DEPTH: usize = 16;

/// How a set of files is read.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Whether several files may define one domain, their descriptors merged
    /// (`MERGE_DOMAIN_CONFIG`); a descriptor defined in two of them is still an error.
    pub merge_domains: bool,
    /// Whether files whose name starts with a dot are skipped (`RUNTIME_IGNOREDOTFILES`).
    pub ignore_dot_files: bool,
}

impl LoadOptions {
    /// The reference's defaults: a domain in one file only, dot files read.
    pub fn new() -> LoadOptions {
        LoadOptions::default()
    }

    /// The same options with `merge_domains`.
    #[must_use]
    pub fn merge_domains(mut self, merge: bool) -> LoadOptions {
        self.merge_domains = merge;
        self
    }

    /// The same options with `ignore_dot_files`.
    #[must_use]
    pub fn ignore_dot_files(mut self, ignore: bool) -> LoadOptions {
        self.ignore_dot_files = ignore;
        self
    }
}

/// A whole configuration: every domain's rules. Built at once from every file, or not at all
/// ([`ConfigErrors`]), so a service swaps it whole and keeps the one it had when a new one
/// fails.
///
/// ```
/// use ratelimit_envoy::config::{Action, Config, Lookup};
///
/// let config = Config::parse("edge.yaml", "
/// domain: edge
/// descriptors:
///   - key: remote_address
///     rate_limit:
///       unit: minute
///       requests_per_unit: 60
/// ")?;
/// let Lookup::Rule(found) = config.lookup("edge", [("remote_address", "10.0.0.1")]) else {
///     panic!("a rule applies");
/// };
/// let Action::Limit(limit) = found.rule().action() else { panic!("a limit") };
/// assert_eq!(limit.replenish(), 60);
/// assert_eq!(found.bucket().name(), "envoy:edge");
/// assert_eq!(found.bucket().key(), "remote_address=10.0.0.1");
/// assert!(matches!(config.lookup("edge", [("path", "/")]), Lookup::NoRule));
/// assert!(matches!(config.lookup("other", [("remote_address", "x")]), Lookup::UnknownDomain));
/// # Ok::<(), ratelimit_envoy::config::ConfigErrors>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Config {
    domains: BTreeMap<String, tree::Tree>,
}

impl Config {
    /// Reads one file's text; `file` names it in errors.
    ///
    /// # Errors
    /// Every error in the file.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigErrors> {
        Config::from_sources([(file, text)], &LoadOptions::default())
    }

    /// Reads several files, each `(name, text)`, into one configuration: every file is read
    /// and every error reported, in the order given.
    ///
    /// # Errors
    /// Every error of every file, and each domain defined twice (unless
    /// [`LoadOptions::merge_domains`]).
    pub fn from_sources<N: AsRef<str>, T: AsRef<str>>(
        sources: impl IntoIterator<Item = (N, T)>,
        options: &LoadOptions,
    ) -> Result<Config, ConfigErrors> {
        let mut config = Config::default();
        let mut errors = Vec::new();
        for (file, text) in sources {
            config.add(file.as_ref(), text.as_ref(), options, &mut errors);
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors::new(errors))
        }
    }

    fn add(
        &mut self,
        file: &str,
        text: &str,
        options: &LoadOptions,
        errors: &mut Vec<ConfigError>,
    ) {
        let doc = match parse::parse(file, text) {
            Ok(doc) => doc,
            Err(mut e) => {
                errors.append(&mut e);
                return;
            }
        };
        let tree = match self.domains.get_mut(&doc.domain) {
            Some(_) if !options.merge_domains => {
                errors.push(ConfigError::new(
                    file,
                    "domain",
                    None,
                    format!("duplicate domain '{}' in config file", doc.domain),
                ));
                return;
            }
            Some(tree) => tree,
            None => self.domains.entry(doc.domain.clone()).or_default(),
        };
        tree.add(file, doc.descriptors, errors);
    }

    /// The rule that applies to one of a request's descriptors (its entries in order, as
    /// Envoy sends `RateLimitDescriptor.entries`) in `domain`, found as the reference's
    /// `GetLimit` finds it: entry by entry from the top of the domain, each entry's
    /// descriptor found by its exact value first, then by the first wildcard (in file order)
    /// its value matches, then by its key alone; the rule is the one of the descriptor the
    /// last entry reaches, if every entry reached one and that descriptor has a `rate_limit`.
    /// A request with more entries than the configuration is deep, or none, has no rule.
    pub fn lookup<'c, 'e>(
        &'c self,
        domain: &str,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
    ) -> Lookup<'c> {
        let Some(tree) = self.domains.get(domain) else {
            return Lookup::UnknownDomain;
        };
        match tree.find(domain, entries) {
            Some(found) => Lookup::Rule(found),
            None => Lookup::NoRule,
        }
    }

    /// The domains, in order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// What Envoy's per-descriptor `limit` override (`RateLimitDescriptor.limit`: a
    /// `requests_per_unit` and a `unit`) makes of a descriptor with `entries` in `domain`, as
    /// the reference's `GetLimit` does: in a domain of the configuration, whatever its rules,
    /// a fixed window of `requests_per_unit` per `unit` with no name, shadow mode or
    /// `replaces` (`requests_per_unit: 0` refuses, as in a file); `None` in an unknown domain
    /// (no limit, as the reference). Its statistics key is `domain.key_value...`, every entry
    /// with its value. Its bucket is the descriptor's own key as a rule of the domain would
    /// have it, followed by `~limit=<unit>`: one bucket per unit (overrides of one unit and
    /// different sizes share it, as the reference's counter), never a configured rule's.
    pub fn override_of<'e>(
        &self,
        domain: &str,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
        requests_per_unit: u32,
        unit: ReferenceUnit,
    ) -> Option<(Rule, Bucket)> {
        if !self.domains.contains_key(domain) {
            return None;
        }
        let mut stats_key = String::from(domain);
        let mut key = String::new();
        for (i, (k, v)) in entries.into_iter().enumerate() {
            stats_key.push('.');
            stats_key.push_str(k);
            if !v.is_empty() {
                stats_key.push('_');
                stats_key.push_str(v);
            }
            if i > 0 {
                key.push('&');
            }
            bucket::escape_into(&mut key, k);
            key.push('=');
            bucket::escape_into(&mut key, v);
        }
        key.push_str("~limit=");
        key.push_str(unit.as_str());
        let rule = Rule::overriding(requests_per_unit, unit, stats_key);
        let bucket = Bucket {
            name: bucket::name_of(domain),
            key,
        };
        Some((rule, bucket))
    }

    /// Whether no file defined a domain (the reference's `IsEmptyDomains`).
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Every rule of `domain`, for a dump of the configuration (the debug endpoint).
    pub fn rules<'c>(&'c self, domain: &str) -> impl Iterator<Item = &'c Rule> + 'c {
        self.domains
            .get(domain)
            .into_iter()
            .flat_map(tree::Tree::rules)
    }
}

/// What applies to one request descriptor.
#[derive(Debug)]
#[non_exhaustive]
pub enum Lookup<'c> {
    /// The configuration has no such domain (the reference counts `domain_not_found`).
    UnknownDomain,
    /// The domain has no rule for this descriptor: it is not limited.
    NoRule,
    /// This rule applies.
    Rule(Found<'c>),
}

/// A rule found for a request descriptor, with where to decide it.
#[derive(Debug, Clone)]
pub struct Found<'c> {
    pub(crate) rule: &'c Rule,
    pub(crate) bucket: Bucket,
    pub(crate) metric_key: String,
}

impl<'c> Found<'c> {
    /// The rule.
    pub fn rule(&self) -> &'c Rule {
        self.rule
    }

    /// The bucket this descriptor is decided in.
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// The descriptor's key in the reference's statistics (`domain.key_value.key`): the
    /// rule's [`stats_key`](Rule::stats_key), with the request's values where the rule asks
    /// for them (`detailed_metric`, `value_to_metric`), and a shared wildcard's pattern
    /// (`share_threshold`).
    pub fn metric_key(&self) -> &str {
        &self.metric_key
    }
}

/// The bucket a request descriptor is decided in: a limit name and a key, as
/// [`RateLimiter::check_named`](ratelimit_core::RateLimiter::check_named) takes them (and
/// [`RateLimiter::named_bucket_key`](ratelimit_core::RateLimiter::named_bucket_key) names
/// its store key).
///
/// - A domain's own rule: the name is `envoy:` and the domain, and the key every entry of the
///   descriptor, in order, as `key=value` joined by `&`, with `%`, `&`, `=` and `~` in keys
///   and values percent-escaped: two different descriptors never share a bucket, whatever
///   their values hold. As in the reference, a descriptor without value in the file (and a
///   wildcard) keys by the request's value, so each value has its own bucket; a wildcard with
///   `share_threshold` writes its pattern instead, as `key~pattern`, so that every value it
///   matches shares one bucket (and none meets a value written like the pattern).
/// - A `shared: name` rule: the name is that name, and the key the value of the
///   descriptor's last entry (a shared wildcard's pattern), unescaped: the key a Rust
///   service's resolver gives for the same request (`Ip` for Envoy's `remote_address`,
///   `Header(..)` for `request_headers`), so that the edge and `#[rate_limit(shared = ..)]`
///   draw from one bucket. A `shared` name is chosen to be shared: rules with one name share
///   their buckets across descriptors and domains.
///
/// The limiter escapes the name and the key again, and digests long ones, when it writes the
/// store key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bucket {
    pub(crate) name: String,
    pub(crate) key: String,
}

impl Bucket {
    /// The limit's name, for `check_named`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key, for `check_named`.
    pub fn key(&self) -> &str {
        &self.key
    }
}
