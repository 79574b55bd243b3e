//! JSON patch (RFC 6902, through the `json-patch` crate) as the API server
//! bounds it. JSON merge patch (RFC 7386) is `json_patch::merge` as is.
//!
//! This module owns only how a patch document changes a JSON value; what
//! the patched object may change (status, immutable metadata) is decided by
//! [`super::semantics`], and server-side apply is [`super::managed`].

use serde_json::Value;

use crate::cluster::{Cause, WriteError};

/// Most operations in one JSON patch, as the API server allows
/// (`maxJSONPatchOperations`); more is `413 RequestEntityTooLarge`.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;
/// Most bytes a JSON patch's `copy` operations may add between them, as
/// the API server allows (`JSONPatchMaxCopyBytes`, 3 MiB); more is `422`.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;
/// Deepest nesting of objects and arrays a patched object may reach: the
/// most `serde_json` reads back (its recursion limit refuses a 128th
/// level), so every stored object can be parsed again by the host, its
/// indexes and its plugins.
pub const MAX_DEPTH: usize = 127;
/// Nodes a patch's depth checks may visit before the patch is refused:
/// only `move`s that could deepen an object near [`MAX_DEPTH`] are walked.
const MAX_DEPTH_CHECK_NODES: usize = 4_000_000;

/// Applies an RFC 6902 patch: `400 BadRequest` for a malformed patch
/// document, `422 Invalid` for one that does not apply (a failed `test`, a
/// missing path), as the API server answers.
///
/// Bounded as the API server bounds it, so a patch cannot make the host
/// allocate more than its body and a few MiB: at most
/// [`MAX_JSON_PATCH_OPERATIONS`] operations and
/// [`MAX_JSON_PATCH_COPY_BYTES`] copied. And bounded in depth, which the
/// API server leaves to its JSON decoder: `move` can nest an object one
/// level deeper per few operations, and the values the host keeps are
/// cloned, compared and dropped recursively, so a document is refused
/// before an operation would take it past [`MAX_DEPTH`].
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), WriteError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| WriteError::BadRequest(format!("invalid JSON patch: {e}")))?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(WriteError::ServerError {
            code: 413,
            message: format!(
                "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                ops.len()
            ),
        });
    }
    let invalid = |message: String| WriteError::Invalid {
        causes: vec![Cause { reason: "FieldValueInvalid".into(), message: message.clone(), field: String::new() }],
        message,
    };
    let mut budget = MAX_DEPTH_CHECK_NODES;
    let mut depth = depth_of(target, &mut budget);
    let mut copied = 0usize;
    // One operation at a time on the caller's copy (a failed patch leaves
    // it half-applied; the caller drops it), each checked before it runs.
    for (i, op) in ops.iter().enumerate() {
        use json_patch::PatchOperation as Op;
        let inserted = match op {
            Op::Add(a) => Some(a.path.count() + depth_of(&a.value, &mut budget)),
            Op::Replace(r) => Some(r.path.count() + depth_of(&r.value, &mut budget)),
            Op::Copy(c) => {
                let from = target.pointer(c.from.as_str());
                if let Some(value) = from {
                    copied += serde_json::to_vec(value).map_or(0, |v| v.len());
                    if copied > MAX_JSON_PATCH_COPY_BYTES {
                        return Err(invalid(format!(
                            "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
                        )));
                    }
                }
                from.map(|v| c.path.count() + depth_of(v, &mut budget))
            }
            // A move deepens the object by at most how much deeper it lands
            // than it was: that bound is kept, and the subtree is measured
            // only when the bound would pass the limit.
            Op::Move(m) => match m.path.count() + depth.saturating_sub(m.from.count()) {
                bound if bound <= MAX_DEPTH => Some(bound),
                _ => target.pointer(m.from.as_str()).map(|v| m.path.count() + depth_of(v, &mut budget)),
            },
            Op::Remove(_) | Op::Test(_) => None,
        };
        if budget == 0 {
            return Err(invalid(format!("operation {i}: the patch moves too much of a deeply nested object")));
        }
        if let Some(inserted) = inserted {
            if inserted > MAX_DEPTH {
                return Err(invalid(format!(
                    "operation {i}: the object would nest deeper than {MAX_DEPTH} levels at {}",
                    op.path()
                )));
            }
            depth = depth.max(inserted);
        }
        json_patch::patch_unsafe(target, std::slice::from_ref(op)).map_err(|mut e| {
            e.operation = i;
            invalid(e.to_string())
        })?;
    }
    Ok(())
}

/// How deeply `value` nests objects and arrays (a scalar is 0, `{}` 1),
/// walked without recursion; every node visited is taken from `budget`,
/// and an exhausted budget stops the walk.
fn depth_of(value: &Value, budget: &mut usize) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, above)) = stack.pop() {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Object(m) => Box::new(m.values()),
            Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        deepest = deepest.max(above + 1);
        stack.extend(children.map(|c| (c, above + 1)));
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_errors_are_typed() {
        let mut t = json!({"a": 1});
        json_patch(&mut t, &json!([{"op": "replace", "path": "/a", "value": 2}])).unwrap();
        assert_eq!(t, json!({"a": 2}));
        assert!(matches!(json_patch(&mut t, &json!({"op": 1})), Err(WriteError::BadRequest(_))));
        let failed = json_patch(&mut t, &json!([{"op": "test", "path": "/a", "value": 3}]));
        assert!(matches!(failed, Err(WriteError::Invalid { .. })));
    }

    /// The API server's bounds: 10 000 operations (413), 3 MiB copied (422).
    #[test]
    fn json_patch_is_bounded_as_the_api_server_bounds_it() {
        let mut t = json!({"data": {"k": "v".repeat(1000)}});
        // Each copy doubles `data`: the twelfth would pass 3 MiB copied.
        let doubling: Vec<Value> =
            (0..14).map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/c{i}")})).collect();
        match json_patch(&mut t, &Value::Array(doubling)) {
            Err(WriteError::Invalid { message, .. }) => {
                assert!(message.contains("accumulated size increase of copy is"), "{message}");
                assert!(message.contains("exceeding the limit 3145728"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let mut t = json!({"data": {"k": "v"}});
        let many = vec![json!({"op": "test", "path": "/data/k", "value": "v"}); MAX_JSON_PATCH_OPERATIONS + 1];
        match json_patch(&mut t, &Value::Array(many)) {
            Err(WriteError::ServerError { code: 413, message }) => {
                assert_eq!(message, "The allowed maximum operations in a JSON patch is 10000, got 10001")
            }
            other => panic!("{other:?}"),
        }
        // Exactly the limit applies.
        let most = vec![json!({"op": "test", "path": "/data/k", "value": "v"}); MAX_JSON_PATCH_OPERATIONS];
        json_patch(&mut t, &Value::Array(most)).unwrap();
        // Copies within the limit apply, and name the failing operation.
        let mut t = json!({"a": {"b": 1}});
        json_patch(&mut t, &json!([{"op": "copy", "from": "/a", "path": "/c"}])).unwrap();
        assert_eq!(t, json!({"a": {"b": 1}, "c": {"b": 1}}));
        match json_patch(&mut t, &json!([{"op": "test", "path": "/a/b", "value": 1}, {"op": "remove", "path": "/x"}])) {
            Err(WriteError::Invalid { message, .. }) => {
                assert!(message.starts_with("operation '/1' failed"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// `move`s that nest the object a level deeper every three operations
    /// stop at the depth the host can read back, instead of overflowing
    /// the stack when the deep value is cloned, compared or dropped.
    #[test]
    fn json_patch_cannot_nest_an_object_past_the_depth_serde_reads() {
        let nesting = |levels: usize| {
            let mut ops = vec![json!({"op": "add", "path": "/a", "value": {}})];
            for _ in 0..levels {
                ops.push(json!({"op": "add", "path": "/t", "value": {}}));
                ops.push(json!({"op": "move", "from": "/a", "path": "/t/a"}));
                ops.push(json!({"op": "move", "from": "/t", "path": "/a"}));
            }
            Value::Array(ops)
        };
        let mut t = json!({});
        json_patch(&mut t, &nesting(MAX_DEPTH - 2)).unwrap();
        let text = serde_json::to_string(&t).unwrap();
        let back: Value = serde_json::from_str(&text).expect("what a patch stores, serde reads back");
        assert_eq!(back, t);
        let mut t = json!({});
        match json_patch(&mut t, &nesting(9_000 / 3)) {
            Err(WriteError::Invalid { message, .. }) => {
                assert!(message.contains("would nest deeper than 127 levels"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // A deep value added in one piece is measured too.
        let mut deep = json!(1);
        for _ in 0..MAX_DEPTH {
            deep = json!([deep]);
        }
        let mut t = json!({});
        let refused = json_patch(&mut t, &json!([{"op": "add", "path": "/x", "value": deep}]));
        assert!(matches!(refused, Err(WriteError::Invalid { .. })), "{refused:?}");
    }
}
