//! What is wrong with a configuration, and where.

use std::fmt;

/// One error in a configuration file: which file, where in the document (a path such as
/// `descriptors[1].descriptors[0].rate_limit.unit`, and the line and column where the YAML
/// reader gives them), and what is wrong.
///
/// ```
/// use ratelimit_envoy::config::Config;
///
/// let text = "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit:\n      unit: minutes\n      requests_per_unit: 5\n";
/// let errors = Config::parse("edge.yaml", text).unwrap_err();
/// let first = &errors.errors()[0];
/// assert_eq!(first.file(), "edge.yaml");
/// assert_eq!(first.path(), "descriptors[0].rate_limit.unit");
/// assert_eq!(first.line(), Some(5));
/// assert!(first.to_string().starts_with("edge.yaml:5:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'minutes'"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    file: String,
    path: String,
    at: Option<(usize, usize)>,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(
        file: &str,
        path: &str,
        at: Option<crate::yaml::Pos>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            path: path.to_owned(),
            at: at.map(|p| (p.line, p.column)),
            message: message.into(),
        }
    }

    /// The file, as the loader named it (its path, or the name given to
    /// [`Config::parse`](crate::config::Config::parse)).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Where in the document: `descriptors[1].rate_limit.unit`; empty for the document as a
    /// whole (a file that is not YAML, a domain defined twice).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The line (from 1), where the YAML reader gives one.
    pub fn line(&self) -> Option<usize> {
        self.at.map(|(line, _)| line)
    }

    /// The column (from 1), where the YAML reader gives one.
    pub fn column(&self) -> Option<usize> {
        self.at.map(|(_, column)| column)
    }

    /// What is wrong, without the place.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// `file:line:column: path: message`, leaving out what is unknown.
impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some((line, column)) = self.at {
            write!(f, ":{line}:{column}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every error found in a configuration (at least one): a load that fails reports them all,
/// so that one edit can fix them; the caller keeps the configuration it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(Vec<ConfigError>);

impl ConfigErrors {
    /// `errors`, which must not be empty.
    pub(crate) fn new(errors: Vec<ConfigError>) -> ConfigErrors {
        debug_assert!(!errors.is_empty());
        ConfigErrors(errors)
    }

    /// The errors, in the order of the files and within a file of the document.
    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }
}

/// One error a line.
impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            fmt::Display::fmt(error, f)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
