//! Where the load generator installs rate-limiter-flexible, which `load_instructions` runs
//! from too.

use std::path::{Path, PathBuf};

/// `target/loadgen-flexible` (or under `$CARGO_TARGET_DIR`): the source tree stays clean.
pub(crate) fn flexible_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |t| root.join(t));
    target.join("loadgen-flexible")
}
