//! Key escaping: whatever the name and key, the bucket key keeps one hash tag holding the
//! whole tag, stays bounded, and distinct (name, key) pairs, named or not, stay distinct.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratelimit_core::MAX_PART_LEN;
use ratelimit_core::__private::bucket_key;

fuzz_target!(|input: (Option<&str>, &str, Option<&str>, &str)| {
    let (n1, k1, n2, k2) = input;
    let k = bucket_key("p", n1, k1);
    assert!(k.starts_with("p:{") && k.ends_with('}'), "{k}");
    assert_eq!(k.matches('{').count(), 1, "{k}");
    assert_eq!(k.matches('}').count(), 1, "{k}");
    assert!(k.len() <= 3 + 4 + 3 + 2 * MAX_PART_LEN + 1, "{}", k.len());
    if (n1, k1) != (n2, k2) {
        assert_ne!(k, bucket_key("p", n2, k2));
    }
});
