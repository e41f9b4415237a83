//! Limits declared at run time: a layer's limit built from values known only then (a
//! configuration file), by [`LayerLimit::new`](crate::http::LayerLimit::new). This module owns
//! the set of them, the rules a name built at run time is held to, and the lock under which
//! the set and the limits in force change; the limit in force of one is resolved by the code
//! that resolves every declaration at enable ([`crate::startup`]).
//!
//! The pipeline works on `&'static LimitDeclaration` (overrides, warnings, remembered bucket
//! names), so a declaration built at run time is leaked, once per distinct name: a name built
//! again with the same limit and key (a router rebuilt on reload) is given the declaration it
//! already has. The memory this takes is bounded by the distinct names the program builds,
//! which come from its configuration, never from the requests it serves.
//!
//! A name built at run time is judged as it is built, not by the program's one validation
//! ([`super::validate`], made once, of the source): it may not be a name the source declares
//! or a `shared` use names, nor one built already with another limit or key. So no run-time
//! declaration is ever dangling or duplicated, and that validation holds whatever the program
//! builds later.
// Without an HTTP integration nothing builds a layer's limit: the set is only ever read.
#![cfg_attr(not(feature = "http-framework"), allow(dead_code))]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::Location;
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

use super::validate::Places;
use super::{Effective, LimitDeclaration, declared_in_source};
use crate::errors::Error;
use crate::limit::Limit;

/// The declarations built at run time, by name.
static BUILT: RwLock<BTreeMap<&'static str, &'static LimitDeclaration>> =
    RwLock::new(BTreeMap::new());

/// The names and key descriptions leaked for declarations, each once: a name whose building
/// failed (an invalid override) and is built again leaks nothing more.
static STRINGS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// Held while declarations join the program and while the limits in force are settled
/// (enable's end, [`reload_overrides`](crate::reload_overrides)): a limit built while enable
/// or a reload runs is resolved by it, or after it by its own building, never by neither nor
/// with an older file than theirs.
static SETTLING: Mutex<()> = Mutex::new(());

/// The right to add declarations and to change the limits in force, held until dropped.
/// Never held on a call's path, nor across an await.
pub(crate) fn settling() -> MutexGuard<'static, ()> {
    SETTLING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every declaration built at run time so far, by name.
pub(crate) fn all() -> Vec<&'static LimitDeclaration> {
    BUILT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .copied()
        .collect()
}

/// The declaration of the limit `name`, of `limit`, keyed by the resolver `key` describes,
/// built at `at`: the one built under that name before, when it has this limit and key;
/// else a new one, listed from now on, with its limit in force as `resolve` finds it (the
/// overrides enable read, once it has run; enable resolves it with the rest otherwise).
/// `resolve` is the caller's, so that the registry does not reach up to `startup`.
pub(crate) fn declare(
    name: &str,
    limit: Limit,
    key: &str,
    at: &'static Location<'static>,
    resolve: impl FnOnce(&LimitDeclaration) -> Result<Option<Effective>, Error>,
) -> Result<&'static LimitDeclaration, Error> {
    let here = At(at);
    ratelimit_vocab::check_name(name).map_err(|e| {
        Error::Config(format!(
            "the limit built at {here} is named `{name}`, and a limit's name {e}"
        ))
    })?;
    let _settling = settling();
    let built = BUILT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .copied();
    if let Some(built) = built {
        if built.declared_limit() == limit && built.key() == key {
            return Ok(built);
        }
        return Err(Error::Config(format!(
            "the limit `{name}` is built at {here} as {limit} keyed by {key}, and was built at \
             {}:{} as {} keyed by {}: a name has one limit and one key, since its buckets are \
             the name's; give one of them another name (an override of a name changes its \
             limit)",
            built.file(),
            built.line(),
            built.declared_limit(),
            built.key()
        )));
    }
    in_source(name, here)?;
    let decl =
        LimitDeclaration::built_at_run_time(intern(name), limit, intern(key), at.file(), at.line());
    if let Some(effective) = resolve(&decl)? {
        decl.set_effective(effective);
    }
    // Leaked, once per name (see the module's docs): the pipeline holds `&'static`s.
    let decl: &'static LimitDeclaration = Box::leak(Box::new(decl));
    BUILT
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(decl.name(), decl);
    Ok(decl)
}

/// `Ok` when the source neither declares `name` nor draws from it with `shared = ".."`; else
/// the error that says where, and what to do.
fn in_source(name: &str, here: At) -> Result<(), Error> {
    let found: Vec<&'static LimitDeclaration> = declared_in_source()
        .into_iter()
        .filter(|d| d.name() == name)
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    let declaring: Vec<_> = found
        .iter()
        .copied()
        .filter(|d| !d.is_shared_use())
        .collect();
    if declaring.is_empty() {
        return Err(Error::Config(format!(
            "the limit `{name}` built at {here} is the name that `shared = \"{name}\"` at {} \
             draws from, and a `shared` use draws only from a limit declared in the source; \
             declare `{name}` there (`name = \"{name}\"` on a `#[rate_limit]` or a \
             `layer_limit!`), or give this one another name",
            Places(&found)
        )));
    }
    Err(Error::Config(format!(
        "the limit `{name}` built at {here} is declared in the source already, at {}: give it \
         another name (an override of `{name}` changes the declared one's limit)",
        Places(&declaring)
    )))
}

/// `s`, leaked once for every declaration that names it.
fn intern(s: &str) -> &'static str {
    let mut strings = STRINGS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&interned) = strings.get(s) {
        return interned;
    }
    let interned: &'static str = Box::leak(Box::from(s));
    strings.insert(interned);
    interned
}

/// The key a limit built at run time lists ([`LimitDeclaration::key`]): the resolver's type
/// without its paths, `Ip`, `Header`, `(Ip, Route)`, `Tenant<Plan>`. Two limits built under
/// one name must have one key: this is what is compared.
pub(crate) fn key_name<K: ?Sized>() -> String {
    let full = std::any::type_name::<K>();
    let mut out = String::with_capacity(full.len());
    let mut path = String::new();
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            path.push(c);
            continue;
        }
        out.push_str(path.rsplit("::").next().unwrap_or_default());
        path.clear();
        out.push(c);
    }
    out.push_str(path.rsplit("::").next().unwrap_or_default());
    out
}

/// Where a limit is built: `src/main.rs:12`.
#[derive(Clone, Copy)]
struct At(&'static Location<'static>);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0.file(), self.0.line())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::panic::Location;

    use super::{LimitDeclaration, all, key_name};
    use crate::errors::Error;
    use crate::limit::Limit;
    use crate::resolvers::Ip;
    use crate::resolvers::Route;

    /// `super::declare` with nothing to resolve: enable has not run in these tests.
    fn declare(
        name: &str,
        limit: Limit,
        key: &str,
        at: &'static Location<'static>,
    ) -> Result<&'static LimitDeclaration, Error> {
        super::declare(name, limit, key, at, |_| Ok(None))
    }

    #[test]
    fn a_key_is_listed_by_its_type_without_paths() {
        assert_eq!(key_name::<Ip>(), "Ip");
        assert_eq!(key_name::<(Ip, Route)>(), "(Ip, Route)");
        assert_eq!(key_name::<crate::resolvers::Header>(), "Header");
        assert_eq!(key_name::<Option<Vec<Ip>>>(), "Option<Vec<Ip>>");
    }

    /// Built again with its limit and key, a name is the declaration it was, however many
    /// times (a router rebuilt on every reload): one declaration, listed once.
    #[test]
    fn a_name_built_again_is_one_declaration() {
        let first = declare(
            "runtime::again",
            Limit::per_minute(5),
            "Ip",
            Location::caller(),
        )
        .unwrap();
        assert!(first.is_built_at_run_time());
        assert_eq!((first.file(), first.declared_cost()), (file!(), 1));
        for _ in 0..1000 {
            let again = declare(
                "runtime::again",
                Limit::per_minute(5),
                "Ip",
                Location::caller(),
            )
            .unwrap();
            assert!(std::ptr::eq(first, again));
        }
        let listed = all()
            .into_iter()
            .filter(|d| d.name() == "runtime::again")
            .count();
        assert_eq!(listed, 1);
    }

    /// Another limit or key under a built name is an error naming both places; so is a blank
    /// name.
    #[test]
    fn a_name_has_one_limit_and_one_key() {
        let first = declare(
            "runtime::one",
            Limit::per_minute(5),
            "Ip",
            Location::caller(),
        )
        .unwrap();
        for (limit, key) in [
            (Limit::per_minute(6), "Ip"),
            (Limit::per_minute(5), "Route"),
        ] {
            let at = Location::caller();
            let Err(Error::Config(e)) = declare("runtime::one", limit, key, at) else {
                panic!("built twice");
            };
            assert!(
                e.contains(&format!("{}:{}", at.file(), at.line()))
                    && e.contains(&format!("{}:{}", first.file(), first.line())),
                "{e}"
            );
            assert!(e.contains("give one of them another name"), "{e}");
        }
        for blank in ["", "  "] {
            let e = declare(blank, Limit::per_minute(5), "Ip", Location::caller())
                .unwrap_err()
                .to_string();
            assert!(e.contains("a limit's name must not be empty"), "{e}");
        }
    }
}
