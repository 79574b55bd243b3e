//! Field management: `metadata.managedFields` and server-side apply, as
//! pure functions over JSON objects.
//!
//! This module owns who owns which field of an object and what an apply
//! does to it. It does not store objects, stamp resourceVersions or decide
//! which part of an object a write may touch (that is [`super::semantics`]).
//!
//! A simplified model of structured-merge-diff (the API server's field
//! manager):
//!
//! - Ownership is tracked per **leaf field**: a scalar, an empty map, or a
//!   list. Lists are atomic (owned and replaced whole) except the
//!   well-known associative lists of the built-in schemas, merged by key
//!   (`containers`, `initContainers`, `ephemeralContainers`, `env`,
//!   `volumes`, `imagePullSecrets` by `name`; `volumeMounts` by
//!   `mountPath`; `conditions` by `type`; `ownerReferences` by `uid`);
//!   their items are owned as `.` plus their own leaves, as upstream
//!   records them.
//! - In `metadata` only `labels`, `annotations`, `finalizers` (atomic here,
//!   a set upstream) and `ownerReferences` are owned; `apiVersion` and
//!   `kind` are never owned. With a status subresource, main-resource
//!   managers own nothing under `status` and `/status` managers own only
//!   `status`.
//! - An update (create, replace, merge or JSON patch) makes its manager the
//!   owner (operation `Update`) of every leaf it added or changed, takes
//!   those leaves from every other manager, and drops removed leaves.
//! - An apply conflicts, for each applied leaf whose value differs from the
//!   live one, with every other manager owning it (`409 Conflict`), unless
//!   forced, which takes the leaves. Leaves the manager applied before and
//!   no longer applies are removed unless another manager owns them. The
//!   configuration is merged into the live object (maps recursively,
//!   associative lists by key, anything else replaced) and becomes the
//!   manager's `Apply` field set.
//!
//! Managed fields are serialised as upstream does (`FieldsV1`: `f:<field>`,
//! `k:{"<key>":<value>}`, `.`), with `manager`, `operation`, `apiVersion`,
//! `time`, `fieldsType` and, for `/status`, `subresource`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::cluster::{Cause, WriteError};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Elem {
    Field(String),
    /// An associative-list item: key field, JSON-encoded key value.
    Key(String, String),
}

pub type FieldPath = Vec<Elem>;
pub type FieldSet = BTreeSet<FieldPath>;

/// Which part of an object a write manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything but `status` when `status` is a subresource.
    Main { status_is_subresource: bool },
    /// Only `status` (the `/status` subresource).
    Status,
}

/// As `fieldpath.Path.String()`: `.spec.containers[name="c"].image`.
pub fn path_string(p: &FieldPath) -> String {
    p.iter()
        .map(|e| match e {
            Elem::Field(f) => format!(".{f}"),
            Elem::Key(k, v) => format!("[{k}={v}]"),
        })
        .collect()
}

/// The key of an associative list, by field name.
pub fn list_key(field: &str) -> Option<&'static str> {
    match field {
        "containers" | "initContainers" | "ephemeralContainers" | "env" | "volumes" | "imagePullSecrets" => {
            Some("name")
        }
        "volumeMounts" => Some("mountPath"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        _ => None,
    }
}

/// The key field when `items` is an associative list whose items all have it.
fn keyed(field: Option<&str>, items: &[Value]) -> Option<&'static str> {
    let key = list_key(field?)?;
    items.iter().all(|i| i.get(key).is_some_and(|k| k.is_string() || k.is_number())).then_some(key)
}

fn walk(v: &Value, field: Option<&str>, path: &mut FieldPath, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                path.push(Elem::Field(k.clone()));
                walk(c, Some(k), path, out);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() && keyed(field, items).is_some() => {
            let key = keyed(field, items).unwrap_or("name");
            for item in items {
                path.push(Elem::Key(key.into(), item[key].to_string()));
                out.insert(path.clone());
                walk(item, None, path, out);
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The leaves of `obj` a manager of `scope` can own.
pub fn leaves(obj: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(m) = obj.as_object() else { return out };
    for (k, v) in m {
        let wanted = match (scope, k.as_str()) {
            (_, "apiVersion" | "kind") => false,
            (Scope::Status, f) => f == "status",
            (Scope::Main { status_is_subresource }, "status") => !status_is_subresource,
            _ => true,
        };
        if !wanted {
            continue;
        }
        if k == "metadata" {
            for f in ["labels", "annotations", "finalizers", "ownerReferences"] {
                if let Some(c) = v.get(f) {
                    let mut path = vec![Elem::Field("metadata".into()), Elem::Field(f.into())];
                    walk(c, Some(f), &mut path, &mut out);
                }
            }
            continue;
        }
        let mut path = vec![Elem::Field(k.clone())];
        walk(v, Some(k), &mut path, &mut out);
    }
    out
}

/// Whether a list item's key value, JSON-encoded, is `encoded` (field
/// paths hold key values encoded, as `k:{"name":"c"}` does).
fn same_key(x: &Value, encoded: &str) -> bool {
    serde_json::to_string(x).is_ok_and(|s| s == encoded)
}

/// The value at `path`, if present.
pub fn get<'a>(obj: &'a Value, path: &[Elem]) -> Option<&'a Value> {
    let mut cur = obj;
    for e in path {
        cur = match e {
            Elem::Field(f) => cur.get(f)?,
            Elem::Key(k, v) => cur.as_array()?.iter().find(|i| i.get(k).is_some_and(|x| same_key(x, v)))?,
        };
    }
    Some(cur)
}

fn get_mut<'a>(obj: &'a mut Value, path: &[Elem]) -> Option<&'a mut Value> {
    let mut cur = obj;
    for e in path {
        cur = match e {
            Elem::Field(f) => cur.get_mut(f)?,
            Elem::Key(k, v) => cur.as_array_mut()?.iter_mut().find(|i| i.get(k).is_some_and(|x| same_key(x, v)))?,
        };
    }
    Some(cur)
}

/// Removes the field or list item at `path`.
pub fn remove(obj: &mut Value, path: &[Elem]) {
    let Some((last, parent)) = path.split_last() else { return };
    let Some(parent) = get_mut(obj, parent) else { return };
    match last {
        Elem::Field(f) => {
            if let Some(m) = parent.as_object_mut() {
                m.remove(f);
            }
        }
        Elem::Key(k, v) => {
            if let Some(a) = parent.as_array_mut() {
                a.retain(|i| i.get(k).is_none_or(|x| !same_key(x, v)));
            }
        }
    }
}

/// Merges an applied configuration into `live`: maps recursively,
/// associative lists by key, anything else replaced.
pub fn merge(live: &mut Value, cfg: &Value, field: Option<&str>) {
    match (live, cfg) {
        (Value::Object(l), Value::Object(c)) => {
            for (k, cv) in c {
                match l.get_mut(k) {
                    Some(lv) => merge(lv, cv, Some(k)),
                    None => {
                        l.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(c)) if keyed(field, c).is_some() && keyed(field, l).is_some() => {
            let key = keyed(field, c).unwrap_or("name");
            for ci in c {
                match l.iter_mut().find(|li| li[key] == ci[key]) {
                    Some(li) => merge(li, ci, None),
                    None => l.push(ci.clone()),
                }
            }
        }
        (live, cfg) => *live = cfg.clone(),
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Manager {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// `""` or `status`.
    pub subresource: String,
    pub api_version: String,
    pub time: String,
    pub fields: FieldSet,
}

impl Manager {
    /// As `printManager` in the field manager's conflict errors.
    fn printed(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource {:?}", self.subresource);
        }
        if self.operation == "Update" {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }
    fn is(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }
}

fn fields_v1(fields: &FieldSet) -> Value {
    let mut root = json!({});
    for p in fields {
        // Every node is a map (or null until it becomes one), so indexing
        // never meets a scalar.
        let mut node = &mut root;
        for e in p {
            let k = match e {
                Elem::Field(f) => format!("f:{f}"),
                Elem::Key(k, v) => format!("k:{{{}:{v}}}", json!(k)),
            };
            node = &mut node[k.as_str()];
        }
        if node.is_null() {
            *node = json!({});
        }
        if matches!(p.last(), Some(Elem::Key(..))) {
            node["."] = json!({});
        }
    }
    root
}

fn parse_fields_v1(node: &Value, path: &mut FieldPath, out: &mut FieldSet) {
    let Some(m) = node.as_object() else { return };
    if m.is_empty() && !path.is_empty() {
        out.insert(path.clone());
        return;
    }
    for (k, child) in m {
        if k == "." {
            out.insert(path.clone());
        } else if let Some(f) = k.strip_prefix("f:") {
            path.push(Elem::Field(f.into()));
            parse_fields_v1(child, path, out);
            path.pop();
        } else if let Some(key) = k.strip_prefix("k:") {
            let Ok(Value::Object(kv)) = serde_json::from_str::<Value>(key) else { continue };
            let Some((kk, kvv)) = kv.iter().next() else { continue };
            path.push(Elem::Key(kk.clone(), kvv.to_string()));
            parse_fields_v1(child, path, out);
            path.pop();
        } else {
            // `v:` (set members) and `i:` (indices) are not produced here;
            // the enclosing field counts as one leaf.
            out.insert(path.clone());
        }
    }
}

/// The entries of `obj.metadata.managedFields`.
pub fn read(obj: &Value) -> Vec<Manager> {
    let Some(entries) = obj["metadata"]["managedFields"].as_array() else { return Vec::new() };
    entries
        .iter()
        .map(|e| {
            let mut fields = FieldSet::new();
            parse_fields_v1(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            Manager {
                manager: s("manager"),
                operation: s("operation"),
                subresource: s("subresource"),
                api_version: s("apiVersion"),
                time: s("time"),
                fields,
            }
        })
        .collect()
}

/// Writes `managers` into `obj.metadata.managedFields` (removed when empty).
pub fn write(obj: &mut Value, managers: &[Manager]) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    if managers.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let entries = managers
        .iter()
        .map(|m| {
            let mut e = json!({
                "manager": m.manager, "operation": m.operation, "apiVersion": m.api_version,
                "time": m.time, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&m.fields),
            });
            if !m.subresource.is_empty() {
                e["subresource"] = json!(m.subresource);
            }
            e
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(entries));
}

fn subresource_of(scope: Scope) -> &'static str {
    match scope {
        Scope::Status => "status",
        Scope::Main { .. } => "",
    }
}

fn entry<'a>(managers: &'a mut Vec<Manager>, api_version: &str, manager: &str, op: &str, sub: &str) -> &'a mut Manager {
    let i = match managers.iter().position(|m| m.is(manager, op, sub)) {
        Some(i) => i,
        None => {
            managers.push(Manager {
                manager: manager.into(),
                operation: op.into(),
                subresource: sub.into(),
                api_version: api_version.into(),
                time: String::new(),
                fields: FieldSet::new(),
            });
            managers.len() - 1
        }
    };
    &mut managers[i]
}

/// Records a non-apply write of `new` over `old` (`None`: a create) by
/// `manager` at `now`, starting from `managers` (the stored entries).
pub fn record_update(old: Option<&Value>, new: &mut Value, manager: &str, scope: Scope, now: &str) {
    let mut managers = old.map(read).unwrap_or_default();
    let before = old.map(|o| leaves(o, scope)).unwrap_or_default();
    let after = leaves(new, scope);
    let changed: FieldSet = after
        .iter()
        .filter(|p| {
            !before.contains(*p)
                || (!matches!(p.last(), Some(Elem::Key(..))) && old.and_then(|o| get(o, p)) != get(new, p))
        })
        .cloned()
        .collect();
    let removed: FieldSet = before.difference(&after).cloned().collect();
    if !changed.is_empty() || !removed.is_empty() {
        for m in managers.iter_mut() {
            m.fields.retain(|p| !changed.contains(p) && !removed.contains(p));
        }
        if !changed.is_empty() {
            let api_version = new["apiVersion"].as_str().unwrap_or("").to_string();
            let e = entry(&mut managers, &api_version, manager, "Update", subresource_of(scope));
            e.fields.extend(changed);
            e.time = now.into();
        }
        managers.retain(|m| !m.fields.is_empty());
    }
    write(new, &managers);
}

/// The `409 Conflict` of an apply: (manager as printed, field path) pairs.
fn apply_conflict(conflicts: &[(String, String)]) -> WriteError {
    let message = if let [(m, p)] = conflicts {
        format!("Apply failed with 1 conflict: conflict with {m}: {p}")
    } else {
        let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (m, p) in conflicts {
            by_manager.entry(m).or_default().push(p);
        }
        let mut lines = Vec::new();
        for (m, paths) in by_manager {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    WriteError::Conflict(message)
}

/// The causes of an apply conflict, one per manager and field, as the API
/// server lists them in `details.causes`.
pub fn conflict_causes(live: &Value, config: &Value, manager: &str, scope: Scope) -> Vec<Cause> {
    conflicts(live, config, manager, scope)
        .into_iter()
        .map(|(m, p)| Cause { reason: "FieldManagerConflict".into(), message: format!("conflict with {m}"), field: p })
        .collect()
}

fn conflicts(live: &Value, config: &Value, manager: &str, scope: Scope) -> Vec<(String, String)> {
    let sub = subresource_of(scope);
    let applied = leaves(config, scope);
    let mut out = Vec::new();
    for m in read(live) {
        if m.is(manager, "Apply", sub) {
            continue;
        }
        for p in applied.intersection(&m.fields) {
            // An associative-list item is shared; only its leaves conflict.
            if !matches!(p.last(), Some(Elem::Key(..))) && get(live, p) != get(config, p) {
                out.push((m.printed(), path_string(p)));
            }
        }
    }
    out
}

/// Server-side apply of `config` onto `live` (for a create: a skeleton with
/// apiVersion, kind, name and namespace) by `manager` at `now`. Returns the
/// merged object with its managed fields, or the conflict.
pub fn apply(
    live: &Value,
    config: &Value,
    manager: &str,
    force: bool,
    scope: Scope,
    now: &str,
) -> Result<Value, WriteError> {
    let sub = subresource_of(scope);
    let mut managers = read(live);
    let applied = leaves(config, scope);
    let mut taken: Vec<(usize, FieldPath)> = Vec::new();
    for (i, m) in managers.iter().enumerate() {
        if m.is(manager, "Apply", sub) {
            continue;
        }
        for p in applied.intersection(&m.fields) {
            if !matches!(p.last(), Some(Elem::Key(..))) && get(live, p) != get(config, p) {
                taken.push((i, p.clone()));
            }
        }
    }
    if !taken.is_empty() && !force {
        let printed: Vec<(String, String)> =
            taken.iter().map(|(i, p)| (managers[*i].printed(), path_string(p))).collect();
        return Err(apply_conflict(&printed));
    }
    for (i, p) in &taken {
        managers[*i].fields.remove(p);
    }
    let previous = managers.iter().find(|m| m.is(manager, "Apply", sub)).map(|m| m.fields.clone()).unwrap_or_default();
    let mut out = live.clone();
    for p in previous.difference(&applied) {
        if !managers.iter().any(|m| !m.is(manager, "Apply", sub) && m.fields.contains(p)) {
            remove(&mut out, p);
        }
    }
    let mut cfg = config.clone();
    if let Some(meta) = cfg.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    merge(&mut out, &cfg, None);
    let api_version = config["apiVersion"].as_str().unwrap_or("").to_string();
    let e = entry(&mut managers, &api_version, manager, "Apply", sub);
    e.fields = applied;
    e.time = now.into();
    managers.retain(|m| !m.fields.is_empty());
    write(&mut out, &managers);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_v1_round_trip() {
        let obj = json!({"metadata": {"labels": {"a": "1"}}, "data": {"k": "v"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}});
        let set = leaves(&obj, Scope::Main { status_is_subresource: true });
        let strings: Vec<String> = set.iter().map(path_string).collect();
        assert!(strings.contains(&".spec.containers[name=\"c\"].image".to_string()), "{strings:?}");
        let v1 = fields_v1(&set);
        assert_eq!(v1["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]["."], json!({}));
        let mut back = FieldSet::new();
        parse_fields_v1(&v1, &mut Vec::new(), &mut back);
        assert_eq!(back, set);
    }

    #[test]
    fn apply_conflicts_with_another_manager_unless_forced() {
        let main = Scope::Main { status_is_subresource: true };
        let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let a = apply(
            &base,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
            "data": {"k": "1"}}),
            "a",
            false,
            main,
            "t",
        )
        .unwrap();
        let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "2"}});
        let e = apply(&a, &cfg, "b", false, main, "t").unwrap_err();
        assert!(matches!(&e, WriteError::Conflict(m) if m.contains(".data.k")), "{e}");
        assert_eq!(conflict_causes(&a, &cfg, "b", main)[0].field, ".data.k");
        let forced = apply(&a, &cfg, "b", true, main, "t").unwrap();
        assert_eq!(forced["data"]["k"], "2");
        let owners: Vec<String> = read(&forced).into_iter().map(|m| m.manager).collect();
        assert_eq!(owners, ["b"]);
    }
}
