//! The Redis module's argument readers over any arguments a client may send: each answers a
//! value or an error (never a panic), and a packed text read number by number gives what the
//! whole-text readers give. (The commands themselves, over hostile argument vectors on a real
//! server: `testkit/tests/module.rs`.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratelimit_module::args::{Args, Keys};

fn bytes(a: &Vec<u8>) -> &[u8] {
    a
}

fuzz_target!(|input: (Vec<Vec<u8>>, bool)| {
    let (argv, counted) = input;
    let keys = if counted { Keys::Counted } else { Keys::One };
    let Ok(args) = Args::split(&argv, bytes, keys) else {
        return;
    };
    let mut signed = [0i64; 8];
    let mut unsigned = [0u64; 5];
    let whole = args.numbers(bytes, &mut signed);
    let whole_unsigned = args.unsigned(bytes, &mut unsigned);
    if let Ok(mut packed) = args.packed(bytes) {
        let mut again = packed.clone();
        let mut one_by_one = Vec::new();
        while let Ok(v) = packed.next_number() {
            one_by_one.push(v);
            if packed.is_done() {
                break;
            }
        }
        if let Ok(n) = whole {
            assert_eq!(&signed[..n], &one_by_one[..]);
        }
        let mut unsigned_one_by_one = Vec::new();
        while let Ok(v) = again.next_unsigned() {
            unsigned_one_by_one.push(v);
            if again.is_done() {
                break;
            }
        }
        if let Ok(n) = whole_unsigned {
            assert_eq!(&unsigned[..n], &unsigned_one_by_one[..]);
        }
    }
});
