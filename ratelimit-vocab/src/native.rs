//! The names of redis-ratelimit's Redis module and of its commands, which the module
//! registers and the limiter calls.
//!
//! Each command decides exactly what one function of the Lua library decides, with the same
//! keys, arguments and reply, and is named by that function's short name after
//! [`COMMAND_PREFIX`]: `ratelimit.v1.token_bucket` stands for the library's `token_bucket`.
//! [`PROTOCOL`] is in the module's name and in every command's: a module whose commands take
//! other arguments, answer otherwise or keep another state has another version, so that two
//! versions can be loaded into one server side by side during a rolling upgrade, and each
//! limiter calls the commands of its own.

/// The version of the commands' arguments, replies and stored state.
pub const PROTOCOL: u32 = 1;

/// The module's name (`MODULE LIST`), which holds [`PROTOCOL`].
pub const MODULE_NAME: &str = "ratelimit_v1";

/// What every command's name starts with, [`PROTOCOL`] included.
pub const COMMAND_PREFIX: &str = "ratelimit.v1.";

/// The commands that are not one algorithm's alone (whose short names are the algorithms'
/// own: `token_bucket`, `fixed_window`, ...): several limits of one call, several calls of
/// one node, and a concurrency limit's release and renewal.
pub const OTHER_COMMANDS: [&str; 4] =
    ["multi", "batch", "concurrency_release", "concurrency_renew"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_hold_the_protocol() {
        // The test reads one digit.
        const { assert!(PROTOCOL < 10) };
        let v = [b'v', b'0' + u8::try_from(PROTOCOL).unwrap()];
        let holds = |name: &str| name.as_bytes().windows(2).any(|w| w == v);
        assert!(holds(MODULE_NAME) && holds(COMMAND_PREFIX));
    }
}
