//! The service's settings, from the environment variables envoyproxy/ratelimit reads
//! (`src/settings/settings.go`), with its defaults, for what this service supports. Read from
//! a map passed in ([`Settings::from_vars`]), so that tests need not touch the process's
//! environment; a value this service cannot honour is an error that says so, never ignored.
//!
//! Variables the reference reads and this service does not (its pools, pipelining,
//! memcache's, xDS's, tracing's) are not read: setting them changes nothing.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use crate::config::LoadOptions;
use crate::service::ResponseHeaders;

/// What the service reads from its environment.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// `HOST` (default `0.0.0.0`): the HTTP server's address (`/healthcheck`, `/json`).
    pub host: String,
    /// `PORT` (default 8080): the HTTP server's port.
    pub port: u16,
    /// `GRPC_HOST` (default `0.0.0.0`).
    pub grpc_host: String,
    /// `GRPC_PORT` (default 8081): where `ShouldRateLimit` is served.
    pub grpc_port: u16,
    /// `DEBUG_HOST` (default `0.0.0.0`).
    pub debug_host: String,
    /// `DEBUG_PORT` (default 6070): the debug server (the configuration's dump).
    pub debug_port: u16,
    /// `RUNTIME_ROOT` (default `/srv/runtime_data/current`).
    pub runtime_root: PathBuf,
    /// `RUNTIME_SUBDIRECTORY` (default empty).
    pub runtime_subdirectory: String,
    /// `RUNTIME_APPDIRECTORY` (default `config`).
    pub runtime_appdirectory: String,
    /// `RUNTIME_IGNOREDOTFILES` (default false): skip configuration files named `.*`.
    pub runtime_ignore_dot_files: bool,
    /// `RUNTIME_WATCH_ROOT` (default true): reload when `RUNTIME_ROOT` (a symlink) is swapped;
    /// false: when the files of the configuration directory change.
    pub runtime_watch_root: bool,
    /// `MERGE_DOMAIN_CONFIG` (default false): several files may define one domain.
    pub merge_domain_config: bool,
    /// The Redis URL ratelimit-core's builder takes, made from `REDIS_URL`, `REDIS_TYPE`,
    /// `REDIS_SOCKET_TYPE`, `REDIS_AUTH` and `REDIS_TLS` (see [`Settings::from_vars`]).
    pub redis_url: String,
    /// `CACHE_KEY_PREFIX` (default empty): the prefix of every key in Redis; empty leaves the
    /// limiter's default.
    pub cache_key_prefix: String,
    /// `LOG_LEVEL` (default `warn`).
    pub log_level: LogLevel,
    /// `LOG_FORMAT` (default `text`): `text` or `json`.
    pub log_format: LogFormat,
    /// `SHADOW_MODE` (default false): every rule in shadow mode.
    pub shadow_mode: bool,
    /// `USE_PROMETHEUS` (default false): serve Prometheus metrics.
    pub use_prometheus: bool,
    /// `PROMETHEUS_ADDR` (default `:9090`).
    pub prometheus_addr: String,
    /// `PROMETHEUS_PATH` (default `/metrics`).
    pub prometheus_path: String,
    /// `NEAR_LIMIT_RATIO` (default 0.8), in thousandths (800): where `near_limit` is counted.
    pub near_limit_permille: u16,
    /// `RATELIMIT_HEADERS`, this service's own (default `off`, as the reference has no such
    /// thing): `draft11` adds the IETF draft-11 `RateLimit-Policy` and `RateLimit` headers to
    /// the response to the client ([`ResponseHeaders`]).
    pub ratelimit_headers: ResponseHeaders,
}

/// `LOG_LEVEL`, as logrus names its levels (any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogLevel {
    /// `trace`.
    Trace,
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `warn` or `warning`.
    Warn,
    /// `error`, and logrus's `fatal` and `panic`, which log errors only.
    Error,
}

/// `LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object a line.
    Json,
}

/// A setting that cannot be honoured: its variable, its value and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?}: {reason}")]
pub struct SettingsError {
    /// The environment variable.
    pub variable: &'static str,
    /// Its value (a password in it replaced by `***`).
    pub value: String,
    /// Why it cannot be honoured, and what to write instead.
    pub reason: String,
}

/// Hides every password.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field(
                "grpc",
                &format_args!("{}:{}", self.grpc_host, self.grpc_port),
            )
            .field("http", &format_args!("{}:{}", self.host, self.port))
            .field(
                "debug",
                &format_args!("{}:{}", self.debug_host, self.debug_port),
            )
            .field("config_dir", &self.config_dir())
            .field("runtime_watch_root", &self.runtime_watch_root)
            .field("merge_domain_config", &self.merge_domain_config)
            .field("redis_url", &redact(&self.redis_url))
            .field("cache_key_prefix", &self.cache_key_prefix)
            .field("log_level", &self.log_level)
            .field("shadow_mode", &self.shadow_mode)
            .field("ratelimit_headers", &self.ratelimit_headers)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// Reads the settings from `vars` (`Settings::from_vars(std::env::vars())` in a service).
    ///
    /// Redis, as the reference's variables say it:
    /// - `REDIS_URL` (default `/var/run/nutcracker/ratelimit.sock`): with `REDIS_TYPE=single`
    ///   (the default, any case) a `host:port` when `REDIS_SOCKET_TYPE=tcp`, a socket's path
    ///   when `unix` (the default); with `cluster`, `host:port,host:port`; with `sentinel`,
    ///   `master,host:port,host:port`. A URL (`redis://`, `rediss://`, `redis+cluster://`,
    ///   `redis+sentinel://`, `unix://`) is taken as it is, whatever the type.
    /// - `REDIS_AUTH`: `password` or `user:password`; `REDIS_TLS=true`: `rediss://`.
    ///
    /// ```
    /// use ratelimit_envoy::settings::Settings;
    ///
    /// let s = Settings::from_vars([
    ///     ("REDIS_SOCKET_TYPE", "tcp"),
    ///     ("REDIS_URL", "redis:6379"),
    ///     ("REDIS_AUTH", "s3cret"),
    ///     ("RUNTIME_ROOT", "/data"),
    ///     ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    /// ])?;
    /// assert_eq!(s.redis_url, "redis://:s3cret@redis:6379");
    /// assert_eq!(s.config_dir(), std::path::Path::new("/data/ratelimit/config"));
    /// assert_eq!(s.grpc_port, 8081);
    /// assert!(Settings::from_vars([("USE_STATSD", "true")]).is_err());
    /// # Ok::<(), ratelimit_envoy::settings::SettingsError>(())
    /// ```
    ///
    /// # Errors
    /// The first variable whose value is malformed or asks for what this service does not
    /// do (statsd, memcache, xDS, a second Redis for per-second limits).
    pub fn from_vars<K, V>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Settings, SettingsError>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let vars: HashMap<String, String> = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let r = Vars(&vars);
        r.refuse_true(
            "USE_STATSD",
            "statsd is not supported; set USE_PROMETHEUS=true for metrics",
        )?;
        r.refuse_true(
            "USE_DOG_STATSD",
            "statsd is not supported; set USE_PROMETHEUS=true for metrics",
        )?;
        r.refuse_true(
            "REDIS_PERSECOND",
            "one Redis serves every limit here (each decision is one atomic script on it); \
             unset REDIS_PERSECOND",
        )?;
        r.refuse_true(
            "RESPONSE_DYNAMIC_METADATA",
            "rules' `metadata` is not returned to Envoy by this service",
        )?;
        if let Some(backend) = r.get("BACKEND_TYPE")
            && !backend.eq_ignore_ascii_case("redis")
        {
            return Err(r.error("BACKEND_TYPE", "only `redis` is supported"));
        }
        if let Some(kind) = r.get("CONFIG_TYPE")
            && !kind.eq_ignore_ascii_case("FILE")
        {
            return Err(r.error(
                "CONFIG_TYPE",
                "only `FILE` is supported: configuration files in RUNTIME_ROOT",
            ));
        }
        Ok(Settings {
            host: r.string("HOST", "0.0.0.0"),
            port: r.port("PORT", 8080)?,
            grpc_host: r.string("GRPC_HOST", "0.0.0.0"),
            grpc_port: r.port("GRPC_PORT", 8081)?,
            debug_host: r.string("DEBUG_HOST", "0.0.0.0"),
            debug_port: r.port("DEBUG_PORT", 6070)?,
            runtime_root: PathBuf::from(r.string("RUNTIME_ROOT", "/srv/runtime_data/current")),
            runtime_subdirectory: r.string("RUNTIME_SUBDIRECTORY", ""),
            runtime_appdirectory: r.string("RUNTIME_APPDIRECTORY", "config"),
            runtime_ignore_dot_files: r.boolean("RUNTIME_IGNOREDOTFILES", false)?,
            runtime_watch_root: r.boolean("RUNTIME_WATCH_ROOT", true)?,
            merge_domain_config: r.boolean("MERGE_DOMAIN_CONFIG", false)?,
            redis_url: redis_url(&r)?,
            cache_key_prefix: r.string("CACHE_KEY_PREFIX", ""),
            log_level: log_level(&r)?,
            log_format: match r.get("LOG_FORMAT") {
                None => LogFormat::Text,
                Some(f) if f.eq_ignore_ascii_case("text") => LogFormat::Text,
                Some(f) if f.eq_ignore_ascii_case("json") => LogFormat::Json,
                Some(_) => return Err(r.error("LOG_FORMAT", "expected `text` or `json`")),
            },
            shadow_mode: r.boolean("SHADOW_MODE", false)?,
            use_prometheus: r.boolean("USE_PROMETHEUS", false)?,
            prometheus_addr: r.string("PROMETHEUS_ADDR", ":9090"),
            prometheus_path: r.string("PROMETHEUS_PATH", "/metrics"),
            near_limit_permille: near_limit(&r)?,
            ratelimit_headers: match r.get("RATELIMIT_HEADERS") {
                None => ResponseHeaders::Off,
                Some(word) => word.parse().map_err(|e| r.error("RATELIMIT_HEADERS", e))?,
            },
        })
    }

    /// Where the configuration files are: `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`,
    /// as the reference reads them (with `RUNTIME_WATCH_ROOT` either way).
    pub fn config_dir(&self) -> PathBuf {
        self.runtime_root
            .join(&self.runtime_subdirectory)
            .join(&self.runtime_appdirectory)
    }

    /// How the configuration files are read: `MERGE_DOMAIN_CONFIG`, `RUNTIME_IGNOREDOTFILES`.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions::new()
            .merge_domains(self.merge_domain_config)
            .ignore_dot_files(self.runtime_ignore_dot_files)
    }
}

/// The variables, with the reference's readings of their values.
struct Vars<'a>(&'a HashMap<String, String>);

impl Vars<'_> {
    /// A variable's value; unset and empty are alike, as envconfig reads them.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn error(&self, variable: &'static str, reason: impl Into<String>) -> SettingsError {
        let value = self.get(variable).unwrap_or_default();
        SettingsError {
            variable,
            value: if variable == "REDIS_AUTH" {
                "***".to_owned()
            } else {
                redact(value)
            },
            reason: reason.into(),
        }
    }

    fn string(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or(default).to_owned()
    }

    /// A boolean as Go's `strconv.ParseBool` reads it.
    fn boolean(&self, name: &'static str, default: bool) -> Result<bool, SettingsError> {
        match self.get(name) {
            None => Ok(default),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(_) => Err(self.error(name, "expected true or false")),
        }
    }

    fn refuse_true(&self, name: &'static str, reason: &str) -> Result<(), SettingsError> {
        if self.boolean(name, false)? {
            return Err(self.error(name, reason));
        }
        Ok(())
    }

    fn port(&self, name: &'static str, default: u16) -> Result<u16, SettingsError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| self.error(name, "expected a port number from 0 to 65535")),
        }
    }
}

fn log_level(r: &Vars<'_>) -> Result<LogLevel, SettingsError> {
    let Some(level) = r.get("LOG_LEVEL") else {
        return Ok(LogLevel::Warn);
    };
    Ok(match level.to_ascii_lowercase().as_str() {
        "trace" => LogLevel::Trace,
        "debug" => LogLevel::Debug,
        "info" => LogLevel::Info,
        "warn" | "warning" => LogLevel::Warn,
        "error" | "fatal" | "panic" => LogLevel::Error,
        _ => {
            return Err(r.error(
                "LOG_LEVEL",
                "expected one of trace, debug, info, warn, error (any case)",
            ));
        }
    })
}

fn near_limit(r: &Vars<'_>) -> Result<u16, SettingsError> {
    let Some(text) = r.get("NEAR_LIMIT_RATIO") else {
        return Ok(800);
    };
    match text.parse::<f64>() {
        Ok(ratio) if ratio > 0.0 && ratio <= 1.0 => {
            // In (0, 1]: at most 1000.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Ok((ratio * 1000.0).round() as u16)
        }
        _ => Err(r.error(
            "NEAR_LIMIT_RATIO",
            "expected a ratio above 0 and at most 1, such as 0.8",
        )),
    }
}

/// The URL ratelimit-core's builder takes, from the reference's Redis variables.
fn redis_url(r: &Vars<'_>) -> Result<String, SettingsError> {
    let url = r.string("REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
    let tls = r.boolean("REDIS_TLS", false)?;
    let auth = r.get("REDIS_AUTH");
    let built = if url.contains("://") {
        if auth.is_some() {
            return Err(r.error(
                "REDIS_AUTH",
                "REDIS_URL is a URL: put the credentials in it (redis://user:password@host:port)",
            ));
        }
        if tls && !url.starts_with("rediss") {
            return Err(r.error(
                "REDIS_TLS",
                "REDIS_URL is a URL: write rediss:// (or rediss+cluster://) for TLS",
            ));
        }
        url
    } else {
        let userinfo = match auth {
            None => String::new(),
            Some(auth) => match auth.split_once(':') {
                Some((user, password)) => format!("{}:{}@", encode(user), encode(password)),
                None => format!(":{}@", encode(auth)),
            },
        };
        let kind = r.string("REDIS_TYPE", "single").to_ascii_lowercase();
        let socket = r.string("REDIS_SOCKET_TYPE", "unix").to_ascii_lowercase();
        let scheme = if tls { "rediss" } else { "redis" };
        match kind.as_str() {
            "single" => match socket.as_str() {
                "tcp" => format!("{scheme}://{userinfo}{url}"),
                "unix" => {
                    if tls {
                        return Err(r.error("REDIS_TLS", "a unix socket takes no TLS"));
                    }
                    if !url.starts_with('/') {
                        // `host:port` with the reference's default socket type: said, rather
                        // than a URL that fails to connect later.
                        return Err(r.error(
                            "REDIS_URL",
                            "not a socket's path, and REDIS_SOCKET_TYPE is `unix` (the \
                             default, as in envoyproxy/ratelimit): set REDIS_SOCKET_TYPE=tcp for \
                             host:port, or give a redis:// URL",
                        ));
                    }
                    let query = match auth {
                        None => String::new(),
                        Some(auth) => match auth.split_once(':') {
                            Some((user, password)) => {
                                format!("?user={}&pass={}", encode(user), encode(password))
                            }
                            None => format!("?pass={}", encode(auth)),
                        },
                    };
                    format!("unix://{url}{query}")
                }
                _ => return Err(r.error("REDIS_SOCKET_TYPE", "expected `tcp` or `unix`")),
            },
            "cluster" => format!("{scheme}+cluster://{userinfo}{url}"),
            "sentinel" => {
                if tls {
                    return Err(r.error(
                        "REDIS_TLS",
                        "TLS to a Sentinel group is not supported by ratelimit-core's URLs",
                    ));
                }
                let Some((master, sentinels)) = url.split_once(',') else {
                    return Err(r.error(
                        "REDIS_URL",
                        "with REDIS_TYPE=sentinel: the master's name, then host:port of each \
                         sentinel, comma-separated (mymaster,10.0.0.1:26379)",
                    ));
                };
                format!("redis+sentinel://{userinfo}{sentinels}/{master}")
            }
            _ => {
                return Err(r.error(
                    "REDIS_TYPE",
                    "expected `single`, `cluster` or `sentinel` (any case)",
                ));
            }
        }
    };
    match ratelimit_core::tools::parse_redis_url(&built) {
        Ok(_) => Ok(built),
        Err(e) => Err(r.error(
            "REDIS_URL",
            format!("{e} (the URL built: {})", redact(&built)),
        )),
    }
}

/// Percent-encodes what a URL's user information cannot hold as it is.
fn encode(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for b in part.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The URL with its password hidden.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let rest = match rest.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => rest.to_owned(),
    };
    let rest = match rest.split_once("pass=") {
        Some((before, _)) => format!("{before}pass=***"),
        None => rest,
    };
    format!("{scheme}://{rest}")
}
