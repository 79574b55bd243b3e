//! Carrying out one write on the locked store: looking objects up, running
//! the API server's rules ([`super::semantics`], [`super::managed`],
//! [`super::patch`]), and storing the result, then what follows from it
//! (garbage collection of dependents, Event aggregation).
//!
//! This module owns the order of those steps and the simplifications of a
//! store without a controller manager:
//!
//! - Garbage collection is synchronous and simple: when an object is
//!   removed, every object with an ownerReference to its uid and no other
//!   owner still stored is deleted as a `Background` delete would (a
//!   dependent with finalizers is only marked), recursively. `Orphan`
//!   removes the ownerReference from the dependents instead; `Foreground`
//!   behaves as `Background` (no `foregroundDeletion` finalizer).
//! - Events are aggregated as client-go's correlator does for identical
//!   ones (same source, involved object, type, reason, message): the stored
//!   Event's `count` and `lastTimestamp` grow instead of a new Event.
//! - A dry run answers what the write would store, stores nothing, emits
//!   nothing and collects nothing.
//!
//! It never touches the files, and knows nothing of informers or plugins.

use std::sync::Arc;

use serde_json::{Value, json};

use super::events;
use super::managed::{self, Scope};
use super::patch;
use super::semantics::{self, DeletePlan, KindRules};
use super::store::{State, key_of};
use crate::cluster::{Cause, DeleteOptions, EventType, Patch, Propagation, Target, WriteError, WriteParams};

/// The field manager of a write (`informer-host` when none is given).
fn manager(params: &WriteParams) -> &str {
    if params.field_manager.is_empty() { "informer-host" } else { &params.field_manager }
}

fn target_key(t: &Target) -> String {
    crate::source::manifests::qualified_key(&t.api_version, &t.kind, t.namespace.as_deref(), &t.name)
}

fn stored(st: &mut State, value: Value) -> Result<Option<Value>, WriteError> {
    st.put(value).map(|v| Some(Value::clone(&v))).map_err(|message| WriteError::ServerError { code: 500, message })
}

/// POST: a new object.
pub(super) fn create(
    st: &mut State,
    mut obj: Value,
    params: &WriteParams,
    now: &str,
) -> Result<Option<Value>, WriteError> {
    if !obj.is_object() {
        return Err(WriteError::BadRequest("the object is not a JSON object".into()));
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let api_version = obj["apiVersion"].as_str().unwrap_or("").to_string();
    let kind = obj["kind"].as_str().unwrap_or("").to_string();
    if api_version.is_empty() || kind.is_empty() {
        return Err(WriteError::BadRequest("Object 'Kind' or 'apiVersion' is missing".into()));
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let prefix = obj["metadata"]["generateName"].as_str().unwrap_or("").to_string();
    if name.is_empty() && !prefix.is_empty() {
        loop {
            let n = st.next_number();
            obj["metadata"]["name"] = json!(format!("{prefix}{}", semantics::name_suffix(n)));
            if st.get(&key_of(&obj)).is_none() {
                break;
            }
        }
    }
    let rules = KindRules::of(&api_version, &kind, Some(&obj));
    let uid = st.new_uid();
    semantics::prepare_create(&mut obj, rules, &uid, now)?;
    let key = key_of(&obj);
    if st.get(&key).is_some() {
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        return Err(semantics::already_exists(&api_version, &kind, name));
    }
    managed::record_update(None, &mut obj, manager(params), rules.scope(false), now);
    if params.dry_run {
        return Ok(Some(obj));
    }
    stored(st, obj)
}

/// PUT of the object or of its status.
pub(super) fn replace(
    st: &mut State,
    obj: Value,
    status: bool,
    params: &WriteParams,
    now: &str,
) -> Result<Option<Value>, WriteError> {
    let target = Target::of(&obj)?;
    if status {
        semantics::check_status_subresource(&target)?;
    }
    let key = target_key(&target);
    let old = st.get(&key).ok_or_else(|| semantics::not_found(&target.api_version, &target.kind, &target.name))?;
    let rules = KindRules::of(&target.api_version, &target.kind, Some(&old));
    let scope = rules.scope(status);
    let mut new = semantics::prepare_update(&old, obj, rules, scope)?;
    managed::record_update(Some(&old), &mut new, manager(params), scope, now);
    finish_update(st, &key, &old, new, params.dry_run, now)
}

/// PATCH of the object or of its status.
pub(super) fn patch(
    st: &mut State,
    target: &Target,
    patch: Patch,
    status: bool,
    params: &WriteParams,
    now: &str,
) -> Result<Option<Value>, WriteError> {
    if status {
        semantics::check_status_subresource(target)?;
    }
    let key = target_key(target);
    let old = st.get(&key);
    let not_found = || semantics::not_found(&target.api_version, &target.kind, &target.name);
    let rules = KindRules::of(&target.api_version, &target.kind, old.as_deref());
    let scope = rules.scope(status);
    let (config, force) = match patch {
        Patch::Merge(p) => {
            let old = old.ok_or_else(not_found)?;
            let mut doc = Value::clone(&old);
            json_patch::merge(&mut doc, &p);
            return update_with(st, &key, target, &old, doc, rules, scope, params, now);
        }
        Patch::Json(p) => {
            let old = old.ok_or_else(not_found)?;
            let mut doc = Value::clone(&old);
            patch::json_patch(&mut doc, &p)?;
            return update_with(st, &key, target, &old, doc, rules, scope, params, now);
        }
        Patch::Apply { config, force } => (config, force),
    };
    if params.field_manager.is_empty() {
        let c = Cause {
            reason: "FieldValueRequired".into(),
            message: "is required for apply patch".into(),
            field: "fieldManager".into(),
        };
        return Err(semantics::invalid(&target.api_version, &target.kind, &target.name, vec![c]));
    }
    let mut config = config;
    if !config.is_object() {
        return Err(WriteError::BadRequest("an apply configuration must be an object".into()));
    }
    semantics::check_target(target, &config)?;
    if !config["metadata"].is_object() {
        config["metadata"] = json!({});
    }
    if !config["metadata"]["managedFields"].is_null() {
        return Err(WriteError::BadRequest("metadata.managedFields must be nil".into()));
    }
    config["apiVersion"] = json!(target.api_version);
    config["kind"] = json!(target.kind);
    config["metadata"]["name"] = json!(target.name);
    if let Some(ns) = &target.namespace {
        config["metadata"]["namespace"] = json!(ns);
    }
    match old {
        Some(old) => {
            let merged = managed::apply(&old, &config, &params.field_manager, force, scope, now)?;
            let new = semantics::prepare_update(&old, merged, rules, scope)?;
            finish_update(st, &key, &old, new, params.dry_run, now)
        }
        None if status => Err(not_found()),
        None => {
            if config["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()) {
                return Err(not_found());
            }
            let mut skeleton = json!({"apiVersion": target.api_version, "kind": target.kind,
                "metadata": {"name": target.name}});
            if let Some(ns) = &target.namespace {
                skeleton["metadata"]["namespace"] = json!(ns);
            }
            let mut obj = managed::apply(&skeleton, &config, &params.field_manager, force, scope, now)?;
            let fields = obj["metadata"]["managedFields"].take();
            let rules = KindRules::of(&target.api_version, &target.kind, Some(&obj));
            let uid = st.new_uid();
            semantics::prepare_create(&mut obj, rules, &uid, now)?;
            if !fields.is_null() {
                obj["metadata"]["managedFields"] = fields;
            }
            if params.dry_run {
                return Ok(Some(obj));
            }
            stored(st, obj)
        }
    }
}

/// The tail of a merge or JSON patch: the patched document as an update.
#[allow(clippy::too_many_arguments)]
fn update_with(
    st: &mut State,
    key: &str,
    target: &Target,
    old: &Value,
    doc: Value,
    rules: KindRules,
    scope: Scope,
    params: &WriteParams,
    now: &str,
) -> Result<Option<Value>, WriteError> {
    semantics::check_target(target, &doc)?;
    let mut new = semantics::prepare_update(old, doc, rules, scope)?;
    managed::record_update(Some(old), &mut new, manager(params), scope, now);
    finish_update(st, key, old, new, params.dry_run, now)
}

/// Stores an update unless it changes nothing; one that removes the last
/// finalizer of an object being deleted deletes it.
fn finish_update(
    st: &mut State,
    key: &str,
    old: &Value,
    new: Value,
    dry_run: bool,
    now: &str,
) -> Result<Option<Value>, WriteError> {
    if semantics::unchanged(old, &new) {
        return Ok(Some(old.clone()));
    }
    if dry_run {
        return Ok(Some(new));
    }
    if semantics::is_finalized(&new) {
        // The update that removes the last finalizer deletes the object:
        // watchers see one Deleted carrying that last state.
        let last = remove_and_collect(st, key, Some(new), Propagation::Background, now);
        return Ok(last.map(|v| Value::clone(&v)));
    }
    stored(st, new)
}

/// DELETE.
pub(super) fn delete(
    st: &mut State,
    target: &Target,
    options: &DeleteOptions,
    dry_run: bool,
    now: &str,
) -> Result<Option<Value>, WriteError> {
    let key = target_key(target);
    let old = st.get(&key).ok_or_else(|| semantics::not_found(&target.api_version, &target.kind, &target.name))?;
    let rules = KindRules::of(&target.api_version, &target.kind, Some(&old));
    match semantics::plan_delete(&old, options, rules, now)? {
        DeletePlan::Remove => {
            if !dry_run {
                remove_and_collect(st, &key, None, options.propagation.unwrap_or(Propagation::Background), now);
            }
            Ok(None)
        }
        DeletePlan::AlreadyMarked => Ok(Some(Value::clone(&old))),
        DeletePlan::Mark(new) if dry_run => Ok(Some(new)),
        DeletePlan::Mark(new) => stored(st, new),
    }
}

/// Removes `key` (watchers see `last` when given) and collects its
/// dependents (see the module docs); returns the removed object's last
/// state.
pub(super) fn remove_and_collect(
    st: &mut State,
    key: &str,
    last: Option<Value>,
    propagation: Propagation,
    now: &str,
) -> Option<Arc<Value>> {
    let removed = st.remove_as(key, last);
    let mut gone: Vec<String> = Vec::new();
    if let Some(uid) = removed.as_ref().and_then(|l| l["metadata"]["uid"].as_str()) {
        gone.push(uid.to_string());
    }
    while let Some(uid) = gone.pop() {
        let owned_by = |v: &Value, uid: &str| {
            v["metadata"]["ownerReferences"].as_array().is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
        };
        for dependent in st.find(|v| owned_by(v, &uid)) {
            let dkey = key_of(&dependent);
            if propagation == Propagation::Orphan {
                let mut orphan = Value::clone(&dependent);
                if let Some(refs) = orphan["metadata"]["ownerReferences"].as_array_mut() {
                    refs.retain(|r| r["uid"] != uid.as_str());
                }
                if let Err(e) = st.put(orphan) {
                    tracing::warn!(key = dkey, error = %e, "cannot orphan a dependent");
                }
                continue;
            }
            let other_owner_left = dependent["metadata"]["ownerReferences"].as_array().is_some_and(|refs| {
                refs.iter()
                    .filter_map(|r| r["uid"].as_str())
                    .filter(|u| *u != uid)
                    .any(|u| !st.find(|v| v["metadata"]["uid"] == u).is_empty())
            });
            if other_owner_left {
                continue;
            }
            let rules = KindRules::of(
                dependent["apiVersion"].as_str().unwrap_or(""),
                dependent["kind"].as_str().unwrap_or(""),
                Some(&dependent),
            );
            match semantics::plan_delete(&dependent, &DeleteOptions::default(), rules, now) {
                Ok(DeletePlan::Remove) => {
                    if let Some(last) = st.remove(&dkey)
                        && let Some(u) = last["metadata"]["uid"].as_str()
                    {
                        gone.push(u.to_string());
                    }
                }
                Ok(DeletePlan::Mark(marked)) => {
                    if let Err(e) = st.put(marked) {
                        tracing::warn!(key = dkey, error = %e, "cannot mark a dependent for deletion");
                    }
                }
                Ok(DeletePlan::AlreadyMarked) | Err(_) => {}
            }
        }
    }
    removed
}

/// An Event about `involved`, new or aggregated into an identical one.
#[allow(clippy::too_many_arguments)]
pub(super) fn record_event(
    st: &mut State,
    involved: &Target,
    event_type: EventType,
    reason: &str,
    message: &str,
    params: &WriteParams,
    now: &str,
    nanos: u64,
) -> Result<Option<Value>, WriteError> {
    let involved_obj: Option<Arc<Value>> = st.get(&target_key(involved));
    let suffix = format!("{:x}", nanos.wrapping_add(st.next_number()));
    let component = manager(params);
    let info = events::EventInfo { event_type, reason, message, component };
    let mut event = events::event(involved, involved_obj.as_deref(), info, &suffix, now);
    let namespace = event["metadata"]["namespace"].clone();
    let same = st.find(|v| {
        v["kind"] == "Event"
            && v["apiVersion"] == "v1"
            && v["metadata"]["namespace"] == namespace
            && events::same_event(v, &event)
    });
    if let Some(existing) = same.first() {
        let repeated = events::repeat_event(existing, now);
        return if params.dry_run { Ok(Some(repeated)) } else { stored(st, repeated) };
    }
    let uid = st.new_uid();
    semantics::prepare_create(&mut event, KindRules::of("v1", "Event", None), &uid, now)?;
    if params.dry_run {
        return Ok(Some(event));
    }
    stored(st, event)
}
