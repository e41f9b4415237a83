//! End-to-end tests live in `tests/`; the binaries are the example services.
