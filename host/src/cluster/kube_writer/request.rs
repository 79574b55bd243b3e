//! The HTTP requests of writes, before they are sent: method, path,
//! query, content type and body, and the bodies built here (`DeleteOptions`).

use http::Method;
use serde_json::{Value, json};

use super::paths::percent_encode;
use crate::cluster::{DeleteOptions, WriteError, WriteParams};

pub(super) const JSON: &str = "application/json";
pub(super) const MERGE_PATCH: &str = "application/merge-patch+json";
pub(super) const JSON_PATCH: &str = "application/json-patch+json";
pub(super) const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// One HTTP request, before it is built.
pub(super) struct Call {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) query: Vec<(&'static str, String)>,
    pub(super) content_type: Option<&'static str>,
    pub(super) body: Vec<u8>,
}

impl Call {
    /// A write with a body and the write's query (`dryRun`, `fieldManager`).
    pub(super) fn write(
        method: Method,
        path: String,
        content_type: &'static str,
        body: Vec<u8>,
        params: &WriteParams,
    ) -> Call {
        let mut query = Vec::new();
        if params.dry_run {
            query.push(("dryRun", "All".to_string()));
        }
        query.push(("fieldManager", params.field_manager.clone()));
        Call { method, path, query, content_type: Some(content_type), body }
    }

    pub(super) fn uri(&self) -> String {
        let mut uri = self.path.clone();
        for (i, (k, v)) in self.query.iter().enumerate() {
            uri.push(if i == 0 { '?' } else { '&' });
            uri.push_str(k);
            uri.push('=');
            uri.push_str(&percent_encode(v));
        }
        uri
    }
}

pub(super) fn encode(value: &impl serde::Serialize) -> Result<Vec<u8>, WriteError> {
    serde_json::to_vec(value).map_err(|e| WriteError::BadRequest(format!("the body cannot be encoded: {e}")))
}

/// `DeleteOptions` as kubectl and client-go send them.
pub(super) fn delete_options(options: &DeleteOptions, dry_run: bool) -> Value {
    let mut body = json!({"kind": "DeleteOptions", "apiVersion": "v1"});
    let mut preconditions = serde_json::Map::new();
    if let Some(uid) = &options.uid {
        preconditions.insert("uid".into(), json!(uid));
    }
    if let Some(rv) = &options.resource_version {
        preconditions.insert("resourceVersion".into(), json!(rv));
    }
    if !preconditions.is_empty() {
        body["preconditions"] = Value::Object(preconditions);
    }
    if let Some(p) = options.propagation {
        body["propagationPolicy"] = json!(p.as_str());
    }
    if dry_run {
        body["dryRun"] = json!(["All"]);
    }
    body
}
