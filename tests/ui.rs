//! Compile-time behaviour of the macros: every misuse is an error with its expected message
//! (`tests/ui/fail`), and every accepted form compiles (`tests/ui/pass`).
//!
//! Regenerate the expected messages with `TRYBUILD=overwrite cargo test --test ui`, then
//! review the `.stderr` diffs like code.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
