//! A quota by calendar period ([`Limit::per_week`], [`Limit::per_month`]): where its windows
//! start, in which time zone, and on which day of a customer's billing cycle.

use ratelimit_algorithms::calendar::Calendar;

use super::{InvalidLimit, Limit, invalid};

impl Limit {
    /// Where a quota by calendar period ([`per_week`](Limit::per_week),
    /// [`per_month`](Limit::per_month)) starts its windows; `None` for any other limit.
    pub const fn calendar(&self) -> Option<Calendar> {
        self.calendar
    }

    /// The same limit with `calendar` where it is a quota by calendar period of the same
    /// period (a month's anchor and clock kept when an override changes its count).
    pub(crate) const fn keeping_calendar(self, calendar: Calendar) -> Limit {
        use ratelimit_algorithms::calendar::Period;
        match (self.calendar, calendar.period()) {
            (Some(own), theirs)
                if matches!(
                    (own.period(), theirs),
                    (Period::Month { .. }, Period::Month { .. })
                        | (Period::Week { .. }, Period::Week { .. })
                ) =>
            {
                Limit {
                    calendar: Some(calendar),
                    ..self
                }
            }
            _ => self,
        }
    }

    /// The same quota by calendar period, read on a clock `minutes` east of UTC (`120`:
    /// UTC+02:00, whose midnight is 22:00 UTC; from -840 to 840).
    ///
    /// # Panics
    /// If [`try_utc_offset`](Limit::try_utc_offset) fails (a compile error in `const`).
    pub const fn utc_offset(self, minutes: i32) -> Limit {
        match self.try_utc_offset(minutes) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`utc_offset`](Limit::utc_offset) for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::NotCalendar`] for a limit that is no calendar period's;
    /// [`InvalidLimit::BadCalendar`] for an offset beyond 14 hours.
    pub const fn try_utc_offset(self, minutes: i32) -> Result<Limit, InvalidLimit> {
        let Some(calendar) = self.calendar else {
            return Err(InvalidLimit::NotCalendar);
        };
        let moved = match calendar.period() {
            ratelimit_algorithms::calendar::Period::Week { first_weekday } => {
                Calendar::week(first_weekday, minutes)
            }
            ratelimit_algorithms::calendar::Period::Month { anchor_day } => {
                Calendar::month(anchor_day, minutes)
            }
        };
        match moved {
            Some(calendar) => Ok(Limit {
                calendar: Some(calendar),
                ..self
            }),
            None => Err(InvalidLimit::BadCalendar {
                anchor: None,
                offset_minutes: minutes,
            }),
        }
    }

    /// The same quota by calendar period, its windows starting on `anchor`: a month's on
    /// that day of the month (1 to 31; a month without it starts on its last day, so a
    /// billing day of the 31st is February's 28th or 29th), a week's on that weekday (1
    /// Monday to 7 Sunday).
    ///
    /// # Panics
    /// If [`try_anchor`](Limit::try_anchor) fails (a compile error in `const`).
    pub const fn anchor(self, anchor: u8) -> Limit {
        match self.try_anchor(anchor) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`anchor`](Limit::anchor) for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::NotCalendar`] for a limit that is no calendar period's;
    /// [`InvalidLimit::BadCalendar`] for an anchor out of its period's range.
    pub const fn try_anchor(self, anchor: u8) -> Result<Limit, InvalidLimit> {
        let Some(calendar) = self.calendar else {
            return Err(InvalidLimit::NotCalendar);
        };
        match calendar.anchored(anchor) {
            Some(calendar) => Ok(Limit {
                calendar: Some(calendar),
                ..self
            }),
            None => Err(InvalidLimit::BadCalendar {
                anchor: Some(anchor),
                offset_minutes: calendar.offset_minutes(),
            }),
        }
    }
}
