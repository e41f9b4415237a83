//! The limits by name, from the service's limits file: the overrides format
//! (`ratelimit_core::overrides`), read by the library's own parser, each limit checked by the
//! library's `Limit::from_parts`.

use std::collections::BTreeMap;
use std::path::Path;

use ratelimit_core::overrides::{self, Override};
use ratelimit_core::{Limit, Unit};

use crate::failure::Failure;

/// Every limit `path` gives in full (a `replenish` at least), by name.
pub(crate) fn load(path: &Path) -> Result<BTreeMap<String, Limit>, Failure> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("cannot read the limits file `{shown}`: {e}")))?;
    let parsed = overrides::parse(&text).map_err(|e| Failure::Usage(format!("{shown}: {e}")))?;
    parsed
        .iter()
        .map(|(name, o)| {
            Ok((
                name.clone(),
                limit(o)
                    .map_err(|why| Failure::Usage(format!("{shown}: limit `{name}`: {why}")))?,
            ))
        })
        .collect()
}

/// The limit an override describes on its own (the CLI has no declaration to fill gaps from:
/// `unit` is `second` and `burst` is `replenish` unless given, as in `#[rate_limit]`).
fn limit(o: &Override) -> Result<Limit, String> {
    let replenish = o
        .replenish
        .ok_or("needs `replenish` (the CLI cannot see the declared limit)")?;
    Limit::from_parts(
        replenish,
        o.burst.unwrap_or(replenish),
        o.unit.unwrap_or(Unit::Second).as_duration(),
        o.algorithm.unwrap_or_default(),
        o.refill.unwrap_or_default(),
        o.initial,
    )
    .map_err(|e| e.to_string())
}
