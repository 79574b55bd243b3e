//! The API server backend of [`ClusterWriter`]: writes as HTTP requests
//! through a [`kube::Client`].
//!
//! This module owns the mapping of a [`WriteRequest`] onto the Kubernetes
//! REST protocol and of every answer back onto a [`WriteError`]:
//!
//! - **Which resource.** `apiVersion` + `kind` are resolved to the plural
//!   and the scope through the server's discovery document of that group
//!   version (`kube::discovery::pinned_kind`), cached per (group, version,
//!   kind). A kind the server does not serve is a
//!   [`WriteError::BadRequest`] naming what was asked (client-go's
//!   `NoKindMatchError` wording), never a `NotFound`: a controller reads
//!   `NotFound` on a delete as "already gone".
//! - **The requests.** Create is a `POST` to the collection, replace a
//!   `PUT` (the object's own `metadata.resourceVersion` is the
//!   precondition), patch a `PATCH` with the content type of its kind
//!   (`merge-patch+json`, `json-patch+json`, `apply-patch+yaml` with
//!   `force`), delete a `DELETE` with a `DeleteOptions` body (preconditions,
//!   `propagationPolicy`), status writes go to `{name}/status`, and an Event
//!   is a `POST` of a core/v1 Event built as client-go's `record` package
//!   builds it. Every write carries `fieldManager` (but `DELETE`, whose
//!   options have none), `dryRun=All` when asked (in the body for `DELETE`,
//!   as `DeleteOptions` carries it), and `Impersonate-User` when asked.
//! - **The answers.** `Status` bodies are read here rather than by kube's
//!   `request` helpers so that nothing is lost: `details.causes` of a 422,
//!   the `Retry-After` header of a 429 (the API server's flow control sends
//!   it with a plain-text body), the HTTP code of a body that is not JSON.
//! - **Time.** Each write, discovery included, must finish within the
//!   writer's timeout ([`WriteError::Timeout`] otherwise).
//!
//! It does not decide whether a write is allowed (the controller's write
//! guard does, before calling [`ClusterWriter::write`]); it does refuse a
//! target whose namespace does not fit the resource's scope, so a guard
//! that judged the namespace is never bypassed by a cluster-scoped kind.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use http::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Method, StatusCode};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::{Cause, ClusterWriter, DeleteOptions, EventType, Patch, Target, WriteError, WriteParams, WriteRequest};

/// The longest an error message taken from a response body may be.
const MAX_MESSAGE_BYTES: usize = 4096;

/// What discovery says about one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedKind {
    /// Group, version, kind and plural as the server serves them.
    pub resource: ApiResource,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
    /// The subresources served (`status`, `scale`, ...).
    pub subresources: Vec<String>,
}

impl ResolvedKind {
    /// `/api/v1` or `/apis/{group}/{version}`.
    fn root(&self) -> String {
        let r = &self.resource;
        if r.group.is_empty() { format!("/api/{}", r.version) } else { format!("/apis/{}/{}", r.group, r.version) }
    }

    /// The collection path of `target`, after checking that its namespace
    /// fits the kind's scope.
    fn collection(&self, target: &Target) -> Result<String, WriteError> {
        let namespace = target.namespace.as_deref().filter(|ns| !ns.is_empty());
        match (self.namespaced, namespace) {
            (true, Some(ns)) => {
                Ok(format!("{}/namespaces/{}/{}", self.root(), path_segment(ns)?, self.resource.plural))
            }
            (false, None) => Ok(format!("{}/{}", self.root(), self.resource.plural)),
            (true, None) => Err(WriteError::BadRequest(format!(
                "{target}: {} is namespaced and no namespace was given",
                self.resource.kind
            ))),
            (false, Some(ns)) => Err(WriteError::BadRequest(format!(
                "{target}: {} is cluster-scoped, but namespace {ns:?} was given",
                self.resource.kind
            ))),
        }
    }

    /// The path of `target` itself, or of its `subresource`.
    fn item(&self, target: &Target, subresource: Option<&str>) -> Result<String, WriteError> {
        let mut path = format!("{}/{}", self.collection(target)?, path_segment(&target.name)?);
        if let Some(sub) = subresource {
            path.push('/');
            path.push_str(sub);
        }
        Ok(path)
    }
}

/// A [`ClusterWriter`] that sends each write to the API server behind a
/// [`kube::Client`].
///
/// Impersonation is a per-request `Impersonate-User` header on the one
/// shared client (what client-go's impersonating round tripper adds), so
/// tenants share connections; the client's own identity must be allowed to
/// `impersonate` users, and its configuration must not impersonate anyone
/// itself (the header would then be sent twice, which the server refuses).
///
/// ```no_run
/// # async fn demo(config: kube::Config) -> Result<(), kube::Error> {
/// use std::time::Duration;
/// use informer_host::cluster::kube_writer::KubeWriter;
/// let writer = KubeWriter::from_config(config)?.with_timeout(Duration::from_secs(5));
/// # Ok(()) }
/// ```
pub struct KubeWriter {
    client: kube::Client,
    timeout: Duration,
    /// `reportingInstance` and `source.host` of recorded Events.
    instance: String,
    kinds: Mutex<HashMap<(String, String, String), Arc<ResolvedKind>>>,
    /// The last Event name's nanosecond stamp: names stay unique within the
    /// process even when two Events share a clock reading.
    last_event_nanos: AtomicI64,
}

impl KubeWriter {
    /// The per-request timeout unless [`KubeWriter::with_timeout`] says
    /// otherwise.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// Writes through `client` as it is configured. kube's default client
    /// retries `429`, `503` and `504` answers itself (honouring
    /// `Retry-After`) within this writer's timeout; build the client with
    /// `default_retry = false`, or use [`KubeWriter::from_config`], to hand
    /// every `429` to the controller as [`WriteError::RateLimited`] instead.
    pub fn new(client: kube::Client) -> KubeWriter {
        KubeWriter {
            client,
            timeout: Self::DEFAULT_TIMEOUT,
            instance: std::env::var("HOSTNAME").unwrap_or_default(),
            kinds: Mutex::new(HashMap::new()),
            last_event_nanos: AtomicI64::new(0),
        }
    }

    /// A client of `config` without kube's transparent retries: a
    /// controller's workqueue owns retrying, with the backoff it reports,
    /// so a `429` comes back at once with the server's `Retry-After`.
    pub fn from_config(mut config: kube::Config) -> Result<KubeWriter, kube::Error> {
        config.default_retry = false;
        Ok(KubeWriter::new(kube::Client::try_from(config)?))
    }

    /// Bounds each write (discovery, request and answer together).
    pub fn with_timeout(mut self, timeout: Duration) -> KubeWriter {
        self.timeout = timeout;
        self
    }

    /// Names this host in recorded Events (`reportingInstance`,
    /// `source.host`; default: `$HOSTNAME`, the pod name in a cluster).
    pub fn with_reporting_instance(mut self, instance: impl Into<String>) -> KubeWriter {
        self.instance = instance.into();
        self
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What the server serves for `api_version` + `kind`, from the cache or
    /// from the group version's discovery document (not bounded by the
    /// writer's timeout: wrap it when calling it directly).
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<Arc<ResolvedKind>, WriteError> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let unknown =
            |why: &str| WriteError::BadRequest(format!("no matches for kind {kind:?} in version {api_version:?}{why}"));
        if version.is_empty()
            || kind.is_empty()
            || version.contains('/')
            || group.is_empty() && api_version.contains('/')
        {
            return Err(unknown(""));
        }
        let key = (group.to_string(), version.to_string(), kind.to_string());
        if let Some(hit) = self.kinds.lock().get(&key) {
            return Ok(hit.clone());
        }
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok(found) => found,
            Err(kube::Error::Discovery(_)) => return Err(unknown("")),
            // The group version itself is not served.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(unknown(&format!(": the server does not serve {api_version:?}")));
            }
            Err(e) => return Err(map_client_error(e)),
        };
        let resolved = Arc::new(ResolvedKind {
            namespaced: caps.scope == Scope::Namespaced,
            subresources: caps.subresources.iter().map(|(r, _)| r.plural.clone()).collect(),
            resource,
        });
        self.kinds.lock().insert(key, resolved.clone());
        Ok(resolved)
    }

    /// Drops what discovery said about `api_version` + `kind` (it is asked
    /// again on the next write): after a 404 for the resource path itself,
    /// e.g. a CustomResourceDefinition deleted or changed.
    fn forget(&self, api_version: &str, kind: &str) {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.kinds.lock().remove(&(group.to_string(), version.to_string(), kind.to_string()));
    }

    async fn execute(&self, request: WriteRequest, params: &WriteParams) -> Result<Option<Value>, WriteError> {
        let subresource = request.subresource();
        match request {
            WriteRequest::Create(object) => {
                let target = Target::of_new(&object)?;
                let kind = self.resolve(&target.api_version, &target.kind).await?;
                let call = Call::write(Method::POST, kind.collection(&target)?, JSON, encode(&object)?, params);
                self.send(call, params, &target).await.map(Some)
            }
            WriteRequest::Replace(object) | WriteRequest::ReplaceStatus(object) => {
                let target = Target::of(&object)?;
                let kind = self.resolve(&target.api_version, &target.kind).await?;
                let call = Call::write(Method::PUT, kind.item(&target, subresource)?, JSON, encode(&object)?, params);
                self.send(call, params, &target).await.map(Some)
            }
            WriteRequest::Patch { target, patch } | WriteRequest::PatchStatus { target, patch } => {
                let kind = self.resolve(&target.api_version, &target.kind).await?;
                let path = kind.item(&target, subresource)?;
                let (content_type, body, force) = match patch {
                    Patch::Merge(p) => (MERGE_PATCH, encode(&p)?, false),
                    Patch::Json(p) => (JSON_PATCH, encode(&p)?, false),
                    // JSON is YAML: the apply body is sent as the JSON it is.
                    Patch::Apply { config, force } => (APPLY_PATCH, encode(&config)?, force),
                };
                let mut call = Call::write(Method::PATCH, path, content_type, body, params);
                if force {
                    call.query.push(("force", "true".into()));
                }
                self.send(call, params, &target).await.map(Some)
            }
            WriteRequest::Delete { target, options } => {
                let kind = self.resolve(&target.api_version, &target.kind).await?;
                let path = kind.item(&target, None)?;
                // DeleteOptions travel in the body (as client-go sends them),
                // dryRun with them: the server's DeleteResource reads the
                // query only when the body is empty, so a `?dryRun=All` next
                // to a body would be ignored. They have no fieldManager.
                let body = encode(&delete_options(&options, params.dry_run))?;
                let call = Call { method: Method::DELETE, path, query: Vec::new(), content_type: Some(JSON), body };
                let answer = self.send(call, params, &target).await?;
                Ok(still_there(answer))
            }
            WriteRequest::RecordEvent { involved, event_type, reason, message } => {
                self.record_event(involved, event_type, reason, message, params).await.map(Some)
            }
        }
    }

    /// Posts a core/v1 Event as client-go's `record` package makes one
    /// (`makeEvent` and `generateEvent` in `tools/record/event.go`): named
    /// `<involved name>.<UnixNano in hex>`, in the involved object's
    /// namespace (`default` for a cluster-scoped one), `count` 1,
    /// `firstTimestamp` = `lastTimestamp`, `source.component` and
    /// `reportingComponent` = the field manager, `source.host` and
    /// `reportingInstance` = this host. No `eventTime`: on core/v1 that
    /// marks a "new" Event, which validation then requires an `action`
    /// for. `involvedObject` carries the object's uid and resourceVersion
    /// (`ref.GetReference` does; `kubectl describe` selects Events by uid)
    /// when a GET of it succeeds; without them otherwise.
    async fn record_event(
        &self,
        involved: Target,
        event_type: EventType,
        reason: String,
        message: String,
        params: &WriteParams,
    ) -> Result<Value, WriteError> {
        let current = self.get(&involved, params).await.ok();
        let meta = |field: &str| {
            current.as_ref().and_then(|o| o["metadata"][field].as_str()).filter(|s| !s.is_empty()).map(str::to_string)
        };
        let (uid, resource_version) = (meta("uid"), meta("resourceVersion"));
        let nanos = self.event_nanos();
        let time = Time(Timestamp::from_nanosecond(i128::from(nanos)).unwrap_or_else(|_| Timestamp::now()));
        let namespace = involved.namespace.clone().filter(|ns| !ns.is_empty());
        let event_namespace = namespace.clone().unwrap_or_else(|| "default".into());
        let instance = Some(self.instance.clone()).filter(|i| !i.is_empty());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{nanos:x}", involved.name)),
                namespace: Some(event_namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(involved.api_version.clone()),
                kind: Some(involved.kind.clone()),
                namespace,
                name: Some(involved.name.clone()),
                uid,
                resource_version,
                field_path: None,
            },
            reason: Some(reason),
            message: Some(message),
            type_: Some(event_type.as_str().into()),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time),
            count: Some(1),
            source: Some(EventSource { component: Some(params.field_manager.clone()), host: instance.clone() }),
            reporting_component: Some(params.field_manager.clone()),
            reporting_instance: instance,
            ..Event::default()
        };
        let target = Target {
            api_version: "v1".into(),
            kind: "Event".into(),
            namespace: Some(event_namespace.clone()),
            name: event.metadata.name.clone().unwrap_or_default(),
        };
        // core/v1 Events are always served: no discovery.
        let path = format!("/api/v1/namespaces/{}/events", path_segment(&event_namespace)?);
        let call = Call::write(Method::POST, path, JSON, encode(&event)?, params);
        self.send(call, params, &target).await
    }

    /// A GET of `target`, as the write's user.
    async fn get(&self, target: &Target, params: &WriteParams) -> Result<Value, WriteError> {
        let kind = self.resolve(&target.api_version, &target.kind).await?;
        let call = Call {
            method: Method::GET,
            path: kind.item(target, None)?,
            query: Vec::new(),
            content_type: None,
            body: Vec::new(),
        };
        self.send(call, params, target).await
    }

    /// A strictly increasing clock reading in nanoseconds, for Event names.
    fn event_nanos(&self) -> i64 {
        let now = i64::try_from(Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX - 1);
        let previous = self
            .last_event_nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| Some(now.max(last.saturating_add(1))))
            .unwrap_or(now);
        now.max(previous.saturating_add(1))
    }

    /// Sends one request and reads its answer: the JSON body of a 2xx, the
    /// typed error of anything else.
    async fn send(&self, call: Call, params: &WriteParams, target: &Target) -> Result<Value, WriteError> {
        let uri = call.uri();
        let mut builder = http::Request::builder().method(call.method.clone()).uri(&uri).header(ACCEPT, JSON);
        if let Some(content_type) = call.content_type {
            builder = builder.header(CONTENT_TYPE, content_type);
        }
        if let Some(user) = &params.impersonate {
            let value = HeaderValue::from_str(user).map_err(|_| {
                WriteError::BadRequest(format!("cannot impersonate {user:?}: not a valid header value"))
            })?;
            builder = builder.header("Impersonate-User", value);
        }
        let request = builder
            .body(kube::client::Body::from(call.body))
            .map_err(|e| WriteError::BadRequest(format!("{} {uri}: {e}", call.method)))?;
        let response = self.client.send(request).await.map_err(map_client_error)?;
        let code = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let body = response.into_body().collect_bytes().await.map_err(map_client_error)?;
        tracing::debug!(method = %call.method, %uri, code = code.as_u16(), "cluster write answered");
        if code.is_success() {
            return serde_json::from_slice(&body).map_err(|e| WriteError::ServerError {
                code: code.as_u16(),
                message: format!("{} {uri}: the answer is not JSON: {e}", call.method),
            });
        }
        let (error, names_object) = error_of(code, retry_after, &body);
        // A 404 that names no object is about the path: the resource went
        // away (or changed) since discovery.
        if code == StatusCode::NOT_FOUND && !names_object {
            self.forget(&target.api_version, &target.kind);
        }
        Err(error)
    }
}

impl ClusterWriter for KubeWriter {
    fn write(&self, request: WriteRequest, params: WriteParams) -> BoxFuture<'_, Result<Option<Value>, WriteError>> {
        Box::pin(async move {
            let what = match request.target() {
                Ok(target) => format!("{} {target}", request.verb()),
                Err(_) => request.verb().to_string(),
            };
            match tokio::time::timeout(self.timeout, self.execute(request, &params)).await {
                Ok(answer) => answer,
                Err(_) => Err(WriteError::Timeout(format!("{what}: no answer within {:?}", self.timeout))),
            }
        })
    }
}

const JSON: &str = "application/json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// One HTTP request, before it is built.
struct Call {
    method: Method,
    path: String,
    query: Vec<(&'static str, String)>,
    content_type: Option<&'static str>,
    body: Vec<u8>,
}

impl Call {
    /// A write with a body and the write's query (`dryRun`, `fieldManager`).
    fn write(method: Method, path: String, content_type: &'static str, body: Vec<u8>, params: &WriteParams) -> Call {
        let mut query = Vec::new();
        if params.dry_run {
            query.push(("dryRun", "All".to_string()));
        }
        query.push(("fieldManager", params.field_manager.clone()));
        Call { method, path, query, content_type: Some(content_type), body }
    }

    fn uri(&self) -> String {
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

fn encode(value: &impl serde::Serialize) -> Result<Vec<u8>, WriteError> {
    serde_json::to_vec(value).map_err(|e| WriteError::BadRequest(format!("the body cannot be encoded: {e}")))
}

/// `DeleteOptions` as kubectl and client-go send them.
fn delete_options(options: &DeleteOptions, dry_run: bool) -> Value {
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

/// What a DELETE's answer means for the caller: the object when it is
/// still there, marked for deletion (finalizers, foreground propagation,
/// graceful deletion); `None` when it is gone — the server answered a
/// `Success` Status, or the deleted object without a deletionTimestamp
/// (the generic store's `ReturnDeletedObject`, e.g. custom resources).
fn still_there(answer: Value) -> Option<Value> {
    if answer["kind"] == "Status" {
        return None;
    }
    answer.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()).then_some(answer)
}

/// The typed error of a non-2xx answer, and whether its Status names an
/// object (`details.name`).
fn error_of(code: StatusCode, retry_after: Option<u64>, body: &[u8]) -> (WriteError, bool) {
    let status: Option<Value> = serde_json::from_slice(body).ok().filter(|v: &Value| v["kind"] == "Status");
    let Some(status) = status else {
        // Not a Status: a filter, a proxy or a load balancer answered.
        let text = String::from_utf8_lossy(body);
        let mut message = cut(text.trim()).to_string();
        if message.is_empty() {
            message = code.canonical_reason().unwrap_or("no message").to_string();
        }
        return (with_retry_after(WriteError::from_status(code.as_u16(), "", message, Vec::new()), retry_after), false);
    };
    let text = |v: &Value| v.as_str().map(|s| cut(s).to_string()).unwrap_or_default();
    let causes = status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| Cause { reason: text(&c["reason"]), message: text(&c["message"]), field: text(&c["field"]) })
        .collect();
    let retry_after = retry_after.or_else(|| status["details"]["retryAfterSeconds"].as_u64());
    let names_object = status["details"]["name"].as_str().is_some_and(|n| !n.is_empty());
    // The HTTP code is authoritative; the Status' own `code` repeats it.
    let error = WriteError::from_status(code.as_u16(), &text(&status["reason"]), text(&status["message"]), causes);
    (with_retry_after(error, retry_after), names_object)
}

fn with_retry_after(error: WriteError, retry_after: Option<u64>) -> WriteError {
    match error {
        WriteError::RateLimited { message, retry_after_seconds } => {
            WriteError::RateLimited { message, retry_after_seconds: retry_after_seconds.or(retry_after) }
        }
        other => other,
    }
}

/// A failure of the client itself (no HTTP answer) or a discovery error
/// answer, typed.
fn map_client_error(error: kube::Error) -> WriteError {
    if let kube::Error::Api(status) = &error {
        let causes = status
            .details
            .as_ref()
            .map(|d| {
                d.causes
                    .iter()
                    .map(|c| Cause { reason: c.reason.clone(), message: c.message.clone(), field: c.field.clone() })
                    .collect()
            })
            .unwrap_or_default();
        return WriteError::from_status(status.code, &status.reason, status.message.clone(), causes);
    }
    // The source chain says what went wrong on the way (refused, reset,
    // timed out connecting or reading).
    let mut message = error.to_string();
    let mut timed_out = false;
    let mut source = std::error::Error::source(&error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
        }
        let text = e.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = e.source();
    }
    if timed_out {
        WriteError::Timeout(message)
    } else {
        // Code 0: there was no HTTP answer.
        WriteError::ServerError { code: 0, message }
    }
}

fn cut(s: &str) -> &str {
    if s.len() <= MAX_MESSAGE_BYTES {
        return s;
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A name or namespace as one path segment. The API server refuses
/// `.`, `..` and names containing `/` or `%` (`IsValidPathSegmentName`);
/// so does this, before sending, as the path would otherwise point
/// elsewhere. Anything else is percent-encoded and judged by the server.
fn path_segment(s: &str) -> Result<String, WriteError> {
    if s.is_empty() {
        return Err(WriteError::BadRequest("an empty name or namespace".into()));
    }
    if s == "." || s == ".." {
        return Err(WriteError::BadRequest(format!("{s:?} may not be a name or namespace")));
    }
    if let Some(c) = s.chars().find(|c| matches!(c, '/' | '%')) {
        return Err(WriteError::BadRequest(format!("{s:?}: a name or namespace may not contain '{c}'")));
    }
    Ok(percent_encode(s))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_body_is_typed_with_its_causes() {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "ConfigMap \"A\" is invalid",
            "details": {"name": "A", "kind": "ConfigMap", "causes": [
                {"reason": "FieldValueInvalid", "message": "Invalid value: \"A\"", "field": "metadata.name"}
            ]}
        });
        let (error, names) = error_of(StatusCode::UNPROCESSABLE_ENTITY, None, body.to_string().as_bytes());
        assert!(names);
        assert_eq!(
            error,
            WriteError::Invalid {
                message: "ConfigMap \"A\" is invalid".into(),
                causes: vec![Cause {
                    reason: "FieldValueInvalid".into(),
                    message: "Invalid value: \"A\"".into(),
                    field: "metadata.name".into()
                }],
            }
        );
    }

    #[test]
    fn a_plain_text_429_keeps_its_retry_after() {
        let (error, _) =
            error_of(StatusCode::TOO_MANY_REQUESTS, Some(7), b"Too many requests, please try again later.\n");
        assert_eq!(
            error,
            WriteError::RateLimited {
                message: "Too many requests, please try again later.".into(),
                retry_after_seconds: Some(7)
            }
        );
        let status = json!({"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down",
            "details": {"retryAfterSeconds": 3}});
        let (error, _) = error_of(StatusCode::TOO_MANY_REQUESTS, None, status.to_string().as_bytes());
        assert_eq!(error, WriteError::RateLimited { message: "slow down".into(), retry_after_seconds: Some(3) });
    }

    #[test]
    fn a_delete_answers_the_object_only_while_it_is_still_there() {
        assert_eq!(still_there(json!({"kind": "Status", "status": "Success"})), None);
        assert_eq!(still_there(json!({"kind": "Widget", "metadata": {"name": "w"}})), None);
        let marked = json!({"kind": "Widget", "metadata": {"name": "w", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(still_there(marked.clone()), Some(marked));
    }

    #[test]
    fn path_segments_cannot_escape_their_place() {
        assert!(path_segment("a/b").is_err());
        assert!(path_segment("..").is_err());
        assert!(path_segment("a%2Fb").is_err());
        assert_eq!(path_segment("a b?").unwrap(), "a%20b%3F");
        assert_eq!(path_segment("web-1.example").unwrap(), "web-1.example");
    }

    #[test]
    fn delete_options_carry_preconditions_propagation_and_dry_run() {
        let options = DeleteOptions {
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            propagation: Some(super::super::Propagation::Foreground),
        };
        assert_eq!(
            delete_options(&options, true),
            json!({"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": "u", "resourceVersion": "7"},
                "propagationPolicy": "Foreground", "dryRun": ["All"]})
        );
        assert_eq!(
            delete_options(&DeleteOptions::default(), false),
            json!({"kind": "DeleteOptions", "apiVersion": "v1"})
        );
    }
}
