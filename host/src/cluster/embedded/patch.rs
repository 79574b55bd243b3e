//! Patch formats as pure functions: JSON merge patch (RFC 7386) and JSON
//! patch (RFC 6902, through the `json-patch` crate).
//!
//! This module owns only how a patch document changes a JSON value; what
//! the patched object may change (status, immutable metadata) is decided by
//! [`super::semantics`], and server-side apply is [`super::managed`].

use serde_json::{Value, json};

use crate::cluster::{Cause, WriteError};

/// RFC 7386 `MergePatch(target, patch)`: objects merge recursively, `null`
/// removes, anything else (lists included) replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(t) = target.as_object_mut() else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Applies an RFC 6902 patch: `400 BadRequest` for a malformed patch
/// document, `422 Invalid` for one that does not apply (a failed `test`, a
/// missing path), as the API server answers.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), WriteError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| WriteError::BadRequest(format!("invalid JSON patch: {e}")))?;
    json_patch::patch(target, &ops).map_err(|e| WriteError::Invalid {
        message: e.to_string(),
        causes: vec![Cause { reason: "FieldValueInvalid".into(), message: e.to_string(), field: String::new() }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7386_examples() {
        let mut t = json!({"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"], "content": "This will be unchanged"});
        merge_patch(
            &mut t,
            &json!({"title": "Hello!", "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": null}, "tags": ["example"]}),
        );
        assert_eq!(
            t,
            json!({"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"],
            "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"})
        );
        let mut t = json!({"e": null});
        merge_patch(&mut t, &json!({"a": 1}));
        assert_eq!(t, json!({"e": null, "a": 1}));
    }

    #[test]
    fn json_patch_errors_are_typed() {
        let mut t = json!({"a": 1});
        json_patch(&mut t, &json!([{"op": "replace", "path": "/a", "value": 2}])).unwrap();
        assert_eq!(t, json!({"a": 2}));
        assert!(matches!(json_patch(&mut t, &json!({"op": 1})), Err(WriteError::BadRequest(_))));
        let failed = json_patch(&mut t, &json!([{"op": "test", "path": "/a", "value": 3}]));
        assert!(matches!(failed, Err(WriteError::Invalid { .. })));
    }
}
