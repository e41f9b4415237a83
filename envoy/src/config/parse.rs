//! Reading one file: the YAML tree walked into descriptors and rules, every error with its
//! path and line, as many errors as the file has (a bad block is skipped, the rest read).

use std::str::FromStr;
use std::time::Duration;

use ratelimit_core::error::InvalidLimit;
use ratelimit_core::{Algorithm, FailurePolicy, Limit, Refill, Unit};

use super::MAX_DEPTH;
use super::error::ConfigError;
use super::rule::{Action, ReferenceUnit, Rule};
use crate::yaml::{self, Node, Pos, Value};

/// The keys of the document's root.
const ROOT_KEYS: &[&str] = &["domain", "descriptors"];

/// The keys of a descriptor, all the reference's.
const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// The keys of a `rate_limit` block: the reference's, then this library's extensions.
const RATE_LIMIT_KEYS: &[&str] = &[
    "requests_per_unit",
    "unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "period",
    "calendar",
    "anchor",
    "utc_offset",
    "max_debt",
    "concurrent",
    "lease",
    "failure_policy",
    "shared",
];

/// The extensions: what an unlimited rule cannot take.
const EXTENSION_KEYS: &[&str] = &[
    "algorithm",
    "burst",
    "period",
    "calendar",
    "anchor",
    "utc_offset",
    "max_debt",
    "concurrent",
    "lease",
    "failure_policy",
    "shared",
];

/// How to write a `period`, for messages.
const PERIOD_SYNTAX: &str = "a period is a whole number and `ms`, `s`, `m`, `h` or `d` (`30s`, \
     `500ms`, `90m`, `36h`, `10d`), or a count and a unit of fixed length (`10 day`, `36 hour`)";

/// A file read: its domain and its descriptors, not yet merged into a configuration.
#[derive(Debug)]
pub(crate) struct Doc {
    pub(crate) domain: String,
    pub(crate) descriptors: Vec<Descriptor>,
}

/// A descriptor as written.
#[derive(Debug)]
pub(crate) struct Descriptor {
    pub(crate) key: String,
    /// `None` for a descriptor without a value (or with an empty one, as the reference reads
    /// it): it matches any value.
    pub(crate) value: Option<String>,
    pub(crate) rule: Option<Rule>,
    pub(crate) children: Vec<Descriptor>,
    pub(crate) share_threshold: bool,
    pub(crate) value_to_metric: bool,
    /// Its path in the document and where it starts, for the errors found when it is merged.
    pub(crate) path: String,
    pub(crate) at: Pos,
    /// The reference's composite key, `domain.key_value.key`, for its messages.
    pub(crate) composite: String,
}

/// Reads `text`, the file `file`: its document, or every error found in it.
pub(crate) fn parse(file: &str, text: &str) -> Result<Doc, Vec<ConfigError>> {
    let mut reader = Reader {
        file,
        errors: Vec::new(),
    };
    let doc = match yaml::parse(text) {
        Ok(root) => reader.root(root.as_ref()),
        Err(e) => {
            reader.errors.push(ConfigError::new(
                file,
                "",
                e.at,
                format!("error loading config file: {}", e.message),
            ));
            None
        }
    };
    match doc {
        Some(doc) if reader.errors.is_empty() => Ok(doc),
        _ => Err(reader.errors),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A map's entries by their (string) keys.
type Fields<'n> = Vec<(&'n str, &'n Node)>;

fn field<'n>(fields: &Fields<'n>, name: &str) -> Option<&'n Node> {
    fields.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

struct Reader<'a> {
    file: &'a str,
    errors: Vec<ConfigError>,
}

impl Reader<'_> {
    fn error(&mut self, path: &str, at: Pos, message: impl Into<String>) {
        self.errors
            .push(ConfigError::new(self.file, path, Some(at), message));
    }

    /// `node` as a map with string keys among `allowed`, each at most once; null is an empty
    /// map. Unknown and repeated keys are errors (the rest is still returned).
    fn map<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        allowed: &[&str],
        what: &str,
    ) -> Option<Fields<'n>> {
        if node.is_null() {
            return Some(Vec::new());
        }
        let Value::Map(entries) = &node.value else {
            self.error(
                path,
                node.at,
                format!("{what} must be a map, found {}", describe(node)),
            );
            return None;
        };
        let mut fields: Fields<'n> = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let Value::Scalar { text, .. } = &key.value else {
                self.error(
                    path,
                    key.at,
                    format!(
                        "config error, key is not of type string: found {}",
                        key.kind()
                    ),
                );
                continue;
            };
            let name = text.as_str();
            if !allowed.contains(&name) {
                let message = unknown_key(name, allowed, what);
                self.error(&join(path, name), key.at, message);
                continue;
            }
            if fields.iter().any(|(k, _)| *k == name) {
                self.error(
                    &join(path, name),
                    key.at,
                    format!("`{name}` is given twice in one {what}"),
                );
                continue;
            }
            fields.push((name, value));
        }
        Some(fields)
    }

    /// A string; `None` for null or absent. A plain number or boolean is read as written, as
    /// the reference's YAML reader reads it into a string.
    fn string(&mut self, node: Option<&Node>, path: &str) -> Option<String> {
        let node = node?;
        if node.is_null() {
            return None;
        }
        match &node.value {
            Value::Scalar { text, .. } => Some(text.clone()),
            _ => {
                self.error(
                    path,
                    node.at,
                    format!("expected a string, found {}", node.kind()),
                );
                None
            }
        }
    }

    /// A boolean as YAML 1.1 (the reference's reader) spells it: `true`, `yes`, `on`, `y` in
    /// their usual cases, and their opposites; null or absent is false.
    fn boolean(&mut self, node: Option<&Node>, path: &str) -> bool {
        let Some(node) = node else { return false };
        if node.is_null() {
            return false;
        }
        if let Value::Scalar { text, plain: true } = &node.value {
            match text.as_str() {
                "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y"
                | "Y" => return true,
                "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n"
                | "N" => return false,
                _ => {}
            }
        }
        self.error(
            path,
            node.at,
            format!("expected true or false, found {}", describe(node)),
        );
        false
    }

    /// A whole number, unquoted; `None` for null or absent (and after an error).
    fn integer<T: TryFrom<i64>>(
        &mut self,
        node: Option<&Node>,
        path: &str,
        range: &str,
    ) -> Option<T> {
        let node = node?;
        if node.is_null() {
            return None;
        }
        if let Value::Scalar { text, plain: true } = &node.value {
            let digits = text.strip_prefix('+').unwrap_or(text);
            if let Ok(n) = digits.parse::<i64>() {
                if let Ok(n) = T::try_from(n) {
                    return Some(n);
                }
                self.error(
                    path,
                    node.at,
                    format!("{n} is out of range: expected {range}"),
                );
                return None;
            }
        }
        self.error(
            path,
            node.at,
            format!("expected {range}, found {}", describe(node)),
        );
        None
    }

    fn root(&mut self, root: Option<&Node>) -> Option<Doc> {
        let Some(root) = root else {
            // An empty file: the reference reads it as a document without a domain.
            self.errors.push(ConfigError::new(
                self.file,
                "",
                None,
                "config file cannot have empty domain",
            ));
            return None;
        };
        let fields = self.map(root, "", ROOT_KEYS, "the document")?;
        let domain = self.string(field(&fields, "domain"), "domain");
        let Some(domain) = domain.filter(|d| !d.is_empty()) else {
            let at = field(&fields, "domain").map_or(root.at, |n| n.at);
            self.error("domain", at, "config file cannot have empty domain");
            return None;
        };
        let descriptors = match field(&fields, "descriptors") {
            Some(list) => self.descriptors(list, "descriptors", &format!("{domain}."), 1),
            None => Vec::new(),
        };
        Some(Doc {
            domain,
            descriptors,
        })
    }

    fn descriptors(
        &mut self,
        list: &Node,
        path: &str,
        parent_key: &str,
        depth: usize,
    ) -> Vec<Descriptor> {
        if list.is_null() {
            return Vec::new();
        }
        let Value::Seq(items) = &list.value else {
            self.error(
                path,
                list.at,
                format!("`descriptors` must be a list, found {}", describe(list)),
            );
            return Vec::new();
        };
        if depth > MAX_DEPTH {
            self.error(
                path,
                list.at,
                format!("descriptors nest more than {MAX_DEPTH} levels deep"),
            );
            return Vec::new();
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("{path}[{i}]");
            if let Some(d) = self.descriptor(item, &path, parent_key, depth) {
                out.push(d);
            }
        }
        out
    }

    fn descriptor(
        &mut self,
        node: &Node,
        path: &str,
        parent_key: &str,
        depth: usize,
    ) -> Option<Descriptor> {
        if !matches!(node.value, Value::Map(_)) {
            self.error(
                path,
                node.at,
                format!(
                    "config error, yaml file contains list of type other than map: {}",
                    describe(node)
                ),
            );
            return None;
        }
        let fields = self.map(node, path, DESCRIPTOR_KEYS, "descriptor")?;
        let key = self.string(field(&fields, "key"), &join(path, "key"));
        let value = self
            .string(field(&fields, "value"), &join(path, "value"))
            .filter(|v| !v.is_empty());
        let shadow_mode = self.boolean(field(&fields, "shadow_mode"), &join(path, "shadow_mode"));
        let quota_mode = self.boolean(field(&fields, "quota_mode"), &join(path, "quota_mode"));
        let detailed_metric = self.boolean(
            field(&fields, "detailed_metric"),
            &join(path, "detailed_metric"),
        );
        let value_to_metric = self.boolean(
            field(&fields, "value_to_metric"),
            &join(path, "value_to_metric"),
        );
        let share_threshold = self.boolean(
            field(&fields, "share_threshold"),
            &join(path, "share_threshold"),
        );
        if let Some(metadata) = field(&fields, "metadata")
            && !metadata.is_null()
            && !matches!(metadata.value, Value::Map(_))
        {
            self.error(
                &join(path, "metadata"),
                metadata.at,
                format!(
                    "error parsing metadata: expected a map, found {}",
                    describe(metadata)
                ),
            );
        }
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            self.error(path, node.at, "descriptor has empty key");
            return None;
        };
        let composite = match &value {
            Some(v) => format!("{parent_key}{key}_{v}"),
            None => format!("{parent_key}{key}"),
        };
        if share_threshold && !value.as_deref().is_some_and(|v| v.contains('*')) {
            self.error(
                &join(path, "share_threshold"),
                field(&fields, "share_threshold").map_or(node.at, |n| n.at),
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), \
                     but found key '{}'",
                    composite.strip_prefix(parent_key).unwrap_or(&composite)
                ),
            );
        }
        let rule = match field(&fields, "rate_limit") {
            Some(block) if !block.is_null() => self.rate_limit(
                block,
                &join(path, "rate_limit"),
                Flags {
                    shadow_mode,
                    quota_mode,
                    detailed_metric,
                },
                &composite,
            ),
            _ => None,
        };
        let children = match field(&fields, "descriptors") {
            Some(list) => self.descriptors(
                list,
                &join(path, "descriptors"),
                &format!("{composite}."),
                depth + 1,
            ),
            None => Vec::new(),
        };
        Some(Descriptor {
            key,
            value,
            rule,
            children,
            share_threshold,
            value_to_metric,
            path: path.to_owned(),
            at: node.at,
            composite,
        })
    }

    fn rate_limit(
        &mut self,
        block: &Node,
        path: &str,
        flags: Flags,
        stats_key: &str,
    ) -> Option<Rule> {
        let fields = self.map(block, path, RATE_LIMIT_KEYS, "rate_limit")?;
        let at = |name: &str| field(&fields, name).map_or(block.at, |n| n.at);
        let has = |name: &str| field(&fields, name).is_some_and(|n| !n.is_null());
        let p = |name: &str| join(path, name);
        let errors_before = self.errors.len();

        let requests_per_unit: Option<u32> = self.integer(
            field(&fields, "requests_per_unit"),
            &p("requests_per_unit"),
            "a whole number from 0 to 4294967295",
        );
        let unit_text = self.string(field(&fields, "unit"), &p("unit"));
        let unit = match unit_text.as_deref() {
            Some(text) => match ReferenceUnit::from_str(text) {
                Ok(unit) => Some(unit),
                Err(e) => {
                    self.error(&p("unit"), at("unit"), e.to_string());
                    None
                }
            },
            None => None,
        };
        let unlimited = self.boolean(field(&fields, "unlimited"), &p("unlimited"));
        let name = self.string(field(&fields, "name"), &p("name"));
        let replaces = self.replaces(field(&fields, "replaces"), &p("replaces"), name.as_deref());

        // The extensions, each read and checked alone.
        let algorithm = match self.string(field(&fields, "algorithm"), &p("algorithm")) {
            Some(text) => match Algorithm::from_str(&text) {
                Ok(a) => Some(a),
                Err(e) => {
                    self.error(&p("algorithm"), at("algorithm"), e.to_string());
                    None
                }
            },
            None => None,
        };
        let burst: Option<u32> = self.integer(
            field(&fields, "burst"),
            &p("burst"),
            "a whole number from 1 to 4294967295",
        );
        let period = match self.string(field(&fields, "period"), &p("period")) {
            Some(text) => match parse_period(&text) {
                Ok(period) => Some(period),
                Err(message) => {
                    self.error(&p("period"), at("period"), message);
                    None
                }
            },
            None => None,
        };
        let calendar = self.boolean(field(&fields, "calendar"), &p("calendar"));
        let anchor: Option<u8> =
            self.integer(field(&fields, "anchor"), &p("anchor"), "a day from 1 to 31");
        let utc_offset: Option<i32> = self.integer(
            field(&fields, "utc_offset"),
            &p("utc_offset"),
            "minutes east of UTC, from -840 to 840",
        );
        let max_debt: Option<u32> = self.integer(
            field(&fields, "max_debt"),
            &p("max_debt"),
            "a whole number of tokens from 0 to 4294967295",
        );
        let concurrent: Option<u32> = self.integer(
            field(&fields, "concurrent"),
            &p("concurrent"),
            "a number of requests in flight from 1",
        );
        let lease = match self.string(field(&fields, "lease"), &p("lease")) {
            Some(text) => match ratelimit_vocab::parse_lease(&text) {
                Ok(us) => Some(Duration::from_micros(us)),
                Err(message) => {
                    self.error(&p("lease"), at("lease"), message);
                    None
                }
            },
            None => None,
        };
        let failure_policy =
            match self.string(field(&fields, "failure_policy"), &p("failure_policy")) {
                Some(text) => match FailurePolicy::from_str(&text) {
                    Ok(policy) => Some(policy),
                    Err(e) => {
                        self.error(&p("failure_policy"), at("failure_policy"), e.to_string());
                        None
                    }
                },
                None => None,
            };
        let shared = self.string(field(&fields, "shared"), &p("shared"));
        if let Some(shared) = &shared
            && ratelimit_vocab::check_name(shared).is_err()
        {
            self.error(
                &p("shared"),
                at("shared"),
                "`shared` names a limit: it must not be blank",
            );
        } else if let Some(shared) = &shared
            && shared.starts_with(super::bucket::NAME_PREFIX)
        {
            self.error(
                &p("shared"),
                at("shared"),
                format!(
                    "names starting with `{}` are the service's own buckets (one per domain); \
                     name the shared limit as the Rust service does",
                    super::bucket::NAME_PREFIX
                ),
            );
        }
        if self.errors.len() > errors_before {
            return None;
        }

        let rule = |action: Action, requests_per_unit: u32, unit: Option<ReferenceUnit>| Rule {
            action,
            name: name.clone(),
            requests_per_unit,
            unit,
            replaces: replaces.clone(),
            shadow_mode: flags.shadow_mode,
            quota_mode: flags.quota_mode,
            detailed_metric: flags.detailed_metric,
            shared: shared.clone(),
            stats_key: stats_key.to_owned(),
        };

        if unlimited {
            if unit.is_some() {
                self.error(
                    &p("unit"),
                    at("unit"),
                    "should not specify rate limit unit when unlimited",
                );
            }
            for ext in EXTENSION_KEYS.iter().filter(|k| has(k)) {
                self.error(
                    &p(ext),
                    at(ext),
                    format!("an unlimited rule takes no `{ext}`"),
                );
            }
            return (self.errors.len() == errors_before)
                .then(|| rule(Action::Unlimited, requests_per_unit.unwrap_or(0), None));
        }

        let build = |limit: Result<Limit, InvalidLimit>| {
            limit
                .and_then(|l| match max_debt {
                    Some(tokens) => l.try_max_debt(tokens),
                    None => Ok(l),
                })
                .map(|l| {
                    l.with_failure_policy(failure_policy)
                        .with_shadow(flags.shadow_mode)
                })
        };

        if let Some(max) = concurrent {
            for other in [
                "unit",
                "period",
                "requests_per_unit",
                "algorithm",
                "burst",
                "calendar",
                "anchor",
                "utc_offset",
            ] {
                if has(other) {
                    self.error(
                        &p(other),
                        at(other),
                        format!(
                            "a concurrency rule (`concurrent`) takes no `{other}`: it bounds the \
                             requests in flight, not a rate (write a rate in a rule of its own)"
                        ),
                    );
                }
            }
            if self.errors.len() > errors_before {
                return None;
            }
            let limit = build(Limit::try_concurrent(max).and_then(|l| match lease {
                Some(lease) => l.try_lease(lease),
                None => Ok(l),
            }));
            return match limit {
                // A valid concurrency limit, which the service cannot hold through Envoy: its
                // slot would be released by the stream-done call, which Envoy does not wait
                // for and does not always make (docs/envoy.md). Said here, with its place,
                // rather than answered UNAVAILABLE on every request.
                Ok(_) => {
                    self.error(
                        &p("concurrent"),
                        at("concurrent"),
                        "concurrency limits are not served through Envoy: a slot would be \
                         released by the call Envoy makes when the stream ends, which it does \
                         not wait for and does not always make, so a lost release would hold \
                         the slot until its lease ends (see docs/envoy.md)",
                    );
                    None
                }
                Err(e) => {
                    self.invalid(&e, path, block.at, &fields, false);
                    None
                }
            };
        }
        if has("lease") {
            self.error(
                &p("lease"),
                at("lease"),
                "`lease` is a concurrency rule's: it goes with `concurrent`",
            );
        }

        // How long the window is: a unit, or a period.
        let length = match (unit, period) {
            (Some(_), Some(_)) => {
                self.error(
                    &p("period"),
                    at("period"),
                    "write either `unit` (the reference's) or `period` (any length), not both",
                );
                None
            }
            (Some(unit), None) => Some(Length::Unit(unit)),
            (None, Some(period)) => Some(Length::Period(period)),
            (None, None) => {
                let written = unit_text.unwrap_or_default();
                self.error(
                    &p("unit"),
                    at("unit"),
                    format!(
                        "invalid rate limit unit '{written}'; a rate limit needs a `unit` (second, \
                         minute, hour, day, week, month or year), or a `period`, or `unlimited: \
                         true`"
                    ),
                );
                None
            }
        };
        let Some(requests_per_unit) = requests_per_unit else {
            self.error(
                &p("requests_per_unit"),
                at("requests_per_unit"),
                "a rate limit needs `requests_per_unit` (0 refuses every request)",
            );
            return None;
        };
        let length = length?;
        if self.errors.len() > errors_before {
            return None;
        }

        if requests_per_unit == 0 {
            let extras: Vec<&str> = EXTENSION_KEYS
                .iter()
                .copied()
                .filter(|k| has(k) && !matches!(*k, "shared" | "period"))
                .collect();
            for ext in &extras {
                self.error(
                    &p(ext),
                    at(ext),
                    format!("`requests_per_unit: 0` refuses every request; it takes no `{ext}`"),
                );
            }
            return extras.is_empty().then(|| rule(Action::Block, 0, unit));
        }

        let algorithm_given = algorithm.is_some();
        let algorithm = algorithm.unwrap_or(Algorithm::FixedWindow);
        let burst = burst.unwrap_or(requests_per_unit);
        let limit = if calendar {
            let calendar_unit = match length {
                Length::Unit(ReferenceUnit::Week) => Some(Unit::Week),
                Length::Unit(ReferenceUnit::Month) => Some(Unit::Month),
                _ => None,
            };
            let Some(calendar_unit) = calendar_unit else {
                self.error(
                    &p("calendar"),
                    at("calendar"),
                    "`calendar: true` makes `unit: week` a calendar week and `unit: month` a \
                     calendar month; this rule's unit is neither (ratelimit-core has no calendar \
                     year)",
                );
                return None;
            };
            Limit::from_unit(
                requests_per_unit,
                burst,
                calendar_unit,
                algorithm,
                Refill::Smooth,
                None,
            )
            .and_then(|l| match anchor {
                Some(anchor) => l.try_anchor(anchor),
                None => Ok(l),
            })
            .and_then(|l| match utc_offset {
                Some(minutes) => l.try_utc_offset(minutes),
                None => Ok(l),
            })
        } else {
            for name in ["anchor", "utc_offset"] {
                if has(name) {
                    self.error(
                        &p(name),
                        at(name),
                        format!(
                            "`{name}` places a calendar period's windows: add `calendar: true` \
                             (with `unit: week` or `unit: month`)"
                        ),
                    );
                }
            }
            if self.errors.len() > errors_before {
                return None;
            }
            let period = match length {
                Length::Unit(unit) => Duration::from_secs(unit.seconds()),
                Length::Period(period) => period,
            };
            Limit::from_parts(
                requests_per_unit,
                burst,
                period,
                algorithm,
                Refill::Smooth,
                None,
            )
        };
        match build(limit) {
            Ok(limit) => Some(rule(
                Action::Limit(limit),
                requests_per_unit,
                match length {
                    Length::Unit(unit) => Some(unit),
                    Length::Period(_) => None,
                },
            )),
            Err(e) => {
                self.invalid(&e, path, block.at, &fields, !algorithm_given);
                None
            }
        }
    }

    /// Reports a limit ratelimit-core refuses, at the field it names that the rule wrote.
    fn invalid(
        &mut self,
        e: &InvalidLimit,
        path: &str,
        at: Pos,
        fields: &Fields<'_>,
        default_algorithm: bool,
    ) {
        let ours = |core: &str| -> &'static [&'static str] {
            match core {
                "replenish" => &["requests_per_unit"],
                "unit" => &["unit", "period", "anchor", "utc_offset"],
                "burst" => &["burst"],
                "algorithm" => &["algorithm"],
                "concurrent" => &["concurrent", "max_debt"],
                "lease" => &["lease"],
                _ => &[],
            }
        };
        // The field the rule wrote that ratelimit-core files under `unit` (a calendar's).
        let calendar: &[&str] = match e {
            InvalidLimit::BadCalendar {
                anchor: Some(_), ..
            } => &["anchor"],
            InvalidLimit::BadCalendar { anchor: None, .. } => &["utc_offset"],
            InvalidLimit::CalendarWindowOnly { .. } => &["algorithm"],
            _ => &[],
        };
        let written = calendar
            .iter()
            .chain(e.fields().iter().flat_map(|f| ours(f).iter()))
            .find_map(|name| field(fields, name).map(|node| (*name, node.at)));
        let mut message = e.to_string();
        if default_algorithm && matches!(e, InvalidLimit::BurstOfWindow { .. }) {
            message.push_str(
                "; a rule without `algorithm` counts by a fixed window, as envoyproxy/ratelimit \
                 does: write `algorithm: token_bucket` for a burst",
            );
        }
        match written {
            Some((name, at)) => self.error(&join(path, name), at, message),
            None => self.error(path, at, message),
        }
    }

    fn replaces(&mut self, node: Option<&Node>, path: &str, own: Option<&str>) -> Vec<String> {
        let Some(node) = node.filter(|n| !n.is_null()) else {
            return Vec::new();
        };
        let Value::Seq(items) = &node.value else {
            self.error(
                path,
                node.at,
                format!(
                    "`replaces` must be a list of `name:` entries, found {}",
                    describe(node)
                ),
            );
            return Vec::new();
        };
        let mut names = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            let Some(fields) = self.map(item, &item_path, &["name"], "replaces entry") else {
                continue;
            };
            let name = self.string(field(&fields, "name"), &join(&item_path, "name"));
            match name.filter(|n| !n.is_empty()) {
                None => self.error(
                    &item_path,
                    item.at,
                    "should not have an empty replaces entry",
                ),
                Some(name) if Some(name.as_str()) == own => self.error(
                    &join(&item_path, "name"),
                    field(&fields, "name").map_or(item.at, |n| n.at),
                    "replaces should not contain name of same descriptor",
                ),
                Some(name) => names.push(name),
            }
        }
        names
    }
}

/// The descriptor's flags a rule carries.
#[derive(Clone, Copy)]
struct Flags {
    shadow_mode: bool,
    quota_mode: bool,
    detailed_metric: bool,
}

/// A rule's window: the reference's unit, or any period.
#[derive(Clone, Copy)]
enum Length {
    Unit(ReferenceUnit),
    Period(Duration),
}

/// A `period`: the period syntax (`30s`, `500ms`, `90m`, `36h`, `10d`) as `ratelimit-vocab`
/// reads it, or a count and a unit of fixed length as `ratelimit-core` names them (`10 day`).
fn parse_period(text: &str) -> Result<Duration, String> {
    if let Ok(us) = ratelimit_vocab::parse_period(text) {
        return Ok(Duration::from_micros(us));
    }
    let mut words = text.split_whitespace();
    if let (Some(count), Some(unit), None) = (words.next(), words.next(), words.next())
        && let Ok(count) = count.parse::<u32>()
        && count > 0
    {
        let unit = Unit::from_str(unit).map_err(|e| format!("{e}; {PERIOD_SYNTAX}"))?;
        if unit.is_calendar() {
            return Err(format!(
                "a {unit} is a calendar period, not a length: use `unit: {unit}` with `calendar: \
                 true`, or count days (`{} day`)",
                if unit == Unit::Week {
                    7 * count
                } else {
                    30 * count
                }
            ));
        }
        return unit
            .as_duration()
            .checked_mul(count)
            .ok_or_else(|| format!("the period `{text}` is too long"));
    }
    Err(format!("unknown period `{}`; {PERIOD_SYNTAX}", text.trim()))
}

/// A node as a message shows it: a scalar's text (cut short), else its kind.
fn describe(node: &Node) -> String {
    match &node.value {
        Value::Scalar { text, .. } if !node.is_null() => {
            let cut: String = text.chars().take(40).collect();
            if cut.len() < text.len() {
                format!("`{cut}...`")
            } else {
                format!("`{cut}`")
            }
        }
        _ => node.kind().to_owned(),
    }
}

/// The message for a key `allowed` does not hold, saying where it belongs when it is known
/// elsewhere (a `unit` beside `key` instead of inside `rate_limit`).
fn unknown_key(name: &str, allowed: &[&str], what: &str) -> String {
    let shown: String = name.chars().take(40).collect();
    let home = if RATE_LIMIT_KEYS.contains(&name) && what != "rate_limit" {
        " (it belongs in a descriptor's `rate_limit` block)"
    } else if DESCRIPTOR_KEYS.contains(&name) && what != "descriptor" {
        " (it belongs in a descriptor, beside `key`)"
    } else if ROOT_KEYS.contains(&name) {
        " (it belongs at the top of the file)"
    } else {
        ""
    };
    format!(
        "config error, unknown key '{shown}' in {what}{home}; expected one of {}",
        allowed.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_read_the_period_syntax_or_a_count_of_units() {
        assert_eq!(parse_period("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_period("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_period("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_period("36h"), Ok(Duration::from_secs(129_600)));
        assert_eq!(parse_period("10d"), Ok(Duration::from_secs(864_000)));
        assert_eq!(parse_period("10 day"), Ok(Duration::from_secs(864_000)));
        assert_eq!(parse_period(" 36  hour "), Ok(Duration::from_secs(129_600)));
        for bad in [
            "10 d", "0 day", "0s", "none", "2w", "", "day", "2 days", "1 2 day", "-1 day",
        ] {
            let err = parse_period(bad).unwrap_err();
            assert!(
                err.contains("period") || err.contains("unit"),
                "{bad}: {err}"
            );
        }
        assert!(parse_period("2 week").unwrap_err().contains("14 day"));
        assert!(
            parse_period("1 month")
                .unwrap_err()
                .contains("calendar: true")
        );
    }
}
