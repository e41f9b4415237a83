//! `ratelimit servers`: how a limiter decides on each server, asked as its `build()` asks.

use ratelimit_core::store::{RedisPath, RedisStore};
use serde::Serialize;

use crate::args::Servers;
use crate::conn::{self, Redis};
use crate::failure::Failure;
use crate::output::{Out, Style};

/// What `servers --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    servers: Vec<Server>,
}

#[derive(Debug, Serialize)]
struct Server {
    /// The server's address (the URL, password hidden, for one server).
    server: String,
    /// `module`, `functions` or `scripts` (`RateLimiter::redis_path`).
    path: String,
    /// What the path calls there: the module's name, the library's, or `EVALSHA`.
    runs: String,
}

pub(crate) async fn run(args: Servers, out: Out) -> Result<(), Failure> {
    let Servers { common } = args;
    conn::check_url(&common.url)?;
    let redis = Redis::connect(&common.url).await?;
    let mut servers = Vec::new();
    for (server, url) in redis.servers(&common.url) {
        // The library's own choice, so that the CLI cannot answer otherwise than a limiter.
        let store = RedisStore::connect(&url).await?;
        let path = store.path();
        let runs = match path {
            RedisPath::Module => ratelimit_core::tools::scripts::native_module().to_owned(),
            RedisPath::Functions => ratelimit_core::tools::scripts::library().name().to_owned(),
            _ => "EVALSHA".to_owned(),
        };
        servers.push(Server {
            server,
            path: path.to_string(),
            runs,
        });
    }
    if out.json {
        return out.json(&Report { servers });
    }
    for s in &servers {
        let path = match s.path.as_str() {
            "module" => out.paint(Style::Green, &s.path),
            _ => out.paint(Style::Yellow, &s.path),
        };
        out.line(&format!("{}  {path} ({})", s.server, s.runs))?;
    }
    Ok(())
}
