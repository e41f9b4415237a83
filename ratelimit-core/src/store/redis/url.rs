//! What a store URL names: one server, a cluster, or the master of a Sentinel group.

/// What a URL asks for.
pub(super) enum Target {
    Single(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        user: Option<String>,
        password: Option<String>,
    },
}

pub(super) fn parse_target(url: &str) -> Result<Target, String> {
    if !cfg!(feature = "tls") && url.starts_with("rediss") {
        return Err(
            "`rediss://` connects with TLS, which needs the `tls` feature of \
                    redis-ratelimit (`features = [\"tls\"]`)"
                .to_owned(),
        );
    }
    let split_hosts = |scheme: &str, rest: &str| -> Result<(Vec<String>, String), String> {
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (format!("{u}@"), h),
            None => (String::new(), authority),
        };
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
}
