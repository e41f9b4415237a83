//! Key escaping: whatever the name and key, the bucket key keeps one hash tag holding all of
//! "name:key", stays bounded, and distinct keys stay distinct.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratelimit_core::MAX_PART_LEN;
use ratelimit_core::__private::bucket_key;

fuzz_target!(|input: (&str, &str, &str)| {
    let (name, a, b) = input;
    let k = bucket_key("p", Some(name), a);
    assert!(k.starts_with("p:{") && k.ends_with('}'), "{k}");
    assert_eq!(k.matches('{').count(), 1, "{k}");
    assert_eq!(k.matches('}').count(), 1, "{k}");
    assert!(k.len() <= 3 + 2 * (MAX_PART_LEN + 1) + 1, "{}", k.len());
    if a != b {
        assert_ne!(k, bucket_key("p", Some(name), b));
    }
});
