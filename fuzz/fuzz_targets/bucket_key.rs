//! Key escaping: whatever the name and key, the bucket key keeps one hash tag holding the
//! whole tag, stays bounded, reads back into its name and key, and distinct (name, key)
//! pairs, named or not, stay distinct.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratelimit_core::tools::MAX_PART_LEN;
use ratelimit_core::tools::{bucket_key, parse_bucket_key};

fuzz_target!(|input: (Option<&str>, &str, Option<&str>, &str)| {
    let (n1, k1, n2, k2) = input;
    let k = bucket_key("p", n1, k1);
    assert!(k.starts_with("p:{") && k.ends_with('}'), "{k}");
    assert_eq!(k.matches('{').count(), 1, "{k}");
    assert_eq!(k.matches('}').count(), 1, "{k}");
    assert!(k.len() <= 3 + 4 + 3 + 2 * MAX_PART_LEN + 1, "{}", k.len());
    // And reads back into them (a part too long to keep, into its digest).
    let read = parse_bucket_key("p", &k).expect("a bucket key reads back");
    assert!(read.key.stands_for(k1), "{k}");
    assert_eq!(read.name.map(|n| n1.is_some_and(|n1| n.stands_for(n1))), n1.map(|_| true));
    if (n1, k1) != (n2, k2) {
        assert_ne!(k, bucket_key("p", n2, k2));
    }
});
