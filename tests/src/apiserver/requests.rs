//! The request log: what the server received, in order, for tests to assert on
//! ("no request was sent", "`dryRun=All` was sent", "as user `bob`").

use std::sync::{Arc, OnceLock};

/// What a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    List,
    Watch,
    /// `GET` of one object (or of its `status` subresource).
    Get,
    /// `POST` to a collection.
    Create,
    /// `PUT` of one object (or of its `status`).
    Update,
    /// `PATCH` of one object (or of its `status`).
    Patch,
    /// `DELETE` of one object.
    Delete,
    /// `GET /api`, `/apis`, `/api/v1`, `/apis/{group}[/{version}]`, `/version`.
    Discovery,
    /// Anything else (unknown paths, other methods).
    Other,
}

/// One request the server received, in arrival order.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// Path and query exactly as sent.
    pub uri: String,
    pub path: String,
    /// Decoded query parameters, in order.
    pub query: Vec<(String, String)>,
    pub kind: RequestKind,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The `Impersonate-User` header, if any.
    pub impersonate_user: Option<String>,
    /// Every `Impersonate-Group` header, in order.
    pub impersonate_groups: Vec<String>,
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
    /// The request body (lossy UTF-8; empty for reads).
    pub body: String,
    /// When the server received it (tokio's clock).
    pub at: tokio::time::Instant,
    /// The status code it was answered with, once answered.
    pub(super) answered: Arc<OnceLock<u16>>,
}

impl RecordedRequest {
    /// The status code the server answered with (a watch: the `200` its
    /// stream began with); `None` while it is being handled or held.
    pub fn status(&self) -> Option<u16> {
        self.answered.get().copied()
    }
    /// The decoded value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    pub fn is_watch(&self) -> bool {
        self.kind == RequestKind::Watch
    }
    pub fn is_list(&self) -> bool {
        self.kind == RequestKind::List
    }
    /// A create, update, patch or delete.
    pub fn is_write(&self) -> bool {
        matches!(self.kind, RequestKind::Create | RequestKind::Update | RequestKind::Patch | RequestKind::Delete)
    }
    /// Whether the request asked for a dry run: `dryRun=All` in the query,
    /// or, for a `DELETE` with a body (then its options are the body's and
    /// the query's are ignored, as the API server does), `"dryRun":["All"]`.
    pub fn is_dry_run(&self) -> bool {
        if self.kind == RequestKind::Delete && !self.body.trim().is_empty() {
            return serde_json::from_str::<serde_json::Value>(&self.body)
                .ok()
                .and_then(|b| b.get("dryRun").and_then(|d| d.as_array()).cloned())
                .is_some_and(|d| d.iter().any(|v| v == "All"));
        }
        self.query.iter().any(|(k, v)| k == "dryRun" && v == "All")
    }
    /// The body parsed as JSON, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_str(&self.body).ok()
    }
}
