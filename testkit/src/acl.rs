//! The least ACL of docs/operations.md, as the tests run it, and `ACL LOG` as they read it:
//! for the library's tests (`testkit/tests`) and the CLI's alike, so that the docs and every
//! test cannot differ.

/// The rules of the least ACL in docs/operations.md ("The least ACL"), for the prefix `app`,
/// with the password `pw`: the line the docs give, as the test runs it.
///
/// # Panics
/// When docs/operations.md cannot be read or gives no `ACL SETUSER ratelimit` line.
#[must_use]
pub fn least_acl() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
    let docs = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let line = docs
        .lines()
        .find(|l| l.starts_with("ACL SETUSER ratelimit "))
        .expect("docs/operations.md gives the least ACL");
    line.split_whitespace()
        .skip(3)
        .map(|rule| {
            if rule == ">password" {
                ">pw".to_owned()
            } else {
                rule.to_owned()
            }
        })
        .collect()
}

/// The rules docs/operations.md adds to the least ACL on a server with the Redis module
/// ("The Redis module", the ACL): one `+ratelimit.v1.<command>` per native command.
///
/// # Panics
/// When docs/operations.md cannot be read or gives no such line.
#[must_use]
pub fn module_rules() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
    let docs = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let prefix = format!("+{}", ratelimit_vocab::native::COMMAND_PREFIX);
    let line = docs
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&prefix))
        .expect("docs/operations.md gives the module's ACL rules");
    line.split_whitespace().map(str::to_owned).collect()
}

/// An `ACL LOG` reply as one line per entry (what was refused, and where).
#[must_use]
pub fn log_entries(log: &[redis::Value]) -> Vec<String> {
    log.iter()
        .map(|entry| match entry {
            redis::Value::Array(fields) => fields
                .iter()
                .map(|v| match v {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            other => format!("{other:?}"),
        })
        .collect()
}
