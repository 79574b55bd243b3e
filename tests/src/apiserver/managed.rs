//! Field management: `metadata.managedFields` and server-side apply.
//!
//! A simplified model of structured-merge-diff, documented here because
//! tests may lean on it:
//!
//! - Ownership is tracked per **leaf field**: a scalar, an empty map, or a
//!   list. Lists are atomic (owned and replaced whole) except a few
//!   well-known associative lists merged by key as the built-in schemas
//!   declare them (`containers`, `initContainers`, `ephemeralContainers`,
//!   `env`, `volumes`, `imagePullSecrets` by `name`; `volumeMounts` by
//!   `mountPath`; `conditions` by `type`; `ownerReferences` by `uid`); their
//!   items are owned as `.` plus their own leaves, as upstream records them.
//! - Only `metadata.labels`, `metadata.annotations`, `metadata.finalizers`
//!   (atomic here; a set upstream) and `metadata.ownerReferences` are owned
//!   in `metadata`; `apiVersion` and `kind` are not owned. For a type with a
//!   status subresource, main-resource managers own nothing under `status`
//!   and `/status` managers own only `status`.
//! - An update (`POST`, `PUT`, merge/JSON/strategic patch) makes its manager
//!   (`fieldManager`, else the `User-Agent` up to its first `/`) the owner,
//!   with operation `Update`, of every leaf it added or changed, takes those
//!   leaves from every other manager, and drops removed leaves everywhere.
//! - An apply (`application/apply-patch+yaml`) conflicts, for every leaf of
//!   the applied configuration whose value differs from the live one, with
//!   each other manager owning that leaf (`409 Conflict`, one
//!   `FieldManagerConflict` cause per manager and field), unless `force=true`,
//!   which takes the leaves. Leaves the manager applied before and no longer
//!   applies are removed unless another manager owns them. The applied
//!   configuration is merged into the live object (maps recursively,
//!   associative lists by key, everything else replaced), and becomes the
//!   manager's `Apply` field set.
//!
//! Managed fields are stored as upstream serialises them (`FieldsV1`:
//! `f:<field>`, `k:{"<key>":<value>}`, `.`), with `manager`, `operation`,
//! `apiVersion`, `time`, `fieldsType` and, for `/status`, `subresource`.

use std::collections::BTreeSet;

use super::*;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Elem {
    Field(String),
    /// An associative-list item: key field, JSON-encoded key value.
    Key(String, String),
}

pub(super) type Path = Vec<Elem>;
pub(super) type FieldSet = BTreeSet<Path>;

/// As `fieldpath.Path.String()`: `.spec.containers[name="c"].image`.
pub(super) fn path_string(p: &Path) -> String {
    p.iter()
        .map(|e| match e {
            Elem::Field(f) => format!(".{f}"),
            Elem::Key(k, v) => format!("[{k}={v}]"),
        })
        .collect()
}

/// The key of an associative list, by field name.
pub(super) fn list_key(field: &str) -> Option<&'static str> {
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

fn keyed(field: Option<&str>, items: &[Value]) -> Option<&'static str> {
    let key = list_key(field?)?;
    items.iter().all(|i| i.get(key).is_some_and(|k| k.is_string() || k.is_number())).then_some(key)
}

/// Which part of an object a write manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Everything but `status` (when `status` is a subresource).
    Main { status_is_subresource: bool },
    /// Only `status`.
    Status,
}

fn walk(v: &Value, field: Option<&str>, path: &mut Path, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                path.push(Elem::Field(k.clone()));
                walk(c, Some(k), path, out);
                path.pop();
            }
        }
        Value::Array(items) if keyed(field, items).is_some() && !items.is_empty() => {
            let key = keyed(field, items).expect("keyed");
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
pub(super) fn leaves(obj: &Value, scope: Scope) -> FieldSet {
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

/// Whether a list item's key value is the JSON-encoded `v`.
fn same_key(x: &Value, v: &str) -> bool {
    let encoded = x.to_string();
    encoded == v
}

/// The value at `path`, if present.
pub(super) fn get<'a>(obj: &'a Value, path: &Path) -> Option<&'a Value> {
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
pub(super) fn remove(obj: &mut Value, path: &Path) {
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
pub(super) fn merge(live: &mut Value, cfg: &Value, field: Option<&str>) {
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
            let key = keyed(field, c).expect("keyed");
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
#[derive(Debug, Clone)]
pub(super) struct Manager {
    pub(super) manager: String,
    /// `Apply` or `Update`.
    pub(super) operation: String,
    pub(super) subresource: String,
    pub(super) api_version: String,
    pub(super) time: String,
    pub(super) fields: FieldSet,
}

impl Manager {
    /// As `printManager` in the field manager's conflict errors.
    pub(super) fn printed(&self) -> String {
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
        let mut node = &mut root;
        for e in p {
            let k = match e {
                Elem::Field(f) => format!("f:{f}"),
                Elem::Key(k, v) => format!("k:{{{}:{v}}}", json!(k)),
            };
            node = node.as_object_mut().expect("object").entry(k).or_insert_with(|| json!({}));
        }
        if matches!(p.last(), Some(Elem::Key(..))) {
            node.as_object_mut().expect("object").insert(".".into(), json!({}));
        }
    }
    root
}

fn parse_fields_v1(node: &Value, path: &mut Path, out: &mut FieldSet) {
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
            // `v:` (set members) and `i:` (indices): not produced here;
            // the enclosing field is treated as one leaf.
            out.insert(path.clone());
        }
    }
}

/// The entries of `obj.metadata.managedFields`.
pub(super) fn read(obj: &Value) -> Vec<Manager> {
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
pub(super) fn write(obj: &mut Value, managers: &[Manager]) {
    let Some(meta) = obj["metadata"].as_object_mut() else { return };
    if managers.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let entries: Vec<Value> = managers
        .iter()
        .map(|m| {
            let mut e = json!({
                "manager": m.manager,
                "operation": m.operation,
                "apiVersion": m.api_version,
                "time": m.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1(&m.fields),
            });
            if !m.subresource.is_empty() {
                e["subresource"] = json!(m.subresource);
            }
            e
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(entries));
}

fn entry<'a>(managers: &'a mut Vec<Manager>, ty: &ResourceType, manager: &str, op: &str, sub: &str) -> &'a mut Manager {
    let i = match managers.iter().position(|m| m.is(manager, op, sub)) {
        Some(i) => i,
        None => {
            managers.push(Manager {
                manager: manager.into(),
                operation: op.into(),
                subresource: sub.into(),
                api_version: ty.api_version(),
                time: String::new(),
                fields: FieldSet::new(),
            });
            managers.len() - 1
        }
    };
    &mut managers[i]
}

fn subresource_of(scope: Scope) -> &'static str {
    match scope {
        Scope::Status => "status",
        Scope::Main { .. } => "",
    }
}

/// Records a non-apply write of `new` over `old` by `manager`.
pub(super) fn record_update(
    ty: &ResourceType,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    scope: Scope,
    mut managers: Vec<Manager>,
) {
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
    if changed.is_empty() && removed.is_empty() {
        write(new, &managers);
        return;
    }
    for m in managers.iter_mut() {
        m.fields.retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    let sub = subresource_of(scope);
    let e = entry(&mut managers, ty, manager, "Update", sub);
    e.fields.extend(changed);
    e.time = rfc3339_now();
    managers.retain(|m| !m.fields.is_empty());
    write(new, &managers);
}

/// Server-side apply of `config` onto `live` (`None`: the object does not
/// exist yet) by `manager`. Returns the new object with its managed fields.
pub(super) fn apply(
    ty: &ResourceType,
    live: &Value,
    config: &Value,
    manager: &str,
    force: bool,
    scope: Scope,
) -> ApiResult<Value> {
    let sub = subresource_of(scope);
    let mut managers = read(live);
    let applied = leaves(config, scope);
    let mut conflicts: Vec<(usize, Path)> = Vec::new();
    for (i, m) in managers.iter().enumerate() {
        if m.is(manager, "Apply", sub) {
            continue;
        }
        for p in applied.intersection(&m.fields) {
            if matches!(p.last(), Some(Elem::Key(..))) {
                continue; // an item is shared; its leaves conflict
            }
            if get(live, p) != get(config, p) {
                conflicts.push((i, p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let printed: Vec<(String, String)> =
            conflicts.iter().map(|(i, p)| (managers[*i].printed(), path_string(p))).collect();
        return Err(ApiError::apply_conflict(&printed));
    }
    for (i, p) in &conflicts {
        managers[*i].fields.remove(p);
    }
    let previous = managers.iter().find(|m| m.is(manager, "Apply", sub)).map(|m| m.fields.clone()).unwrap_or_default();
    let mut out = live.clone();
    for p in previous.difference(&applied) {
        let owned_elsewhere = managers.iter().any(|m| !m.is(manager, "Apply", sub) && m.fields.contains(p));
        if !owned_elsewhere {
            remove(&mut out, p);
        }
    }
    let mut cfg = config.clone();
    if let Some(meta) = cfg["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    merge(&mut out, &cfg, None);
    let e = entry(&mut managers, ty, manager, "Apply", sub);
    e.fields = applied;
    e.time = rfc3339_now();
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
}
