//! A domain's descriptors as a tree, and the walk that finds the rule of a request's
//! descriptor, as the reference's `GetLimit` walks it.

use std::collections::HashMap;

use super::bucket;
use super::error::ConfigError;
use super::parse::Descriptor;
use super::rule::Rule;
use super::{Bucket, Found};

/// One domain's rules.
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    /// Every node; the domain's own (the root, which has no rule) is the first.
    nodes: Vec<TreeNode>,
}

#[derive(Debug, Clone, Default)]
struct TreeNode {
    rule: Option<Rule>,
    /// The level below, by descriptor key.
    children: HashMap<String, KeyLevel>,
    value_to_metric: bool,
    share_threshold: bool,
}

/// The descriptors of one key at one level.
#[derive(Debug, Clone, Default)]
struct KeyLevel {
    /// By exact value; a wildcard's pattern too (the reference finds a value equal to a
    /// pattern by its map before it tries the patterns).
    exact: HashMap<String, usize>,
    /// The wildcards, in the order of the files.
    wildcards: Vec<Wildcard>,
    /// The descriptor without a value.
    any: Option<usize>,
}

#[derive(Debug, Clone)]
struct Wildcard {
    /// The value split on `*`: `foo*bar` is `["foo", "bar"]`.
    parts: Vec<String>,
    pattern: String,
    node: usize,
}

/// How an entry matched its node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Exact,
    Wildcard,
    Any,
}

impl Default for Tree {
    /// A domain without descriptors: its root alone.
    fn default() -> Tree {
        Tree {
            nodes: vec![TreeNode::default()],
        }
    }
}

impl Tree {
    /// Adds a file's descriptors under the root; a descriptor whose key and value its level
    /// already has is an error, as in the reference.
    pub(crate) fn add(
        &mut self,
        file: &str,
        descriptors: Vec<Descriptor>,
        errors: &mut Vec<ConfigError>,
    ) {
        self.add_under(0, file, descriptors, errors);
    }

    fn add_under(
        &mut self,
        parent: usize,
        file: &str,
        descriptors: Vec<Descriptor>,
        errors: &mut Vec<ConfigError>,
    ) {
        for d in descriptors {
            let index = self.nodes.len();
            let level = self.nodes[parent]
                .children
                .entry(d.key.clone())
                .or_default();
            let taken = match &d.value {
                Some(value) => level.exact.contains_key(value),
                None => level.any.is_some(),
            };
            if taken {
                errors.push(ConfigError::new(
                    file,
                    &d.path,
                    Some(d.at),
                    format!("duplicate descriptor composite key '{}'", d.composite),
                ));
                continue;
            }
            match &d.value {
                Some(value) => {
                    level.exact.insert(value.clone(), index);
                    if value.contains('*') {
                        level.wildcards.push(Wildcard {
                            parts: value.split('*').map(str::to_owned).collect(),
                            pattern: value.clone(),
                            node: index,
                        });
                    }
                }
                None => level.any = Some(index),
            }
            self.nodes.push(TreeNode {
                rule: d.rule,
                children: HashMap::new(),
                value_to_metric: d.value_to_metric,
                share_threshold: d.share_threshold,
            });
            self.add_under(index, file, d.children, errors);
        }
    }

    /// The rule of a request's descriptor in this domain, as the reference's `GetLimit`
    /// finds it: entry by entry from the top, each entry's node found by its exact value,
    /// else by the first wildcard it matches, else by its key alone; the rule is that of the
    /// node the last entry reaches, when every entry reached one. The walk stops at a node
    /// without children, so it reads at most one entry more than the tree is deep.
    pub(crate) fn find<'c, 'e>(
        &'c self,
        domain: &str,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
    ) -> Option<Found<'c>> {
        let mut node = &self.nodes[0];
        let mut walked: Vec<Step<'e, 'c>> = Vec::new();
        let mut entries = entries.into_iter().peekable();
        let mut found = None;
        while let Some((key, value)) = entries.next() {
            let last = entries.peek().is_none();
            let Some(level) = node.children.get(key) else {
                break;
            };
            let (index, how, pattern) = if let Some(&i) = level.exact.get(value) {
                // A value written as a wildcard's pattern reaches that wildcard's node.
                match level.wildcards.iter().find(|w| w.node == i) {
                    Some(w) => (i, How::Wildcard, w.pattern.as_str()),
                    None => (i, How::Exact, ""),
                }
            } else if let Some(w) = level.wildcards.iter().find(|w| matches(&w.parts, value)) {
                (w.node, How::Wildcard, w.pattern.as_str())
            } else if let Some(i) = level.any {
                (i, How::Any, "")
            } else {
                break;
            };
            let next = &self.nodes[index];
            walked.push(Step {
                key,
                value,
                how,
                pattern,
                node: next,
            });
            if last && next.rule.is_some() {
                found = next.rule.as_ref();
            }
            if next.children.is_empty() {
                break;
            }
            node = next;
        }
        let rule = found?;
        Some(Found {
            rule,
            bucket: bucket_of(domain, rule, &walked),
            metric_key: metric_key(domain, rule, &walked),
        })
    }

    /// The rules, for a dump: each rule with its stats key.
    pub(crate) fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.nodes.iter().filter_map(|n| n.rule.as_ref())
    }
}

/// One entry of the request and the node it reached.
struct Step<'e, 'c> {
    key: &'e str,
    value: &'e str,
    how: How,
    /// The wildcard's pattern when it matched by one.
    pattern: &'c str,
    node: &'c TreeNode,
}

impl Step<'_, '_> {
    /// Whether every value this wildcard matches shares one bucket (`share_threshold`).
    fn shares(&self) -> bool {
        self.how == How::Wildcard && self.node.share_threshold
    }
}

/// Whether `value` matches a wildcard split on `*`: each `*` stands for any run of
/// characters (none included), as the reference's `wildcardMatch` reads it.
fn matches(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|only| only == value);
    };
    if value.len() < parts.iter().map(String::len).sum::<usize>() {
        return false;
    }
    let Some(rest) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some(mut rest) = rest.strip_suffix(last.as_str()) else {
        return false;
    };
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The bucket of a request's descriptor under `rule`; see [`Bucket`].
fn bucket_of(domain: &str, rule: &Rule, walked: &[Step<'_, '_>]) -> Bucket {
    if let Some(shared) = &rule.shared {
        // Found, so the walk reached the last entry.
        let key = walked
            .last()
            .map_or("", |s| if s.shares() { s.pattern } else { s.value });
        return Bucket {
            name: shared.clone(),
            key: key.to_owned(),
        };
    }
    let mut key = String::new();
    for (i, step) in walked.iter().enumerate() {
        if i > 0 {
            key.push('&');
        }
        bucket::escape_into(&mut key, step.key);
        if step.shares() {
            key.push('~');
            bucket::escape_into(&mut key, step.pattern);
        } else {
            key.push('=');
            bucket::escape_into(&mut key, step.value);
        }
    }
    Bucket {
        name: bucket::name_of(domain),
        key,
    }
}

/// The key of the request's statistics under `rule`, as the reference names it.
fn metric_key(domain: &str, rule: &Rule, walked: &[Step<'_, '_>]) -> String {
    let mut out = String::from(domain);
    for step in walked {
        out.push('.');
        out.push_str(step.key);
        let value = if rule.detailed_metric {
            // Every value, except a shared wildcard's pattern.
            if step.shares() {
                step.pattern
            } else {
                step.value
            }
        } else {
            match step.how {
                How::Wildcard if step.shares() => step.pattern,
                How::Wildcard if step.node.value_to_metric => step.value,
                How::Wildcard => step.pattern,
                How::Exact => step.value,
                How::Any if step.node.value_to_metric => step.value,
                How::Any => "",
            }
        };
        if !value.is_empty() || (rule.detailed_metric && !walked.iter().any(Step::shares)) {
            out.push('_');
            out.push_str(value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(p: &str) -> Vec<String> {
        p.split('*').map(str::to_owned).collect()
    }

    #[test]
    fn wildcards_match_as_the_references() {
        let cases = [
            ("foo*", "foo", true),
            ("foo*", "foobar", true),
            ("foo*", "fo", false),
            ("bar*b", "barb", true),
            ("bar*b", "bar123b", true),
            ("bar*b", "bar", false),
            ("bar*b", "barbx", false),
            ("foo*bar*baz", "foo1bar2baz", true),
            ("foo*bar*baz", "foobarbaz", true),
            ("foo*bar*baz", "foobaz", false),
            ("foo*bar*baz", "foo_baz_bar", false),
            ("*", "", true),
            ("*", "anything", true),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ];
        for (pattern, value, expected) in cases {
            assert_eq!(
                matches(&parts(pattern), value),
                expected,
                "{pattern} ~ {value}"
            );
        }
    }
}
