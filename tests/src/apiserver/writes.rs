//! Writes over HTTP: `POST` (create), `PUT` (replace), `PATCH` (merge, JSON,
//! strategic merge, server-side apply) and `DELETE`, on resources and on
//! their `status` subresource, as the generic registry of the API server
//! handles them:
//!
//! - the server sets `uid`, `creationTimestamp`, `resourceVersion`,
//!   `generation` (for types that keep it; bumped only when something other
//!   than `metadata` and a `status` subresource changed, and when a deletion
//!   with finalizers starts) and `managedFields`;
//! - `metadata.resourceVersion` in a `PUT` or a patch is a precondition
//!   (`409 Conflict` when stale); a `PUT` without it is unconditional for
//!   types that allow it, `422` for custom resources;
//! - a write that changes nothing is not stored: same resourceVersion, no
//!   watch event (as the registry skips no-op updates);
//! - writes to the main resource keep the stored `status`, writes to
//!   `/status` keep everything but `status` (`ResetObjectMetaForStatus`);
//! - `dryRun=All` validates and answers as the real write would (a create
//!   has no resourceVersion) and stores nothing, sends no event;
//! - `DELETE` of an object with finalizers sets `deletionTimestamp` and
//!   answers `200` with the object; removing its last finalizer then deletes
//!   it. Otherwise the object goes, and the answer is the object or a
//!   `Success` Status ([`ResourceType::returns_deleted_object`]).
//!   `propagationPolicy` is validated and accepted; there is no garbage
//!   collector, so `Foreground` and `Orphan` behave as `Background` (no
//!   `foregroundDeletion`/`orphan` finalizer is added).
//! - Namespaced creates need the namespace to exist (the `NamespaceLifecycle`
//!   admission plugin: `404 namespaces "x" not found`), except `default`,
//!   `kube-system`, `kube-public` and `kube-node-lease`, which exist in every
//!   cluster and are implicit here.

use super::body::{check_name, check_namespace, decode, decode_body};
use super::managed::Scope;
use super::patch::{APPLY, JSON_PATCH, MERGE, STRATEGIC};
use super::*;

/// A write as it arrived.
pub(super) struct WriteRequest<'a> {
    pub(super) route: &'a Route,
    pub(super) query: &'a [(String, String)],
    /// Without parameters (`; charset=...`).
    pub(super) content_type: &'a str,
    pub(super) user_agent: &'a str,
    pub(super) body: &'a [u8],
}

impl WriteRequest<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    fn params(&self, name: &str) -> Vec<String> {
        self.query.iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect()
    }
    /// `fieldManager`, else the User-Agent up to its first `/`, as the API
    /// server defaults it.
    fn manager(&self, options_kind: &str) -> ApiResult<String> {
        let m = match self.param("fieldManager").filter(|m| !m.is_empty()) {
            Some(m) => m.to_string(),
            None => self.user_agent.split('/').next().unwrap_or("").to_string(),
        };
        validation::field_manager(&m, options_kind)?;
        Ok(m)
    }
    fn scope(&self, ty: &ResourceType) -> Scope {
        match self.route.subresource.as_deref() {
            Some("status") => Scope::Status,
            _ => Scope::Main { status_is_subresource: ty.status_subresource },
        }
    }
}

pub(super) fn serve_write(shared: &Shared, method: &Method, req: &WriteRequest<'_>) -> Response<Body> {
    let result = {
        let mut st = shared.state.lock();
        match *method {
            Method::POST => create(&mut st, req),
            Method::PUT => update(&mut st, req),
            Method::PATCH => patch(&mut st, req),
            Method::DELETE => delete(&mut st, req),
            _ => Err(not_allowed()),
        }
    };
    match result {
        Ok((code, body)) => json_response(StatusCode::from_u16(code).expect("code"), body.to_string()),
        Err(e) => e.response(),
    }
}

fn not_allowed() -> ApiError {
    ApiError::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource".into())
}

/// The part of an object whose changes bump `metadata.generation`.
fn spec_part(ty: &ResourceType, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if ty.status_subresource {
            m.remove("status");
        }
    }
    v
}

/// An object as compared for "did anything change": no resourceVersion, no
/// managed-fields timestamps.
fn comparable(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
        if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
            for e in entries {
                if let Some(e) = e.as_object_mut() {
                    e.remove("time");
                }
            }
        }
    }
    v
}

const IMPLICIT_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

impl State {
    pub(super) fn namespace_exists(&self, ns: &str) -> bool {
        IMPLICIT_NAMESPACES.contains(&ns)
            || self
                .types
                .iter()
                .position(|t| t.group.is_empty() && t.kind == "Namespace")
                .is_some_and(|ty| self.objects.contains_key(&Key { ty, namespace: String::new(), name: ns.into() }))
    }

    /// A name for `generateName`: the prefix and five characters from the
    /// API server's alphabet (`utilrand.String`), unused in `key`'s scope.
    fn generate_name(&mut self, prefix: &str, mut key: Key) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        loop {
            self.next_uid += 1;
            let mut x = self.next_uid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x0005_DEEC_E66D;
            let suffix: String = (0..5)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ALPHABET[(x % ALPHABET.len() as u64) as usize] as char
                })
                .collect();
            key.name = format!("{prefix}{suffix}");
            if !self.objects.contains_key(&key) {
                return key.name;
            }
        }
    }

    pub(super) fn new_uid(&mut self) -> String {
        self.next_uid += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.next_uid)
    }

    /// The etcd key upstream names in storage errors.
    fn storage_key(&self, key: &Key) -> String {
        let ty = &self.types[key.ty];
        let prefix = if ty.group.is_empty() || ty.group == "apps" {
            ty.plural.clone()
        } else {
            format!("{}/{}", ty.group, ty.plural)
        };
        if ty.namespaced {
            format!("/registry/{prefix}/{}/{}", key.namespace, key.name)
        } else {
            format!("/registry/{prefix}/{}", key.name)
        }
    }
}

/// Stamps what the server sets on create and validates; returns the key.
fn prepare_create(st: &mut State, ty_index: usize, obj: &mut Value) -> ApiResult<Key> {
    let ty = st.types[ty_index].clone();
    let meta = obj["metadata"].as_object_mut().expect("metadata");
    let namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let generate = meta.get("generateName").and_then(Value::as_str).unwrap_or("").to_string();
    let name = if name.is_empty() && !generate.is_empty() {
        let n = st.generate_name(&generate, Key { ty: ty_index, namespace: namespace.clone(), name: String::new() });
        obj["metadata"]["name"] = json!(n);
        n
    } else {
        name
    };
    let uid = st.new_uid();
    let meta = obj["metadata"].as_object_mut().expect("metadata");
    meta.insert("uid".into(), json!(uid));
    meta.insert("creationTimestamp".into(), json!(rfc3339_now()));
    for gone in ["deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "resourceVersion"] {
        meta.remove(gone);
    }
    if ty.generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if ty.status_subresource {
        // PrepareForCreate resets status; a Namespace starts Active.
        if ty.kind == "Namespace" && ty.group.is_empty() {
            obj["status"] = json!({"phase": "Active"});
        } else if let Some(m) = obj.as_object_mut() {
            m.remove("status");
        }
    }
    let causes = validation::validate_object(&ty, obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&ty.group, &ty.kind, &name, causes));
    }
    if ty.namespaced && !st.namespace_exists(&namespace) {
        return Err(ApiError::namespace_not_found(&namespace));
    }
    let key = Key { ty: ty_index, namespace, name: name.clone() };
    if st.objects.contains_key(&key) {
        return Err(ApiError::already_exists(&ty, &name));
    }
    Ok(key)
}

/// Stores a created object (unless a dry run) and answers `201`.
fn finish_create(st: &mut State, key: Key, mut obj: Value, dry_run: bool) -> ApiResult<(u16, Value)> {
    if dry_run {
        return Ok((201, obj));
    }
    st.rv += 1;
    obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
    Ok((201, st.commit(Change::Added, key, obj, None)))
}

fn create(st: &mut State, req: &WriteRequest<'_>) -> ApiResult<(u16, Value)> {
    let ty = st.types[req.route.ty].clone();
    if req.route.name.is_some() || (ty.namespaced && req.route.namespace.is_none()) {
        return Err(not_allowed());
    }
    let dry_run = validation::dry_run(&req.params("dryRun"), "CreateOptions")?;
    let manager = req.manager("CreateOptions")?;
    let mut obj = decode_body(&ty, req)?;
    check_namespace(&ty, &mut obj, req.route.namespace.as_deref())?;
    if obj["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()) {
        return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
    }
    if let Some(meta) = obj["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    let key = prepare_create(st, req.route.ty, &mut obj)?;
    managed::record_update(&ty, None, &mut obj, &manager, req.scope(&ty), Vec::new());
    finish_create(st, key, obj, dry_run)
}

/// How an update's managed fields are computed.
enum Fields<'a> {
    /// A non-apply write by this manager.
    Update(&'a str),
    /// Already computed (server-side apply).
    Computed,
}

/// The common tail of `PUT` and `PATCH`: preconditions, subresource rules,
/// generation, managed fields, no-op detection, finalization, storing.
#[allow(clippy::too_many_arguments)]
fn finish_update(
    st: &mut State,
    key: Key,
    old: Arc<Value>,
    mut new: Value,
    scope: Scope,
    fields: Fields<'_>,
    dry_run: bool,
    need_rv: bool,
) -> ApiResult<(u16, Value)> {
    let ty = st.types[key.ty].clone();
    let old_rv = old["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    match new["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty()) {
        Some(rv) if rv != old_rv => return Err(ApiError::stale(&ty, &key.name)),
        Some(_) => {}
        None if need_rv && !ty.unconditional_update => {
            return Err(ApiError::invalid(
                &ty.group,
                &ty.kind,
                &key.name,
                vec![Cause::invalid("metadata.resourceVersion", "0x0", "must be specified for an update")],
            ));
        }
        None => {}
    }
    if let Some(uid) = new["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
        && Some(uid) != old["metadata"]["uid"].as_str()
    {
        return Err(ApiError::invalid(
            &ty.group,
            &ty.kind,
            &key.name,
            vec![Cause::invalid("metadata.uid", &format!("{uid:?}"), "field is immutable")],
        ));
    }
    if scope == Scope::Status {
        // Only status is taken from the request; metadata keeps what
        // ResetObjectMetaForStatus keeps.
        let mut n = (*old).clone();
        match new.get("status") {
            Some(s) => n["status"] = s.clone(),
            None => {
                n.as_object_mut().expect("object").remove("status");
            }
        }
        if let Some(mf) = new["metadata"].get("managedFields") {
            n["metadata"]["managedFields"] = mf.clone();
        }
        new = n;
    } else {
        if ty.status_subresource {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().expect("object").remove("status");
                }
            }
        }
        let meta = new["metadata"].as_object_mut().expect("metadata");
        for field in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
            match old["metadata"].get(field) {
                Some(v) => meta.insert(field.into(), v.clone()),
                None => meta.remove(field),
            };
        }
        meta.insert("name".into(), json!(key.name));
        if ty.namespaced {
            meta.insert("namespace".into(), json!(key.namespace));
        }
        meta.remove("selfLink");
    }
    if let Fields::Update(manager) = fields {
        // A request that brings its own managedFields sets them (as upstream
        // lets it); otherwise the stored ones are carried on.
        let managers = match new["metadata"].get("managedFields") {
            Some(mf) if *mf != old["metadata"]["managedFields"] => managed::read(&new),
            _ => managed::read(&old),
        };
        managed::record_update(&ty, Some(&old), &mut new, manager, scope, managers);
    }
    if ty.generation && spec_part(&ty, &old) != spec_part(&ty, &new) {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
        new["metadata"]["generation"] = json!(g + 1);
    }
    new["metadata"]["resourceVersion"] = json!(old_rv);
    if comparable(&new) == comparable(&old) {
        return Ok((200, (*old).clone()));
    }
    let finalized = new["metadata"]["deletionTimestamp"].is_string()
        && new["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty());
    if dry_run {
        return Ok((200, new));
    }
    st.rv += 1;
    new["metadata"]["resourceVersion"] = json!(st.rv.to_string());
    let change = if finalized { Change::Deleted } else { Change::Modified };
    Ok((200, st.commit(change, key, new, Some(old))))
}

fn key_of(st: &State, req: &WriteRequest<'_>) -> ApiResult<Key> {
    let Some(name) = req.route.name.clone() else { return Err(not_allowed()) };
    let _ = st;
    Ok(Key { ty: req.route.ty, namespace: req.route.namespace.clone().unwrap_or_default(), name })
}

fn update(st: &mut State, req: &WriteRequest<'_>) -> ApiResult<(u16, Value)> {
    let ty = st.types[req.route.ty].clone();
    let key = key_of(st, req)?;
    let dry_run = validation::dry_run(&req.params("dryRun"), "UpdateOptions")?;
    let manager = req.manager("UpdateOptions")?;
    let mut obj = decode_body(&ty, req)?;
    check_namespace(&ty, &mut obj, req.route.namespace.as_deref())?;
    check_name(&obj, &key.name)?;
    let Some(old) = st.objects.get(&key).cloned() else { return Err(ApiError::not_found(&ty, &key.name)) };
    finish_update(st, key, old, obj, req.scope(&ty), Fields::Update(&manager), dry_run, true)
}

fn patch(st: &mut State, req: &WriteRequest<'_>) -> ApiResult<(u16, Value)> {
    let ty = st.types[req.route.ty].clone();
    let key = key_of(st, req)?;
    let mut accepted = vec![JSON_PATCH, MERGE];
    if ty.strategic_merge {
        accepted.push(STRATEGIC);
    }
    accepted.push(APPLY);
    if !accepted.contains(&req.content_type) {
        return Err(ApiError::unsupported_patch(&accepted));
    }
    let apply = req.content_type == APPLY;
    let dry_run = validation::dry_run(&req.params("dryRun"), "PatchOptions")?;
    let force = match req.param("force") {
        None => false,
        Some(_) if !apply => {
            return Err(ApiError::invalid_options(
                "PatchOptions",
                vec![Cause::forbidden("force", "may not be specified for non-apply patch")],
            ));
        }
        Some(f) => parse_bool(f).ok_or_else(|| ApiError::bad_request(format!("force: invalid boolean value {f:?}")))?,
    };
    if apply && req.param("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError::invalid_options(
            "PatchOptions",
            vec![Cause::required("fieldManager", "is required for apply patch")],
        ));
    }
    let manager = req.manager("PatchOptions")?;
    let scope = req.scope(&ty);
    let old = st.objects.get(&key).cloned();
    if apply {
        let mut config = decode(&ty, req.body, true)?;
        check_namespace(&ty, &mut config, req.route.namespace.as_deref())?;
        check_name(&config, &key.name)?;
        if !config["metadata"]["managedFields"].is_null() {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        return match old {
            Some(old) => {
                let new = managed::apply(&ty, &old, &config, &manager, force, scope)?;
                finish_update(st, key, old, new, scope, Fields::Computed, dry_run, false)
            }
            None if scope == Scope::Status => Err(ApiError::not_found(&ty, &key.name)),
            None => {
                let mut skeleton = json!({"apiVersion": ty.api_version(), "kind": ty.kind,
                    "metadata": {"name": key.name}});
                if ty.namespaced {
                    skeleton["metadata"]["namespace"] = json!(key.namespace);
                }
                if config["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()) {
                    return Err(ApiError::not_found(&ty, &key.name));
                }
                let mut obj = managed::apply(&ty, &skeleton, &config, &manager, force, scope)?;
                let mf = obj["metadata"]["managedFields"].clone();
                let key = prepare_create(st, req.route.ty, &mut obj)?;
                if !mf.is_null() {
                    obj["metadata"]["managedFields"] = mf;
                }
                finish_create(st, key, obj, dry_run)
            }
        };
    }
    let Some(old) = old else { return Err(ApiError::not_found(&ty, &key.name)) };
    let mut doc = (*old).clone();
    match req.content_type {
        JSON_PATCH => patch::json_patch(&mut doc, req.body)?,
        ct => {
            let p: Value = serde_json::from_slice(req.body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            if ct == MERGE {
                json_patch::merge(&mut doc, &p);
            } else {
                patch::strategic_merge_patch(&mut doc, &p).map_err(ApiError::bad_request)?;
            }
        }
    }
    if !doc.is_object() || !doc["metadata"].is_object() {
        return Err(ApiError::bad_request("the patched object is not an object with metadata"));
    }
    finish_update(st, key, old, doc, scope, Fields::Update(&manager), dry_run, false)
}

fn delete(st: &mut State, req: &WriteRequest<'_>) -> ApiResult<(u16, Value)> {
    let ty = st.types[req.route.ty].clone();
    let key = key_of(st, req)?;
    if req.route.subresource.is_some() {
        return Err(not_allowed());
    }
    // As the apiserver's DeleteResource handler: the options are the body
    // when there is one, else the query; never both.
    let from_body = !req.body.iter().all(u8::is_ascii_whitespace);
    let options: Value = if from_body {
        serde_json::from_slice(req.body).map_err(|e| ApiError::bad_request(e.to_string()))?
    } else {
        json!({
            "dryRun": req.params("dryRun"),
            "propagationPolicy": req.param("propagationPolicy"),
        })
    };
    let dry: Vec<String> = options["dryRun"]
        .as_array()
        .map(|d| d.iter().map(|v| v.as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default();
    let dry_run = validation::dry_run(&dry, "DeleteOptions")?;
    let policy = options["propagationPolicy"].as_str().map(str::to_string);
    if let Some(p) = policy
        && !["Foreground", "Background", "Orphan"].contains(&p.as_str())
    {
        return Err(ApiError::invalid_options(
            "DeleteOptions",
            vec![Cause::not_supported(
                "propagationPolicy",
                &format!("{p:?}"),
                &["Foreground", "Background", "Orphan", "nil"],
            )],
        ));
    }
    let Some(old) = st.objects.get(&key).cloned() else { return Err(ApiError::not_found(&ty, &key.name)) };
    let pre = &options["preconditions"];
    let precondition_failed = |what: &str, wanted: &str, actual: &str| {
        ApiError::conflict(
            &ty,
            &key.name,
            &format!(
                "StorageError: invalid object, Code: 4, Key: {}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}",
                st.storage_key(&key)
            ),
        )
    };
    if let Some(uid) = pre["uid"].as_str() {
        let actual = old["metadata"]["uid"].as_str().unwrap_or("");
        if uid != actual {
            return Err(precondition_failed("UID", uid, actual));
        }
    }
    if let Some(rv) = pre["resourceVersion"].as_str() {
        let actual = old["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if rv != actual {
            return Err(precondition_failed("ResourceVersion", rv, actual));
        }
    }
    let has_finalizers = old["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    if has_finalizers {
        if old["metadata"]["deletionTimestamp"].is_string() {
            return Ok((200, (*old).clone()));
        }
        let mut new = (*old).clone();
        new["metadata"]["deletionTimestamp"] = json!(rfc3339_now());
        new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if ty.generation {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
            new["metadata"]["generation"] = json!(g + 1);
        }
        if dry_run {
            return Ok((200, new));
        }
        st.rv += 1;
        new["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        return Ok((200, st.commit(Change::Modified, key, new, Some(old))));
    }
    if !dry_run {
        st.rv += 1;
        let mut gone = (*old).clone();
        gone["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        st.commit(Change::Deleted, key.clone(), gone, Some(old.clone()));
    }
    if ty.returns_deleted_object {
        return Ok((200, (*old).clone()));
    }
    let mut details = serde_json::Map::new();
    details.insert("name".into(), json!(key.name));
    if !ty.group.is_empty() {
        details.insert("group".into(), json!(ty.group));
    }
    details.insert("kind".into(), json!(ty.plural));
    details.insert("uid".into(), old["metadata"]["uid"].clone());
    Ok((200, json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})))
}
