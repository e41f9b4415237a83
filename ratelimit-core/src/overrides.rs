//! Configuration overrides: change any declared limit without recompiling (Spring's
//! `limitProperties`).
//!
//! # The file
//! A TOML file named by `enable_redis_rate_limit!(config = "limits.toml")` or by the
//! environment variable `RATE_LIMIT_CONFIG`. Each table under `limits` names one declared limit
//! (see [`declared_limits`](crate::declared_limits)) and sets any of its fields; fields left
//! out keep their declared values.
//!
//! ```toml
//! [limits."shop::orders::list_orders"]
//! replenish = 10        # tokens per unit, >= 1
//! burst = 100           # bucket capacity, >= 1
//! unit = "minute"       # second | minute | hour | day
//! cost = 2              # tokens per call, 1..=burst
//! policy = "deny"       # while Redis fails: fallback | allow | deny
//! algorithm = "token_bucket" # | fixed_window | sliding_window | sliding_log | leaky_bucket
//! refill = "smooth"     # smooth | interval (token bucket only)
//! initial = 0           # tokens in a new bucket, 0..=burst (token bucket only)
//! shadow = true         # decide and count, never refuse (for rolling out a limit)
//! wait = "2s"           # wait up to this for a turn (ms, s, m), or "none" (token/leaky bucket)
//!
//! [limits."shop::search"]
//! enabled = false       # calls pass unchecked
//! ```
//!
//! # The environment
//! `RATE_LIMIT_OVERRIDE_<NAME>`, where `<NAME>` is the limit's name in upper case with every
//! character other than a letter or digit replaced by `_` (`shop::orders::list_orders` →
//! `RATE_LIMIT_OVERRIDE_SHOP__ORDERS__LIST_ORDERS`), holds comma-separated fields
//! (`replenish=10,burst=100,unit=minute,cost=2,policy=deny,algorithm=sliding_log`) or `disabled`. It wins over the file.
//!
//! The library's variables are `RATE_LIMIT_CONFIG` and `RATE_LIMIT_OVERRIDE_<NAME>` (and
//! `REDIS_URL`). Any other variable whose name starts with `RATE_LIMIT` (in any case) is taken
//! for a mistyped one and is an error, as is an override with no field (an empty value).
//!
//! An override that names no declared limit, or has an invalid value, makes
//! `enable_redis_rate_limit!` fail with an error naming the file or variable, the limit (in
//! the file, the line and column) and the field. A value gets the same message from the file
//! and from the environment: `` `burst` must be a whole number from 1 to 4294967295, not `0` ``.
//!
//! # Limits built at run time
//! A layer's limit built from configuration
//! ([`LayerLimit::new`](crate::http::LayerLimit::new)) is a declared limit from the moment it
//! is built, overridden by its name like any other. Built before `enable_redis_rate_limit!`,
//! enable applies its override with the rest. Built after, its building applies the override
//! at once, read as [`reload_overrides`](crate::reload_overrides) reads them (the file enable
//! read, and the environment, as they are then); an override of a name not built yet is left
//! for later then, but is an error at enable and at a reload, which cannot tell it from a
//! typo: build such limits before enable, or reload after building them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::errors::Error;
use crate::limit::Algorithm;
use crate::limit::FailurePolicy;
use crate::limit::Limit;
use crate::limit::Refill;
use crate::limit::Unit;
pub use crate::registry::Effective;
use crate::registry::{LimitDeclaration, describe_names};

/// The prefix of the per-limit environment variables.
pub const ENV_PREFIX: &str = "RATE_LIMIT_OVERRIDE_";

/// The environment variable naming the overrides file.
pub const CONFIG_VAR: &str = "RATE_LIMIT_CONFIG";

/// What every variable of the library starts with. A variable whose name starts with it (in
/// any case) and is neither [`CONFIG_VAR`] nor [`ENV_PREFIX`]`<NAME>` is taken for a typo of
/// one (`RATE_LIMIT_OVERRIDES_..`, `RATE_LIMIT_OVERIDE_..`, `rate_limit_override_..`) and is
/// an error at start-up, rather than an override silently ignored.
pub const ENV_NAMESPACE: &str = "RATE_LIMIT";

/// The fields one override may set. Each value is checked as it is read, with the same
/// message from the file and from the environment; how the values combine with the declared
/// ones is checked by [`Limit::try_new`] when the override is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Override {
    /// Tokens per unit.
    #[serde(default, deserialize_with = "replenish")]
    pub replenish: Option<u32>,
    /// Bucket capacity.
    #[serde(default, deserialize_with = "burst")]
    pub burst: Option<u32>,
    /// The unit of `replenish`.
    pub unit: Option<Unit>,
    /// Tokens per call.
    #[serde(default, deserialize_with = "cost")]
    pub cost: Option<u32>,
    /// `false` disables the limit.
    pub enabled: Option<bool>,
    /// The failure policy of this limit.
    pub policy: Option<FailurePolicy>,
    /// How the limit counts. A window algorithm's burst is its `replenish` unless `burst` is
    /// given too (and then must equal it).
    pub algorithm: Option<Algorithm>,
    /// How a token bucket refills.
    pub refill: Option<Refill>,
    /// Tokens in a new token bucket.
    #[serde(default, deserialize_with = "initial")]
    pub initial: Option<u32>,
    /// Shadow mode: decide and count, never refuse.
    pub shadow: Option<bool>,
    /// How long a call may wait for its turn (`"2s"`, `"500ms"`, `"1m"`), or `"none"` to
    /// refuse at once: `Some(None)` removes a declared wait.
    #[serde(default, deserialize_with = "wait_from_toml")]
    pub wait: Option<Option<std::time::Duration>>,
    /// A concurrency limit's most calls in flight.
    #[serde(default, deserialize_with = "concurrent")]
    pub concurrent: Option<u32>,
    /// A concurrency limit's lease (`"30s"`, `"1m"`), as `wait` is written.
    #[serde(default, deserialize_with = "lease_from_toml")]
    pub lease: Option<std::time::Duration>,
    /// The most tokens a settlement may leave the bucket owing ([`Limit::max_debt`]; 0: none).
    #[serde(default, deserialize_with = "max_debt")]
    pub max_debt: Option<u32>,
}

/// The fields an override may set, for messages.
const FIELDS: &str = "`replenish`, `burst`, `unit`, `cost`, `enabled`, `policy`, `algorithm`, `refill`, \
     `initial`, `shadow`, `wait`, `concurrent`, `lease`, `max_debt`";

/// The smallest value of a count field: `initial` and `max_debt` may be 0, the others not.
fn least(field: &str) -> u32 {
    u32::from(!matches!(field, "initial" | "max_debt"))
}

/// The one rule for `replenish`, `burst`, `cost` and `initial`, however the value was written.
fn count_error(field: &str, written: &dyn std::fmt::Display) -> String {
    format!(
        "`{field}` must be a whole number from {} to {}, not `{written}`",
        least(field),
        u32::MAX
    )
}

/// A wait as written in the file or the environment, in the one syntax `#[rate_limit(wait =
/// "..")]` takes too (with its messages): a whole number of `ms`, `s` or `m`, or `none`.
fn parse_wait(text: &str) -> Result<Option<std::time::Duration>, String> {
    ratelimit_vocab::parse_wait(text)
        .map(|us| us.map(std::time::Duration::from_micros))
        .map_err(|e| e.to_string())
}

fn wait_from_toml<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<std::time::Duration>>, D::Error> {
    let text = String::deserialize(d)?;
    parse_wait(&text)
        .map(Some)
        .map_err(|why| serde::de::Error::custom(format!("field `wait`: {why}")))
}

/// A lease as written in the file or the environment: a wait's syntax, never `none`.
fn parse_lease(text: &str) -> Result<std::time::Duration, String> {
    ratelimit_vocab::parse_lease(text)
        .map(std::time::Duration::from_micros)
        .map_err(str::to_owned)
}

fn lease_from_toml<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    let text = String::deserialize(d)?;
    parse_lease(&text)
        .map(Some)
        .map_err(|why| serde::de::Error::custom(format!("field `lease`: {why}")))
}

/// A count as written in the environment.
fn count_from_text(field: &str, text: &str) -> Result<u32, Error> {
    text.parse::<u32>()
        .ok()
        .filter(|n| *n >= least(field))
        .ok_or_else(|| Error::Config(count_error(field, &text)))
}

/// A count as written in the file: any TOML value, held to [`count_error`]'s rule.
fn count_from_toml<'de, D: serde::Deserializer<'de>>(
    d: D,
    field: &'static str,
) -> Result<Option<u32>, D::Error> {
    struct Count(&'static str);

    impl serde::de::Visitor<'_> for Count {
        type Value = u32;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "`{}` as a whole number from {} to {}",
                self.0,
                least(self.0),
                u32::MAX
            )
        }

        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<u32, E> {
            match u64::try_from(n) {
                Ok(n) => self.visit_u64(n),
                Err(_) => Err(E::custom(count_error(self.0, &n))),
            }
        }

        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<u32, E> {
            u32::try_from(n)
                .ok()
                .filter(|n| *n >= least(self.0))
                .ok_or_else(|| E::custom(count_error(self.0, &n)))
        }

        fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<u32, E> {
            Err(E::custom(count_error(self.0, &n)))
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<u32, E> {
            Err(E::custom(count_error(self.0, &format_args!("\"{s}\""))))
        }

        fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<u32, E> {
            Err(E::custom(count_error(self.0, &b)))
        }
    }

    d.deserialize_any(Count(field)).map(Some)
}

fn replenish<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    count_from_toml(d, "replenish")
}

fn burst<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    count_from_toml(d, "burst")
}

fn cost<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    count_from_toml(d, "cost")
}

fn initial<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    count_from_toml(d, "initial")
}

fn concurrent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    count_from_toml(d, "concurrent")
}

fn max_debt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    count_from_toml(d, "max_debt")
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    limits: BTreeMap<String, Override>,
}

/// Parses the TOML text of an overrides file into its overrides by limit name.
///
/// # Errors
/// [`Error::Config`] with the parser's message (line and column, unknown fields, a value
/// out of range).
pub fn parse(text: &str) -> Result<BTreeMap<String, Override>, Error> {
    toml::from_str::<File>(text).map(|f| f.limits).map_err(|e| {
        // The table the error is in names the limit: the last header before it.
        let table = e
            .span()
            .and_then(|span| text.get(..span.start))
            .and_then(|before| {
                before
                    .lines()
                    .rev()
                    .map(str::trim)
                    .find(|l| l.starts_with('['))
            });
        match table {
            Some(table) => Error::Config(format!("in `{table}`: {e}")),
            None => Error::Config(e.to_string()),
        }
    })
}

/// Parses the value of a `RATE_LIMIT_OVERRIDE_*` variable.
///
/// # Errors
/// [`Error::Config`] naming the bad field, with the message the file would give.
pub fn parse_env(value: &str) -> Result<Override, Error> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("disabled") || value.eq_ignore_ascii_case("off") {
        return Ok(Override {
            enabled: Some(false),
            ..Override::default()
        });
    }
    let mut o = Override::default();
    if value.split(',').all(|f| f.trim().is_empty()) {
        return Err(Error::Config(
            "the value is empty: give comma-separated fields (`replenish=10,burst=100`) or \
             `disabled`, or unset the variable"
                .to_owned(),
        ));
    }
    for field in value.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let (k, v) = field
            .split_once('=')
            .ok_or_else(|| Error::Config(format!("`{field}` is not `field=value`")))?;
        let (k, v) = (k.trim(), v.trim());
        match k {
            "replenish" => o.replenish = Some(count_from_text(k, v)?),
            "burst" => o.burst = Some(count_from_text(k, v)?),
            "cost" => o.cost = Some(count_from_text(k, v)?),
            "initial" => o.initial = Some(count_from_text(k, v)?),
            "algorithm" => o.algorithm = Some(v.parse().map_err(|e| field_error(k, &e))?),
            "refill" => o.refill = Some(v.parse().map_err(|e| field_error(k, &e))?),
            // The file shows the field at its line; here the message names it.
            "unit" => o.unit = Some(v.parse().map_err(|e| field_error(k, &e))?),
            "policy" => o.policy = Some(v.parse().map_err(|e| field_error(k, &e))?),
            "enabled" => {
                o.enabled = Some(v.parse().map_err(|_| {
                    field_error(k, &format_args!("`{v}` is not `true` or `false`"))
                })?);
            }
            "shadow" => {
                o.shadow = Some(v.parse().map_err(|_| {
                    field_error(k, &format_args!("`{v}` is not `true` or `false`"))
                })?);
            }
            "wait" => o.wait = Some(parse_wait(v).map_err(|why| field_error(k, &why))?),
            "concurrent" => o.concurrent = Some(count_from_text(k, v)?),
            "lease" => o.lease = Some(parse_lease(v).map_err(|why| field_error(k, &why))?),
            "max_debt" => o.max_debt = Some(count_from_text(k, v)?),
            other => {
                return Err(Error::Config(format!(
                    "unknown field `{other}`, expected one of {FIELDS}"
                )));
            }
        }
    }
    Ok(o)
}

fn field_error(field: &str, why: &dyn std::fmt::Display) -> Error {
    Error::Config(format!("field `{field}`: {why}"))
}

/// The environment variable that overrides the limit called `name`.
pub(crate) fn env_var_name(name: &str) -> String {
    let mut out = String::from(ENV_PREFIX);
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    out
}

/// The overrides found for one enable: from the file and from the environment, each with the
/// place it came from for error messages.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    by_name: BTreeMap<String, Vec<(String, Override)>>,
}

/// The overrides of `decls` in `file` and the environment; an override that names no
/// declared limit is an error.
pub(crate) fn load(file: Option<&Path>, decls: &[&LimitDeclaration]) -> Result<Overrides, Error> {
    read(file, env(), decls, Unknown::Refuse)
}

/// The overrides of `decls` in `file` and the environment, leaving out those of names not
/// declared (yet): for a layer's limit built at run time after enable, whose building must
/// not fail for an override of a limit that the program builds next.
#[cfg_attr(not(feature = "http-framework"), allow(dead_code))]
pub(crate) fn load_known(
    file: Option<&Path>,
    decls: &[&LimitDeclaration],
) -> Result<Overrides, Error> {
    read(file, env(), decls, Unknown::Skip)
}

/// The environment's variables that belong to the library, or look as if they were meant to.
fn env() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| {
        let k = k.into_string().ok()?;
        looks_ours(&k).then(|| (k, v.to_string_lossy().into_owned()))
    })
}

/// What an override that names no declared limit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unknown {
    /// An error: a typo of a limit's name, most likely.
    Refuse,
    /// Left out: the limit of a name built at run time, not built yet.
    #[cfg_attr(not(feature = "http-framework"), allow(dead_code))]
    Skip,
}

/// What follows the declared limits in the error of an override that names none of them: a
/// limit built at run time is declared once built.
const BUILT_LATER: &str = "(a layer's limit built at run time, by `LayerLimit::new`, can be \
     named once it is built: build it before `enable_redis_rate_limit!`, or reload the \
     overrides after building it)";

/// Whether the variable `name` belongs to the library, or was meant to (see
/// [`ENV_NAMESPACE`]).
fn looks_ours(name: &str) -> bool {
    name.get(..ENV_NAMESPACE.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(ENV_NAMESPACE))
}

/// The error for `var`, which starts like the library's variables and is none of them.
fn not_ours(var: &str, decls: &[&LimitDeclaration]) -> String {
    // `RATE_LIMIT_OVERRIDES_SHOP__ORDERS`: the limit whose variable's tail it ends with.
    let meant = decls
        .iter()
        .map(|d| env_var_name(d.name()))
        .filter(|known| {
            let tail = &known[ENV_PREFIX.len()..];
            var.len() > tail.len() && var.to_ascii_uppercase().ends_with(&format!("_{tail}"))
        })
        .max_by_key(String::len);
    let hint = match meant {
        Some(known) => format!(" (did you mean `{known}`?)"),
        None => String::new(),
    };
    format!(
        "the environment variable `{var}` is not one of redis-ratelimit's{hint}: they are \
         `{CONFIG_VAR}` (the overrides file) and `{ENV_PREFIX}<NAME>` (one limit's \
         override), and any other variable starting with `{ENV_NAMESPACE}` is taken for a \
         typo of them; rename or unset it"
    )
}

/// [`load`] with the environment given, for tests.
#[cfg(test)]
fn load_from(
    file: Option<&Path>,
    env: impl Iterator<Item = (String, String)>,
    decls: &[&LimitDeclaration],
) -> Result<Overrides, Error> {
    read(file, env, decls, Unknown::Refuse)
}

/// The overrides of `decls` in `file` and `env`, an override of another name `unknown`.
fn read(
    file: Option<&Path>,
    env: impl Iterator<Item = (String, String)>,
    decls: &[&LimitDeclaration],
    unknown: Unknown,
) -> Result<Overrides, Error> {
    let declared = |name: &str| decls.iter().any(|d| d.name() == name);
    let mut out = Overrides::default();
    if let Some(path) = file {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!("cannot read the rate-limit config `{shown}`: {e}"))
        })?;
        let limits = parse(&text).map_err(|e| Error::Config(format!("{shown}: {e}")))?;
        for (name, o) in limits {
            if !declared(&name) {
                if unknown == Unknown::Skip {
                    continue;
                }
                return Err(Error::Config(format!(
                    "{shown}: `[limits.\"{name}\"]` names no declared limit; declared limits: \
                     {} {BUILT_LATER}",
                    describe_names(decls)
                )));
            }
            out.by_name
                .entry(name)
                .or_default()
                .push((shown.clone(), o));
        }
    }
    for (var, value) in env {
        let var = var.as_str();
        if var == CONFIG_VAR || !looks_ours(var) {
            continue;
        }
        if !var.starts_with(ENV_PREFIX) {
            return Err(Error::Config(not_ours(var, decls)));
        }
        // By name: a declaration and its `shared = ".."` uses are one limit.
        let mut targets: Vec<&str> = decls
            .iter()
            .map(|d| d.name())
            .filter(|name| env_var_name(name) == var)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        let name = match targets.as_slice() {
            [one] => *one,
            [] if unknown == Unknown::Skip => continue,
            [] => {
                return Err(Error::Config(format!(
                    "{var} names no declared limit; declared limits: {} {BUILT_LATER}",
                    describe_names(decls)
                )));
            }
            _ => {
                return Err(Error::Config(format!(
                    "{var} matches several limits ({}); rename one with `name = \"..\"`",
                    targets.join(", ")
                )));
            }
        };
        let o =
            parse_env(&value).map_err(|e| Error::Config(format!("{var}: limit `{name}`: {e}")))?;
        out.by_name
            .entry(name.to_owned())
            .or_default()
            .push((var.to_owned(), o));
    }
    Ok(out)
}

impl Overrides {
    /// The effective limit of `decl`: declared values, then the file, then the environment.
    pub(crate) fn apply(&self, decl: &LimitDeclaration) -> Result<Effective, Error> {
        let mut cost = decl.declared_cost();
        let mut enabled = true;
        let mut limit = decl.declared_limit();
        // Each source is validated as it is applied, so an error names the one that made the
        // limit invalid.
        for (source, o) in self.by_name.get(decl.name()).into_iter().flatten() {
            let fail = |fields: &[&str], why: &dyn std::fmt::Display| {
                let fields = match fields {
                    [one] => format!("field `{one}`"),
                    [init @ .., last] => format!("fields `{}` and `{last}`", init.join("`, `")),
                    [] => "a field".to_owned(),
                };
                Error::Config(format!(
                    "{source}: limit `{}`: {fields}: {why}",
                    decl.name()
                ))
            };
            if limit.is_concurrent() {
                // A concurrency limit keeps its kind: an override switches it, changes its
                // policy, shadow mode or wait; a rate's fields would make it a rate limit.
                let rate_fields = [
                    ("replenish", o.replenish.is_some()),
                    ("burst", o.burst.is_some()),
                    ("unit", o.unit.is_some()),
                    ("cost", o.cost.is_some()),
                    ("algorithm", o.algorithm.is_some()),
                    ("refill", o.refill.is_some()),
                    ("initial", o.initial.is_some()),
                    ("max_debt", o.max_debt.is_some()),
                ];
                if let Some(&(field, _)) = rate_fields.iter().find(|(_, set)| *set) {
                    return Err(fail(
                        &[field],
                        &"a concurrency limit has no rate: an override of it may set \
                          `concurrent`, `lease`, `enabled`, `policy`, `shadow` and `wait`",
                    ));
                }
                if let Some(max) = o.concurrent {
                    // The same limit with another max: its lease, wait, policy and shadow kept.
                    let mut again =
                        Limit::try_concurrent(max).map_err(|e| fail(&["concurrent"], &e))?;
                    if let Some(lease) = limit.lease_time() {
                        again = again.try_lease(lease).map_err(|e| fail(&["lease"], &e))?;
                    }
                    if let Some(wait) = limit.max_wait() {
                        again = again.try_wait(wait).map_err(|e| fail(&["wait"], &e))?;
                    }
                    limit = again
                        .with_failure_policy(limit.failure_policy())
                        .with_shadow(limit.is_shadow());
                }
                if let Some(lease) = o.lease {
                    limit = limit.try_lease(lease).map_err(|e| fail(&["lease"], &e))?;
                }
                limit = limit
                    .with_failure_policy(o.policy.or(limit.failure_policy()))
                    .with_shadow(o.shadow.unwrap_or(limit.is_shadow()));
                match o.wait {
                    Some(Some(wait)) => {
                        limit = limit.try_wait(wait).map_err(|e| fail(e.fields(), &e))?;
                    }
                    Some(None) => limit = limit.without_wait(),
                    None => {}
                }
                enabled = o.enabled.unwrap_or(enabled);
                continue;
            }
            if let Some(field) = [
                ("concurrent", o.concurrent.is_some()),
                ("lease", o.lease.is_some()),
            ]
            .into_iter()
            .find_map(|(field, set)| set.then_some(field))
            {
                return Err(fail(
                    &[field],
                    &"a rate limit has no slots: `concurrent` and `lease` are a concurrency \
                      limit's (declare it with `concurrent = ..`)",
                ));
            }
            let algorithm = o.algorithm.unwrap_or(limit.algorithm_kind());
            let replenish = o.replenish.unwrap_or(limit.replenish());
            // A window's burst is its replenish; a token bucket keeps the burst it had.
            let burst = match o.burst {
                Some(burst) => burst,
                None if algorithm.is_window() => replenish,
                None => limit.burst_capacity(),
            };
            let refill = match (o.refill, algorithm.is_window()) {
                (Some(refill), _) => refill,
                (None, true) => Refill::Smooth,
                (None, false) => limit.refill_kind(),
            };
            let initial = match (o.initial, algorithm.is_window()) {
                (Some(initial), _) => Some(initial),
                (None, true) => None,
                (None, false) => limit.initial_tokens_set(),
            };
            let policy = o.policy.or(limit.failure_policy());
            let shadow = o.shadow.unwrap_or(limit.is_shadow());
            let wait = limit.max_wait();
            // A unit named anew is built as a unit (a week or a month is a calendar period);
            // a quota by calendar period keeps its period, and its anchor and clock where the
            // override leaves its unit as it was.
            let rebuilt = match (o.unit, limit.calendar()) {
                (Some(unit), _) => {
                    Limit::from_unit(replenish, burst, unit, algorithm, refill, initial)
                }
                (None, Some(calendar)) => Limit::from_unit(
                    replenish,
                    burst,
                    limit.unit().unwrap_or(Unit::Month),
                    algorithm,
                    refill,
                    initial,
                )
                .map(|l| l.keeping_calendar(calendar)),
                (None, None) => {
                    Limit::from_parts(replenish, burst, limit.period(), algorithm, refill, initial)
                }
            };
            limit = rebuilt
                .map_err(|e| fail(e.fields(), &e))?
                .with_failure_policy(policy)
                .with_shadow(shadow)
                .with_max_debt(o.max_debt.or(limit.max_debt_set()));
            if o.max_debt.is_some() && !limit.settles() {
                return Err(fail(
                    &["max_debt"],
                    &format_args!(
                        "{limit} cannot owe tokens, so it has no debt to bound (a sliding \
                         window or an interval refill)"
                    ),
                ));
            }
            // The declared wait stays unless the override sets one or removes it (`none`); one
            // the new limit cannot have says so.
            if let Some(wait) = o.wait.unwrap_or(wait) {
                limit = limit.try_wait(wait).map_err(|e| fail(e.fields(), &e))?;
            }
            cost = o.cost.unwrap_or(cost);
            enabled = o.enabled.unwrap_or(enabled);
            if cost > limit.burst_capacity() {
                return Err(fail(
                    &["cost"],
                    &format_args!(
                        "cost {cost} exceeds burst {}, so no call could ever pass",
                        limit.burst_capacity()
                    ),
                ));
            }
        }
        Ok(Effective {
            limit,
            cost,
            enabled,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Limit;

    static ORDERS: LimitDeclaration = LimitDeclaration::new(
        "shop::orders",
        Limit::per_minute(3).burst(300),
        1,
        "User",
        "src/orders.rs",
        7,
    );
    static SEARCH: LimitDeclaration = LimitDeclaration::new(
        "shop::search",
        Limit::per_second(100).on_failure(FailurePolicy::Allow),
        2,
        "Global",
        "src/search.rs",
        9,
    );

    static FETCH: LimitDeclaration = LimitDeclaration::new(
        "crawl::fetch",
        Limit::per_second(10)
            .burst(1)
            .wait(std::time::Duration::from_secs(2)),
        1,
        "Uri",
        "src/crawl.rs",
        3,
    );

    static QUOTA: LimitDeclaration = LimitDeclaration::new(
        "api::quota",
        Limit::per_month(10_000).anchor(15).utc_offset(120),
        1,
        "User",
        "src/api.rs",
        9,
    );

    fn decls() -> Vec<&'static LimitDeclaration> {
        vec![&ORDERS, &SEARCH, &FETCH, &QUOTA]
    }

    #[test]
    fn a_quota_by_calendar_period_keeps_its_calendar_or_is_made_one() {
        // A new count keeps the month, its billing day and its clock: never 31 days on end.
        let o = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_API__QUOTA", "replenish=20000")]),
            &decls(),
        )
        .unwrap();
        let quota = o.apply(&QUOTA).unwrap().limit;
        assert_eq!(quota.replenish(), 20_000);
        assert_eq!(quota.calendar(), QUOTA.declared_limit().calendar());
        // A week instead: a calendar week, from Monday.
        let f = file("[limits.\"api::quota\"]\nunit = \"week\"\n");
        let o = load_from(Some(&f.0), env(&[]), &decls()).unwrap();
        let weekly = o.apply(&QUOTA).unwrap().limit;
        assert_eq!(
            weekly.calendar(),
            ratelimit_algorithms::calendar::Calendar::week(1, 0)
        );
        // A day's limit made a month's: a fixed window of months.
        let o = load_from(
            None,
            env(&[(
                "RATE_LIMIT_OVERRIDE_SHOP__SEARCH",
                "unit=month,algorithm=fixed_window",
            )]),
            &decls(),
        )
        .unwrap();
        let search = o.apply(&SEARCH).unwrap().limit;
        assert_eq!(search.unit(), Some(Unit::Month));
        assert!(search.calendar().is_some());
        // A calendar period counted otherwise is refused, naming the fields.
        let o = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_API__QUOTA", "algorithm=token_bucket")]),
            &decls(),
        )
        .unwrap();
        let err = o.apply(&QUOTA).unwrap_err().to_string();
        assert!(err.contains("calendar period"), "{err}");
    }

    /// A limit's debt bound is set by the file and by the environment (`0`: no debt), kept by
    /// later overrides that do not name it, and refused where there is no debt to bound.
    #[test]
    fn the_debt_bound_is_overridden() {
        let f = file("[limits.\"shop::orders\"]\nmax_debt = 500\n");
        let o = load_from(Some(&f.0), env(&[]), &decls()).unwrap();
        assert_eq!(o.apply(&ORDERS).unwrap().limit.debt_bound(), 500);
        let o = load_from(
            Some(&f.0),
            env(&[("RATE_LIMIT_OVERRIDE_SHOP__ORDERS", "replenish=9")]),
            &decls(),
        )
        .unwrap();
        assert_eq!(o.apply(&ORDERS).unwrap().limit.debt_bound(), 500);
        let o = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_SHOP__ORDERS", "max_debt=0")]),
            &decls(),
        )
        .unwrap();
        assert_eq!(o.apply(&ORDERS).unwrap().limit.debt_bound(), 0);
        let o = load_from(
            None,
            env(&[(
                "RATE_LIMIT_OVERRIDE_SHOP__ORDERS",
                "algorithm=sliding_window,max_debt=10",
            )]),
            &decls(),
        )
        .unwrap();
        let err = o.apply(&ORDERS).unwrap_err().to_string();
        assert!(
            err.contains("field `max_debt`") && err.contains("cannot owe"),
            "{err}"
        );
    }

    /// A limit used by another function (`shared = ".."`) is one limit under one variable,
    /// as in the file (issue 44: "matches several limits (gw.search, gw.search)").
    #[test]
    fn a_shared_limit_is_overridden_by_its_one_variable() {
        static USE: LimitDeclaration =
            LimitDeclaration::sharing("shop::search", 1, "Global", "src/other.rs", 4);
        let mut with_use = decls();
        with_use.push(&USE);
        let o = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_SHOP__SEARCH", "replenish=7")]),
            &with_use,
        )
        .unwrap();
        assert_eq!(o.apply(&SEARCH).unwrap().limit.replenish(), 7);
    }

    #[test]
    fn shadow_is_switched_and_a_declared_wait_stays() {
        let o = load_from(
            None,
            env(&[
                ("RATE_LIMIT_OVERRIDE_SHOP__ORDERS", "shadow=true"),
                ("RATE_LIMIT_OVERRIDE_CRAWL__FETCH", "replenish=20"),
            ]),
            &decls(),
        )
        .unwrap();
        assert!(o.apply(&ORDERS).unwrap().limit.is_shadow());
        let fetch = o.apply(&FETCH).unwrap().limit;
        assert_eq!(fetch.replenish(), 20);
        assert_eq!(fetch.max_wait(), Some(std::time::Duration::from_secs(2)));
        // A window cannot wait: the override says which fields clash.
        let o = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_CRAWL__FETCH", "algorithm=fixed_window")]),
            &decls(),
        )
        .unwrap();
        let err = o.apply(&FETCH).unwrap_err().to_string();
        assert!(
            err.contains("`wait`") && err.contains("cannot wait"),
            "{err}"
        );
        // ... unless it removes the wait too; or another wait, from the file or the
        // environment alike.
        let o = load_from(
            None,
            env(&[(
                "RATE_LIMIT_OVERRIDE_CRAWL__FETCH",
                "algorithm=fixed_window,wait=none",
            )]),
            &decls(),
        )
        .unwrap();
        assert_eq!(o.apply(&FETCH).unwrap().limit.max_wait(), None);
        let f = file("[limits.\"crawl::fetch\"]\nwait = \"500ms\"\n");
        let o = load_from(Some(&f.0), env(&[]), &decls()).unwrap();
        assert_eq!(
            o.apply(&FETCH).unwrap().limit.max_wait(),
            Some(std::time::Duration::from_millis(500))
        );
        for bad in ["2", "2h", "+2s", "0s", "1.5s", "1441m", "5000000000ms"] {
            let err = load_from(
                None,
                env(&[("RATE_LIMIT_OVERRIDE_CRAWL__FETCH", &format!("wait={bad}"))]),
                &decls(),
            )
            .unwrap_err()
            .to_string();
            // The macro's message for `wait = "{bad}"`, after the field's name.
            let why = ratelimit_vocab::parse_wait(bad).unwrap_err().to_string();
            assert!(
                err.contains(&format!("field `wait`: {why}")),
                "{bad}: {err}"
            );
        }
        let f = file("[limits.\"crawl::fetch\"]\nwait = \"2 s\"\n");
        let err = load_from(Some(&f.0), env(&[]), &decls())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("field `wait`") && err.contains("crawl::fetch"),
            "{err}"
        );
        assert!(
            load_from(
                None,
                env(&[("RATE_LIMIT_OVERRIDE_SHOP__ORDERS", "shadow=maybe")]),
                &decls()
            )
            .is_err()
        );
    }

    fn file(text: &str) -> tempfile_path::TempFile {
        tempfile_path::TempFile::new(text)
    }

    /// A file in the system's temporary directory, removed when dropped.
    mod tempfile_path {
        pub(super) struct TempFile(pub(super) std::path::PathBuf);
        impl TempFile {
            pub(super) fn new(text: &str) -> TempFile {
                use std::hash::BuildHasher;
                let n = std::collections::hash_map::RandomState::new().hash_one(text);
                let path = std::env::temp_dir()
                    .join(format!("rl-overrides-{}-{n:x}.toml", std::process::id()));
                std::fs::write(&path, text).unwrap();
                TempFile(path)
            }
        }
        impl Drop for TempFile {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    fn env(pairs: &[(&str, &str)]) -> impl Iterator<Item = (String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn the_file_then_the_environment_change_declared_limits() {
        let f = file(
            "[limits.\"shop::orders\"]\nreplenish = 10\nunit = \"hour\"\npolicy = \"allow\"\n\n[limits.\"shop::search\"]\nenabled = false\n",
        );
        let o = load_from(
            Some(&f.0),
            env(&[
                (
                    "RATE_LIMIT_OVERRIDE_SHOP__ORDERS",
                    "burst=50,cost=5,policy=deny",
                ),
                ("UNRELATED", "x"),
            ]),
            &decls(),
        )
        .unwrap();
        let orders = o.apply(&ORDERS).unwrap();
        assert_eq!(
            orders.limit,
            Limit::per_hour(10)
                .burst(50)
                .on_failure(FailurePolicy::Deny)
        );
        assert_eq!((orders.cost, orders.enabled), (5, true));
        let search = o.apply(&SEARCH).unwrap();
        assert_eq!(
            (search.limit, search.cost, search.enabled),
            (
                Limit::per_second(100).on_failure(FailurePolicy::Allow),
                2,
                false
            )
        );
        // Without overrides, the declared policy stays.
        let none = load_from(None, env(&[]), &decls()).unwrap();
        assert_eq!(
            none.apply(&SEARCH).unwrap().limit.failure_policy(),
            Some(FailurePolicy::Allow)
        );
        assert_eq!(none.apply(&ORDERS).unwrap().limit.failure_policy(), None);
    }

    #[test]
    fn a_mistyped_or_empty_variable_is_an_error() {
        let load = |var: &str, value: &str| {
            load_from(None, env(&[(var, value), ("UNRELATED", "x")]), &decls())
                .map(drop)
                .map_err(|e| e.to_string())
        };
        for var in [
            "RATE_LIMIT_OVERRIDES_SHOP__ORDERS",
            "RATE_LIMIT_OVERIDE_SHOP__ORDERS",
            "rate_limit_override_shop__orders",
            "RATE_LIMITS_OVERRIDE_SHOP__ORDERS",
        ] {
            let e = load(var, "burst=5").unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "the environment variable `{var}` is not one of redis-ratelimit's (did you \
                     mean `RATE_LIMIT_OVERRIDE_SHOP__ORDERS`?)"
                )),
                "{e}"
            );
            assert!(
                e.contains("`RATE_LIMIT_CONFIG` (the overrides file)"),
                "{e}"
            );
        }
        let e = load("RATE_LIMIT_CONFIGS", "limits.toml").unwrap_err();
        assert!(
            e.starts_with("the environment variable `RATE_LIMIT_CONFIGS` is not one of redis-ratelimit's: they are"),
            "{e}"
        );
        for empty in ["", "  ", " , ,"] {
            let e = load("RATE_LIMIT_OVERRIDE_SHOP__ORDERS", empty).unwrap_err();
            assert!(
                e.starts_with(
                    "RATE_LIMIT_OVERRIDE_SHOP__ORDERS: limit `shop::orders`: the value is empty"
                ),
                "{e}"
            );
        }
        // The library's own variables, and others' that only look alike.
        assert_eq!(load("RATE_LIMIT_CONFIG", "limits.toml"), Ok(()));
        assert_eq!(load("RATELIMIT_WHATEVER", "x"), Ok(()));
        assert_eq!(load("MY_RATE_LIMIT", "x"), Ok(()));
        assert_eq!(load("RATE_LIMIT_OVERRIDE_SHOP__ORDERS", "burst=5"), Ok(()));
    }

    #[test]
    fn errors_name_the_source_the_limit_and_the_field() {
        let f = file("[limits.\"shop::ordres\"]\nreplenish = 1\n");
        let e = load_from(Some(&f.0), env(&[]), &decls())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("names no declared limit") && e.contains("shop::ordres"),
            "{e}"
        );
        assert!(e.contains(&f.0.display().to_string()), "{e}");
        assert!(e.contains("shop::orders, shop::search"), "{e}");

        let e = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_SHOP__NOPE", "burst=1")]),
            &decls(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("RATE_LIMIT_OVERRIDE_SHOP__NOPE names no declared limit"),
            "{e}"
        );

        // A bad value in the file is reported where it stands: file, line and column.
        let f = file("[limits.\"shop::orders\"]\nburst = 0\n");
        let e = load_from(Some(&f.0), env(&[]), &decls())
            .unwrap_err()
            .to_string();
        assert!(e.contains(&f.0.display().to_string()), "{e}");
        assert!(e.contains("line 2, column 9"), "{e}");
        assert!(e.contains("`burst` must be a whole number from 1"), "{e}");

        let o = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_SHOP__SEARCH", "cost=101")]),
            &decls(),
        )
        .unwrap();
        let e = o.apply(&SEARCH).unwrap_err().to_string();
        assert!(
            e.starts_with("RATE_LIMIT_OVERRIDE_SHOP__SEARCH: limit `shop::search`: field `cost`"),
            "{e}"
        );

        for (value, message) in [
            (
                "unit=fortnight",
                "field `unit`: unknown unit `fortnight`; expected one of `second`, `minute`, `hour`, `day`, `week`, `month`",
            ),
            (
                "policy=sometimes",
                "field `policy`: unknown failure policy `sometimes`; expected one of `fallback`, `allow`, `deny`",
            ),
        ] {
            let e = load_from(
                None,
                env(&[("RATE_LIMIT_OVERRIDE_SHOP__SEARCH", value)]),
                &decls(),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("limit `shop::search`: {message}")),
                "{e}"
            );
        }

        // The file gives the same messages, at the value's line and column.
        for (text, message) in [
            (
                "policy = \"sometimes\"",
                "unknown failure policy `sometimes`; expected one of `fallback`, `allow`, `deny`",
            ),
            ("policy = 3", "expected one of `fallback`, `allow`, `deny`"),
            (
                "unit = \"fortnight\"",
                "unknown unit `fortnight`; expected one of `second`, `minute`, `hour`, `day`, `week`, `month`",
            ),
            (
                "unit = 60",
                "expected one of `second`, `minute`, `hour`, `day`, `week`, `month`",
            ),
        ] {
            let f = file(&format!("[limits.\"shop::search\"]\n{text}\n"));
            let e = load_from(Some(&f.0), env(&[]), &decls())
                .unwrap_err()
                .to_string();
            assert!(e.contains(&f.0.display().to_string()), "{e}");
            assert!(e.contains("line 2"), "{e}");
            assert!(e.contains(message), "{text}: {e}");
        }

        let e = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_SHOP__SEARCH", "burst=-1")]),
            &decls(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("limit `shop::search`: `burst` must be a whole number from 1"),
            "{e}"
        );

        let missing = std::path::Path::new("/nonexistent/limits.toml");
        let e = load_from(Some(missing), env(&[]), &decls())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot read the rate-limit config `/nonexistent/limits.toml`"),
            "{e}"
        );
    }

    /// The one message for a bad count, wherever it was written and whatever it was.
    fn count_rule(field: &str) -> String {
        format!("`{field}` must be a whole number from 1 to 4294967295")
    }

    #[test]
    fn a_bad_count_has_one_message_in_the_file_and_the_environment() {
        for field in ["replenish", "burst", "cost"] {
            for (bad, in_toml) in [
                ("0", "0"),
                ("-1", "-1"),
                ("4294967296", "4294967296"),
                ("zero", "\"zero\""),
                ("1.5", "1.5"),
                ("", "\"\""),
                ("true", "true"),
            ] {
                let toml = format!("[limits.\"shop::orders\"]\n{field} = {in_toml}\n");
                let from_file = parse(&toml).and_then(|o| {
                    o.get("shop::orders")
                        .map_or(Ok(()), |o| apply_one(o).map(drop))
                });
                let env = format!("{field}={bad}");
                let from_env = parse_env(&env).and_then(|o| apply_one(&o).map(drop));
                for (where_, result) in [("file", from_file), ("env", from_env)] {
                    let e = result.expect_err(&format!("{where_}: {field} = {bad}"));
                    assert!(
                        e.to_string().contains(&count_rule(field)),
                        "{where_}: {field} = {bad}: {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_concurrency_limit_keeps_its_kind_and_refuses_a_rate() {
        static EXPORTS: LimitDeclaration =
            LimitDeclaration::new("exports", Limit::concurrent(2), 1, "Global", "f", 1);
        let apply = |env: &str| {
            let mut overrides = Overrides::default();
            overrides
                .by_name
                .entry("exports".to_owned())
                .or_default()
                .push(("test".to_owned(), parse_env(env).unwrap()));
            overrides.apply(&EXPORTS)
        };
        let e = apply("shadow=true,wait=2s,policy=deny").unwrap();
        assert_eq!(
            e.limit,
            Limit::concurrent(2)
                .shadow()
                .wait(std::time::Duration::from_secs(2))
                .on_failure(FailurePolicy::Deny)
        );
        assert!(!apply("enabled=false").unwrap().enabled);
        let e = apply("replenish=5").unwrap_err().to_string();
        assert!(
            e.contains("field `replenish`") && e.contains("no rate"),
            "{e}"
        );
    }

    /// A concurrency limit's max and lease are overridden like a rate: the rest of it (its
    /// wait, policy) kept; a rate limit has neither, and says so; the file takes them too.
    #[test]
    fn a_concurrency_limit_changes_its_max_and_lease() {
        use std::time::Duration;
        static RUNS: LimitDeclaration = LimitDeclaration::new(
            "runs",
            Limit::concurrent(2)
                .wait(Duration::from_secs(1))
                .on_failure(FailurePolicy::Deny),
            1,
            "Global",
            "f",
            1,
        );
        let apply = |decl: &LimitDeclaration, env: &str| {
            let mut overrides = Overrides::default();
            overrides
                .by_name
                .entry(decl.name().to_owned())
                .or_default()
                .push(("test".to_owned(), parse_env(env).unwrap()));
            overrides.apply(decl)
        };
        let e = apply(&RUNS, "concurrent=5").unwrap();
        let expected = Limit::concurrent(5)
            .wait(Duration::from_secs(1))
            .on_failure(FailurePolicy::Deny);
        assert_eq!(e.limit, expected);
        let e = apply(&RUNS, "lease=10s,concurrent=3").unwrap();
        assert_eq!(e.limit.max_in_flight(), Some(3));
        assert_eq!(e.limit.lease_time(), Some(Duration::from_secs(10)));
        assert_eq!(e.limit.max_wait(), Some(Duration::from_secs(1)));
        let e = parse_env("lease=2000m").unwrap_err().to_string();
        assert!(
            e.contains("`lease` takes a duration from 1 ms to a day"),
            "{e}"
        );
        assert!(parse_env("lease=none").is_err() && parse_env("lease=2d").is_err());
        assert!(parse_env("concurrent=0").is_err());
        let e = apply(&ORDERS, "concurrent=3").unwrap_err().to_string();
        assert!(
            e.contains("field `concurrent`") && e.contains("no slots"),
            "{e}"
        );
        let file = parse("[limits.runs]\nconcurrent = 4\nlease = \"1m\"\n").unwrap();
        assert_eq!(file["runs"].concurrent, Some(4));
        assert_eq!(file["runs"].lease, Some(Duration::from_secs(60)));
    }

    /// `o` applied to `shop::orders`, as the only override.
    fn apply_one(o: &Override) -> Result<Effective, Error> {
        let mut overrides = Overrides::default();
        overrides
            .by_name
            .entry("shop::orders".to_owned())
            .or_default()
            .push(("test".to_owned(), o.clone()));
        overrides.apply(&ORDERS)
    }

    #[test]
    fn each_error_names_its_own_fields() {
        // 1,000,003 per day with a burst of 2^32 - 1 is too fine: the three fields together,
        // not `burst` alone, even when the override sets only some of them.
        for env in [
            "replenish=1000003,burst=4294967295,unit=day",
            "replenish=1000003,unit=day",
        ] {
            let mut o = parse_env(env).unwrap();
            if o.burst.is_none() {
                // Declared burst 300 is fine-grained enough; the file's burst is not.
                o.burst = Some(u32::MAX);
            }
            let e = apply_one(&o).unwrap_err().to_string();
            assert!(
                e.contains("limit `shop::orders`: fields `replenish`, `burst` and `unit`: "),
                "{env}: {e}"
            );
            assert!(e.contains("too fine-grained"), "{env}: {e}");
        }
        let e = apply_one(&parse_env("cost=301").unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("limit `shop::orders`: field `cost`: cost 301 exceeds burst 300"),
            "{e}"
        );
    }

    #[test]
    fn file_format() {
        let o = parse(
            "[limits.\"a::b\"]\nreplenish = 10\nburst = 100\nunit = \"minute\"\ncost = 2\n\n[limits.c]\nenabled = false\n",
        )
        .unwrap();
        assert_eq!(o["a::b"].replenish, Some(10));
        assert_eq!(o["a::b"].unit, Some(Unit::Minute));
        assert_eq!(o["c"].enabled, Some(false));
    }

    #[test]
    fn file_errors_name_the_field() {
        let e = parse("[limits.a]\nbursts = 3\n").unwrap_err().to_string();
        assert!(e.contains("bursts"), "{e}");
        let e = parse("[limits.a]\nburst = -3\n").unwrap_err().to_string();
        assert!(e.contains("burst"), "{e}");
    }

    proptest::proptest! {
        /// The parsers answer any input with a value or an error, never a panic.
        #[test]
        fn parsers_never_panic(text in ".{0,200}", env in "[a-z=,0-9 ]{0,60}") {
            let _ = parse(&text);
            let _ = parse(&format!("[limits.a]\n{text}"));
            let _ = parse_env(&env);
        }
    }

    #[test]
    fn env_format() {
        let o = parse_env("replenish=5, unit=hour,cost=1").unwrap();
        assert_eq!(
            (o.replenish, o.unit, o.cost),
            (Some(5), Some(Unit::Hour), Some(1))
        );
        assert_eq!(parse_env("disabled").unwrap().enabled, Some(false));
        assert!(
            parse_env("burst=x")
                .unwrap_err()
                .to_string()
                .contains("`burst`")
        );
        assert!(
            parse_env("bust=1")
                .unwrap_err()
                .to_string()
                .contains("unknown field `bust`")
        );
        assert_eq!(
            env_var_name("shop::orders::list"),
            "RATE_LIMIT_OVERRIDE_SHOP__ORDERS__LIST"
        );
    }
}
