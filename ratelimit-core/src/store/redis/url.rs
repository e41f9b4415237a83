//! What a store URL names: one server, a cluster, or the master of a Sentinel group. Public
//! through [`tools`](crate::tools), for tools that connect where the limiter does.

use std::fmt;

use crate::errors::redact_url;

/// What a Redis URL names, as [`RedisStore`](crate::store::RedisStore) reads it. Its `Debug` hides
/// every password.
///
/// ```
/// use ratelimit_core::tools::{RedisTarget, node_url, parse_redis_url};
///
/// let cluster = parse_redis_url("redis+cluster://:s3cret@10.0.0.1:7000,10.0.0.2:7000")
///     .expect("a cluster URL");
/// assert_eq!(
///     cluster,
///     RedisTarget::Cluster(vec![
///         "redis://:s3cret@10.0.0.1:7000".to_owned(),
///         "redis://:s3cret@10.0.0.2:7000".to_owned(),
///     ])
/// );
/// assert!(!format!("{cluster:?}").contains("s3cret"));
/// // A master found in `CLUSTER SLOTS`, with the cluster URL's credentials.
/// assert_eq!(
///     node_url("redis+cluster://:s3cret@10.0.0.1:7000", "10.0.0.3:7001"),
///     "redis://:s3cret@10.0.0.3:7001"
/// );
/// assert!(parse_redis_url("redis+sentinel://10.0.0.1:26379").is_err()); // no master name
/// ```
#[non_exhaustive]
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    /// One server: `redis://`, `rediss://` or `unix://`, the URL as given.
    Single(String),
    /// A Redis Cluster (`redis+cluster://` or `rediss+cluster://`): one `redis://` (or
    /// `rediss://`) URL per node given, each with the URL's credentials.
    Cluster(Vec<String>),
    /// The master of a Sentinel group (`redis+sentinel://`).
    #[non_exhaustive]
    Sentinel {
        /// One `redis://` URL per sentinel, without credentials.
        sentinels: Vec<String>,
        /// The group's name.
        master: String,
        /// The master's user, if given.
        user: Option<String>,
        /// The master's password, if given.
        password: Option<String>,
    },
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |urls: &[String]| urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>();
        match self {
            Target::Single(url) => f.debug_tuple("Single").field(&redact_url(url)).finish(),
            Target::Cluster(nodes) => f.debug_tuple("Cluster").field(&redacted(nodes)).finish(),
            Target::Sentinel {
                sentinels,
                master,
                user,
                password,
            } => f
                .debug_struct("Sentinel")
                .field("sentinels", &redacted(sentinels))
                .field("master", master)
                .field("user", user)
                .field("password", &password.as_ref().map(|_| "***"))
                .finish(),
        }
    }
}

/// The userinfo (with its `@`), hosts and path of what follows a URL's `://`: `u:p@a:1,b:2/0`
/// is `("u:p@", "a:1,b:2", "0")`. Everything up to the last `@` is userinfo, as
/// [`redact_url`] reads it: a password may hold a `/`.
fn authority(rest: &str) -> (String, &str, &str) {
    let (userinfo, after) = match rest.rsplit_once('@') {
        Some((u, after)) => (format!("{u}@"), after),
        None => (String::new(), rest),
    };
    let (hosts, path) = after.split_once('/').unwrap_or((after, ""));
    (userinfo, hosts, path)
}

/// The URL of one node of the cluster `cluster_url` names, at `address` (`host:port`, as
/// `CLUSTER SLOTS` gives it), with the cluster URL's scheme (`rediss` for TLS) and
/// credentials: `node_url("redis+cluster://:pw@a:1", "10.0.0.2:7001")` is
/// `redis://:pw@10.0.0.2:7001`.
#[must_use]
pub fn node_url(cluster_url: &str, address: &str) -> String {
    let scheme = if cluster_url.starts_with("rediss") {
        "rediss"
    } else {
        "redis"
    };
    let rest = cluster_url.split_once("://").map_or("", |(_, r)| r);
    let (userinfo, _, _) = authority(rest);
    format!("{scheme}://{userinfo}{address}")
}

/// What redis-rs said of a URL it could not read, in its own words only: its detail may quote
/// the URL (`Invalid protocol version - InvalidClientConfig: <the query's value>`), and a URL
/// that does not parse may hold its password anywhere.
#[must_use]
pub fn url_complaint(e: &redis::RedisError) -> String {
    let text = e.to_string();
    // `<description> - <kind>[: <detail>]`, the description a literal of redis-rs's.
    match text.split_once(&format!(" - {:?}", e.kind())) {
        Some((description, _)) if e.kind() == redis::ErrorKind::InvalidClientConfig => {
            description.to_owned()
        }
        _ => "it did not parse".to_owned(),
    }
}

/// What `url` names, checked without connecting.
///
/// # Errors
/// Why `url` names nothing: no host, a Sentinel URL without its master's name, `rediss`
/// without the `tls` feature. The message holds no part of the URL.
pub fn parse_target(url: &str) -> Result<Target, String> {
    if !cfg!(feature = "tls") && url.starts_with("rediss") {
        return Err(
            "`rediss://` connects with TLS, which needs the `tls` feature of \
                    redis-ratelimit (`features = [\"tls\"]`)"
                .to_owned(),
        );
    }
    let split_hosts = |scheme: &str, rest: &str| -> Result<(Vec<String>, String), String> {
        let (userinfo, hosts, path) = authority(rest);
        let hosts: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| format!("{scheme}://{userinfo}{h}"))
            .collect();
        if hosts.is_empty() {
            return Err("no host given".to_owned());
        }
        Ok((hosts, path.to_owned()))
    };
    if let Some(rest) = url.strip_prefix("redis+cluster://") {
        return Ok(Target::Cluster(split_hosts("redis", rest)?.0));
    }
    if let Some(rest) = url.strip_prefix("rediss+cluster://") {
        return Ok(Target::Cluster(split_hosts("rediss", rest)?.0));
    }
    if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        // The credentials are the master's (the data node's), not the sentinels'.
        let (userinfo, hosts) = match rest
            .split_once('/')
            .map_or(rest, |(a, _)| a)
            .rsplit_once('@')
        {
            Some((u, _)) => (Some(u), &rest[u.len() + 1..]),
            None => (None, rest),
        };
        let (hosts, path) = split_hosts("redis", hosts)?;
        let master = path.split('/').next().unwrap_or("").to_owned();
        if master.is_empty() {
            return Err(
                "the master's name is missing: redis+sentinel://host:26379/<master>".to_owned(),
            );
        }
        let (user, password) = match userinfo.map(|u| u.split_once(':').unwrap_or((u, ""))) {
            Some((u, p)) => (
                Some(u.to_owned()).filter(|u| !u.is_empty()),
                Some(p.to_owned()).filter(|p| !p.is_empty()),
            ),
            None => (None, None),
        };
        return Ok(Target::Sentinel {
            sentinels: hosts,
            master,
            user,
            password,
        });
    }
    Ok(Target::Single(url.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_the_deployment() {
        assert!(
            matches!(parse_target("redis://h:1/2"), Ok(Target::Single(u)) if u == "redis://h:1/2")
        );
        match parse_target("redis+cluster://:pw@a:1,b:2").unwrap() {
            Target::Cluster(n) => assert_eq!(n, ["redis://:pw@a:1", "redis://:pw@b:2"]),
            _ => panic!("cluster"),
        }
        match parse_target("redis+sentinel://u:pw@a:26379,b:26379/mymaster").unwrap() {
            Target::Sentinel {
                sentinels,
                master,
                user,
                password,
            } => {
                assert_eq!(sentinels, ["redis://a:26379", "redis://b:26379"]);
                assert_eq!(master, "mymaster");
                assert_eq!(
                    (user.as_deref(), password.as_deref()),
                    (Some("u"), Some("pw"))
                );
            }
            _ => panic!("sentinel"),
        }
        assert!(parse_target("redis+sentinel://a:26379").is_err());
        assert!(parse_target("redis+cluster://").is_err());
    }

    #[test]
    fn a_complaint_quotes_nothing_of_the_url() {
        let protocol = crate::store::redis::client::client("redis://h/0?protocol=s3cret-pw")
            .err()
            .unwrap();
        assert!(protocol.to_string().contains("s3cret-pw"), "{protocol}");
        assert_eq!(url_complaint(&protocol), "Invalid protocol version");
        let other = redis::RedisError::from((redis::ErrorKind::Io, "x", "s3cret-pw".to_owned()));
        assert_eq!(url_complaint(&other), "it did not parse");
    }

    #[test]
    fn nodes_keep_the_credentials_and_debug_hides_them() {
        assert_eq!(
            node_url("redis+cluster://:p@a:1,b:2", "10.0.0.1:7000"),
            "redis://:p@10.0.0.1:7000"
        );
        assert_eq!(node_url("rediss+cluster://a:1", "h:2"), "rediss://h:2");
        // A password holding `/` stays whole, and is never shown.
        assert_eq!(
            node_url("redis+cluster://:pa/ss@a:1", "h:2"),
            "redis://:pa/ss@h:2"
        );
        let cluster = parse_target("redis+cluster://:pa/ss@a:1,b:2").unwrap();
        assert_eq!(
            cluster,
            Target::Cluster(vec![
                "redis://:pa/ss@a:1".into(),
                "redis://:pa/ss@b:2".into()
            ])
        );
        assert!(!format!("{cluster:?}").contains("pa"), "{cluster:?}");
        for url in [
            "redis+cluster://:s3cret@a:1,b:2",
            "redis+cluster://:s3/cret@a:1,b:2",
            "redis+sentinel://u:s3cret@a:26379/m",
            "redis://:s3cret@h:1",
        ] {
            let shown = format!("{:?}", parse_target(url).unwrap());
            assert!(!shown.contains("cret"), "{shown}");
        }
    }
}
