//! A `rate_limit` block: the reference's fields and this library's extensions, read into a
//! rule whose limit ratelimit-core has checked.

use std::str::FromStr;
use std::time::Duration;

use ratelimit_core::error::InvalidLimit;
use ratelimit_core::{Algorithm, FailurePolicy, Limit, Refill, Unit};

use super::{Fields, Reader, field, join};
use crate::config::rule::{Action, ReferenceUnit, Rule};
use crate::yaml::{Node, Pos};

/// The keys of a `rate_limit` block: the reference's, then this library's extensions.
pub(super) const RATE_LIMIT_KEYS: &[&str] = &[
    "requests_per_unit",
    "unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "period",
    "calendar",
    "anchor",
    "utc_offset",
    "max_debt",
    "concurrent",
    "lease",
    "failure_policy",
    "shared",
];

/// The extensions: what an unlimited rule cannot take.
const EXTENSION_KEYS: &[&str] = &[
    "algorithm",
    "burst",
    "period",
    "calendar",
    "anchor",
    "utc_offset",
    "max_debt",
    "concurrent",
    "lease",
    "failure_policy",
    "shared",
];

/// How to write a `period`, for messages.
const PERIOD_SYNTAX: &str = "a period is a whole number and `ms`, `s`, `m`, `h` or `d` (`30s`, \
     `500ms`, `90m`, `36h`, `10d`), or a count and a unit of fixed length (`10 day`, `36 hour`)";

impl Reader<'_> {
    pub(super) fn rate_limit(
        &mut self,
        block: &Node,
        path: &str,
        flags: Flags,
        stats_key: &str,
    ) -> Option<Rule> {
        let fields = self.map(block, path, RATE_LIMIT_KEYS, "rate_limit")?;
        let at = |name: &str| field(&fields, name).map_or(block.at, |n| n.at);
        let has = |name: &str| field(&fields, name).is_some_and(|n| !n.is_null());
        let p = |name: &str| join(path, name);
        let errors_before = self.errors.len();

        let requests_per_unit: Option<u32> = self.integer(
            field(&fields, "requests_per_unit"),
            &p("requests_per_unit"),
            "a whole number from 0 to 4294967295",
        );
        let unit_text = self.string(field(&fields, "unit"), &p("unit"));
        let unit = match unit_text.as_deref() {
            Some(text) => match ReferenceUnit::from_str(text) {
                Ok(unit) => Some(unit),
                Err(e) => {
                    self.error(&p("unit"), at("unit"), e.to_string());
                    None
                }
            },
            None => None,
        };
        let unlimited = self.boolean(field(&fields, "unlimited"), &p("unlimited"));
        let name = self.string(field(&fields, "name"), &p("name"));
        let replaces = self.replaces(field(&fields, "replaces"), &p("replaces"), name.as_deref());

        // The extensions, each read and checked alone.
        let algorithm = match self.string(field(&fields, "algorithm"), &p("algorithm")) {
            Some(text) => match Algorithm::from_str(&text) {
                Ok(a) => Some(a),
                Err(e) => {
                    self.error(&p("algorithm"), at("algorithm"), e.to_string());
                    None
                }
            },
            None => None,
        };
        let burst: Option<u32> = self.integer(
            field(&fields, "burst"),
            &p("burst"),
            "a whole number from 1 to 4294967295",
        );
        let period = match self.string(field(&fields, "period"), &p("period")) {
            Some(text) => match parse_period(&text) {
                Ok(period) => Some(period),
                Err(message) => {
                    self.error(&p("period"), at("period"), message);
                    None
                }
            },
            None => None,
        };
        let calendar = self.boolean(field(&fields, "calendar"), &p("calendar"));
        let anchor: Option<u8> =
            self.integer(field(&fields, "anchor"), &p("anchor"), "a day from 1 to 31");
        let utc_offset: Option<i32> = self.integer(
            field(&fields, "utc_offset"),
            &p("utc_offset"),
            "minutes east of UTC, from -840 to 840",
        );
        let max_debt: Option<u32> = self.integer(
            field(&fields, "max_debt"),
            &p("max_debt"),
            "a whole number of tokens from 0 to 4294967295",
        );
        let concurrent: Option<u32> = self.integer(
            field(&fields, "concurrent"),
            &p("concurrent"),
            "a number of requests in flight from 1",
        );
        let lease = match self.string(field(&fields, "lease"), &p("lease")) {
            Some(text) => match ratelimit_vocab::parse_lease(&text) {
                Ok(us) => Some(Duration::from_micros(us)),
                Err(message) => {
                    self.error(&p("lease"), at("lease"), message);
                    None
                }
            },
            None => None,
        };
        let failure_policy =
            match self.string(field(&fields, "failure_policy"), &p("failure_policy")) {
                Some(text) => match FailurePolicy::from_str(&text) {
                    Ok(policy) => Some(policy),
                    Err(e) => {
                        self.error(&p("failure_policy"), at("failure_policy"), e.to_string());
                        None
                    }
                },
                None => None,
            };
        let shared = self.string(field(&fields, "shared"), &p("shared"));
        if let Some(shared) = &shared
            && ratelimit_vocab::check_name(shared).is_err()
        {
            self.error(
                &p("shared"),
                at("shared"),
                "`shared` names a limit: it must not be blank",
            );
        } else if let Some(shared) = &shared
            && shared.starts_with(crate::config::bucket::NAME_PREFIX)
        {
            self.error(
                &p("shared"),
                at("shared"),
                format!(
                    "names starting with `{}` are the service's own buckets (one per domain); \
                     name the shared limit as the Rust service does",
                    crate::config::bucket::NAME_PREFIX
                ),
            );
        }
        if self.errors.len() > errors_before {
            return None;
        }

        let rule = |action: Action, requests_per_unit: u32, unit: Option<ReferenceUnit>| Rule {
            action,
            name: name.clone(),
            requests_per_unit,
            unit,
            replaces: replaces.clone(),
            shadow_mode: flags.shadow_mode,
            quota_mode: flags.quota_mode,
            detailed_metric: flags.detailed_metric,
            shared: shared.clone(),
            stats_key: stats_key.to_owned(),
        };

        if unlimited {
            if unit.is_some() {
                self.error(
                    &p("unit"),
                    at("unit"),
                    "should not specify rate limit unit when unlimited",
                );
            }
            for ext in EXTENSION_KEYS.iter().filter(|k| has(k)) {
                self.error(
                    &p(ext),
                    at(ext),
                    format!("an unlimited rule takes no `{ext}`"),
                );
            }
            return (self.errors.len() == errors_before)
                .then(|| rule(Action::Unlimited, requests_per_unit.unwrap_or(0), None));
        }

        let build = |limit: Result<Limit, InvalidLimit>| {
            limit
                .and_then(|l| match max_debt {
                    Some(tokens) => l.try_max_debt(tokens),
                    None => Ok(l),
                })
                .map(|l| {
                    l.with_failure_policy(failure_policy)
                        .with_shadow(flags.shadow_mode)
                })
        };

        if let Some(max) = concurrent {
            for other in [
                "unit",
                "period",
                "requests_per_unit",
                "algorithm",
                "burst",
                "calendar",
                "anchor",
                "utc_offset",
            ] {
                if has(other) {
                    self.error(
                        &p(other),
                        at(other),
                        format!(
                            "a concurrency rule (`concurrent`) takes no `{other}`: it bounds the \
                             requests in flight, not a rate (write a rate in a rule of its own)"
                        ),
                    );
                }
            }
            if self.errors.len() > errors_before {
                return None;
            }
            let limit = build(Limit::try_concurrent(max).and_then(|l| match lease {
                Some(lease) => l.try_lease(lease),
                None => Ok(l),
            }));
            return match limit {
                // A valid concurrency limit, which the service cannot hold through Envoy: its
                // slot would be released by the stream-done call, which Envoy does not wait
                // for and does not always make (docs/envoy.md). Said here, with its place,
                // rather than answered UNAVAILABLE on every request.
                Ok(_) => {
                    self.error(
                        &p("concurrent"),
                        at("concurrent"),
                        "concurrency limits are not served through Envoy: a slot would be \
                         released by the call Envoy makes when the stream ends, which it does \
                         not wait for and does not always make, so a lost release would hold \
                         the slot until its lease ends (see docs/envoy.md)",
                    );
                    None
                }
                Err(e) => {
                    self.invalid(&e, path, block.at, &fields, false);
                    None
                }
            };
        }
        if has("lease") {
            self.error(
                &p("lease"),
                at("lease"),
                "`lease` is a concurrency rule's: it goes with `concurrent`",
            );
        }

        // How long the window is: a unit, or a period.
        let length = match (unit, period) {
            (Some(_), Some(_)) => {
                self.error(
                    &p("period"),
                    at("period"),
                    "write either `unit` (the reference's) or `period` (any length), not both",
                );
                None
            }
            (Some(unit), None) => Some(Length::Unit(unit)),
            (None, Some(period)) => Some(Length::Period(period)),
            (None, None) => {
                let written = unit_text.unwrap_or_default();
                self.error(
                    &p("unit"),
                    at("unit"),
                    format!(
                        "invalid rate limit unit '{written}'; a rate limit needs a `unit` (second, \
                         minute, hour, day, week, month or year), or a `period`, or `unlimited: \
                         true`"
                    ),
                );
                None
            }
        };
        let Some(requests_per_unit) = requests_per_unit else {
            self.error(
                &p("requests_per_unit"),
                at("requests_per_unit"),
                "a rate limit needs `requests_per_unit` (0 refuses every request)",
            );
            return None;
        };
        let length = length?;
        if self.errors.len() > errors_before {
            return None;
        }

        if requests_per_unit == 0 {
            let extras: Vec<&str> = EXTENSION_KEYS
                .iter()
                .copied()
                .filter(|k| has(k) && !matches!(*k, "shared" | "period"))
                .collect();
            for ext in &extras {
                self.error(
                    &p(ext),
                    at(ext),
                    format!("`requests_per_unit: 0` refuses every request; it takes no `{ext}`"),
                );
            }
            return extras.is_empty().then(|| rule(Action::Block, 0, unit));
        }

        let algorithm_given = algorithm.is_some();
        let algorithm = algorithm.unwrap_or(Algorithm::FixedWindow);
        let burst = burst.unwrap_or(requests_per_unit);
        let limit = if calendar {
            let calendar_unit = match length {
                Length::Unit(ReferenceUnit::Week) => Some(Unit::Week),
                Length::Unit(ReferenceUnit::Month) => Some(Unit::Month),
                _ => None,
            };
            let Some(calendar_unit) = calendar_unit else {
                self.error(
                    &p("calendar"),
                    at("calendar"),
                    "`calendar: true` makes `unit: week` a calendar week and `unit: month` a \
                     calendar month; this rule's unit is neither (ratelimit-core has no calendar \
                     year)",
                );
                return None;
            };
            Limit::from_unit(
                requests_per_unit,
                burst,
                calendar_unit,
                algorithm,
                Refill::Smooth,
                None,
            )
            .and_then(|l| match anchor {
                Some(anchor) => l.try_anchor(anchor),
                None => Ok(l),
            })
            .and_then(|l| match utc_offset {
                Some(minutes) => l.try_utc_offset(minutes),
                None => Ok(l),
            })
        } else {
            for name in ["anchor", "utc_offset"] {
                if has(name) {
                    self.error(
                        &p(name),
                        at(name),
                        format!(
                            "`{name}` places a calendar period's windows: add `calendar: true` \
                             (with `unit: week` or `unit: month`)"
                        ),
                    );
                }
            }
            if self.errors.len() > errors_before {
                return None;
            }
            let period = match length {
                Length::Unit(unit) => Duration::from_secs(unit.seconds()),
                Length::Period(period) => period,
            };
            Limit::from_parts(
                requests_per_unit,
                burst,
                period,
                algorithm,
                Refill::Smooth,
                None,
            )
        };
        match build(limit) {
            Ok(limit) => Some(rule(
                Action::Limit(limit),
                requests_per_unit,
                match length {
                    Length::Unit(unit) => Some(unit),
                    Length::Period(_) => None,
                },
            )),
            Err(e) => {
                self.invalid(&e, path, block.at, &fields, !algorithm_given);
                None
            }
        }
    }

    /// Reports a limit ratelimit-core refuses, at the field it names that the rule wrote.
    fn invalid(
        &mut self,
        e: &InvalidLimit,
        path: &str,
        at: Pos,
        fields: &Fields<'_>,
        default_algorithm: bool,
    ) {
        let ours = |core: &str| -> &'static [&'static str] {
            match core {
                "replenish" => &["requests_per_unit"],
                "unit" => &["unit", "period", "anchor", "utc_offset"],
                "burst" => &["burst"],
                "algorithm" => &["algorithm"],
                "concurrent" => &["concurrent", "max_debt"],
                "lease" => &["lease"],
                _ => &[],
            }
        };
        // The field the rule wrote that ratelimit-core files under `unit` (a calendar's).
        let calendar: &[&str] = match e {
            InvalidLimit::BadCalendar {
                anchor: Some(_), ..
            } => &["anchor"],
            InvalidLimit::BadCalendar { anchor: None, .. } => &["utc_offset"],
            InvalidLimit::CalendarWindowOnly { .. } => &["algorithm"],
            _ => &[],
        };
        let written = calendar
            .iter()
            .chain(e.fields().iter().flat_map(|f| ours(f).iter()))
            .find_map(|name| field(fields, name).map(|node| (*name, node.at)));
        let mut message = e.to_string();
        if default_algorithm && matches!(e, InvalidLimit::BurstOfWindow { .. }) {
            message.push_str(
                "; a rule without `algorithm` counts by a fixed window, as envoyproxy/ratelimit \
                 does: write `algorithm: token_bucket` for a burst",
            );
        }
        match written {
            Some((name, at)) => self.error(&join(path, name), at, message),
            None => self.error(path, at, message),
        }
    }
}

/// The descriptor's flags a rule carries.
#[derive(Clone, Copy)]
pub(super) struct Flags {
    pub(super) shadow_mode: bool,
    pub(super) quota_mode: bool,
    pub(super) detailed_metric: bool,
}

/// A rule's window: the reference's unit, or any period.
#[derive(Clone, Copy)]
enum Length {
    Unit(ReferenceUnit),
    Period(Duration),
}

/// A `period`: the period syntax (`30s`, `500ms`, `90m`, `36h`, `10d`) as `ratelimit-vocab`
/// reads it, or a count and a unit of fixed length as `ratelimit-core` names them (`10 day`).
fn parse_period(text: &str) -> Result<Duration, String> {
    if let Ok(us) = ratelimit_vocab::parse_period(text) {
        return Ok(Duration::from_micros(us));
    }
    let mut words = text.split_whitespace();
    if let (Some(count), Some(unit), None) = (words.next(), words.next(), words.next())
        && let Ok(count) = count.parse::<u32>()
        && count > 0
    {
        let unit = Unit::from_str(unit).map_err(|e| format!("{e}; {PERIOD_SYNTAX}"))?;
        if unit.is_calendar() {
            return Err(format!(
                "a {unit} is a calendar period, not a length: use `unit: {unit}` with `calendar: \
                 true`, or count days (`{} day`)",
                if unit == Unit::Week {
                    7 * count
                } else {
                    30 * count
                }
            ));
        }
        return unit
            .as_duration()
            .checked_mul(count)
            .ok_or_else(|| format!("the period `{text}` is too long"));
    }
    Err(format!("unknown period `{}`; {PERIOD_SYNTAX}", text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_read_the_period_syntax_or_a_count_of_units() {
        assert_eq!(parse_period("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_period("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_period("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_period("36h"), Ok(Duration::from_secs(129_600)));
        assert_eq!(parse_period("10d"), Ok(Duration::from_secs(864_000)));
        assert_eq!(parse_period("10 day"), Ok(Duration::from_secs(864_000)));
        assert_eq!(parse_period(" 36  hour "), Ok(Duration::from_secs(129_600)));
        for bad in [
            "10 d", "0 day", "0s", "none", "2w", "", "day", "2 days", "1 2 day", "-1 day",
        ] {
            let err = parse_period(bad).unwrap_err();
            assert!(
                err.contains("period") || err.contains("unit"),
                "{bad}: {err}"
            );
        }
        assert!(parse_period("2 week").unwrap_err().contains("14 day"));
        assert!(
            parse_period("1 month")
                .unwrap_err()
                .contains("calendar: true")
        );
    }
}
