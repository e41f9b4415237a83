//! Calendar periods: windows that are calendar weeks or months, for quotas that reset at
//! calendar instants ("10,000 calls a month, from the 1st at 00:00 UTC", "from each
//! customer's billing day"), where a window of a fixed length (30 days) would drift.
//!
//! A [`Calendar`] names the period (a week from a weekday, a month from a day of the month)
//! and the offset from UTC of the clock it is read on (a quota that resets at midnight in
//! UTC+02:00 resets at 22:00 UTC). Its windows cover the timeline without gap or overlap:
//! [`Calendar::window`] gives the one holding an instant, from local midnight of its first
//! day to local midnight of the next window's. A month from a day the month lacks (the 31st,
//! in April; the 29th, in February of a common year) starts on the month's last day, so that
//! every month has exactly one window start, and the next month starts on its own anchor
//! again (a billing day of the 31st: January 31, February 28 or 29, March 31).
//!
//! All in integer arithmetic on days since the Unix epoch (the proleptic Gregorian calendar,
//! as every Unix clock reads it, leap seconds not counted), the same in the Lua scripts, on
//! the Redis server's clock; microseconds stay below 2^53.
//!
//! ```
//! use ratelimit_algorithms::calendar::Calendar;
//!
//! // Months from the 31st, UTC: 2028-02-10 is in the window from January 31 to February 29
//! // (2028 is a leap year).
//! let billing = Calendar::month(31, 0).expect("a day of the month");
//! let at = |y, m, d| Calendar::midnight_utc_us(y, m, d).unwrap();
//! assert_eq!(billing.window(at(2028, 2, 10)), (at(2028, 1, 31), at(2028, 2, 29)));
//! // Weeks from Monday: 2026-11-28 is a Saturday.
//! let weeks = Calendar::week(1, 0).expect("a weekday");
//! assert_eq!(weeks.window(at(2026, 11, 28)), (at(2026, 11, 23), at(2026, 11, 30)));
//! ```

/// A day, in microseconds.
pub const DAY_US: u64 = 86_400_000_000;

/// The farthest a calendar's clock may be from UTC, in minutes: 14 hours, as the time zones
/// in use are (UTC-12:00 to UTC+14:00).
pub const MAX_OFFSET_MINUTES: i32 = 14 * 60;

/// A calendar period: the windows of a quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    period: Period,
    /// Minutes east of UTC of the clock the period is read on (within ±840: two bytes, so
    /// that a limit carrying a calendar stays as small as one without).
    offset_minutes: i16,
}

/// Which period, and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// Weeks from a weekday: 1 Monday to 7 Sunday (ISO 8601).
    Week {
        /// The weekday a week starts on.
        first_weekday: u8,
    },
    /// Months from a day of the month (1 to 31; the month's last day in a month without it).
    Month {
        /// The day of the month a window starts on.
        anchor_day: u8,
    },
}

impl Calendar {
    /// Months starting on `anchor_day` (1 to 31) at midnight, `offset_minutes` east of UTC;
    /// `None` for a day or an offset out of range.
    #[must_use]
    pub const fn month(anchor_day: u8, offset_minutes: i32) -> Option<Calendar> {
        if anchor_day == 0 || anchor_day > 31 || !offset_in_range(offset_minutes) {
            return None;
        }
        Some(Calendar {
            period: Period::Month { anchor_day },
            // Within ±840, checked above.
            #[allow(clippy::cast_possible_truncation)]
            offset_minutes: offset_minutes as i16,
        })
    }

    /// Weeks starting on `first_weekday` (1 Monday to 7 Sunday) at midnight, `offset_minutes`
    /// east of UTC; `None` for a weekday or an offset out of range.
    #[must_use]
    pub const fn week(first_weekday: u8, offset_minutes: i32) -> Option<Calendar> {
        if first_weekday == 0 || first_weekday > 7 || !offset_in_range(offset_minutes) {
            return None;
        }
        Some(Calendar {
            period: Period::Week { first_weekday },
            // Within ±840, checked above.
            #[allow(clippy::cast_possible_truncation)]
            offset_minutes: offset_minutes as i16,
        })
    }

    /// Its period.
    #[must_use]
    pub const fn period(self) -> Period {
        self.period
    }

    /// Its clock's offset from UTC, in minutes east.
    #[must_use]
    pub const fn offset_minutes(self) -> i32 {
        self.offset_minutes as i32
    }

    /// The same period, its windows starting on `anchor` instead (a key's own billing day or
    /// weekday, in the period's range); `None` out of range.
    #[must_use]
    pub const fn anchored(self, anchor: u8) -> Option<Calendar> {
        match self.period {
            Period::Week { .. } => Calendar::week(anchor, self.offset_minutes()),
            Period::Month { .. } => Calendar::month(anchor, self.offset_minutes()),
        }
    }

    /// The window holding the instant `now_us` (microseconds since the epoch, UTC): its start
    /// and its end, `start <= now_us < end`. The end of one window is the start of the next.
    #[must_use]
    pub fn window(self, now_us: u64) -> (u64, u64) {
        let offset_us = i64::from(self.offset_minutes) * 60_000_000;
        // Microseconds below 2^53 (the year 2255): within an i64, offset and all.
        let local = i64::try_from(now_us).unwrap_or(i64::MAX) + offset_us;
        let day = local.div_euclid(DAY_US_I64);
        let (start_day, end_day) = match self.period {
            Period::Week { first_weekday } => {
                // 1970-01-01 was a Thursday (ISO weekday 4).
                let weekday = (day + 3).rem_euclid(7) + 1;
                let start = day - (weekday - i64::from(first_weekday)).rem_euclid(7);
                (start, start + 7)
            }
            Period::Month { anchor_day } => {
                let (year, month, dom) = civil_from_days(day);
                let this = anchor_in(year, month, anchor_day);
                if dom >= this {
                    let (ny, nm) = next_month(year, month);
                    (
                        days_from_civil(year, month, this),
                        days_from_civil(ny, nm, anchor_in(ny, nm, anchor_day)),
                    )
                } else {
                    let (py, pm) = previous_month(year, month);
                    (
                        days_from_civil(py, pm, anchor_in(py, pm, anchor_day)),
                        days_from_civil(year, month, this),
                    )
                }
            }
        };
        let instant = |day: i64| u64::try_from(day * DAY_US_I64 - offset_us).unwrap_or(0);
        (instant(start_day), instant(end_day))
    }

    /// The longest window of its period, in microseconds: a week, or 31 days.
    #[must_use]
    pub const fn longest_us(self) -> u64 {
        match self.period {
            Period::Week { .. } => 7 * DAY_US,
            Period::Month { .. } => 31 * DAY_US,
        }
    }

    /// The calendar's arguments, as the scripts take them after a window's own: the period
    /// (1 week, 2 month), its anchor (the first weekday, the anchor day), and the offset in
    /// minutes plus [`MAX_OFFSET_MINUTES`] (so that every argument is unsigned).
    #[must_use]
    pub fn args(self) -> [u64; 3] {
        let (kind, anchor) = match self.period {
            Period::Week { first_weekday } => (1, first_weekday),
            Period::Month { anchor_day } => (2, anchor_day),
        };
        let offset = u64::try_from(self.offset_minutes() + MAX_OFFSET_MINUTES).unwrap_or(0);
        [kind, u64::from(anchor), offset]
    }

    /// The inverse of [`args`](Calendar::args); `None` for arguments no calendar sends.
    #[must_use]
    pub fn from_args(args: &[u64]) -> Option<Calendar> {
        let &[kind, anchor, offset] = args else {
            return None;
        };
        let anchor = u8::try_from(anchor).ok()?;
        let offset = i32::try_from(offset).ok()? - MAX_OFFSET_MINUTES;
        match kind {
            1 => Calendar::week(anchor, offset),
            2 => Calendar::month(anchor, offset),
            _ => None,
        }
    }

    /// Midnight UTC of the date `year-month-day`, in microseconds since the epoch; `None`
    /// for a date that is not one, or one before 1970.
    #[must_use]
    pub fn midnight_utc_us(year: i64, month: u32, day: u32) -> Option<u64> {
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        u64::try_from(days_from_civil(year, month, day) * DAY_US_I64).ok()
    }
}

const DAY_US_I64: i64 = 86_400_000_000;

const fn offset_in_range(minutes: i32) -> bool {
    -MAX_OFFSET_MINUTES <= minutes && minutes <= MAX_OFFSET_MINUTES
}

/// The day `anchor` of the month, or the month's last day if it has fewer.
fn anchor_in(year: i64, month: u32, anchor: u8) -> u32 {
    u32::from(anchor).min(days_in_month(year, month))
}

fn next_month(year: i64, month: u32) -> (i64, u32) {
    if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    }
}

fn previous_month(year: i64, month: u32) -> (i64, u32) {
    if month == 1 {
        (year - 1, 12)
    } else {
        (year, month - 1)
    }
}

/// Whether `year` is a leap year (Gregorian).
#[must_use]
pub const fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// The days of `month` (1 to 12) in `year`.
#[must_use]
pub const fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of the date `year-month-day` (Howard Hinnant's `days_from_civil`).
#[must_use]
pub const fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month as i64;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of the day `days` since 1970-01-01: year, month (1 to 12), day (1 to 31)
/// (Howard Hinnant's `civil_from_days`).
#[must_use]
// The day (1 to 31) and the month (1 to 12) fit in any integer.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub const fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(y: i64, m: u32, d: u32) -> u64 {
        Calendar::midnight_utc_us(y, m, d).unwrap()
    }

    #[test]
    fn dates_and_days_are_one_to_one() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        // Every day from 1970 to 2260, in order, each the day after the one before.
        let (mut y, mut m, mut d) = (1970, 1, 1);
        for days in 0..days_from_civil(2260, 1, 1) {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            assert_eq!(days_from_civil(y, m, d), days);
            d += 1;
            if d > days_in_month(y, m) {
                d = 1;
                (y, m) = next_month(y, m);
            }
        }
        assert!(is_leap(2000) && is_leap(2028) && !is_leap(2100) && !is_leap(2027));
    }

    #[test]
    fn months_from_the_31st_start_on_the_last_day_of_shorter_months() {
        let c = Calendar::month(31, 0).unwrap();
        assert_eq!(
            c.window(at(2028, 2, 10)),
            (at(2028, 1, 31), at(2028, 2, 29))
        );
        assert_eq!(
            c.window(at(2028, 2, 29)),
            (at(2028, 2, 29), at(2028, 3, 31))
        );
        assert_eq!(
            c.window(at(2027, 2, 28)),
            (at(2027, 2, 28), at(2027, 3, 31))
        );
        assert_eq!(
            c.window(at(2027, 4, 30)),
            (at(2027, 4, 30), at(2027, 5, 31))
        );
        // The 29th in a common year's February: its last day, the 28th.
        let c = Calendar::month(29, 0).unwrap();
        assert_eq!(c.window(at(2027, 3, 1)), (at(2027, 2, 28), at(2027, 3, 29)));
        assert_eq!(c.window(at(2028, 3, 1)), (at(2028, 2, 29), at(2028, 3, 29)));
    }

    #[test]
    fn a_month_from_the_first_is_the_calendar_month() {
        let c = Calendar::month(1, 0).unwrap();
        assert_eq!(
            c.window(at(2026, 12, 31) + DAY_US - 1),
            (at(2026, 12, 1), at(2027, 1, 1))
        );
        assert_eq!(c.window(at(2027, 1, 1)), (at(2027, 1, 1), at(2027, 2, 1)));
        // The last second of a period, then the first of the next.
        let last = at(2027, 2, 1) - 1_000_000;
        assert_eq!(c.window(last).1 - last, 1_000_000);
        assert_eq!(c.window(at(2027, 2, 1)).0, at(2027, 2, 1));
    }

    #[test]
    fn an_offset_moves_midnight() {
        // UTC+02:00: the month starts at 22:00 UTC the day before.
        let c = Calendar::month(1, 120).unwrap();
        let two_hours = 2 * 3_600_000_000;
        assert_eq!(
            c.window(at(2026, 11, 30) + 23 * 3_600_000_000),
            (at(2026, 12, 1) - two_hours, at(2027, 1, 1) - two_hours)
        );
        // UTC-05:00: 03:00 UTC on the 1st is still the month before, there.
        let c = Calendar::month(1, -300).unwrap();
        let five_hours = 5 * 3_600_000_000;
        assert_eq!(
            c.window(at(2027, 1, 1) + 3 * 3_600_000_000),
            (at(2026, 12, 1) + five_hours, at(2027, 1, 1) + five_hours)
        );
    }

    #[test]
    fn weeks_start_on_their_weekday() {
        // 2026-11-23 is a Monday, 2026-11-29 a Sunday.
        let monday = Calendar::week(1, 0).unwrap();
        assert_eq!(
            monday.window(at(2026, 11, 23)),
            (at(2026, 11, 23), at(2026, 11, 30))
        );
        assert_eq!(
            monday.window(at(2026, 11, 29)),
            (at(2026, 11, 23), at(2026, 11, 30))
        );
        let sunday = Calendar::week(7, 0).unwrap();
        assert_eq!(
            sunday.window(at(2026, 11, 28)),
            (at(2026, 11, 22), at(2026, 11, 29))
        );
        assert_eq!(
            sunday.window(at(2026, 11, 29)),
            (at(2026, 11, 29), at(2026, 12, 6))
        );
    }

    #[test]
    fn out_of_range_calendars_are_refused() {
        assert!(Calendar::month(0, 0).is_none() && Calendar::month(32, 0).is_none());
        assert!(Calendar::week(0, 0).is_none() && Calendar::week(8, 0).is_none());
        assert!(Calendar::month(1, 841).is_none() && Calendar::month(1, -841).is_none());
        assert!(Calendar::month(1, 840).is_some() && Calendar::week(1, -840).is_some());
        assert_eq!(
            Calendar::month(1, 0).unwrap().anchored(31),
            Calendar::month(31, 0)
        );
        assert_eq!(Calendar::week(1, 0).unwrap().anchored(8), None);
        assert_eq!(Calendar::midnight_utc_us(2027, 2, 29), None);
        assert_eq!(Calendar::from_args(&[3, 1, 840]), None);
        assert_eq!(Calendar::from_args(&[2, 1, 1681]), None);
    }

    fn calendar() -> impl Strategy<Value = Calendar> {
        (
            any::<bool>(),
            1u8..=31,
            -MAX_OFFSET_MINUTES..=MAX_OFFSET_MINUTES,
        )
            .prop_map(|(week, anchor, offset)| {
                if week {
                    Calendar::week(anchor % 7 + 1, offset).unwrap()
                } else {
                    Calendar::month(anchor, offset).unwrap()
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Every instant from 1971 to 2250 is in its window, which starts at local midnight
        /// of its anchor (clamped to the month), and the next window starts where it ends.
        #[test]
        fn windows_tile_the_timeline(c in calendar(), now in at(1971, 1, 1)..at(2250, 1, 1)) {
            let (start, end) = c.window(now);
            prop_assert!(start <= now && now < end, "{c:?} {now}: {start} {end}");
            prop_assert_eq!(c.window(end).0, end);
            prop_assert_eq!(c.window(start), (start, end));
            prop_assert_eq!(c.window(end - 1), (start, end));
            let offset_us = i64::from(c.offset_minutes()) * 60_000_000;
            let local_day = |t: u64| (i64::try_from(t).unwrap() + offset_us).div_euclid(DAY_US_I64);
            // Local midnights.
            prop_assert_eq!((i64::try_from(start).unwrap() + offset_us).rem_euclid(DAY_US_I64), 0);
            let (y, m, d) = civil_from_days(local_day(start));
            match c.period() {
                Period::Week { first_weekday } => {
                    prop_assert_eq!(end - start, 7 * DAY_US);
                    prop_assert_eq!((local_day(start) + 3).rem_euclid(7) + 1, i64::from(first_weekday));
                }
                Period::Month { anchor_day } => {
                    prop_assert_eq!(d, anchor_in(y, m, anchor_day));
                    let (ny, nm) = next_month(y, m);
                    prop_assert_eq!(civil_from_days(local_day(end)), (ny, nm, anchor_in(ny, nm, anchor_day)));
                }
            }
            prop_assert_eq!(Calendar::from_args(&c.args()), Some(c));
        }
    }
}
