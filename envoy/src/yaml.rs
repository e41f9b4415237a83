//! A YAML document as a small tree whose every node knows its line and column, built from
//! saphyr-parser's events with its size bounded before it is built: the configuration's
//! reader walks it to say where each error is, semantic ones included.
//!
//! Bounds, for files that may be hostile or simply broken: collections nest at most
//! [`MAX_NESTING`] deep (so neither building, walking nor dropping the tree can exhaust the
//! stack: the parser itself keeps its states on the heap), and a document has at most
//! [`MAX_NODES`] nodes, aliases counted as the nodes they copy (so a "billion laughs" document
//! stops at the bound instead of filling memory).

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// How deep collections may nest in one document. A descriptor level takes two (its list and
/// its map), so this leaves room for [`MAX_DEPTH`](crate::config::MAX_DEPTH) levels and the
/// blocks inside them.
pub(crate) const MAX_NESTING: usize = 64;

/// The most nodes one document may hold, each alias counted as the nodes it stands for:
/// about 30,000 descriptors with a rate limit each.
pub(crate) const MAX_NODES: usize = 500_000;

/// Where a node starts: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pos {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl Pos {
    fn of(span: Span) -> Pos {
        Pos {
            line: span.start.line(),
            column: span.start.col() + 1,
        }
    }
}

/// A node of the document.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) value: Value,
    pub(crate) at: Pos,
    /// Nodes in this subtree, itself included (what copying it for an alias costs).
    weight: usize,
    /// Collections nested in this subtree, itself included (0 for a scalar).
    height: usize,
}

/// What a node holds.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// A scalar as written; `plain` when unquoted (only a plain scalar can be a number, a
    /// boolean or null).
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// Whether this is null as YAML (and `gopkg.in/yaml.v2`, the reference's reader) reads
    /// it: an empty plain scalar, `~` or `null` in one of its three spellings.
    pub(crate) fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// What kind of node this is, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match &self.value {
            Value::Scalar { .. } if self.is_null() => "null",
            Value::Scalar { .. } => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a map",
        }
    }
}

/// Why a text is not a YAML document this reader takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct YamlError {
    pub(crate) message: String,
    pub(crate) at: Option<Pos>,
}

/// A collection being built.
enum Frame {
    Seq {
        items: Vec<Node>,
        at: Pos,
        anchor: usize,
    },
    Map {
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
        at: Pos,
        anchor: usize,
    },
}

/// Parses `text`: its one document, or `None` when it holds none (an empty file, comments
/// only).
pub(crate) fn parse(text: &str) -> Result<Option<Node>, YamlError> {
    let mut builder = Builder::default();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| YamlError {
            message: e.info().to_owned(),
            at: Some(Pos {
                line: e.marker().line(),
                column: e.marker().col() + 1,
            }),
        })?;
        builder.event(event, span)?;
    }
    Ok(builder.root)
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    root: Option<Node>,
    documents: usize,
    nodes: usize,
    anchors: HashMap<usize, Node>,
}

impl Builder {
    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        let at = Pos::of(span);
        let fail = |message: String| {
            Err(YamlError {
                message,
                at: Some(at),
            })
        };
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return fail(
                        "a configuration file holds one YAML document; this is a second one \
                         (split it into two files)"
                            .to_owned(),
                    );
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                // `!!str 5` is the string "5", as a quoted scalar is.
                let tagged_str = tag.is_some_and(|t| t.is_yaml_core_schema() && t.suffix == "str");
                let node = Node {
                    value: Value::Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain && !tagged_str,
                    },
                    at,
                    weight: 1,
                    height: 0,
                };
                self.count(1, at)?;
                self.complete(node, anchor)?;
            }
            Event::SequenceStart(anchor, _) => {
                self.open(at)?;
                self.stack.push(Frame::Seq {
                    items: Vec::new(),
                    at,
                    anchor,
                });
            }
            Event::MappingStart(anchor, _) => {
                self.open(at)?;
                self.stack.push(Frame::Map {
                    entries: Vec::new(),
                    key: None,
                    at,
                    anchor,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = self.stack.pop() else {
                    return fail("the end of a collection that was never opened".to_owned());
                };
                let (value, at, anchor) = match frame {
                    Frame::Seq { items, at, anchor } => (Value::Seq(items), at, anchor),
                    Frame::Map {
                        entries,
                        at,
                        anchor,
                        ..
                    } => (Value::Map(entries), at, anchor),
                };
                let (weight, height) = match &value {
                    Value::Seq(items) => items
                        .iter()
                        .fold((1, 0), |(w, h), n| (w + n.weight, h.max(n.height))),
                    Value::Map(entries) => entries.iter().fold((1, 0), |(w, h), (k, v)| {
                        (w + k.weight + v.weight, h.max(k.height).max(v.height))
                    }),
                    Value::Scalar { .. } => (1, 0),
                };
                let node = Node {
                    value,
                    at,
                    weight,
                    height: height + 1,
                };
                self.complete(node, anchor)?;
            }
            Event::Alias(id) => {
                let Some(node) = self.anchors.get(&id) else {
                    return fail("an alias to an anchor that is not defined before it".to_owned());
                };
                if self.stack.len() + node.height > MAX_NESTING {
                    return fail(format!(
                        "this alias nests collections more than {MAX_NESTING} deep"
                    ));
                }
                let node = Node { at, ..node.clone() };
                self.count(node.weight, at)?;
                self.complete(node, 0)?;
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
        }
        Ok(())
    }

    /// Counts `n` more nodes against [`MAX_NODES`].
    fn count(&mut self, n: usize, at: Pos) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err(YamlError {
                message: format!(
                    "the document holds more than {MAX_NODES} nodes (aliases counted as what \
                     they copy)"
                ),
                at: Some(at),
            });
        }
        Ok(())
    }

    /// Checks that one more collection may open here.
    fn open(&mut self, at: Pos) -> Result<(), YamlError> {
        self.count(1, at)?;
        if self.stack.len() >= MAX_NESTING {
            return Err(YamlError {
                message: format!("collections nest more than {MAX_NESTING} deep"),
                at: Some(at),
            });
        }
        Ok(())
    }

    /// Puts a finished node where it belongs: in the collection being built, or as the root.
    fn complete(&mut self, node: Node, anchor: usize) -> Result<(), YamlError> {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push((k, node)),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(node: &Node) -> &str {
        match &node.value {
            Value::Scalar { text, .. } => text,
            other => panic!("not a scalar: {other:?}"),
        }
    }

    #[test]
    fn nodes_know_their_line_and_column() {
        let root = parse("domain: d\ndescriptors:\n  - key: k\n")
            .unwrap()
            .unwrap();
        let Value::Map(entries) = &root.value else {
            panic!("a map")
        };
        assert_eq!(scalar(&entries[1].0), "descriptors");
        assert_eq!(entries[1].0.at, Pos { line: 2, column: 1 });
        let Value::Seq(items) = &entries[1].1.value else {
            panic!("a list")
        };
        let Value::Map(first) = &items[0].value else {
            panic!("a map")
        };
        assert_eq!(
            first[0].1.at,
            Pos {
                line: 3,
                column: 10
            }
        );
    }

    #[test]
    fn an_empty_text_has_no_document_and_a_second_document_is_an_error() {
        assert!(parse("").unwrap().is_none());
        assert!(parse("# only a comment\n").unwrap().is_none());
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert!(err.message.contains("second one"), "{err:?}");
        assert_eq!(err.at.map(|p| p.line), Some(2));
    }

    #[test]
    fn quoted_and_tagged_scalars_are_not_plain_and_null_is_recognised() {
        let root = parse("a: '5'\nb: 5\nc: !!str 5\nd:\ne: ~\n")
            .unwrap()
            .unwrap();
        let Value::Map(e) = &root.value else { panic!() };
        let plain = |i: usize| matches!(e[i].1.value, Value::Scalar { plain: true, .. });
        assert_eq!((plain(0), plain(1), plain(2)), (false, true, false));
        assert!(e[3].1.is_null() && e[4].1.is_null() && !e[1].1.is_null());
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing_the_stack() {
        // Flow collections: the parser's own bound (256) or ours, whichever comes first.
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        let err = parse(&deep).unwrap_err();
        assert!(err.at.is_some(), "{err:?}");
        let deep = "[".repeat(200) + &"]".repeat(200);
        let err = parse(&deep).unwrap_err();
        assert!(err.message.contains("nest more than 64"), "{err:?}");
        // Block maps, by indentation alone.
        let block: String = (0..2_000)
            .map(|i| format!("{}a:\n", " ".repeat(i)))
            .collect();
        let err = parse(&block).unwrap_err();
        assert!(err.message.contains("nest more than 64"), "{err:?}");
        assert_eq!(err.at.map(|p| p.line), Some(65));
        let within = "[".repeat(MAX_NESTING) + &"]".repeat(MAX_NESTING);
        assert!(parse(&within).is_ok());
    }

    #[test]
    fn aliases_copy_their_anchor_and_a_billion_laughs_stops_at_the_bound() {
        let root = parse("a: &x {k: v}\nb: *x\n").unwrap().unwrap();
        let Value::Map(e) = &root.value else { panic!() };
        assert!(matches!(&e[1].1.value, Value::Map(m) if scalar(&m[0].1) == "v"));
        assert_eq!(e[1].1.at.line, 2);
        let mut laughs = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            laughs += &format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            );
        }
        let err = parse(&laughs).unwrap_err();
        assert!(err.message.contains("more than 500000 nodes"), "{err:?}");
        assert!(parse("a: *nowhere\n").is_err());
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let err = parse("'''\n").unwrap_err();
        assert!(err.at.is_some(), "{err:?}");
    }
}
