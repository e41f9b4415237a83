//! What a call's limits decided, as a response describes it: the verdict a scope records
//! ([`Recorded`]) and what a request's response describes ([`Described`]).

use crate::Decision;
use crate::decision::{Label, Names, named_parts, shown_parts};
use crate::limit::TierName;

/// The verdict of the last limited call made in a scope: what the response headers describe.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recorded {
    /// The limit's name (of several, the tightest's: see [`Decision::tightest`]).
    pub name: &'static str,
    /// What it decided.
    pub decision: Decision,
    /// Every limit's name, when there are several.
    names: Option<Names>,
    /// The tier the call was given (of several limits, the tightest's).
    tier: Option<TierName>,
}

impl Recorded {
    /// The verdict of a call decided under the limit `label` (of several, the tightest's, each
    /// named in `names`).
    pub(crate) fn new(label: Label, decision: Decision, names: Option<Names>) -> Recorded {
        Recorded {
            name: label.name,
            decision,
            names,
            tier: label.tier,
        }
    }

    /// Each limit of the call, by name, with its own decision: one, unless the call was
    /// decided under several limits.
    pub fn parts(&self) -> impl Iterator<Item = (&'static str, &Decision)> {
        let one = self.name;
        named_parts(&self.decision, self.names.as_ref())
            .map(move |(label, d)| (label.map_or(one, |l| l.name), d))
    }

    /// The [tier](crate::Tier) the call was given, if any (of several limits, the
    /// tightest's): the policy the response headers name, `name[tier]`. A constant's name or
    /// one built at run time ([`Tier::try_new`](crate::Tier::try_new)), borrowed from the
    /// verdict.
    pub fn tier(&self) -> Option<&str> {
        match &self.names {
            Some(names) => names.tightest(&self.decision).tier.as_ref(),
            None => self.tier.as_ref(),
        }
        .map(TierName::as_str)
    }

    /// Each limit of the call under the name it is described to clients with
    /// (`name[tier]` for a call given a tier).
    #[cfg_attr(not(any(feature = "axum", feature = "actix-web")), allow(dead_code))]
    pub(crate) fn shown_parts(
        &self,
    ) -> impl Iterator<Item = (std::borrow::Cow<'_, str>, &Decision)> {
        shown_parts(
            &self.decision,
            self.names.as_ref(),
            Some(self.name),
            self.tier.as_ref(),
            "rate-limit",
        )
    }
}

/// What a request's response describes: the limits layers decided first (outermost first),
/// then the last limited call's verdict. Empty once a rejection's response took them with it.
#[cfg(any(feature = "axum", feature = "actix-web"))]
#[derive(Debug, Default)]
pub(crate) struct Described {
    pub(crate) first: Vec<Recorded>,
    pub(crate) last: Option<Recorded>,
}
