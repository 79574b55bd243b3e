//! Host bindings of the `controller` world and the host side of its
//! `stores`, `kube` and `queue` imports.
//!
//! This module owns the translation between the WIT types and the host's
//! ([`crate::cluster`]'s requests and errors, the informers' caches); the
//! shared interfaces (`types`, `log`, `cache`) are the handler world's own
//! bindings, so an `object` is one type for both worlds. Each call reads the
//! sandbox of the calling instance only: its [`ControllerCtx`].

use std::time::Duration;

use wasmtime::component::Resource;

use super::ControllerCtx;
use super::keys::{MAX_ENQUEUES_PER_CALL, check_key};
use crate::cluster::{self, Cause, WriteError, WriteRequest};
use crate::plugin::bindings::{MAX_ERROR_BYTES, ObjectHandle, ProtocolViolation};
use crate::plugin::log_budget::sanitize;
use crate::plugin::sandbox::Sandbox;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "controller",
    with: {
        "informer-host:plugin/types": crate::plugin::bindings::informer_host::plugin::types,
        "informer-host:plugin/log": crate::plugin::bindings::informer_host::plugin::log,
        "informer-host:plugin/cache": crate::plugin::bindings::informer_host::plugin::cache,
    },
    // May trap: handing out object handles past the instance's cap, a
    // malformed key or too many in one call.
    imports: {
        "informer-host:plugin/stores": trappable,
        "informer-host:plugin/queue": trappable,
    },
});

use self::exports::informer_host::plugin::reconciler::Action;
use self::informer_host::plugin::kube as wit;

/// The `reconciler` interface every controller exports.
pub const RECONCILER_EXPORT: &str = "informer-host:plugin/reconciler";
/// The controller-only imports.
pub const STORES: &str = "informer-host:plugin/stores";
pub const KUBE: &str = "informer-host:plugin/kube";
pub const QUEUE: &str = "informer-host:plugin/queue";

/// What a reconcile asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    RequeueAfter(Duration),
}

impl From<Action> for Outcome {
    fn from(a: Action) -> Self {
        match a {
            Action::Done => Outcome::Done,
            Action::RequeueAfter(ms) => Outcome::RequeueAfter(Duration::from_millis(ms)),
        }
    }
}

impl Sandbox {
    fn controller(&self) -> &ControllerCtx {
        // Only controller instances link these imports, and every
        // controller instance's sandbox carries its context.
        self.shared.controller.as_deref().expect("a controller import called outside a controller instance")
    }
}

fn target(t: wit::Target) -> cluster::Target {
    cluster::Target { api_version: t.api_version, kind: t.kind, namespace: t.namespace, name: t.name }
}

/// Parses JSON text from the guest; a parse error is the guest's mistake,
/// answered as `bad-request` (never a trap). A body the API server would
/// not decode (over [`cluster::MAX_REQUEST_BODY_BYTES`]) gets its `413`
/// before the host parses it, whichever cluster the write is for.
fn json(text: &str) -> Result<serde_json::Value, WriteError> {
    if text.len() > cluster::MAX_REQUEST_BODY_BYTES {
        return Err(WriteError::body_too_large());
    }
    serde_json::from_str(text).map_err(|e| WriteError::BadRequest(format!("the object is not JSON: {e}")))
}

fn patch(p: wit::PatchBody) -> Result<cluster::Patch, WriteError> {
    Ok(match p {
        wit::PatchBody::Merge(t) => cluster::Patch::Merge(json(&t)?),
        wit::PatchBody::Json(t) => cluster::Patch::Json(json(&t)?),
        wit::PatchBody::Apply(a) => cluster::Patch::Apply { config: json(&a.config)?, force: a.force },
    })
}

fn to_wit(e: WriteError) -> wit::KubeError {
    let cut = |s: String| sanitize(&s, MAX_ERROR_BYTES).into_owned();
    match e {
        WriteError::NotFound(m) => wit::KubeError::NotFound(cut(m)),
        WriteError::AlreadyExists(m) => wit::KubeError::AlreadyExists(cut(m)),
        WriteError::Conflict(m) => wit::KubeError::Conflict(cut(m)),
        WriteError::Forbidden(m) => wit::KubeError::Forbidden(cut(m)),
        WriteError::Invalid { message, causes } => wit::KubeError::Invalid(wit::Invalid {
            message: cut(message),
            causes: causes
                .into_iter()
                .take(64)
                .map(|Cause { reason, message, field }| wit::Cause {
                    reason: cut(reason),
                    message: cut(message),
                    field: cut(field),
                })
                .collect(),
        }),
        WriteError::RateLimited { message, retry_after_seconds } => {
            wit::KubeError::RateLimited(wit::RateLimited { message: cut(message), retry_after_seconds })
        }
        WriteError::Timeout(m) => wit::KubeError::Timeout(cut(m)),
        WriteError::BadRequest(m) => wit::KubeError::BadRequest(cut(m)),
        WriteError::ServerError { code, message } => {
            wit::KubeError::ServerError(wit::ServerError { code, message: cut(message) })
        }
    }
}

impl Sandbox {
    /// Sends one write through the controller's guard, blocking this
    /// (blocking-pool) thread until it is answered or the call's deadline
    /// passes, whichever comes first.
    fn write(&mut self, request: Result<WriteRequest, WriteError>) -> Result<Option<String>, wit::KubeError> {
        let request = request.map_err(to_wit)?;
        let call_left = self.call_ends.map(|end| end.saturating_duration_since(std::time::Instant::now()));
        let ctx = self.controller();
        let answer = ctx.runtime.block_on(ctx.guard.write_within(request, call_left));
        answer.map(|v| v.map(|v| v.to_string())).map_err(to_wit)
    }

    fn write_object(&mut self, request: Result<WriteRequest, WriteError>) -> Result<String, wit::KubeError> {
        self.write(request).map(Option::unwrap_or_default)
    }
}

impl wit::Host for Sandbox {
    fn create(&mut self, object: String) -> Result<String, wit::KubeError> {
        self.write_object(json(&object).map(WriteRequest::Create))
    }

    fn replace(&mut self, object: String) -> Result<String, wit::KubeError> {
        self.write_object(json(&object).map(WriteRequest::Replace))
    }

    fn patch(&mut self, t: wit::Target, p: wit::PatchBody) -> Result<String, wit::KubeError> {
        self.write_object(patch(p).map(|patch| WriteRequest::Patch { target: target(t), patch }))
    }

    fn delete(&mut self, t: wit::Target, o: wit::DeleteOptions) -> Result<Option<String>, wit::KubeError> {
        let propagation = o.propagation.map(|p| match p {
            wit::Propagation::Orphan => cluster::Propagation::Orphan,
            wit::Propagation::Background => cluster::Propagation::Background,
            wit::Propagation::Foreground => cluster::Propagation::Foreground,
        });
        let options = cluster::DeleteOptions { uid: o.uid, resource_version: o.resource_version, propagation };
        self.write(Ok(WriteRequest::Delete { target: target(t), options }))
    }

    fn replace_status(&mut self, object: String) -> Result<String, wit::KubeError> {
        self.write_object(json(&object).map(WriteRequest::ReplaceStatus))
    }

    fn patch_status(&mut self, t: wit::Target, p: wit::PatchBody) -> Result<String, wit::KubeError> {
        self.write_object(patch(p).map(|patch| WriteRequest::PatchStatus { target: target(t), patch }))
    }

    fn record_event(
        &mut self,
        involved: wit::Target,
        event_type: wit::EventType,
        reason: String,
        message: String,
    ) -> Result<(), wit::KubeError> {
        let event_type = match event_type {
            wit::EventType::Normal => cluster::EventType::Normal,
            wit::EventType::Warning => cluster::EventType::Warning,
        };
        // An Event's note is at most 1 KiB on the API server.
        let message = sanitize(&message, 1024).into_owned();
        let reason = sanitize(&reason, 128).into_owned();
        self.write(Ok(WriteRequest::RecordEvent { involved: target(involved), event_type, reason, message }))
            .map(|_| ())
    }
}

impl self::informer_host::plugin::queue::Host for Sandbox {
    /// Traps on a key that cannot be an object key and past
    /// [`MAX_ENQUEUES_PER_CALL`] calls in one guest call: both are the
    /// guest's bug or an attack on the host's memory, not a refusal the
    /// guest could handle. A full queue drops the key (counted).
    fn enqueue(&mut self, key: String, after_ms: u64) -> wasmtime::Result<()> {
        self.enqueues += 1;
        if self.enqueues > MAX_ENQUEUES_PER_CALL {
            return Err(ProtocolViolation(format!(
                "more than {MAX_ENQUEUES_PER_CALL} queue.enqueue calls in one call"
            ))
            .into());
        }
        check_key(&key).map_err(|why| ProtocolViolation(format!("queue.enqueue of {why}")))?;
        self.controller().keys.add_from_guest(key, Duration::from_millis(after_ms));
        Ok(())
    }
}

impl self::informer_host::plugin::stores::Host for Sandbox {
    fn get(
        &mut self,
        informer: String,
        key: String,
    ) -> wasmtime::Result<Result<Option<Resource<ObjectHandle>>, String>> {
        let found = match self.controller().store(&informer) {
            Ok(view) => view.get(&key),
            Err(e) => return Ok(Err(e)),
        };
        Ok(Ok(match found {
            Some(obj) => Some(self.push_object(obj)?),
            None => None,
        }))
    }

    fn list(
        &mut self,
        informer: String,
        namespace: Option<String>,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, String>> {
        match self.controller().store(&informer) {
            Ok(view) => Ok(Ok(self.hand_out(view.list_examined(namespace.as_deref()))?)),
            Err(e) => Ok(Err(e)),
        }
    }

    fn by_index(
        &mut self,
        informer: String,
        index: String,
        value: String,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, String>> {
        match self
            .controller()
            .store(&informer)
            .and_then(|v| v.by_index_examined(&index, &value).map_err(|e| e.to_string()))
        {
            Ok(found) => Ok(Ok(self.hand_out(found)?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

/// Adds the controller-only imports a plugin with `grants` may use to a
/// linker: `queue` always, `stores` with `cache`, `kube` with `kube`.
pub(crate) fn add_controller_imports(
    l: &mut wasmtime::component::Linker<Sandbox>,
    grants: &crate::plugin::Grants,
) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    self::informer_host::plugin::queue::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
    if grants.cache {
        self::informer_host::plugin::stores::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
    }
    if grants.kube {
        self::informer_host::plugin::kube::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_too_large_for_the_api_server_is_refused_before_it_is_parsed() {
        // Not JSON at all: only a parse would say so, and it does not run.
        let huge = "{".repeat(cluster::MAX_REQUEST_BODY_BYTES + 1);
        assert_eq!(json(&huge), Err(WriteError::body_too_large()));
        let at_limit = format!("\"{}\"", "x".repeat(cluster::MAX_REQUEST_BODY_BYTES - 2));
        assert!(json(&at_limit).is_ok());
    }
}
