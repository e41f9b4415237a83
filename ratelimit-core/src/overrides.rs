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
//!
//! [limits."shop::search"]
//! enabled = false       # calls pass unchecked
//! ```
//!
//! # The environment
//! `RATE_LIMIT_OVERRIDE_<NAME>`, where `<NAME>` is the limit's name in upper case with every
//! character other than a letter or digit replaced by `_` (`shop::orders::list_orders` →
//! `RATE_LIMIT_OVERRIDE_SHOP__ORDERS__LIST_ORDERS`), holds comma-separated fields
//! (`replenish=10,burst=100,unit=minute,cost=2,policy=deny`) or `disabled`. It wins over the file.
//!
//! An override that names no declared limit, or has an invalid value, makes
//! `enable_redis_rate_limit!` fail with an error naming the file or variable, the limit and
//! the field.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::registry::{Effective, LimitDeclaration, describe_names};
use crate::{Error, FailurePolicy, Limit, Unit};

/// The prefix of the per-limit environment variables.
pub const ENV_PREFIX: &str = "RATE_LIMIT_OVERRIDE_";

/// The fields one override may set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Override {
    /// Tokens per unit.
    pub replenish: Option<u32>,
    /// Bucket capacity.
    pub burst: Option<u32>,
    /// The unit of `replenish`.
    pub unit: Option<String>,
    /// Tokens per call.
    pub cost: Option<u32>,
    /// `false` disables the limit.
    pub enabled: Option<bool>,
    /// The failure policy of this limit: `fallback`, `allow` or `deny`.
    pub policy: Option<String>,
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
/// [`Error::Config`] with the parser's message (line and column, unknown fields).
pub fn parse(text: &str) -> Result<BTreeMap<String, Override>, Error> {
    toml::from_str::<File>(text)
        .map(|f| f.limits)
        .map_err(|e| Error::Config(e.to_string()))
}

/// Parses the value of a `RATE_LIMIT_OVERRIDE_*` variable.
///
/// # Errors
/// [`Error::Config`] naming the bad field.
pub fn parse_env(value: &str) -> Result<Override, Error> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("disabled") || value.eq_ignore_ascii_case("off") {
        return Ok(Override {
            enabled: Some(false),
            ..Override::default()
        });
    }
    let mut o = Override::default();
    for field in value.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let (k, v) = field
            .split_once('=')
            .ok_or_else(|| Error::Config(format!("`{field}` is not `field=value`")))?;
        let (k, v) = (k.trim(), v.trim());
        let number = || {
            v.parse::<u32>().map_err(|_| {
                Error::Config(format!(
                    "field `{k}`: `{v}` is not a whole number from 0 to {}",
                    u32::MAX
                ))
            })
        };
        match k {
            "replenish" => o.replenish = Some(number()?),
            "burst" => o.burst = Some(number()?),
            "cost" => o.cost = Some(number()?),
            "unit" => o.unit = Some(v.to_owned()),
            "policy" => o.policy = Some(v.to_owned()),
            "enabled" => {
                o.enabled = Some(v.parse().map_err(|_| {
                    Error::Config(format!("field `enabled`: `{v}` is not `true` or `false`"))
                })?);
            }
            other => {
                return Err(Error::Config(format!(
                    "unknown field `{other}`; expected one of `replenish`, `burst`, `unit`, `cost`, `enabled`, `policy`"
                )));
            }
        }
    }
    Ok(o)
}

/// The environment variable that overrides the limit called `name`.
pub fn env_var_name(name: &str) -> String {
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

pub(crate) fn load(
    file: Option<&Path>,
    decls: &[&'static LimitDeclaration],
) -> Result<Overrides, Error> {
    let env = std::env::vars_os().filter_map(|(k, v)| {
        let k = k.into_string().ok()?;
        k.starts_with(ENV_PREFIX)
            .then(|| (k, v.to_string_lossy().into_owned()))
    });
    load_from(file, env, decls)
}

/// [`load`] with the environment given, for tests.
fn load_from(
    file: Option<&Path>,
    env: impl Iterator<Item = (String, String)>,
    decls: &[&'static LimitDeclaration],
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
                return Err(Error::Config(format!(
                    "{shown}: `[limits.\"{name}\"]` names no declared limit; declared limits: {}",
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
        if !var.starts_with(ENV_PREFIX) {
            continue;
        }
        let targets: Vec<&&LimitDeclaration> = decls
            .iter()
            .filter(|d| env_var_name(d.name()) == var)
            .collect();
        let decl = match targets.as_slice() {
            [one] => one,
            [] => {
                return Err(Error::Config(format!(
                    "{var} names no declared limit; declared limits: {}",
                    describe_names(decls)
                )));
            }
            _ => {
                return Err(Error::Config(format!(
                    "{var} matches several limits ({}); rename one with `name = \"..\"`",
                    targets
                        .iter()
                        .map(|d| d.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        };
        let o = parse_env(&value)
            .map_err(|e| Error::Config(format!("{var}: limit `{}`: {e}", decl.name())))?;
        out.by_name
            .entry(decl.name().to_owned())
            .or_default()
            .push((var.to_owned(), o));
    }
    Ok(out)
}

impl Overrides {
    /// The effective limit of `decl`: declared values, then the file, then the environment.
    pub(crate) fn apply(&self, decl: &LimitDeclaration) -> Result<Effective, Error> {
        let mut replenish = decl.declared_limit().replenish();
        let mut burst = decl.declared_limit().burst_capacity();
        let mut unit = decl.declared_limit().unit();
        let mut cost = decl.declared_cost();
        let mut enabled = true;
        let mut policy = decl.declared_limit().failure_policy();
        let Some(list) = self.by_name.get(decl.name()) else {
            return Ok(Effective {
                limit: decl.declared_limit(),
                cost,
                enabled,
            });
        };
        for (source, o) in list {
            let fail = |field: &str, why: &dyn std::fmt::Display| {
                Error::Config(format!(
                    "{source}: limit `{}`: field `{field}`: {why}",
                    decl.name()
                ))
            };
            if let Some(r) = o.replenish {
                replenish = r;
            }
            if let Some(b) = o.burst {
                burst = b;
            }
            if let Some(u) = &o.unit {
                unit = u.parse::<Unit>().map_err(|e| fail("unit", &e))?;
            }
            if let Some(c) = o.cost {
                if c == 0 {
                    return Err(fail("cost", &"must be at least 1"));
                }
                cost = c;
            }
            if let Some(e) = o.enabled {
                enabled = e;
            }
            if let Some(p) = &o.policy {
                policy = Some(p.parse::<FailurePolicy>().map_err(|e| fail("policy", &e))?);
            }
            if replenish == 0 {
                return Err(fail("replenish", &"must be at least 1"));
            }
            if burst == 0 {
                return Err(fail("burst", &"must be at least 1"));
            }
            Limit::try_new(replenish, burst, unit).map_err(|e| fail("burst", &e))?;
            if cost > burst {
                return Err(fail(
                    "cost",
                    &format_args!("cost {cost} exceeds burst {burst}, so no call could ever pass"),
                ));
            }
        }
        let limit = Limit::try_new(replenish, burst, unit)?.with_failure_policy(policy);
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
    use crate::Limit;

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

    fn decls() -> Vec<&'static LimitDeclaration> {
        vec![&ORDERS, &SEARCH]
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

        let f = file("[limits.\"shop::orders\"]\nburst = 0\n");
        let o = load_from(Some(&f.0), env(&[]), &decls()).unwrap();
        let e = o.apply(&ORDERS).unwrap_err().to_string();
        assert!(
            e.contains("limit `shop::orders`: field `burst`: must be at least 1"),
            "{e}"
        );

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

        let o = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_SHOP__SEARCH", "unit=fortnight")]),
            &decls(),
        )
        .unwrap();
        let e = o.apply(&SEARCH).unwrap_err().to_string();
        assert!(e.contains("field `unit`: unknown unit `fortnight`"), "{e}");

        let f = file("[limits.\"shop::search\"]\npolicy = \"sometimes\"\n");
        let o = load_from(Some(&f.0), env(&[]), &decls()).unwrap();
        let e = o.apply(&SEARCH).unwrap_err().to_string();
        assert!(
            e.contains("limit `shop::search`: field `policy`: unknown failure policy `sometimes`"),
            "{e}"
        );

        let e = load_from(
            None,
            env(&[("RATE_LIMIT_OVERRIDE_SHOP__SEARCH", "burst=-1")]),
            &decls(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("limit `shop::search`: field `burst`"), "{e}");

        let missing = std::path::Path::new("/nonexistent/limits.toml");
        let e = load_from(Some(missing), env(&[]), &decls())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot read the rate-limit config `/nonexistent/limits.toml`"),
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
        assert_eq!(o["a::b"].unit.as_deref(), Some("minute"));
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
            (o.replenish, o.unit.as_deref(), o.cost),
            (Some(5), Some("hour"), Some(1))
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
