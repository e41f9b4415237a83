//! How the axum examples sold by plan know their callers: the `x-api-key` header looked up in
//! a fixed table (a real service would look it up in its store); an unknown key, or none, is
//! refused with 401 before any limit.

use axum::Json;
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde_json::{Value, json};

/// The caller `parts` name in `x-api-key`, and its plan, from `known`.
pub(crate) fn caller<P: Copy>(
    parts: &Parts,
    known: &[(&'static str, P)],
) -> Result<(&'static str, P), (StatusCode, Json<Value>)> {
    let key = parts.headers.get("x-api-key").and_then(|v| v.to_str().ok());
    known
        .iter()
        .find(|(id, _)| Some(*id) == key)
        .copied()
        .ok_or((
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "unknown API key" })),
        ))
}
