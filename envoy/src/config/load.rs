//! Loading every file of a directory, as the reference loads
//! `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.

use std::io::Read;
use std::path::Path;

use super::{Config, ConfigError, ConfigErrors, LoadOptions};

/// The largest configuration file read, in bytes: a larger one is an error, read no further
/// (30,000 descriptors take about 3 MiB).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

impl Config {
    /// Reads every `*.yaml` and `*.yml` file directly in `dir` (in name order; with
    /// [`LoadOptions::ignore_dot_files`], not those whose name starts with a dot) into one
    /// configuration, or reports every error: the caller keeps its configuration then.
    ///
    /// ```
    /// use ratelimit_envoy::config::{Config, LoadOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("edge.yaml"), "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n")?;
    /// std::fs::write(dir.path().join("notes.txt"), "not read")?;
    /// let config = Config::load_dir(dir.path(), &LoadOptions::new())?;
    /// assert_eq!(config.domains().collect::<Vec<_>>(), ["edge"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A directory that cannot be read, a file that cannot be read or is larger than
    /// [`MAX_FILE_BYTES`], and every error of every file's content.
    pub fn load_dir(dir: &Path, options: &LoadOptions) -> Result<Config, ConfigErrors> {
        let shown = dir.display().to_string();
        let entries = std::fs::read_dir(dir).map_err(|e| {
            ConfigErrors::new(vec![ConfigError::new(
                &shown,
                "",
                None,
                format!("cannot read the configuration directory: {e}"),
            )])
        })?;
        let mut paths = Vec::new();
        let mut errors = Vec::new();
        for entry in entries {
            let path = match entry {
                Ok(entry) => entry.path(),
                Err(e) => {
                    errors.push(ConfigError::new(
                        &shown,
                        "",
                        None,
                        format!("cannot list it: {e}"),
                    ));
                    continue;
                }
            };
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let yaml = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
            if !yaml || (options.ignore_dot_files && name.starts_with('.')) || path.is_dir() {
                continue;
            }
            paths.push(path);
        }
        paths.sort();
        let mut sources = Vec::with_capacity(paths.len());
        for path in paths {
            let shown = path.display().to_string();
            match read_bounded(&path) {
                Ok(text) => sources.push((shown, text)),
                Err(message) => errors.push(ConfigError::new(&shown, "", None, message)),
            }
        }
        match Config::from_sources(sources, options) {
            Ok(config) if errors.is_empty() => Ok(config),
            Ok(_) => Err(ConfigErrors::new(errors)),
            Err(more) => {
                errors.extend(more);
                Err(ConfigErrors::new(errors))
            }
        }
    }
}

/// The file's text, read no further than [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "the file is larger than {MAX_FILE_BYTES} bytes; split it (several files may \
             define one domain with MERGE_DOMAIN_CONFIG=true)"
        ));
    }
    String::from_utf8(bytes).map_err(|e| format!("the file is not UTF-8: {e}"))
}
