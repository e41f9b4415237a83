//! Every bucket under a prefix, by `SCAN` on every master.

use crate::conn::Redis;
use crate::failure::Failure;
use crate::state::Mode;
use ratelimit_core::tools::{Bucket, Stored, instances_key, parse_bucket_key};

/// What one pass over the prefix found besides the buckets.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Seen {
    /// Buckets (keys that read back as `<prefix>:{...}` and still existed when read).
    pub(crate) buckets: u64,
    /// Other keys under `<prefix>:`: the application's, or another prefix's that starts with
    /// this one (`app` and `app:v2`).
    pub(crate) others: u64,
    /// Whether the heartbeat's set of live instances was there.
    pub(crate) instances: bool,
}

/// What `top` and `watch` start with: the prefix and URL checked, the limits `--config` names
/// (none without it), what to read of each bucket (a sliding log's times only when a limit
/// decides it), and the connection.
pub(crate) async fn open(
    common: &crate::args::Common,
    file: Option<&std::path::Path>,
) -> Result<
    (
        Redis,
        std::collections::BTreeMap<String, ratelimit_core::Limit>,
        Mode,
    ),
    Failure,
> {
    crate::commands::check_prefix(&common.prefix)?;
    crate::conn::check_url(&common.url)?;
    let limits = match file {
        Some(path) => crate::config::load(path)?,
        None => std::collections::BTreeMap::new(),
    };
    let mode = if limits.is_empty() {
        Mode::Count
    } else {
        Mode::Full
    };
    Ok((Redis::connect(&common.url).await?, limits, mode))
}

/// Scans `<prefix>:*`, reading each key as it stands, and hands every bucket to `each`.
pub(crate) async fn buckets(
    redis: &Redis,
    prefix: &str,
    count: u32,
    mode: Mode,
    mut each: impl FnMut(&str, Bucket, &Stored),
) -> Result<Seen, Failure> {
    let instances = instances_key(prefix);
    let mut seen = Seen::default();
    let pattern = format!("{}:*", glob_literal(prefix));
    redis
        .scan(&pattern, count, mode, |batch| {
            for (key, read) in batch {
                if key == instances {
                    seen.instances = true;
                } else if !read.exists() {
                    // Expired between SCAN and the read: full now.
                } else if let Some(bucket) = parse_bucket_key(prefix, &key) {
                    seen.buckets += 1;
                    each(&key, bucket, &read);
                } else {
                    seen.others += 1;
                }
            }
        })
        .await?;
    Ok(seen)
}

/// Fails with "not found" when the prefix has no key at all and no live instance: a typo
/// in --prefix, rather than a fleet whose buckets are all full.
pub(crate) async fn known(redis: &Redis, prefix: &str, seen: Seen) -> Result<(), Failure> {
    if seen.buckets > 0 || seen.others > 0 || seen.instances {
        return Ok(());
    }
    if redis.exists(&instances_key(prefix)).await? {
        return Ok(());
    }
    let found = match other_prefixes(redis).await? {
        (found, _) if !found.is_empty() => format!(
            "prefixes found: {}",
            found
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (_, true) => "no other prefix has buckets or live instances there".to_owned(),
        (_, false) => format!(
            "no other prefix in the first {} keys looked at",
            PREFIX_SCAN_STEPS * PREFIX_SCAN_COUNT as usize
        ),
    };
    Err(Failure::NotFound(format!(
        "unknown prefix `{prefix}`: no key under `{prefix}:` on {} and no live instance \
         (`{}`); {found}; is --prefix right? (RateLimiter::builder() defaults to `{}`, \
         enable_redis_rate_limit! to the crate's name)",
        redis.shown,
        instances_key(prefix),
        ratelimit_core::defaults::DEFAULT_PREFIX
    )))
}

/// How far [`other_prefixes`] looks, per server: steps of `SCAN`, keys per step.
const PREFIX_SCAN_STEPS: usize = 20;
const PREFIX_SCAN_COUNT: u32 = 1000;
/// The most prefixes an error names.
const PREFIXES_NAMED: usize = 10;

/// The prefixes of the limiters whose keys a bounded `SCAN` finds (a heartbeat's set of live
/// instances, a bucket), sorted, at most [`PREFIXES_NAMED`]; and whether it saw every key.
async fn other_prefixes(redis: &Redis) -> Result<(Vec<String>, bool), Failure> {
    let (keys, whole) = redis
        .some_keys("*:*", PREFIX_SCAN_COUNT, PREFIX_SCAN_STEPS)
        .await?;
    let mut found = std::collections::BTreeSet::new();
    for key in &keys {
        if let Some(prefix) = prefix_of(key) {
            found.insert(prefix.to_owned());
        }
    }
    Ok((found.into_iter().take(PREFIXES_NAMED).collect(), whole))
}

/// The prefix `key` is named under, if it is a limiter's: `<prefix>:instances`, or a bucket
/// `<prefix>:{...}` that reads back under that prefix.
fn prefix_of(key: &str) -> Option<&str> {
    if let Some(prefix) = key.strip_suffix(":instances") {
        return Some(prefix).filter(|p| !p.is_empty());
    }
    let (prefix, _) = key.split_once(":{")?;
    parse_bucket_key(prefix, key).map(|_| prefix)
}

/// `text` as a literal in a Redis glob pattern (`SCAN … MATCH`): `*`, `?`, `[`, `]` and `\`
/// escaped with a backslash.
fn glob_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::glob_literal;

    #[test]
    fn a_limiters_keys_name_its_prefix() {
        use super::prefix_of;
        let bucket = ratelimit_core::tools::bucket_key("shop", Some("api::orders"), "u:1");
        assert_eq!(prefix_of(&bucket), Some("shop"));
        assert_eq!(prefix_of("my_crate:instances"), Some("my_crate"));
        assert_eq!(prefix_of("session:{abc"), None);
        assert_eq!(prefix_of("cache:users"), None);
    }

    #[test]
    fn globs_are_literal() {
        assert_eq!(glob_literal(r"a*b?[c]\d{e}"), r"a\*b\?\[c\]\\d{e}");
    }
}
