//! What a request may carry, and what each descriptor costs.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tonic::Status;

use crate::config::ReferenceUnit;
use crate::usage::STREAM_DONE_KEY;

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 16;
/// The most bytes of the domain, and of each entry's key and value.
pub const MAX_VALUE_BYTES: usize = 4096;

/// The descriptor's cost, as the reference's `GetHitsAddends`.
pub(super) fn cost_of(request: &RateLimitRequest, descriptor: &RateLimitDescriptor) -> u64 {
    match &descriptor.hits_addend {
        Some(own) => own.value,
        None => u64::from(request.hits_addend.max(1)),
    }
}

/// Each descriptor's stream-done estimate: `Some` for a descriptor with a
/// [`STREAM_DONE_KEY`] entry (its value, a decimal), `None` for the others.
pub(super) fn stream_done_estimates(
    request: &RateLimitRequest,
) -> Result<Vec<Option<u64>>, Status> {
    let mut out = Vec::with_capacity(request.descriptors.len());
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        let mut marks = descriptor
            .entries
            .iter()
            .filter(|e| e.key == STREAM_DONE_KEY);
        let estimate = match (marks.next(), marks.next()) {
            (None, _) => None,
            (Some(_), Some(_)) => {
                return Err(Status::invalid_argument(format!(
                    "descriptor {i} has more than one {STREAM_DONE_KEY} entry"
                )));
            }
            (Some(mark), None) => Some(mark.value.parse::<u64>().map_err(|_| {
                Status::invalid_argument(format!(
                    "descriptor {i}: {STREAM_DONE_KEY} is `{}`, expected the estimate the \
                     request path took, a whole number (0 for none)",
                    mark.value
                ))
            })?),
        };
        out.push(estimate);
    }
    Ok(out)
}

/// The request's bounds.
pub(super) fn validate(request: &RateLimitRequest) -> Result<(), Status> {
    let invalid = |why: String| Err(Status::invalid_argument(why));
    if request.domain.is_empty() {
        return invalid("rate limit domain must not be empty".into());
    }
    if request.domain.len() > MAX_VALUE_BYTES {
        return invalid(format!("the domain is longer than {MAX_VALUE_BYTES} bytes"));
    }
    if request.descriptors.is_empty() {
        return invalid("rate limit descriptor list must not be empty".into());
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return invalid(format!(
            "{} descriptors: at most {MAX_DESCRIPTORS} per request",
            request.descriptors.len()
        ));
    }
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        if descriptor.entries.len() > MAX_ENTRIES {
            return invalid(format!(
                "descriptor {i} has {} entries: at most {MAX_ENTRIES}",
                descriptor.entries.len()
            ));
        }
        for entry in &descriptor.entries {
            if entry.key.len() > MAX_VALUE_BYTES || entry.value.len() > MAX_VALUE_BYTES {
                return invalid(format!(
                    "descriptor {i} has an entry longer than {MAX_VALUE_BYTES} bytes"
                ));
            }
        }
        if let Some(limit) = &descriptor.limit
            && override_unit(limit.unit).is_none()
        {
            return invalid(format!(
                "descriptor {i} carries a limit override without a unit (unit {})",
                limit.unit
            ));
        }
        if descriptor.is_negative_hits {
            return Err(Status::unimplemented(format!(
                "descriptor {i} asks for negative hits, which this service does not apply yet"
            )));
        }
    }
    Ok(())
}

/// The unit of a descriptor's `limit` override (`envoy.type.v3.RateLimitUnit`, read by the
/// response's `Unit`, whose numbers it shares and which has `WEEK`, newer than the types
/// this package builds with), `None` for `UNKNOWN` and numbers the enum does not have.
pub(super) fn override_unit(unit: i32) -> Option<ReferenceUnit> {
    Some(match Unit::try_from(unit).ok()? {
        Unit::Unknown => return None,
        Unit::Second => ReferenceUnit::Second,
        Unit::Minute => ReferenceUnit::Minute,
        Unit::Hour => ReferenceUnit::Hour,
        Unit::Day => ReferenceUnit::Day,
        Unit::Week => ReferenceUnit::Week,
        Unit::Month => ReferenceUnit::Month,
        Unit::Year => ReferenceUnit::Year,
    })
}
