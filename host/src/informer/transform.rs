//! Transforms for an informer's objects before they reach its cache
//! (client-go's `SetTransform`; controller-runtime's
//! `cache.TransformStripManagedFields`).
//!
//! This module owns [`strip_fields`]: dropping `metadata.managedFields`
//! (the server-side-apply bookkeeping, often larger than the rest of an
//! object) and, on request, the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation (a whole second copy of the object). Handlers never see
//! what was dropped; writes are unaffected (the API server keeps both).

use std::sync::Arc;

use super::delta_fifo::TransformFunc;
use super::object::{Object, ObjectRef};

/// The annotation `kubectl apply` (client-side) keeps its last input in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What [`strip_fields`] drops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Strip {
    /// `metadata.managedFields`.
    pub managed_fields: bool,
    /// The [`LAST_APPLIED`] annotation.
    pub last_applied: bool,
}

impl Strip {
    /// Whether it drops anything.
    pub fn any(self) -> bool {
        self.managed_fields || self.last_applied
    }
}

/// A transform dropping what `strip` names. An object holding none of it
/// is passed on as it is, without being parsed (a substring check first).
pub fn strip_fields(strip: Strip) -> TransformFunc {
    Arc::new(move |obj: ObjectRef| {
        let json = obj.json();
        let managed = strip.managed_fields && json.contains("\"managedFields\"");
        let applied = strip.last_applied && json.contains(LAST_APPLIED);
        if !managed && !applied {
            return obj;
        }
        let Ok(mut value) = serde_json::from_str::<serde_json::Value>(json) else { return obj };
        let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) else { return obj };
        let mut changed = false;
        if managed {
            changed |= meta.remove("managedFields").is_some();
        }
        if applied && let Some(annotations) = meta.get_mut("annotations").and_then(|a| a.as_object_mut()) {
            changed |= annotations.remove(LAST_APPLIED).is_some();
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
        if !changed {
            return obj;
        }
        // The object was valid; without some of its metadata it still is.
        Object::from_value(&value).map(Arc::new).unwrap_or(obj)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(json: &str) -> ObjectRef {
        Arc::new(Object::from_json(json).unwrap())
    }

    const APPLIED: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","resourceVersion":"3",
        "labels":{"app":"x"},
        "annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"k\":\"v\"}}","keep":"me"},
        "managedFields":[{"manager":"kubectl","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:k":{}}}}]},
        "data":{"k":"v"}}"#;

    #[test]
    fn managed_fields_go_and_everything_else_stays() {
        let f = strip_fields(Strip { managed_fields: true, last_applied: false });
        let out = f(obj(APPLIED));
        let v: serde_json::Value = out.parse().unwrap();
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(v["metadata"]["annotations"]["keep"], "me");
        assert!(v["metadata"]["annotations"].get(LAST_APPLIED).is_some());
        assert_eq!((out.key(), out.resource_version(), out.label("app")), ("n/a", Some("3"), Some("x")));
        assert_eq!(v["data"]["k"], "v");
        assert!(out.json().len() < APPLIED.len());
    }

    #[test]
    fn the_last_applied_annotation_goes_on_request() {
        let f = strip_fields(Strip { managed_fields: true, last_applied: true });
        let v: serde_json::Value = f(obj(APPLIED)).parse().unwrap();
        assert!(v["metadata"]["annotations"].get(LAST_APPLIED).is_none());
        assert_eq!(v["metadata"]["annotations"]["keep"], "me");
        let only = APPLIED.replace(r#","keep":"me""#, "");
        let v: serde_json::Value = f(obj(&only)).parse().unwrap();
        assert!(v["metadata"].get("annotations").is_none(), "an emptied annotations map goes too");
    }

    #[test]
    fn an_object_with_nothing_to_strip_is_passed_on_as_it_is() {
        let f = strip_fields(Strip { managed_fields: true, last_applied: true });
        for json in [
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}"#,
            // The words, but not where they would be stripped.
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"managedFields":"x"}}"#,
        ] {
            let plain = obj(json);
            assert!(Arc::ptr_eq(&plain, &f(plain.clone())), "not copied: {json}");
        }
    }
}
