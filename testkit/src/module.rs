//! The Redis module (`module/`), for the servers the tests start: built once, loaded with
//! `--loadmodule`.
//!
//! Cargo builds a test's dependencies as libraries, never a `cdylib`, so the module's shared
//! library is built here: `$RATELIMIT_MODULE` when it is set (`scripts/test` builds the
//! module first and sets it), else `cargo build --release -p redis-ratelimit-module` into a
//! target directory of its own (`target/module`), so that it takes no lock the build running
//! the tests holds. Concurrent test processes each ask; cargo's lock serializes them and all
//! but the first find it built.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The module's shared library, built if need be. Panics, saying why, when it cannot be.
pub fn path() -> PathBuf {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PATH.get_or_init(find_or_build) {
        Ok(path) => path.clone(),
        Err(why) => panic!("the Redis module could not be built: {why}"),
    }
}

/// `["--loadmodule", <path>]`: the arguments that load the module into a `redis-server`, as
/// the servers' `start_with` take them.
pub fn load_args() -> [&'static str; 2] {
    static PATH: OnceLock<String> = OnceLock::new();
    [
        "--loadmodule",
        PATH.get_or_init(|| path().display().to_string()),
    ]
}

fn find_or_build() -> Result<PathBuf, String> {
    if let Some(given) = std::env::var_os("RATELIMIT_MODULE") {
        let given = PathBuf::from(given);
        return if given.is_file() {
            Ok(given)
        } else {
            Err(format!(
                "RATELIMIT_MODULE names no file: {}",
                given.display()
            ))
        };
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("testkit has no parent directory")?
        .to_path_buf();
    let target = workspace.join("target").join("module");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&workspace)
        .env("CARGO_TARGET_DIR", &target)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "redis-ratelimit-module",
        ])
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build -p redis-ratelimit-module: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let built = target.join("release").join(library_name());
    if built.is_file() {
        Ok(built)
    } else {
        Err(format!("cargo built no {}", built.display()))
    }
}

/// The shared library's file name on this platform.
fn library_name() -> &'static str {
    if cfg!(target_os = "macos") {
        "libratelimit_module.dylib"
    } else {
        "libratelimit_module.so"
    }
}
