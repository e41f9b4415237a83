//! Reading one file: the YAML tree walked into descriptors and rules, every error with its
//! path and line, as many errors as the file has (a bad block is skipped, the rest read).

use super::MAX_DEPTH;
use super::error::ConfigError;
use super::rule::Rule;
use crate::yaml::{self, Node, Pos, Value};

mod rate_limit;

use rate_limit::{Flags, RATE_LIMIT_KEYS};

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
