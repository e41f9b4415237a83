//! What a call's limits decided, each told under its label: the pipeline's one output, the
//! verdict ([`Recorded`], as a request's scope records it for the response), and the rejection
//! a refused call returns ([`RateLimited`]), which carries it with the key; and what a
//! request's response describes ([`Described`]). How limits are told (one, with its tier; or
//! several, each by its label in its part's place) is [`Told`]'s alone.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::decision::{Decision, Label, Names, Source};
use crate::limit::TierName;

/// How a verdict's limits are told: a call under one limit by the tier it was given (its name
/// is the verdict's), or a call under several by each limit's label, in its part's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Told {
    One(Option<TierName>),
    Several(Names),
}

impl Told {
    /// The tier of the call (of several limits, the tightest's).
    fn tier<'a>(&'a self, decision: &Decision) -> Option<&'a str> {
        match self {
            Told::One(tier) => tier.as_ref(),
            Told::Several(names) => names.tightest(decision).tier.as_ref(),
        }
        .map(TierName::as_str)
    }

    /// Each part of `decision` with its limit's label; `None` for a call under one limit,
    /// which the verdict names.
    fn labels<'a>(
        &'a self,
        decision: &'a Decision,
    ) -> impl Iterator<Item = (Option<&'a Label>, &'a Decision)> {
        let labels = match self {
            Told::One(_) => None,
            Told::Several(names) => Some(names.labels()),
        };
        decision
            .parts()
            .iter()
            .enumerate()
            .map(move |(i, d)| (labels.and_then(|l| l.get(i)), d))
    }

    /// Each part of `decision` under the name it is described to clients with
    /// ([`Label::shown`]): its label's, else `one` with the call's tier, else `rate-limit`.
    fn shown<'a>(
        &'a self,
        decision: &'a Decision,
        one: Option<&'a str>,
    ) -> impl Iterator<Item = (Cow<'a, str>, &'a Decision)> {
        let tier = match self {
            Told::One(tier) => tier.as_ref().map(TierName::as_str),
            Told::Several(_) => None,
        };
        self.labels(decision).map(move |(label, d)| {
            let shown = match label {
                Some(label) => Label::shown(label.name, label.tier.as_ref().map(TierName::as_str)),
                None => Label::shown(one.unwrap_or("rate-limit"), tier),
            };
            (shown, d)
        })
    }
}

/// The verdict of a limited call: each of its limits' labels with its decision, and which one
/// was tightest (its name here). What the pipeline returns for every call, what a request's
/// scope records for the response headers (the last call's), and what a rejection carries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recorded {
    /// The limit's name (of several, the tightest's: see [`Decision::tightest`]).
    pub name: &'static str,
    /// What it decided.
    pub decision: Decision,
    /// How each of its limits is told.
    told: Told,
}

impl Recorded {
    /// The verdict of a call decided under the one limit `label`.
    #[inline]
    pub(crate) fn one(label: Label, decision: Decision) -> Recorded {
        Recorded {
            name: label.name,
            decision,
            told: Told::One(label.tier),
        }
    }

    /// The verdict of a call decided under several limits, each given with its label: their
    /// decisions combined, the labels kept in the place of their own parts.
    pub(crate) fn several(named: Vec<(Label, Decision)>) -> Recorded {
        let (decision, names) = Decision::combined_named(named);
        Recorded {
            name: names.tightest(&decision).name,
            decision,
            told: Told::Several(names),
        }
    }

    /// Each limit's label with its own decision, in order (of a call under one limit, none).
    pub(crate) fn labelled(&self) -> impl Iterator<Item = (&Label, &Decision)> {
        self.told
            .labels(&self.decision)
            .filter_map(|(label, d)| Some((label?, d)))
    }

    /// Each limit of the call, by name, with its own decision: one, unless the call was
    /// decided under several limits.
    pub fn parts(&self) -> impl Iterator<Item = (&'static str, &Decision)> {
        let one = self.name;
        self.told
            .labels(&self.decision)
            .map(move |(label, d)| (label.map_or(one, |l| l.name), d))
    }

    /// The [tier](crate::Tier) the call was given, if any (of several limits, the
    /// tightest's): the policy the response headers name, `name[tier]`. A constant's name or
    /// one built at run time ([`Tier::try_new`](crate::Tier::try_new)), borrowed from the
    /// verdict.
    pub fn tier(&self) -> Option<&str> {
        self.told.tier(&self.decision)
    }

    /// Each limit of the call under the name it is described to clients with
    /// (`name[tier]` for a call given a tier).
    #[cfg_attr(not(feature = "http-framework"), allow(dead_code))]
    pub(crate) fn shown_parts(&self) -> impl Iterator<Item = (Cow<'_, str>, &Decision)> {
        self.told.shown(&self.decision, Some(self.name))
    }
}

/// The HTTP statuses a limit answers its refusals with, when not the defaults
/// (`#[rate_limit(empty_key_status = .., limited_status = ..)]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Statuses {
    /// Of a refusal for want of a key (else 403).
    pub(crate) empty_key: Option<u16>,
    /// Of a refusal by the limit's bucket (else 429).
    pub(crate) limited: Option<u16>,
}

/// A call that was refused by its rate limit. Handlers return it (through their error type's
/// `From<RateLimited>`) instead of running; with the `axum` feature it becomes a 429 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimited {
    decision: Decision,
    key: String,
    /// The limit's name (of several, the tightest's), unless the rejection was built unnamed.
    name: Option<Cow<'static, str>>,
    /// How each of its limits is told.
    told: Told,
    /// The HTTP status of a refusal for want of a key, when its limit chose one
    /// (`#[rate_limit(empty_key_status = ..)]`).
    empty_key_status: Option<u16>,
    /// The HTTP status of a refusal by its limit's bucket, when its limit chose one
    /// (`#[rate_limit(limited_status = ..)]`).
    limited_status: Option<u16>,
}

impl RateLimited {
    /// A rejection of the call on `key` with `decision`.
    pub fn new(decision: Decision, key: impl Into<String>) -> RateLimited {
        RateLimited {
            decision,
            key: key.into(),
            name: None,
            told: Told::One(None),
            empty_key_status: None,
            limited_status: None,
        }
    }

    /// The rejection of the call `verdict` refused, on `key`: answered with the statuses its
    /// limit chose (`statuses`: for want of a key, by its bucket), when it chose them.
    pub(crate) fn refused(verdict: Recorded, key: String, statuses: Statuses) -> RateLimited {
        RateLimited {
            decision: verdict.decision,
            key,
            name: Some(Cow::Borrowed(verdict.name)),
            told: verdict.told,
            empty_key_status: statuses.empty_key,
            limited_status: statuses.limited,
        }
    }

    /// The [tier](crate::Tier) the refused call was given (of several limits, the tightest's):
    /// the policy the response headers name, `name[tier]`. A constant's name or one built at
    /// run time ([`Tier::try_new`](crate::Tier::try_new)), borrowed from the rejection.
    pub fn tier(&self) -> Option<&str> {
        self.told.tier(&self.decision)
    }

    /// Each limit of the call under the name it is described to clients with: its name, with
    /// its tier (`name[tier]`), or `rate-limit` without a name.
    pub(crate) fn shown_parts(&self) -> impl Iterator<Item = (Cow<'_, str>, &Decision)> {
        self.told.shown(&self.decision, self.name.as_deref())
    }

    /// The status a refusal for want of a key is answered with, when its limit chose one.
    pub(crate) fn empty_key_status(&self) -> Option<u16> {
        self.empty_key_status
    }

    /// The status a refusal by a bucket is answered with, when its limit chose one.
    pub(crate) fn limited_status(&self) -> Option<u16> {
        self.limited_status
    }

    /// The same rejection, naming the limit that refused it.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<Cow<'static, str>>) -> RateLimited {
        self.name = Some(name.into());
        self
    }

    /// Each limit of the call with its own decision, by name where the call had names (the
    /// macro's); one, unless the call was decided under several limits.
    pub fn parts(&self) -> impl Iterator<Item = (Option<&str>, &Decision)> {
        let one = self.name.as_deref();
        self.told
            .labels(&self.decision)
            .map(move |(label, d)| (label.map(|l| l.name).or(one), d))
    }

    /// The decision that refused the call.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The key whose bucket was empty.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The limit's name, when the call was checked under one (always, through the macro).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// How long until the same call would be admitted.
    pub fn retry_after(&self) -> Duration {
        self.decision.retry_after
    }
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.decision;
        // Who refused says what happened: only a bucket that ran out "rate limits".
        match d.source {
            Source::NoKey => {
                write!(f, "no rate-limit key for this call")?;
                if let Some(name) = &self.name {
                    write!(f, " under `{name}`")?;
                }
                return write!(f, " (empty-key policy: deny)");
            }
            Source::CostExceedsBurst => {
                write!(f, "the call costs {} tokens", d.cost)?;
                if d.cost == u32::MAX {
                    write!(f, " or more")?;
                }
                write!(
                    f,
                    ", more than the burst of {} holds: no wait could admit it",
                    d.limit.burst_capacity()
                )?;
                if let Some(name) = &self.name {
                    write!(f, " under `{name}`")?;
                }
                return Ok(());
            }
            Source::FailClosed => {
                write!(
                    f,
                    "rate-limit store unavailable; failure policy `deny` refused the call"
                )?;
                if let Some(name) = &self.name {
                    write!(f, " under `{name}`")?;
                }
            }
            _ => {
                write!(f, "rate limited")?;
                if let Some(name) = &self.name {
                    write!(f, " by `{name}`")?;
                }
                write!(f, " ({})", d.limit)?;
                if d.source == Source::Fallback {
                    write!(
                        f,
                        ", by this instance's share while the store is unavailable"
                    )?;
                }
            }
        }
        if d.retry_after.is_zero() {
            Ok(())
        } else {
            write!(f, ": retry after {:?}", d.retry_after)
        }
    }
}

impl std::error::Error for RateLimited {}

#[cfg(feature = "http-framework")]
#[derive(Debug, Default)]
pub(crate) struct Described {
    pub(crate) first: Vec<Recorded>,
    pub(crate) last: Option<Recorded>,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::RateLimited;
    use crate::decision::Decision;
    use crate::decision::Source;
    use crate::limit::Limit;

    fn refused(source: Source, retry_after: Duration) -> RateLimited {
        let limit = Limit::per_minute(3);
        let d = Decision::new(false, 0, limit, 1, retry_after, Duration::ZERO);
        RateLimited::new(d.with_source(source), "k").with_name("api::orders")
    }

    #[test]
    fn each_refusal_says_what_happened() {
        let second = Duration::from_secs(1);
        assert_eq!(
            refused(Source::Store, 20 * second).to_string(),
            "rate limited by `api::orders` (3 per minute (burst 3)): retry after 20s"
        );
        assert_eq!(
            refused(Source::NoKey, Duration::ZERO).to_string(),
            "no rate-limit key for this call under `api::orders` (empty-key policy: deny)"
        );
        assert_eq!(
            refused(Source::FailClosed, Duration::ZERO).to_string(),
            "rate-limit store unavailable; failure policy `deny` refused the call under \
             `api::orders`"
        );
        assert_eq!(
            refused(Source::FailClosed, second / 5).to_string(),
            "rate-limit store unavailable; failure policy `deny` refused the call under \
             `api::orders`: retry after 200ms"
        );
        assert_eq!(
            refused(Source::Fallback, 20 * second).to_string(),
            "rate limited by `api::orders` (3 per minute (burst 3)), by this instance's share while the \
             store is unavailable: retry after 20s"
        );
        let unnamed = RateLimited::new(
            Decision::new(
                false,
                0,
                Limit::per_minute(3),
                1,
                Duration::ZERO,
                Duration::ZERO,
            )
            .with_source(Source::NoKey),
            "",
        );
        assert_eq!(
            unnamed.to_string(),
            "no rate-limit key for this call (empty-key policy: deny)"
        );
    }

    /// A verdict is told one way wherever it goes: the record a scope keeps and the
    /// rejection that carries it name the same limits, the same tightest and the same tier,
    /// and a call under one limit is named by the verdict, with its tier in the shown name.
    #[test]
    fn a_verdict_is_told_alike_by_the_record_and_the_rejection() {
        use crate::decision::Label;
        use crate::limit::Limit;
        use crate::limit::Tier;

        let limit = Limit::per_minute(3);
        let admitted = Decision::new(true, 2, limit, 1, Duration::ZERO, Duration::ZERO);
        let refused = Decision::new(false, 0, limit, 1, Duration::from_secs(20), Duration::ZERO);
        let pro = Tier::new("pro", Limit::per_minute(30));
        let labels = [
            Label::of("api::list"),
            Label {
                name: "api::tenant",
                tier: Some(pro.tier_name()),
            },
        ];
        let several = crate::pipeline::verdict::Recorded::several(
            labels
                .into_iter()
                .zip([admitted.clone(), refused])
                .collect(),
        );
        assert_eq!(
            several.name, "api::tenant",
            "the refusing limit is the tightest"
        );
        assert_eq!(several.tier(), Some("pro"));
        let names: Vec<_> = several.parts().map(|(name, d)| (name, d.allowed)).collect();
        assert_eq!(names, [("api::list", true), ("api::tenant", false)]);
        let shown: Vec<_> = several.shown_parts().map(|(name, _)| name).collect();
        assert_eq!(shown, ["api::list", "api::tenant[pro]"]);
        let labelled: Vec<_> = several.labelled().map(|(l, _)| l.name).collect();
        assert_eq!(labelled, ["api::list", "api::tenant"]);

        let statuses = super::Statuses {
            empty_key: Some(429),
            limited: Some(402),
        };
        let rejection = RateLimited::refused(several.clone(), "k".into(), statuses);
        assert_eq!(rejection.name(), Some(several.name));
        assert_eq!(rejection.tier(), several.tier());
        let told: Vec<_> = rejection
            .parts()
            .map(|(n, _)| n.map(str::to_owned))
            .collect();
        assert_eq!(told, [Some("api::list".into()), Some("api::tenant".into())]);
        let shown_again: Vec<_> = rejection.shown_parts().map(|(name, _)| name).collect();
        assert_eq!(shown_again, shown);
        assert_eq!(rejection.empty_key_status(), Some(429));
        assert_eq!(rejection.limited_status(), Some(402));

        let one = crate::pipeline::verdict::Recorded::one(
            Label {
                name: "api::search",
                tier: Some(pro.tier_name()),
            },
            admitted,
        );
        assert_eq!(
            one.parts().map(|(n, _)| n).collect::<Vec<_>>(),
            ["api::search"]
        );
        assert_eq!(one.tier(), Some("pro"));
        let shown: Vec<_> = one.shown_parts().map(|(name, _)| name).collect();
        assert_eq!(shown, ["api::search[pro]"]);
        assert_eq!(
            one.labelled().count(),
            0,
            "one limit is named by the verdict"
        );
    }
}
