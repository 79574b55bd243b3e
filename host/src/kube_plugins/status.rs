//! A `Plugin`'s status: its conditions (`Ready`, `Synced`, `Degraded`), the
//! generation they describe, the loaded digest and a summary of counters.
//!
//! This module owns building a status from what the host observed, keeping a
//! condition's `lastTransitionTime` while its status does not change (the API
//! conventions), and writing it through the status subresource only when it
//! changed, so that a status write, which is itself a watch event, never
//! feeds a loop of writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::crd::{Plugin, PluginCounters, PluginStatus};

/// One condition as observed: `status` is `True`, `False` or `Unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

impl Observed {
    pub fn yes(reason: &str, message: impl Into<String>) -> Self {
        Observed { status: "True", reason: reason.into(), message: message.into() }
    }
    pub fn no(reason: &str, message: impl Into<String>) -> Self {
        Observed { status: "False", reason: reason.into(), message: message.into() }
    }
    pub fn unknown(reason: &str, message: impl Into<String>) -> Self {
        Observed { status: "Unknown", reason: reason.into(), message: message.into() }
    }
}

/// What the host saw of one plugin at one reconcile.
#[derive(Debug, Clone)]
pub struct Report {
    pub generation: Option<i64>,
    pub ready: Observed,
    pub synced: Observed,
    pub degraded: Observed,
    pub digest: Option<String>,
    pub replica: Option<String>,
    pub counters: Option<PluginCounters>,
}

/// The status to write for `report`, given the one the object carries.
pub fn build(old: Option<&PluginStatus>, report: &Report) -> PluginStatus {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let conditions = [("Ready", &report.ready), ("Synced", &report.synced), ("Degraded", &report.degraded)]
        .into_iter()
        .map(|(ty, o)| {
            let previous = old.and_then(|s| s.conditions.iter().find(|c| c.type_ == ty));
            let last_transition_time = match previous {
                Some(p) if p.status == o.status => p.last_transition_time.clone(),
                _ => now.clone(),
            };
            Condition {
                type_: ty.to_string(),
                status: o.status.to_string(),
                reason: o.reason.clone(),
                message: bounded(&o.message),
                observed_generation: report.generation,
                last_transition_time,
            }
        })
        .collect();
    PluginStatus {
        conditions,
        observed_generation: report.generation,
        digest: report.digest.clone(),
        replica: report.replica.clone(),
        counters: report.counters.clone(),
    }
}

/// Whether `new` says something `old` does not (times of unchanged
/// conditions are kept by [`build`], so equality is the test).
pub fn changed(old: Option<&PluginStatus>, new: &PluginStatus) -> bool {
    old != Some(new)
}

/// Writes `status` with a merge patch of the status subresource.
pub async fn write(api: &Api<Plugin>, name: &str, status: &PluginStatus) -> Result<(), kube::Error> {
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(merge_patch(status))).await.map(drop)
}

/// The merge patch that makes the stored status `status`. A merge patch
/// leaves a key it does not name as it is (RFC 7386), so each field
/// `status` leaves out is sent as `null`, which removes it: a plugin
/// refused or unloaded must not keep showing the digest and counters of
/// the version it ran before.
fn merge_patch(status: &PluginStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    let absent_is_null = |v: &mut serde_json::Value, keys: &[&str]| {
        if let Some(map) = v.as_object_mut() {
            for key in keys {
                map.entry(*key).or_insert(serde_json::Value::Null);
            }
        }
    };
    absent_is_null(&mut value, &["conditions", "observedGeneration", "digest", "replica", "counters"]);
    if let Some(counters) = value.get_mut("counters").filter(|c| c.is_object()) {
        absent_is_null(counters, &["writes", "refusedWrites"]);
    }
    json!({ "status": value })
}

/// Condition messages are at most 32 KiB (the API's limit); a longer one
/// (a registry's error page, say) is cut on a character boundary.
fn bounded(message: &str) -> String {
    const MAX: usize = 32 << 10;
    if message.len() <= MAX {
        return message.to_string();
    }
    let mut end = MAX - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ready: Observed) -> Report {
        Report {
            generation: Some(2),
            ready,
            synced: Observed::unknown("Loading", ""),
            degraded: Observed::no("Healthy", ""),
            digest: None,
            replica: None,
            counters: None,
        }
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let first = build(None, &report(Observed::no("Loading", "pulling")));
        let mut aged = first.clone();
        let t0 = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        aged.conditions.iter_mut().for_each(|c| c.last_transition_time = t0.clone());
        // Same status, new message: the time stays, the message changes.
        let again = build(Some(&aged), &report(Observed::no("Loading", "compiling")));
        let ready = again.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.last_transition_time.clone(), ready.message.as_str()), (t0.clone(), "compiling"));
        assert!(changed(Some(&aged), &again));
        // The same observation again changes nothing: no write.
        assert!(!changed(Some(&again), &build(Some(&again), &report(Observed::no("Loading", "compiling")))));
        // A new status is a transition.
        let up = build(Some(&aged), &report(Observed::yes("Loaded", "")));
        assert_ne!(up.conditions.iter().find(|c| c.type_ == "Ready").unwrap().last_transition_time, t0);
    }

    /// What the API server stores after the patch, for a status that had
    /// every field and one that has none of the optional ones.
    #[test]
    fn the_status_patch_clears_what_the_new_status_leaves_out() {
        use crate::kube_plugins::crd::PluginCounters;
        let counters = PluginCounters { delivered: 3, writes: Some(2), refused_writes: Some(1), ..Default::default() };
        let full = PluginStatus {
            digest: Some("sha256:aa".into()),
            replica: Some("r-0".into()),
            counters: Some(counters),
            ..build(None, &report(Observed::yes("Loaded", "")))
        };
        let stored = serde_json::to_value(&full).unwrap();
        let apply = |stored: &serde_json::Value, status: &PluginStatus| {
            let mut object = json!({ "status": stored });
            json_patch::merge(&mut object, &merge_patch(status));
            serde_json::from_value::<PluginStatus>(object["status"].take()).unwrap()
        };
        // Refused: no digest, replica or counters any more.
        // As stored: times in whole seconds.
        let stored_as =
            |s: &PluginStatus| serde_json::from_value::<PluginStatus>(serde_json::to_value(s).unwrap()).unwrap();
        let refused =
            PluginStatus { observed_generation: None, ..build(None, &report(Observed::no("Refused", "over"))) };
        assert_eq!(apply(&stored, &refused), stored_as(&refused));
        // A handler that was a controller: its counters lose the writes.
        let handler =
            PluginStatus { counters: Some(PluginCounters { delivered: 4, ..Default::default() }), ..full.clone() };
        assert_eq!(apply(&stored, &handler), stored_as(&handler));
        assert_eq!(apply(&stored, &full), stored_as(&full));
    }

    #[test]
    fn a_huge_message_is_cut_to_the_apis_limit() {
        let s = build(None, &report(Observed::no("PullFailed", "é".repeat(40_000))));
        let m = &s.conditions[0].message;
        assert!(m.len() <= 32 << 10 && m.ends_with("..."), "{}", m.len());
    }
}
