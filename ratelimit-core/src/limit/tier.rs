//! Tiers: the limits one declared limit takes per caller (a plan: free, pro, a contract), and
//! their names, which clients read in a header and metrics carry as a label.

use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, PoisonError, RwLock};

use ratelimit_vocab::{NameProblem, check_tier_name};

use super::{InvalidLimit, Limit};

/// A named limit a call may be given in place of its declaration's: one plan's quota. A
/// `#[rate_limit(tier = ..)]` attribute picks one per call (from the caller's plan, an
/// argument, the request); the call keeps its bucket (one per limit and key), so a caller
/// whose plan changes goes on from the tokens it has, by the store's rules for a changed
/// limit. The response headers (`RateLimit-Policy: "search[pro]";..`), the rejection, the
/// recorded verdict and the metrics name the tier.
///
/// Plans known when the program is written are constants, built by [`Tier::new`]; a tier
/// whose name is read at run time (an enterprise contract's, from a config file or the
/// accounts table) is built by [`Tier::try_new`]. A tier's name is short and plain: 1 to 64
/// ASCII letters, digits, `-`, `_` or `.`, so that no name can break the header it is sent
/// in or the metrics label it is counted under. A constant with any other name does not
/// compile; `try_new` refuses it.
///
/// ```
/// use ratelimit_core::{Limit, Tier};
///
/// const FREE: Tier = Tier::new("free", Limit::per_hour(100));
/// const PRO: Tier = Tier::new("pro", Limit::per_hour(10_000));
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// assert_eq!(PRO.limit().burst_capacity(), 10_000);
///
/// // A contract's own limit and tier name, read at run time (here from a config's lines).
/// let config = String::from("tier = acme-gold\nper_minute = 2500");
/// let value = |key: &str| config.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(" = "));
/// let per_minute: u32 = value("per_minute").unwrap_or("60").parse()?;
/// let contract = Tier::try_new(value("tier").unwrap_or("contract"), Limit::per_minute(per_minute))?;
/// assert_eq!(contract.name(), "acme-gold");
/// assert_eq!(contract.limit(), Limit::per_minute(2_500));
///
/// // A name a header or a metrics label could not carry is refused.
/// assert!(Tier::try_new("gold\"; q=1", Limit::per_minute(2_500)).is_err());
/// # let _ = FREE;
/// # Ok(())
/// # }
/// ```
///
/// A tier is cheap to clone: a constant's name is the literal, and a run-time name is shared,
/// so that the decision, the rejection, the headers and the metrics of a call under it never
/// copy the name.
///
/// ```compile_fail
/// use ratelimit_core::{Limit, Tier};
///
/// // A quote would end the header's string early: a compile error.
/// const BAD: Tier = Tier::new("pro\"", Limit::per_hour(10_000));
/// # let _ = BAD;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tier {
    name: TierName,
    limit: Limit,
}

impl Tier {
    /// The tier `name`, whose calls are decided under `limit`: for a name written in the
    /// program (`const PRO: Tier = Tier::new("pro", Limit::per_hour(10_000))`).
    ///
    /// # Panics
    /// If `name` is empty, longer than 64 bytes, or has a character other than an ASCII
    /// letter, a digit, `-`, `_` or `.`: in a `const`, a compile error. A name read at run
    /// time goes to [`Tier::try_new`].
    pub const fn new(name: &'static str, limit: Limit) -> Tier {
        match check_tier_name(name) {
            Ok(()) => Tier {
                name: TierName(name),
                limit,
            },
            Err(NameProblem::Empty) => panic!("a tier name must not be empty"),
            Err(NameProblem::TooLong { .. }) => panic!("a tier name is at most 64 bytes long"),
            Err(NameProblem::Forbidden { .. }) => panic!(
                "a tier name has only ASCII letters, digits, `-`, `_` and `.`: another character \
                 could break the `RateLimit-Policy` header or a metrics label that names it"
            ),
        }
    }

    /// The tier `name`, whose calls are decided under `limit`, for a name known at run time
    /// (a contract's, from a config file or a database): a `String`, a `&str` or an
    /// `Arc<str>`. The name is kept once for the program's life, however many tiers are built
    /// with it, so that carrying it costs a call nothing; at most
    /// [`MAX_RUN_TIME_TIER_NAMES`] distinct names may be (build tiers from plans and
    /// contracts, never per request).
    ///
    /// ```
    /// use ratelimit_core::{Limit, Tier};
    /// use ratelimit_core::error::InvalidLimit;
    ///
    /// let gold = Tier::try_new(String::from("acme-gold"), Limit::per_minute(2_500)).unwrap();
    /// assert_eq!(gold.name(), "acme-gold");
    /// assert!(matches!(
    ///     Tier::try_new("acme gold", Limit::per_minute(2_500)),
    ///     Err(InvalidLimit::BadTierName { forbidden: Some((4, ' ')), .. })
    /// ));
    /// ```
    ///
    /// # Errors
    /// [`InvalidLimit::BadTierName`] (which `?` turns into
    /// [`Error::InvalidLimit`](crate::Error::InvalidLimit)) if `name` is empty, longer than 64
    /// bytes, or has a character other than an ASCII letter, a digit, `-`, `_` or `.`;
    /// [`InvalidLimit::TooManyTierNames`] for a name beyond the program's
    /// [`MAX_RUN_TIME_TIER_NAMES`].
    pub fn try_new(name: impl Into<Arc<str>>, limit: Limit) -> Result<Tier, InvalidLimit> {
        let name = name.into();
        if let Err(problem) = check_tier_name(&name) {
            let forbidden = match problem {
                NameProblem::Forbidden { at } => name[at..].chars().next().map(|c| (at, c)),
                NameProblem::Empty | NameProblem::TooLong { .. } => None,
            };
            return Err(InvalidLimit::BadTierName {
                len: name.len(),
                forbidden,
            });
        }
        Ok(Tier {
            name: TierName(intern(&name)?),
            limit,
        })
    }

    /// The tier's name, as the headers and metrics show it.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The limit of the tier's calls.
    pub const fn limit(&self) -> Limit {
        self.limit
    }

    /// The tier's name, as a call's decision carries it (cloned without copying the text).
    pub(crate) fn tier_name(&self) -> TierName {
        self.name.clone()
    }
}

/// A tier's name, as every place a call's tier goes keeps it (its decision's label, the
/// rejection, the recorded verdict, the headers, the metrics): a constant's literal, or a name
/// read at run time, interned. A plain `&'static str`: carried and dropped at no cost, on the
/// path of every call, tiered or not (an enum that could hold an `Arc` gave every label and
/// recorded verdict drop glue: docs/benchmarks.md, issue 34).
#[derive(Clone)]
pub(crate) struct TierName(&'static str);

/// The most distinct tier names a program may build at run time ([`Tier::try_new`]): each is
/// kept for the program's life (at most 64 bytes), so that a name costs nothing per call;
/// the bound keeps that memory bounded (4 MiB at most) should a program build tiers from
/// something unbounded.
pub const MAX_RUN_TIME_TIER_NAMES: usize = 65_536;

/// The name `name`, kept once for the program's life: the same `&'static str` for every tier
/// built with it.
fn intern(name: &str) -> Result<&'static str, InvalidLimit> {
    static NAMES: RwLock<Option<HashSet<&'static str>>> = RwLock::new(None);
    // A name built before is found under the shared lock: a program that builds a contract's
    // tier on each call waits on no other.
    let known = NAMES.read().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = known.as_ref().and_then(|names| names.get(name)) {
        return Ok(known);
    }
    drop(known);
    let mut names = NAMES.write().unwrap_or_else(PoisonError::into_inner);
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(known) = names.get(name) {
        return Ok(known);
    }
    if names.len() >= MAX_RUN_TIME_TIER_NAMES {
        return Err(InvalidLimit::TooManyTierNames {
            max: MAX_RUN_TIME_TIER_NAMES,
        });
    }
    let kept: &'static str = Box::leak(Box::from(name));
    names.insert(kept);
    Ok(kept)
}

impl TierName {
    /// The name.
    pub(crate) fn as_str(&self) -> &'static str {
        self.0
    }

    /// The name as a metrics label value.
    #[cfg(feature = "metrics")]
    pub(crate) fn label(&self) -> metrics::SharedString {
        metrics::SharedString::const_str(self.0)
    }
}

impl PartialEq for TierName {
    fn eq(&self, other: &TierName) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for TierName {}

impl Hash for TierName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for TierName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_and_a_run_time_tier_of_one_name_are_one_tier() {
        const PRO: Tier = Tier::new("pro", Limit::per_hour(10));
        let read = Tier::try_new(String::from("pro"), Limit::per_hour(10)).unwrap();
        assert_eq!(PRO, read);
        assert_eq!(format!("{read:?}"), format!("{PRO:?}"));
        assert!(format!("{read:?}").contains("name: \"pro\""));
    }

    #[test]
    fn a_run_time_name_is_kept_once() {
        let name: Arc<str> = Arc::from("acme-gold");
        let tier = Tier::try_new(Arc::clone(&name), Limit::per_minute(5)).unwrap();
        let again = Tier::try_new(String::from("acme-gold"), Limit::per_minute(9)).unwrap();
        // One copy of the text, whatever the tiers built with it.
        assert!(std::ptr::eq(
            tier.tier_name().as_str(),
            again.tier_name().as_str()
        ));
        assert_eq!(tier.name(), "acme-gold");
    }

    /// The names kept are bounded: past the bound a new name is refused, and the names kept
    /// still build tiers. (This test fills the process's table: nextest runs it alone.)
    #[test]
    fn the_names_kept_are_bounded() {
        let limit = Limit::per_minute(5);
        Tier::try_new("kept-first", limit).unwrap();
        let mut refused = None;
        for i in 0..=MAX_RUN_TIME_TIER_NAMES {
            if let Err(e) = Tier::try_new(format!("t{i}"), limit) {
                refused = Some(e);
                break;
            }
        }
        assert_eq!(
            refused,
            Some(InvalidLimit::TooManyTierNames {
                max: MAX_RUN_TIME_TIER_NAMES
            })
        );
        assert!(Tier::try_new("kept-first", limit).is_ok());
    }

    #[test]
    fn hostile_names_are_refused_with_what_is_wrong() {
        let limit = Limit::per_minute(5);
        let refused = |name: &str| Tier::try_new(name, limit).unwrap_err();
        for (name, at, c) in [
            ("gold\"", 4, '"'),
            ("gold;q=1", 4, ';'),
            ("gold,other", 4, ','),
            ("gold\nx-evil: 1", 4, '\n'),
            ("gold[x]", 4, '['),
            ("gold\\", 4, '\\'),
            ("göld", 1, 'ö'),
        ] {
            assert_eq!(
                refused(name),
                InvalidLimit::BadTierName {
                    len: name.len(),
                    forbidden: Some((at, c)),
                },
                "{name:?}"
            );
        }
        assert_eq!(
            refused(""),
            InvalidLimit::BadTierName {
                len: 0,
                forbidden: None
            }
        );
        let long = "a".repeat(10 * 1024);
        let too_long = refused(&long);
        assert_eq!(
            too_long,
            InvalidLimit::BadTierName {
                len: 10 * 1024,
                forbidden: None
            }
        );
        assert_eq!(too_long.fields(), &["tier"]);
        // The message says what a name may be, and never repeats the hostile one.
        let message = crate::errors::Error::from(refused("gold\nx-evil: 1")).to_string();
        assert_eq!(
            message,
            "invalid limit: a tier name must not contain '\\n' (at byte 4); a tier name is 1 to \
             64 ASCII letters, digits, `-`, `_` or `.` (`pro`, `acme-2025.gold`)"
        );
        assert!(!too_long.to_string().contains("aaaa"));
    }
}
