//! The overrides file and environment parsers: any input gives a value or an error, and a
//! parsed override applies to a declared limit with a value or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratelimit_core::overrides::{parse, parse_env};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(limits) = parse(text) {
        for o in limits.values() {
            if let (Some(r), Some(b)) = (o.replenish, o.burst) {
                let unit = o.unit.unwrap_or(ratelimit_core::Unit::Second);
                let _ = ratelimit_core::Limit::try_new(r, b, unit);
            }
        }
    }
    let _ = parse_env(text);
});
