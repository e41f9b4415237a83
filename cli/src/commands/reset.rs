//! `ratelimit reset`: refills one bucket on every instance, by the library's own reset.

use ratelimit_core::RateLimiter;
use serde::Serialize;

use crate::args::Reset;
use crate::commands::{Names, bucket_of, check_prefix};
use crate::conn::{self, Redis};
use crate::failure::Failure;
use crate::output::{Out, Style};
use ratelimit_core::tools::parse_bucket_key;

/// What `reset --json` prints.
#[derive(Debug, Serialize)]
struct Done {
    /// The bucket's Redis key.
    bucket: String,
    /// The limit's name (`null`: an unnamed bucket).
    name: Option<String>,
    key: String,
    /// Whether the bucket existed (was not full) just before the reset.
    existed: bool,
}

pub(crate) async fn run(args: Reset, out: Out) -> Result<(), Failure> {
    let Reset { common, which } = args;
    check_prefix(&common.prefix)?;
    conn::check_url(&common.url)?;
    let (bucket, names) = bucket_of(&common.prefix, &which)?;
    let (name, key) = match names {
        Some(names) => names,
        None => read_back(&common.prefix, &bucket)?,
    };
    let redis = Redis::connect(&common.url).await?;
    let existed = redis.exists(&bucket).await?;
    // The library's reset, so that the CLI cannot drift from it: DEL, then PUBLISH on the
    // fleet's channel, which every instance's deny cache listens to.
    let limiter = RateLimiter::builder()
        .redis(common.url.as_str())
        .prefix(common.prefix.as_str())
        .deny_cache(0)
        // A tool, not an instance of the service: it must not count in the fleet.
        .instance(false)
        .build()
        .await?;
    match &name {
        Some(name) => limiter.reset_named(name, &key).await?,
        None => limiter.reset(&key).await?,
    }
    let done = Done {
        bucket,
        name,
        key,
        existed,
    };
    if out.json {
        return out.json(&done);
    }
    let what = if done.existed {
        out.paint(Style::Green, "reset")
    } else {
        out.paint(Style::Green, "was full already (no key); reset anyway")
    };
    out.line(&format!(
        "{}: {what}; every instance's deny cache told",
        done.bucket
    ))
}

/// The name and key of a bucket given by --bucket: the library resets by name and key.
fn read_back(prefix: &str, bucket: &str) -> Result<Names, Failure> {
    let parsed = parse_bucket_key(prefix, bucket).ok_or_else(|| {
        Failure::Usage(format!(
            "`{bucket}` is not a bucket key under the prefix `{prefix}` \
             (`{prefix}:{{<n>:<name>:<key>}}`): check --prefix, or give --name and --key"
        ))
    })?;
    let digest = || {
        Failure::Usage(format!(
            "`{bucket}` keeps its name or key only as a digest (longer than 128 bytes): reset \
             it with --name and --key"
        ))
    };
    let name = match &parsed.name {
        None => None,
        Some(n) => Some(n.text().ok_or_else(digest)?.to_owned()),
    };
    let key = parsed.key.text().ok_or_else(digest)?.to_owned();
    Ok((name, key))
}
