//! The windows' parameters of limits.

use crate::algorithm::OfLimit as _;
use crate::algorithm::WindowParams;
use crate::algorithm::sliding_window::SlidingParams;
use crate::limit::Limit;

#[test]
fn params_need_a_millisecond_and_a_token() {
    assert!(WindowParams::try_new(0, 1_000_000).is_none());
    assert!(WindowParams::try_new(1, 999).is_none());
    assert!(WindowParams::try_new(1, 1000).is_some());
    // A fixed window counts to any limit; the sliding window's weights bound it.
    assert!(WindowParams::try_new(1_000_000_000, 86_400_000_000).is_some());
    assert!(SlidingParams::try_new(1_000_000_000, 86_400_000_000).is_none());
    assert!(SlidingParams::try_new(6_000_000, 86_400_000_000).is_some());
    let day = Limit::per_day(1_000_000);
    assert_eq!(
        WindowParams::of(&day).map(|p| p.period_us()),
        Some(86_400_000_000)
    );
}
