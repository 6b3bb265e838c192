//! Loading and writing stored data with JSON paths in every error.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{BranchError, Result};

fn path_of(p: &serde_path_to_error::Path) -> String {
    let s = p.to_string();
    if s.is_empty() || s == "." {
        ".".into()
    } else {
        s
    }
}

/// Deserializes from a JSON value. The fast path runs without path
/// tracking; only a failure is re-run to find the path at fault.
pub(crate) fn from_value<T: DeserializeOwned>(v: &Value) -> Result<T> {
    match T::deserialize(v) {
        Ok(t) => Ok(t),
        Err(first) => match serde_path_to_error::deserialize::<_, T>(v) {
            Err(e) => Err(BranchError::invalid(
                path_of(e.path()),
                e.inner().to_string(),
            )),
            Ok(_) => Err(BranchError::invalid(".", first.to_string())),
        },
    }
}

/// Deserializes from JSON bytes, with the path and the line/column of the
/// fault on failure.
pub(crate) fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match T::deserialize(&mut de).and_then(|t| de.end().map(|()| t)) {
        Ok(t) => Ok(t),
        Err(first) => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            match serde_path_to_error::deserialize::<_, T>(&mut de) {
                Err(e) => Err(BranchError::invalid(
                    path_of(e.path()),
                    e.inner().to_string(),
                )),
                Ok(_) => Err(BranchError::invalid(".", first.to_string())),
            }
        }
    }
}

/// Serializes into a JSON value; a failure (a non-finite float) names the
/// path of the value.
pub(crate) fn to_value<T: Serialize + ?Sized>(t: &T, what: &str) -> Result<Value> {
    match serde_json::to_value(t) {
        Ok(v) => Ok(v),
        Err(first) => {
            let mut track = serde_path_to_error::Track::new();
            let ser =
                serde_path_to_error::Serializer::new(serde_json::value::Serializer, &mut track);
            match t.serialize(ser) {
                Err(e) => Err(BranchError::Serialize {
                    path: format!("{what}{}", suffix(&track.path())),
                    reason: e.to_string(),
                }),
                Ok(_) => Err(BranchError::Serialize {
                    path: what.into(),
                    reason: first.to_string(),
                }),
            }
        }
    }
}

/// Serializes into JSON bytes (no intermediate value).
pub(crate) fn to_vec<T: Serialize + ?Sized>(t: &T, what: &str) -> Result<Vec<u8>> {
    match serde_json::to_vec(t) {
        Ok(bytes) => Ok(bytes),
        // Re-run through the value serializer only to learn the path.
        Err(first) => match to_value(t, what) {
            Err(e) => Err(e),
            Ok(_) => Err(BranchError::Serialize {
                path: what.into(),
                reason: first.to_string(),
            }),
        },
    }
}

fn suffix(p: &serde_path_to_error::Path) -> String {
    let s = p.to_string();
    if s.is_empty() || s == "." {
        String::new()
    } else {
        format!(".{s}")
    }
}
