//! Procedural macros of redis-ratelimit. Use them through the `redis-ratelimit` crate.
//!
//! This crate is a skeleton until the annotation framework lands: it compiles and exports
//! nothing yet.
