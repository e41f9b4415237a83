//! The subcommands, and what they share.

pub(crate) mod inspect;
pub(crate) mod reset;
pub(crate) mod scan;
pub(crate) mod servers;
pub(crate) mod top;
pub(crate) mod watch;

use ratelimit_core::tools::bucket_key;

use crate::args::Which;
use crate::failure::Failure;

/// The name (if any) and key of a bucket given by --name/--key.
pub(crate) type Names = (Option<String>, String);

/// The bucket `which` names, with its name and key when given by --name/--key.
pub(crate) fn bucket_of(prefix: &str, which: &Which) -> Result<(String, Option<Names>), Failure> {
    match (&which.bucket, &which.key) {
        (Some(bucket), _) => Ok((bucket.clone(), None)),
        (None, Some(key)) => Ok((
            bucket_key(prefix, which.name.as_deref(), key),
            Some((which.name.clone(), key.clone())),
        )),
        (None, None) => Err(Failure::Usage(
            "give --key (with --name for a named limit) or --bucket".to_owned(),
        )),
    }
}

/// The library's own check of a prefix (a brace would move keys between cluster slots).
pub(crate) fn check_prefix(prefix: &str) -> Result<(), Failure> {
    if prefix.contains(['{', '}']) {
        return Err(Failure::Usage(
            ratelimit_core::Error::InvalidPrefix(prefix.to_owned()).to_string(),
        ));
    }
    Ok(())
}
