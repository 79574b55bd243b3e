//! What the API server does to an object on each write, as pure functions
//! over JSON: server-set metadata, preconditions, the status subresource,
//! `metadata.generation`, finalizers, validation and the `Status` errors.
//! Event objects are [`super::events`].
//!
//! This module owns the rules; it holds no state. The caller (the embedded
//! store, or later the HTTP test server) looks objects up, picks uids and
//! timestamps, stamps resourceVersions and stores the results. Field
//! ownership and apply are [`super::managed`]; patch documents are
//! [`super::patch`].
//!
//! # Which kinds have a status subresource, and a generation
//!
//! The embedded store has no schemas, so [`KindRules::of`] decides:
//!
//! - Well-known built-in kinds with `/status` upstream ([`STATUS_KINDS`]:
//!   Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Pod,
//!   Service, Namespace, ...) have one: a create drops the given status (a
//!   Namespace starts `Active`), main writes keep the stored status,
//!   `/status` writes change only status.
//! - Well-known kinds without one ([`PLAIN_KINDS`]: ConfigMap, Secret,
//!   RBAC kinds, Event, ...) treat `status` as ordinary content, and a
//!   write to their `/status` is a `BadRequest`, as the API writer answers
//!   it.
//! - Any other kind (a custom resource) has one exactly when the stored
//!   object has a `status` field (a create keeps what it is given).
//!
//! `metadata.generation` is kept by every kind except those whose upstream
//! registry does not set it ([`NO_GENERATION_KINDS`]: ConfigMap, Secret,
//! Namespace, Service, RBAC kinds, Event, ...). It starts at 1 and grows by
//! one when anything other than `metadata` (and `status`, when it is a
//! subresource) changes, and when a deletion with finalizers starts.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::managed::Scope;
use crate::cluster::{Cause, DeleteOptions, Target, WriteError};

/// `(group, kind)` of built-in kinds served with a `status` subresource.
pub const STATUS_KINDS: &[(&str, &str)] = &[
    ("", "Pod"),
    ("", "Service"),
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("", "ReplicationController"),
    ("", "ResourceQuota"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("policy", "PodDisruptionBudget"),
    ("networking.k8s.io", "Ingress"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
];

/// `(group, kind)` of built-in kinds without a `status` subresource.
pub const PLAIN_KINDS: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "Event"),
    ("", "LimitRange"),
    ("events.k8s.io", "Event"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("coordination.k8s.io", "Lease"),
];

/// `(group, kind)` of built-in kinds that keep no `metadata.generation`.
pub const NO_GENERATION_KINDS: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "Event"),
    ("", "Namespace"),
    ("", "Service"),
    ("", "Node"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("events.k8s.io", "Event"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("coordination.k8s.io", "Lease"),
];

/// A write to the status of a well-known kind served without one
/// ([`PLAIN_KINDS`]) is refused, as the API writer refuses a subresource
/// discovery does not list (the server has no such route). Other kinds may
/// have one (a custom resource's CRD decides), so they are not refused.
pub fn check_status_subresource(target: &Target) -> Result<(), WriteError> {
    let gk = (group_of(&target.api_version), target.kind.as_str());
    if PLAIN_KINDS.iter().any(|(g, k)| (*g, *k) == gk) {
        return Err(WriteError::BadRequest(format!("{target}: {} has no status subresource", target.kind)));
    }
    Ok(())
}

/// The API group of an apiVersion (`""` for the core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// How the server treats one kind (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindRules {
    pub status_subresource: bool,
    pub generation: bool,
}

impl KindRules {
    /// The rules for `kind` in `api_version`, given the stored object.
    pub fn of(api_version: &str, kind: &str, live: Option<&Value>) -> KindRules {
        let gk = (group_of(api_version), kind);
        let listed = |list: &[(&str, &str)]| list.iter().any(|(g, k)| (*g, *k) == gk);
        let status_subresource = if listed(STATUS_KINDS) {
            true
        } else if listed(PLAIN_KINDS) {
            false
        } else {
            live.is_some_and(|o| o.get("status").is_some())
        };
        KindRules { status_subresource, generation: !listed(NO_GENERATION_KINDS) }
    }

    /// The part of an object a write of `subresource` manages.
    pub fn scope(self, status: bool) -> Scope {
        if status { Scope::Status } else { Scope::Main { status_is_subresource: self.status_subresource } }
    }
}

/// The resource as errors name it: `configmaps`, `deployments.apps` (the
/// plural is guessed from the kind, as there is no discovery here).
pub fn resource_name(api_version: &str, kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    let plural = if lower.ends_with('s') || lower.ends_with('x') || lower.ends_with("ch") {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y').filter(|s| !s.ends_with(['a', 'e', 'o', 'u'])) {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    };
    match group_of(api_version) {
        "" => plural,
        g => format!("{plural}.{g}"),
    }
}

/// `404 NotFound`: `configmaps "a" not found`.
pub fn not_found(api_version: &str, kind: &str, name: &str) -> WriteError {
    WriteError::NotFound(format!("{} {name:?} not found", resource_name(api_version, kind)))
}

/// `409 AlreadyExists`: `configmaps "a" already exists`.
pub fn already_exists(api_version: &str, kind: &str, name: &str) -> WriteError {
    WriteError::AlreadyExists(format!("{} {name:?} already exists", resource_name(api_version, kind)))
}

/// `409 Conflict` for a failed precondition or a stale resourceVersion.
pub fn conflict(api_version: &str, kind: &str, name: &str, why: &str) -> WriteError {
    WriteError::Conflict(format!(
        "Operation cannot be fulfilled on {} {name:?}: {why}",
        resource_name(api_version, kind)
    ))
}

const STALE: &str = "the object has been modified; please apply your changes to the latest version and try again";

/// `422 Invalid`: `ConfigMap "a" is invalid: metadata.name: ...`.
pub fn invalid(api_version: &str, kind: &str, name: &str, causes: Vec<Cause>) -> WriteError {
    let qualified = match group_of(api_version) {
        "" => kind.to_string(),
        g => format!("{kind}.{g}"),
    };
    let details: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    let joined = if details.len() == 1 { details[0].clone() } else { format!("[{}]", details.join(", ")) };
    WriteError::Invalid { message: format!("{qualified} {name:?} is invalid: {joined}"), causes }
}

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause { reason: reason.into(), message, field: field.into() }
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// `IsDNS1123Subdomain`: what is wrong with `name`, nothing when valid.
pub fn dns_subdomain_errors(name: &str) -> Vec<&'static str> {
    let mut errs = Vec::new();
    if name.len() > 253 {
        errs.push("must be no more than 253 characters");
    }
    if !name.split('.').all(is_label) {
        errs.push(SUBDOMAIN_MSG);
    }
    errs
}

/// `IsDNS1123Label`, for Namespace names.
pub fn dns_label_errors(name: &str) -> Vec<&'static str> {
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push("must be no more than 63 characters");
    }
    if !is_label(name) {
        errs.push(LABEL_MSG);
    }
    errs
}

/// The field errors of an object about to be stored (`ValidateObjectMeta`):
/// a missing name, a name that is not a DNS subdomain (a DNS label for a
/// Namespace), a namespace that is not a DNS label, non-string labels.
pub fn validate_object(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    let is_namespace = obj["kind"] == "Namespace" && group_of(obj["apiVersion"].as_str().unwrap_or("")).is_empty();
    if name.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required".into(),
        ));
    } else {
        let errs = if is_namespace { dns_label_errors(name) } else { dns_subdomain_errors(name) };
        causes.extend(
            errs.into_iter()
                .map(|e| cause("FieldValueInvalid", "metadata.name", format!("Invalid value: {name:?}: {e}"))),
        );
    }
    if let Some(ns) = meta["namespace"].as_str().filter(|ns| !ns.is_empty()) {
        causes.extend(
            dns_label_errors(ns)
                .into_iter()
                .map(|e| cause("FieldValueInvalid", "metadata.namespace", format!("Invalid value: {ns:?}: {e}"))),
        );
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (k, v) in labels.iter().filter(|(_, v)| !v.is_string()) {
            causes.push(cause(
                "FieldValueInvalid",
                &format!("metadata.labels.{k}"),
                format!("Invalid value: {v}: must be a string"),
            ));
        }
    }
    causes
}

/// Checks that the object a write carries is the object the write names:
/// the same namespace and name (`422 Invalid` otherwise; upstream answers
/// these with 400 or 422 depending on where the name came from).
pub fn check_target(target: &Target, obj: &Value) -> Result<(), WriteError> {
    let mut causes = Vec::new();
    let ns = obj["metadata"]["namespace"].as_str().filter(|ns| !ns.is_empty());
    if let Some(ns) = ns
        && Some(ns) != target.namespace.as_deref()
    {
        let want = target.namespace.as_deref().unwrap_or("");
        causes.push(cause(
            "FieldValueInvalid",
            "metadata.namespace",
            format!("Invalid value: {ns:?}: does not match the namespace of the request ({want:?})"),
        ));
    }
    if let Some(name) = obj["metadata"]["name"].as_str().filter(|n| !n.is_empty())
        && name != target.name
    {
        causes.push(cause(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: {name:?}: does not match the name of the request ({:?})", target.name),
        ));
    }
    if causes.is_empty() { Ok(()) } else { Err(invalid(&target.api_version, &target.kind, &target.name, causes)) }
}

/// Stamps what the server sets on create (`uid`, `creationTimestamp`,
/// `generation`; server-only fields cleared; status per the kind's rules)
/// and validates. The name is already chosen (`generateName` resolved).
pub fn prepare_create(obj: &mut Value, rules: KindRules, uid: &str, now: &str) -> Result<(), WriteError> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let api_version = obj["apiVersion"].as_str().unwrap_or("").to_string();
    let kind = obj["kind"].as_str().unwrap_or("").to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if obj["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()) {
        return Err(WriteError::BadRequest("resourceVersion should not be set on objects to be created".into()));
    }
    let causes = validate_object(obj);
    if !causes.is_empty() {
        return Err(invalid(&api_version, &kind, &name, causes));
    }
    if let Some(meta) = obj["metadata"].as_object_mut() {
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(now));
        for gone in ["deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "resourceVersion", "managedFields"]
        {
            meta.remove(gone);
        }
        if rules.generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
    }
    if rules.status_subresource
        && STATUS_KINDS.contains(&(group_of(&api_version), kind.as_str()))
        && let Some(m) = obj.as_object_mut()
    {
        // PrepareForCreate resets status; a Namespace starts Active.
        if kind == "Namespace" {
            m.insert("status".into(), json!({"phase": "Active"}));
        } else {
            m.remove("status");
        }
    }
    Ok(())
}

/// The part of an object whose changes bump `metadata.generation`.
fn spec_part(rules: KindRules, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if rules.status_subresource {
            m.remove("status");
        }
    }
    v
}

/// Turns the object a replace or patch produced into what is stored:
/// `metadata.resourceVersion` (when set) and `metadata.uid` (when set) are
/// preconditions; a `/status` write keeps everything of `old` but `status`
/// (and managed fields); a main write keeps `old`'s status when it is a
/// subresource, and the metadata only the server sets; `generation` grows
/// when the spec part changed. The result carries `old`'s resourceVersion.
pub fn prepare_update(old: &Value, new: Value, rules: KindRules, scope: Scope) -> Result<Value, WriteError> {
    let api_version = old["apiVersion"].as_str().unwrap_or("");
    let kind = old["kind"].as_str().unwrap_or("");
    let name = old["metadata"]["name"].as_str().unwrap_or("");
    let old_rv = old["metadata"]["resourceVersion"].clone();
    if let Some(rv) = new["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty())
        && Some(rv) != old_rv.as_str()
    {
        return Err(conflict(api_version, kind, name, STALE));
    }
    if let Some(uid) = new["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
        && Some(uid) != old["metadata"]["uid"].as_str()
    {
        let c = cause("FieldValueInvalid", "metadata.uid", format!("Invalid value: {uid:?}: field is immutable"));
        return Err(invalid(api_version, kind, name, vec![c]));
    }
    let mut new = new;
    if !new.is_object() || !new["metadata"].is_object() {
        return Err(WriteError::BadRequest("the object is not an object with metadata".into()));
    }
    if scope == Scope::Status {
        let mut n = old.clone();
        match new.get("status") {
            Some(s) => n["status"] = s.clone(),
            None => {
                if let Some(m) = n.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        if let Some(mf) = new["metadata"].get("managedFields") {
            n["metadata"]["managedFields"] = mf.clone();
        }
        new = n;
    } else {
        if rules.status_subresource
            && let Some(m) = new.as_object_mut()
        {
            match old.get("status") {
                Some(s) => m.insert("status".into(), s.clone()),
                None => m.remove("status"),
            };
        }
        if let Some(meta) = new["metadata"].as_object_mut() {
            for field in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
                match old["metadata"].get(field) {
                    Some(v) => meta.insert(field.into(), v.clone()),
                    None => meta.remove(field),
                };
            }
            meta.insert("name".into(), json!(name));
            match old["metadata"].get("namespace") {
                Some(ns) => meta.insert("namespace".into(), ns.clone()),
                None => meta.remove("namespace"),
            };
            meta.remove("selfLink");
        }
        if let Some(m) = new.as_object_mut() {
            m.insert("apiVersion".into(), json!(api_version));
            m.insert("kind".into(), json!(kind));
        }
    }
    if rules.generation && spec_part(rules, old) != spec_part(rules, &new) {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
        new["metadata"]["generation"] = json!(g + 1);
    }
    new["metadata"]["resourceVersion"] = old_rv;
    Ok(new)
}

/// An object as compared for "did anything change": no resourceVersion,
/// no managed-fields times.
fn comparable(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
        if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
            for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                e.remove("time");
            }
        }
    }
    v
}

/// Whether an update changes nothing (then the server stores nothing: no
/// new resourceVersion, no watch event).
pub fn unchanged(old: &Value, new: &Value) -> bool {
    comparable(old) == comparable(new)
}

/// Whether the object is being deleted and has no finalizers left: the
/// update that made it so deletes it.
pub fn is_finalized(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
        && obj["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty())
}

/// What a delete does.
#[derive(Debug, Clone, PartialEq)]
pub enum DeletePlan {
    /// No finalizers: the object goes.
    Remove,
    /// Finalizers: the object stays, marked with this new state
    /// (`deletionTimestamp`, grace period 0, generation + 1).
    Mark(Value),
    /// Already marked: nothing changes; the answer is the object.
    AlreadyMarked,
}

/// Checks a delete's preconditions (uid, resourceVersion: `409 Conflict`)
/// and decides what it does.
pub fn plan_delete(
    old: &Value,
    options: &DeleteOptions,
    rules: KindRules,
    now: &str,
) -> Result<DeletePlan, WriteError> {
    let meta = &old["metadata"];
    let (api_version, kind) = (old["apiVersion"].as_str().unwrap_or(""), old["kind"].as_str().unwrap_or(""));
    let name = meta["name"].as_str().unwrap_or("");
    let check = |what: &str, wanted: &Option<String>, actual: &str| match wanted {
        Some(w) if w != actual => Err(conflict(
            api_version,
            kind,
            name,
            &format!("Precondition failed: {what} in precondition: {w}, {what} in object meta: {actual}"),
        )),
        _ => Ok(()),
    };
    check("UID", &options.uid, meta["uid"].as_str().unwrap_or(""))?;
    check("ResourceVersion", &options.resource_version, meta["resourceVersion"].as_str().unwrap_or(""))?;
    if meta["finalizers"].as_array().is_none_or(|f| f.is_empty()) {
        return Ok(DeletePlan::Remove);
    }
    if meta["deletionTimestamp"].is_string() {
        return Ok(DeletePlan::AlreadyMarked);
    }
    let mut new = old.clone();
    new["metadata"]["deletionTimestamp"] = json!(now);
    new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    if rules.generation {
        new["metadata"]["generation"] = json!(meta["generation"].as_i64().unwrap_or(0) + 1);
    }
    Ok(DeletePlan::Mark(new))
}

/// `t` as RFC 3339 in UTC, to the second (`metav1.Time`).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

/// Five characters from the API server's `generateName` alphabet
/// (`utilrand.String`), derived from `seed`.
pub fn name_suffix(seed: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x0005_DEEC_E66D;
    (0..5)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
}

/// A uid in the form of a v4 UUID, unique per `n` within one store and
/// different between stores through `salt`.
pub fn uid(salt: u64, n: u64) -> String {
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        salt >> 32,
        (salt >> 16) & 0xffff,
        salt & 0xfff,
        (n >> 48) & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_and_names() {
        assert!(KindRules::of("apps/v1", "Deployment", None).status_subresource);
        assert!(!KindRules::of("v1", "ConfigMap", Some(&json!({"status": {}}))).status_subresource);
        assert!(KindRules::of("x.io/v1", "Widget", Some(&json!({"status": {}}))).status_subresource);
        assert!(!KindRules::of("v1", "ConfigMap", None).generation);
        assert_eq!(resource_name("apps/v1", "Deployment"), "deployments.apps");
        assert_eq!(resource_name("networking.k8s.io/v1", "Ingress"), "ingresses.networking.k8s.io");
        assert_eq!(resource_name("v1", "Policy"), "policies");
        assert_eq!(rfc3339(UNIX_EPOCH + std::time::Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn validation_causes() {
        let causes =
            validate_object(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.name");
        let causes = validate_object(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}));
        assert_eq!(causes[0].reason, "FieldValueRequired");
    }
}
