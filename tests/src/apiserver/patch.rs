//! Patch formats: JSON merge patch (RFC 7386, `json_patch::merge`), JSON
//! patch (RFC 6902, through the `json-patch` crate), and strategic merge
//! patch for the common cases.
//!
//! Strategic merge patch here is merge patch plus what built-in schemas make
//! different for the lists controllers usually touch: the associative lists
//! of [`super::managed`] (`containers`, `env`, `volumes`, `conditions`, ...)
//! merge by key instead of being replaced, an item `{"$patch": "delete", <key>}`
//! deletes that item, `{"$patch": "replace"}` in a map replaces it, and the
//! `$setElementOrder/`, `$retainKeys` and `$deleteFromPrimitiveList/`
//! directives are accepted and ignored (order and retention are not
//! modelled). Other lists are replaced, as for merge patch. Custom resources
//! answer `415`, as upstream.

use super::*;

pub(super) const MERGE: &str = "application/merge-patch+json";
pub(super) const JSON_PATCH: &str = "application/json-patch+json";
pub(super) const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub(super) const APPLY: &str = "application/apply-patch+yaml";

/// Strategic merge patch as described in the module docs.
pub(super) fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.as_object_mut().expect("object").remove("$patch");
        *target = replaced;
        return Ok(());
    }
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().expect("object");
    for (k, v) in p {
        if k.starts_with('$') {
            match k.as_str() {
                "$retainKeys" | "$patch" => continue,
                k if k.starts_with("$setElementOrder/") || k.starts_with("$deleteFromPrimitiveList/") => continue,
                other => return Err(format!("unknown patch directive {other:?}")),
            }
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (managed::list_key(k), v) {
            (Some(key), Value::Array(items)) => {
                let cur = t.entry(k.clone()).or_insert_with(|| json!([]));
                if !cur.is_array() {
                    *cur = json!([]);
                }
                let list = cur.as_array_mut().expect("array");
                for item in items {
                    let Some(kv) = item.get(key) else {
                        return Err(format!("map: {item} does not contain declared merge key: {key}"));
                    };
                    let pos = list.iter().position(|li| li.get(key) == Some(kv));
                    if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                        if let Some(i) = pos {
                            list.remove(i);
                        }
                        continue;
                    }
                    match pos {
                        Some(i) => strategic_merge_patch(&mut list[i], item)?,
                        None => {
                            let mut fresh = json!({});
                            strategic_merge_patch(&mut fresh, item)?;
                            list.push(fresh);
                        }
                    }
                }
            }
            (_, Value::Object(_)) => strategic_merge_patch(t.entry(k.clone()).or_insert(Value::Null), v)?,
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

/// Applies an RFC 6902 patch: `400` for a malformed patch, `413` for one
/// of more than 10 000 operations (`maxJSONPatchOperations`), `422` for one
/// that does not apply (a failed `test`, a missing path), as upstream.
pub(super) fn json_patch(target: &mut Value, patch: &[u8]) -> ApiResult<()> {
    const MAX_OPERATIONS: usize = 10_000;
    let ops: json_patch::Patch = serde_json::from_slice(patch).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if ops.len() > MAX_OPERATIONS {
        let message = format!("The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {}", ops.len());
        return Err(ApiError::new(413, "RequestEntityTooLarge", message));
    }
    json_patch::patch(target, &ops).map_err(|e| ApiError::new(422, "Invalid", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategic_merges_containers_by_name() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
            "args": ["1", "2"]}});
        strategic_merge_patch(
            &mut t,
            &json!({"$setElementOrder/containers": [{"name": "a"}], "spec": {"containers": [
                {"name": "a", "image": "x2"}, {"name": "b", "$patch": "delete"}, {"name": "c", "image": "z"}],
                "args": ["3"]}}),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "a", "image": "x2"}, {"name": "c", "image": "z"}], "args": ["3"]}})
        );
    }
}
