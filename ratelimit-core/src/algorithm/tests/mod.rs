//! `ratelimit-algorithms`' decisions under this crate's [`Limit`](crate::Limit)s, which that
//! crate cannot build: the tests of each algorithm that need one.

mod args;
mod fixed_window;
mod token_bucket;
