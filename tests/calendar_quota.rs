//! Quotas by calendar period (`unit = "month"`, `"week"`, `Limit::per_month`): a fixed window
//! whose windows are the calendar's, on the memory store at chosen dates (its manual clock),
//! and on Redis servers whose clocks start at chosen dates (`faketime`), by the scripts, the
//! function library and the module: the quota taken, the true time to the reset said, and the
//! next period's quota at its first instant, at the edges the calendar has (a leap February's
//! last second, a billing day of the 31st, a clock east of UTC).
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::time::Duration;

use redis_ratelimit::clock::ManualClock;
use redis_ratelimit::store::{MemoryStore, RedisPath};
use redis_ratelimit::tools::algorithms::calendar::{self, Calendar};
use redis_ratelimit::{Global, Limit, RateLimited, RateLimiter, rate_limit};
use testkit::RedisServer;

mod support;

/// Microseconds since the epoch of `y-m-d` at `hh:mm:ss` UTC.
fn utc(y: i64, m: u32, d: u32, hms: (u64, u64, u64)) -> u64 {
    Calendar::midnight_utc_us(y, m, d).unwrap() + ((hms.0 * 60 + hms.1) * 60 + hms.2) * 1_000_000
}

static CLOCKED: OnceLock<RateLimiter> = OnceLock::new();

#[rate_limit(replenish = 3, unit = "month", key = Global, limiter = CLOCKED)]
async fn monthly() -> Result<(), RateLimited> {
    Ok(())
}

/// The attribute's monthly quota on the memory store, from the last second of a leap
/// February: three calls, then a refusal whose `retry_after` is the second left exactly,
/// then March's quota at March's first instant.
#[tokio::test]
async fn a_monthly_quota_resets_at_the_month_on_the_memory_store() {
    let clock = ManualClock::starting_at_utc(utc(2028, 2, 29, (23, 59, 59)));
    let limiter = RateLimiter::builder()
        .memory_store(MemoryStore::with_clock(clock.clone()))
        .build()
        .await
        .unwrap();
    CLOCKED.set(limiter).unwrap();
    for _ in 0..3 {
        monthly().await.unwrap();
    }
    clock.advance(Duration::from_millis(250));
    let refused = monthly().await.unwrap_err();
    assert_eq!(refused.retry_after(), Duration::from_millis(750));
    clock.advance(Duration::from_micros(749_999));
    assert!(monthly().await.is_err(), "a microsecond early");
    clock.advance(Duration::from_micros(1));
    for _ in 0..3 {
        monthly().await.unwrap();
    }
    assert!(monthly().await.is_err());
}

static BILLED: OnceLock<RateLimiter> = OnceLock::new();

/// Each customer's quota resets on their own billing day: the call is given a tier built at
/// run time, whose monthly limit is anchored on the customer's day (the bucket is the
/// customer's whatever its tier).
#[rate_limit(replenish = 2, unit = "month", key = customer, tier = billing(day), limited_status = 402, limiter = BILLED)]
async fn billed(customer: &str, day: u8) -> Result<(), RateLimited> {
    Ok(())
}

fn billing(day: u8) -> redis_ratelimit::Tier {
    let limit = Limit::per_month(2).try_anchor(day).unwrap();
    redis_ratelimit::Tier::try_new(format!("billed-on-{day}"), limit).unwrap()
}

/// Anchors per customer, on the memory store at February 14th, 23:59:59: the customer billed
/// on the 15th has a second left of their month, the one billed on the 1st until March.
#[tokio::test]
async fn each_customer_s_month_starts_on_their_billing_day() {
    let clock = ManualClock::starting_at_utc(utc(2028, 2, 14, (23, 59, 59)));
    let limiter = RateLimiter::builder()
        .memory_store(MemoryStore::with_clock(clock.clone()))
        .build()
        .await
        .unwrap();
    BILLED.set(limiter).unwrap();
    for customer in ["on-15th", "on-1st"] {
        let day = if customer == "on-15th" { 15 } else { 1 };
        billed(customer, day).await.unwrap();
        billed(customer, day).await.unwrap();
        let refused = billed(customer, day).await.unwrap_err();
        #[cfg(any(feature = "axum", feature = "actix-web"))]
        assert_eq!(refused.status(), 402);
        let left = if day == 15 {
            Duration::from_secs(1)
        } else {
            Duration::from_micros(utc(2028, 3, 1, (0, 0, 0)) - utc(2028, 2, 14, (23, 59, 59)))
        };
        assert_eq!(refused.retry_after(), left, "{customer}");
    }
    clock.advance(Duration::from_secs(1));
    billed("on-15th", 15).await.unwrap();
    assert!(billed("on-1st", 1).await.is_err());
}

static RESOLVED: OnceLock<RateLimiter> = OnceLock::new();

/// A customer and the billing day the auth middleware found for them.
#[derive(Clone)]
struct Account {
    id: &'static str,
    billing_day: u8,
}

/// The customer's key, and their billing day as the anchor of their monthly quota.
struct Customer;

impl redis_ratelimit::KeyResolver for Customer {
    fn resolve<'a>(
        &'a self,
        ctx: &'a redis_ratelimit::RequestContext,
    ) -> Option<std::borrow::Cow<'a, str>> {
        ctx.extensions()
            .get::<Account>()
            .map(|a| std::borrow::Cow::Borrowed(a.id))
    }

    fn anchor(&self, ctx: &redis_ratelimit::RequestContext) -> Option<u8> {
        ctx.extensions().get::<Account>().map(|a| a.billing_day)
    }
}

#[rate_limit(replenish = 2, unit = "month", key = Customer, limiter = RESOLVED)]
async fn by_customer() -> Result<(), RateLimited> {
    Ok(())
}

/// Stacked with a daily rate: the anchor applies to the month only.
#[rate_limit(replenish = 2, unit = "month", key = Customer, name = "stacked.month", limiter = RESOLVED)]
#[rate_limit(replenish = 100, unit = "day", key = Customer, name = "stacked.day", limiter = RESOLVED)]
async fn by_customer_stacked() -> Result<(), RateLimited> {
    Ok(())
}

/// Anchors from the key's resolver, on the memory store at February 14th, 23:59:59: the
/// customer billed on the 15th has a second left of their month, the one billed on the 1st
/// until March, one alone and one under stacked limits; a day no month has (32) is said once
/// and the limit's own anchor (the 1st) used.
#[tokio::test]
async fn a_key_resolver_says_where_its_customer_s_month_starts() {
    use redis_ratelimit::{RequestContext, context::scope};
    let clock = ManualClock::starting_at_utc(utc(2028, 2, 14, (23, 59, 59)));
    let limiter = RateLimiter::builder()
        .memory_store(MemoryStore::with_clock(clock.clone()))
        .build()
        .await
        .unwrap();
    RESOLVED.set(limiter).unwrap();
    let as_account =
        |id, billing_day| RequestContext::new().with_extension(Account { id, billing_day });
    let march = Duration::from_micros(utc(2028, 3, 1, (0, 0, 0)) - utc(2028, 2, 14, (23, 59, 59)));
    for (id, day, left) in [
        ("on-15th", 15, Duration::from_secs(1)),
        ("on-1st", 1, march),
        ("on-32nd", 32, march),
    ] {
        for _ in 0..2 {
            scope(as_account(id, day), by_customer()).await.unwrap();
            scope(as_account(id, day), by_customer_stacked())
                .await
                .unwrap();
        }
        let alone = scope(as_account(id, day), by_customer()).await.unwrap_err();
        assert_eq!(alone.retry_after(), left, "{id}");
        let stacked = scope(as_account(id, day), by_customer_stacked())
            .await
            .unwrap_err();
        assert_eq!(stacked.name(), Some("stacked.month"));
        assert_eq!(stacked.retry_after(), left, "{id}, stacked");
    }
    clock.advance(Duration::from_secs(1));
    scope(as_account("on-15th", 15), by_customer())
        .await
        .unwrap();
    scope(as_account("on-15th", 15), by_customer_stacked())
        .await
        .unwrap();
    assert!(scope(as_account("on-1st", 1), by_customer()).await.is_err());
}

/// A billing day of the 31st at UTC+01:00 on the memory store: February's window starts on
/// its last day (the 29th in 2028) at 23:00 UTC the day before, and runs to March 31st.
#[tokio::test]
async fn a_billing_day_the_month_lacks_starts_on_its_last_day() {
    let clock = ManualClock::starting_at_utc(utc(2028, 2, 28, (22, 59, 59)));
    let limiter = RateLimiter::builder()
        .memory_store(MemoryStore::with_clock(clock.clone()))
        .build()
        .await
        .unwrap();
    let billing = Limit::per_month(2).anchor(31).utc_offset(60);
    // 22:59:59 UTC on the 28th is 23:59:59 on the 28th at UTC+01:00: January 31st's window.
    for _ in 0..2 {
        assert!(limiter.check("acme", &billing).await.unwrap().allowed);
    }
    let refused = limiter.check("acme", &billing).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Duration::from_secs(1));
    clock.advance(Duration::from_secs(1));
    let february = limiter.check("acme", &billing).await.unwrap();
    assert!(february.allowed);
    // Its window ends on March 31st at midnight, UTC+01:00.
    let end = utc(2028, 3, 30, (23, 0, 0));
    let now = utc(2028, 2, 28, (23, 0, 0));
    assert_eq!(february.reset_after, Duration::from_micros(end - now));
}

/// The server's clock, µs since the epoch.
async fn server_now(con: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(con).await.unwrap();
    s * 1_000_000 + us
}

/// Quotas by calendar period on Redis, through the module, the function library and
/// `EVALSHA`, on the server's own clock (today's: a Debian `redis-server` is linked with
/// jemalloc, which cannot run under libfaketime, so the dates are the calendars' to move
/// instead): a month, a week from Sunday, a billing day of the 31st at UTC-05:30, and a month
/// whose window ends within the hour (its offset chosen from the server's time so that its
/// local midnight is near). Each takes its quota, then refuses with a `retry_after` and a
/// reset that end exactly at the window's end on the server's clock, read before and after.
/// (Every date's window end is held to the twin by `calendar_windows_end_where_the_twin_says`
/// in testkit's algorithms test, and the change of period on the memory store above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_by_calendar_period_on_redis_by_every_path() {
    let servers = [
        (
            RedisServer::start_with(&testkit::module::load_args()),
            RedisPath::Module,
        ),
        (RedisServer::start(), RedisPath::Functions),
        (
            RedisServer::start_with(&["--rename-command", "FUNCTION", ""]),
            RedisPath::Scripts,
        ),
    ];
    for (server, path) in &servers {
        let limiter = support::redis_limiter(server, "test").await;
        assert_eq!(limiter.redis_path(), Some(*path));
        let mut con = server.connection().await;
        // UTC+hh:00 where it is between 23:00 and 24:00 now, and months from tomorrow there:
        // a window that ends within the hour.
        let now = server_now(&mut con).await;
        let (hour, day): (u64, u64) = (3_600_000_000, 86_400_000_000);
        let offset = 23 - i64::try_from(now % day / hour).unwrap();
        let offset = if offset > 14 { offset - 24 } else { offset };
        let local = now
            .checked_add_signed(offset * i64::try_from(hour).unwrap())
            .unwrap();
        let tomorrow = i64::try_from(local / day).unwrap() + 1;
        let (_, _, anchor) = calendar::civil_from_days(tomorrow);
        let soon = Limit::per_month(2)
            .utc_offset(i32::try_from(offset * 60).unwrap())
            .anchor(u8::try_from(anchor).unwrap());
        let quotas = [
            Limit::per_month(3),
            Limit::per_week(2).anchor(7),
            Limit::per_month(2).anchor(31).utc_offset(-330),
            soon,
        ];
        for (i, quota) in quotas.iter().enumerate() {
            let calendar = quota.calendar().unwrap();
            // A window that ends while its quota is taken (a few milliseconds, at most once
            // in an hour for the nearest) is taken again in the next, on a key of its own.
            let (refused, before, after) = 'taken: {
                for attempt in 0..2 {
                    let key = format!("acme-{i}-{attempt}");
                    let before = server_now(&mut con).await;
                    let mut answers = Vec::new();
                    for _ in 0..=quota.replenish() {
                        answers.push(limiter.check(&key, quota).await.unwrap());
                    }
                    let after = server_now(&mut con).await;
                    if calendar.window(before) == calendar.window(after) {
                        let (refused, taken) = answers.split_last().unwrap();
                        assert!(taken.iter().all(|d| d.allowed), "{path:?} {quota}");
                        break 'taken (refused.clone(), before, after);
                    }
                }
                panic!("{path:?} {quota}: two windows ended within two quotas' calls");
            };
            assert!(!refused.allowed, "{path:?} {quota}");
            let end = calendar.window(after).1;
            let retry = u64::try_from(refused.retry_after.as_micros()).unwrap();
            assert!(
                end - after <= retry && retry <= end - before,
                "{path:?} {quota}: retry after {retry} µs, the window ends {} to {} µs away",
                end - after,
                end - before
            );
            assert_eq!(refused.reset_after, refused.retry_after, "{path:?} {quota}");
            if i == 3 {
                assert!(retry <= hour, "{path:?}: the window ends within the hour");
            }
        }
    }
}
