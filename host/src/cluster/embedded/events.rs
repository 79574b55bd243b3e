//! Event objects as pure functions over JSON: a core/v1 Event as
//! client-go's event recorder builds it, and the correlation that turns a
//! repeated Event into a higher `count`.
//!
//! This module owns the shape of an Event; storing it, and finding an
//! identical one to aggregate into, is the caller's (`super::writes`).

use serde_json::{Value, json};

use crate::cluster::{EventType, Target};

/// What an Event says, and who says it.
#[derive(Debug, Clone, Copy)]
pub struct EventInfo<'a> {
    pub event_type: EventType,
    pub reason: &'a str,
    pub message: &'a str,
    /// `source.component` (the controller's field manager).
    pub component: &'a str,
}

/// A core/v1 Event about `involved` (its stored state when known, for uid
/// and resourceVersion), as client-go's recorder builds it, named
/// `<involved name>.<suffix>`, in the involved object's namespace
/// (`default` for a cluster-scoped one).
pub fn event(involved: &Target, involved_obj: Option<&Value>, info: EventInfo<'_>, suffix: &str, now: &str) -> Value {
    let EventInfo { event_type, reason, message, component } = info;
    let namespace = involved.namespace.clone().unwrap_or_else(|| "default".into());
    let mut reference = json!({"apiVersion": involved.api_version, "kind": involved.kind, "name": involved.name});
    if let Some(ns) = &involved.namespace {
        reference["namespace"] = json!(ns);
    }
    if let Some(o) = involved_obj {
        for (field, pointer) in [("uid", "/metadata/uid"), ("resourceVersion", "/metadata/resourceVersion")] {
            if let Some(v) = o.pointer(pointer).filter(|v| v.is_string()) {
                reference[field] = v.clone();
            }
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{}.{suffix}", involved.name), "namespace": namespace},
        "involvedObject": reference,
        "reason": reason,
        "message": message,
        "type": event_type.as_str(),
        "source": {"component": component},
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "reportingComponent": component,
    })
}

/// Whether `existing` is the same Event as `new` (client-go's correlator
/// key: source, involved object, type, reason, message), so `new` only
/// bumps its count.
pub fn same_event(existing: &Value, new: &Value) -> bool {
    let io = |v: &Value| {
        let r = &v["involvedObject"];
        (r["kind"].clone(), r["namespace"].clone(), r["name"].clone(), r["uid"].clone(), r["apiVersion"].clone())
    };
    ["source", "type", "reason", "message"].iter().all(|f| existing[*f] == new[*f]) && io(existing) == io(new)
}

/// `existing` seen once more at `now`: count + 1, lastTimestamp.
pub fn repeat_event(existing: &Value, now: &str) -> Value {
    let mut v = existing.clone();
    v["count"] = json!(existing["count"].as_i64().unwrap_or(1) + 1);
    v["lastTimestamp"] = json!(now);
    v
}
