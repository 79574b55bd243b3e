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

/// Answers typed as [`WriteError`]s.
mod answers;
/// Collection, item and subresource paths.
mod paths;
/// Requests before they are sent, and the bodies built here.
mod request;

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
use kube::discovery::Scope;
use parking_lot::Mutex;
use serde_json::Value;

use self::answers::{error_of, map_client_error, still_there};
pub use self::paths::ResolvedKind;
use self::paths::path_segment;
use self::request::{APPLY_PATCH, Call, JSON, JSON_PATCH, MERGE_PATCH, delete_options, encode};
use super::{ClusterWriter, EventType, Patch, Target, WriteError, WriteParams, WriteRequest};

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

#[cfg(test)]
mod tests;
