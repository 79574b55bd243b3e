//! A loopback Kubernetes API server for tests: the list/watch wire protocol,
//! faithfully, for any resource path, on `127.0.0.1` with an ephemeral port.
//!
//! This module owns the fixture and nothing else: an in-memory object store
//! with a global, increasing resourceVersion (like etcd's revision), a history
//! of changes that can be compacted, and an HTTP/1.1 server (hyper 1) that
//! answers what a real `kube-apiserver` answers for
//!
//! - `GET /api/v1[/namespaces/{ns}]/{plural}` and
//!   `GET /apis/{group}/{version}[/namespaces/{ns}]/{plural}`: a list
//!   (`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"N"},"items":[...]}`,
//!   items carrying `kind`/`apiVersion`), honouring `resourceVersion`
//!   (unset: most recent; `"0"`: any, limit ignored as the watch cache does;
//!   `N`: not older than N, `504` when N is in the future), `resourceVersionMatch`
//!   (`NotOlderThan`, `Exact`: the state at N, `410 Expired` once compacted),
//!   `limit`/`continue` paging over a consistent snapshot (`410 Expired` for a
//!   token older than the compacted revision), `labelSelector` (equality and
//!   set-based: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x)`,
//!   `a>1`, `a<1`) and `fieldSelector` (`metadata.name`, `metadata.namespace`
//!   with `=`, `==`, `!=`);
//! - the same paths with `watch=1`/`watch=true`: a chunked stream of
//!   newline-delimited `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}`.
//!   `resourceVersion` unset or `"0"` starts with synthetic `ADDED` events for
//!   the current state; `N` sends every change strictly after N. Selectors
//!   apply per event as the watch cache applies them: an object that stops
//!   matching arrives as `DELETED` (its previous state at the new
//!   resourceVersion), one that starts matching as `ADDED`. `BOOKMARK`s (an
//!   object of the resource's kind with only `metadata.resourceVersion`) go to
//!   watches opened with `allowWatchBookmarks=true`; `timeoutSeconds` ends the
//!   stream cleanly. A watch from a compacted resourceVersion gets `410 Gone`
//!   either as an HTTP 410 `Status` or as an `ERROR` event carrying a `Status`
//!   with `code: 410, reason: "Expired"` ([`GoneStyle`]);
//! - `GET .../{plural}/{name}[/status]`: one object or a `404 NotFound` Status;
//! - writes (see the `writes` module): `POST` to a collection, `PUT`,
//!   `PATCH` (`application/merge-patch+json`, `application/json-patch+json`,
//!   `application/strategic-merge-patch+json` for built-in types,
//!   `application/apply-patch+yaml` with field managers and conflicts) and
//!   `DELETE` of an object, and `PUT`/`PATCH` of `{name}/status`, each
//!   producing the watch event a watcher sees and a new resourceVersion;
//! - discovery (`/api`, `/apis`, `/api/v1`, `/apis/{group}[/{version}]`,
//!   `/version`) for the registered types, including those of a
//!   `CustomResourceDefinition` created at runtime.
//!
//! Errors are `metav1.Status` objects with the HTTP code, as the real server
//! sends them (`status` module). A request impersonating a user
//! (`Impersonate-User`) is authorized against the [`Rule`]s granted to it.
//!
//! The control API ([`ApiServer`]) seeds and changes objects directly (as a
//! write to etcd would: no validation, admission or field management),
//! registers types, sends bookmarks, compacts history, drops or expires
//! every open watch, holds new watches back (all, or one resource's),
//! injects failures and `429`s, refuses connections for a while, grants
//! rights to impersonated users, and records every request (method, path,
//! query, content type, impersonation, body, and the status it was answered
//! with; [`RecordedRequest`]). It may not depend on the code under test: it
//! knows nothing of the informer or the host.
//!
//! Modules: `resources` (types and their registry strategy), `store`
//! (objects, revisions, history), `http` (accepting, routing, dispatch),
//! `list_watch` (reads), `writes` (the write path), `patch` (patch formats),
//! `managed` (managed fields, server-side apply), `validation`, `authz`,
//! `status` (Status bodies), `discovery`, `faults`, `requests` (the log),
//! `selectors`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

mod authz;
mod body;
mod discovery;
mod faults;
mod http;
mod list_watch;
mod managed;
mod patch;
mod requests;
mod resources;
mod selectors;
mod status;
mod store;
#[cfg(test)]
mod tests;
mod validation;
mod writes;

use authz::*;
use discovery::*;
use faults::*;
use http::*;
use list_watch::*;
use status::*;
use store::*;
use writes::*;

pub use authz::Rule;
pub use faults::ThrottleStyle;
pub use list_watch::GoneStyle;
pub use requests::{RecordedRequest, RequestKind};
pub use resources::ResourceType;
pub use selectors::{FieldSelector, LabelSelector};

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// Which new watch requests the server holds back.
enum Held {
    Nothing,
    All,
    /// Those of the resources at these plurals.
    Plurals(Vec<String>),
}

impl Held {
    fn holds(&self, plural: &str) -> bool {
        match self {
            Held::Nothing => false,
            Held::All => true,
            Held::Plurals(plurals) => plurals.iter().any(|p| p == plural),
        }
    }
}

struct Shared {
    state: Mutex<State>,
    /// Which new watch requests are held back.
    hold: watch::Sender<Held>,
    open_watches: AtomicUsize,
    /// The accept loop; `None` while connections are refused.
    accept_task: Mutex<Option<JoinHandle<()>>>,
    addr: SocketAddr,
}

/// The running fixture. Dropping it stops the server and closes every
/// connection.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use e2e::apiserver::{ApiServer, config_map};
/// let server = ApiServer::start().await;
/// let cm = server.create(config_map("default", "a", &[("app", "web")], &[("k", "v")]))?;
/// assert_eq!(cm["metadata"]["resourceVersion"], "2");
/// let client = server.client(); // a kube::Client pointed at it
/// # Ok(()) }
/// ```
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(task) = self.shared.accept_task.lock().take() {
            task.abort();
        }
        self.shared.state.lock().watchers.clear();
    }
}

/// A Namespace object.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A ConfigMap object with labels and data.
pub fn config_map(namespace: &str, name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> Value {
    let labels: serde_json::Map<String, Value> = labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let mut metadata = json!({"name": name, "namespace": namespace});
    if !labels.is_empty() {
        metadata["labels"] = Value::Object(labels);
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
}

impl ApiServer {
    /// Binds `127.0.0.1:0` and serves until dropped. The default resource
    /// types are registered (see [`ResourceType`]); the first change gets
    /// resourceVersion 2 (an empty store is at 1, as a fresh etcd is).
    pub async fn start() -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                types: vec![
                    ResourceType::config_maps(),
                    ResourceType::secrets(),
                    ResourceType::namespaces(),
                    ResourceType::deployments(),
                    ResourceType::core_events(),
                    ResourceType::events(),
                    ResourceType::custom_resource_definitions(),
                    // Served by every real API server (coordination.k8s.io/v1).
                    ResourceType::leases(),
                ],
                rv: 1,
                compacted: 1,
                base: BTreeMap::new(),
                log: Vec::new(),
                objects: BTreeMap::new(),
                watchers: Vec::new(),
                requests: Vec::new(),
                failures: Vec::new(),
                throttles: Vec::new(),
                write_latency: std::time::Duration::ZERO,
                users: BTreeMap::new(),
                gone_style: GoneStyle::default(),
                watch_list: true,
                next_uid: 1,
            }),
            hold: watch::Sender::new(Held::Nothing),
            open_watches: AtomicUsize::new(0),
            accept_task: Mutex::new(None),
            addr,
        });
        *shared.accept_task.lock() = Some(tokio::spawn(accept_loop(listener, shared.clone())));
        ApiServer { shared, addr }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    /// A kubeconfig-free client configuration pointed at this server.
    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.url().parse().expect("server url"))
    }
    /// Writes a kubeconfig file pointing at this server (token auth, the
    /// given default namespace), for code that reads one as a user would.
    pub fn write_kubeconfig(&self, path: &std::path::Path, namespace: Option<&str>) {
        let ns = namespace.map(|n| format!(", namespace: {n}")).unwrap_or_default();
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{}\"}}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u{ns}}}\ncurrent-context: c\n\
             users:\n- name: u\n  user: {{token: t}}\n",
            self.url()
        );
        std::fs::write(path, text).expect("kubeconfig written");
    }
    /// A `kube::Client` pointed at this server (needs a tokio runtime).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("kube client")
    }

    /// Serves another resource type (e.g. a custom resource); it appears in
    /// discovery at once. Registering a type again (same group, version and
    /// plural) replaces its definition. Creating a `CustomResourceDefinition`
    /// registers its types the same way.
    pub fn register(&self, ty: ResourceType) {
        self.shared.state.lock().register(ty);
    }

    /// The current resourceVersion (of the last change, in any resource).
    pub fn resource_version(&self) -> String {
        self.shared.state.lock().rv.to_string()
    }

    /// Creates an object (`apiVersion`, `kind`, `metadata.name` required;
    /// a namespaced object without namespace goes to `default`). Stamps
    /// `uid`, `creationTimestamp` and the next resourceVersion; returns the
    /// stored object.
    pub fn create(&self, obj: Value) -> anyhow::Result<Value> {
        let mut st = self.shared.state.lock();
        let (key, mut obj) = st.normalize(obj)?;
        if st.objects.contains_key(&key) {
            bail!("AlreadyExists: {} {:?} already exists", st.types[key.ty].plural, key.name);
        }
        st.rv += 1;
        let uid = st.new_uid();
        let tracks_generation = st.types[key.ty].generation;
        let meta = obj["metadata"].as_object_mut().expect("metadata");
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(rfc3339_now()));
        if tracks_generation {
            meta.entry("generation").or_insert(json!(1));
        }
        meta.insert("resourceVersion".into(), json!(st.rv.to_string()));
        Ok(st.commit(Change::Added, key, obj, None))
    }

    /// Replaces an existing object, keeping its `uid` and
    /// `creationTimestamp`. A `metadata.resourceVersion` in `obj` must match
    /// the stored one (optimistic concurrency, `Conflict` otherwise).
    pub fn update(&self, obj: Value) -> anyhow::Result<Value> {
        let mut st = self.shared.state.lock();
        let (key, mut obj) = st.normalize(obj)?;
        let Some(prev) = st.objects.get(&key).cloned() else {
            bail!("NotFound: {} {:?} not found", st.types[key.ty].plural, key.name);
        };
        let meta = obj["metadata"].as_object_mut().expect("metadata");
        if let Some(rv) = meta.get("resourceVersion").and_then(Value::as_str)
            && Some(rv) != prev["metadata"]["resourceVersion"].as_str()
        {
            bail!("Conflict: the object has been modified; resourceVersion {rv} is stale");
        }
        for field in ["uid", "creationTimestamp"] {
            meta.insert(field.into(), prev["metadata"][field].clone());
        }
        st.rv += 1;
        let rv = st.rv.to_string();
        obj["metadata"]["resourceVersion"] = json!(rv);
        Ok(st.commit(Change::Modified, key, obj, Some(prev)))
    }

    /// Creates or replaces an object.
    pub fn apply(&self, obj: Value) -> anyhow::Result<Value> {
        let exists = {
            let st = self.shared.state.lock();
            let (key, _) = st.normalize(obj.clone())?;
            st.objects.contains_key(&key)
        };
        if exists {
            let mut obj = obj;
            if let Some(meta) = obj["metadata"].as_object_mut() {
                meta.remove("resourceVersion");
            }
            self.update(obj)
        } else {
            self.create(obj)
        }
    }

    /// Deletes an object; returns its last state, stamped with the
    /// resourceVersion of the delete (what a `DELETED` event carries).
    pub fn delete(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> anyhow::Result<Value> {
        let mut st = self.shared.state.lock();
        let ty = st.type_of(api_version, kind)?;
        let namespace = if st.types[ty].namespaced { namespace.unwrap_or("default") } else { "" };
        let key = Key { ty, namespace: namespace.into(), name: name.into() };
        let Some(prev) = st.objects.get(&key).cloned() else {
            bail!("NotFound: {} {name:?} not found", st.types[ty].plural);
        };
        st.rv += 1;
        let mut obj = (*prev).clone();
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        Ok(st.commit(Change::Deleted, key, obj, Some(prev)))
    }

    /// Deletes the ConfigMap `namespace/name`.
    pub fn delete_config_map(&self, namespace: &str, name: &str) -> anyhow::Result<Value> {
        self.delete("v1", "ConfigMap", Some(namespace), name)
    }

    /// The stored object, if any.
    pub fn get(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let st = self.shared.state.lock();
        let ty = st.type_of(api_version, kind).ok()?;
        let namespace = if st.types[ty].namespaced { namespace.unwrap_or("default") } else { "" };
        st.objects.get(&Key { ty, namespace: namespace.into(), name: name.into() }).map(|v| (**v).clone())
    }

    /// Sends a `BOOKMARK` at the current resourceVersion to every open watch
    /// that allowed bookmarks; returns that resourceVersion.
    pub fn bookmark(&self) -> String {
        let mut st = self.shared.state.lock();
        let rv = st.rv;
        st.watchers.retain(|w| w.send(Signal::Bookmark(rv)).is_ok());
        rv.to_string()
    }

    /// Compacts history at the current resourceVersion: a watch, an `Exact`
    /// list or a `continue` token from an older resourceVersion gets `410`.
    /// Returns the compacted resourceVersion.
    pub fn compact(&self) -> String {
        let mut st = self.shared.state.lock();
        st.base = st.objects.clone();
        st.log.clear();
        st.compacted = st.rv;
        st.rv.to_string()
    }

    /// Closes every open watch connection abruptly (the chunked body ends
    /// without its terminating chunk and the TCP connection closes). Returns
    /// how many were closed.
    pub fn drop_watches(&self) -> usize {
        let watchers = std::mem::take(&mut self.shared.state.lock().watchers);
        watchers.into_iter().filter(|w| w.send(Signal::Drop).is_ok()).count()
    }

    /// Ends every open watch with an `ERROR` event carrying a `410 Expired`
    /// Status, as a server does to a watch that fell out of its history
    /// window. Returns how many were expired.
    pub fn expire_watches(&self) -> usize {
        let (watchers, oldest) = {
            let mut st = self.shared.state.lock();
            (std::mem::take(&mut st.watchers), st.rv)
        };
        watchers.into_iter().filter(|w| w.send(Signal::Expire { oldest }).is_ok()).count()
    }

    /// Holds every new watch request (recorded, but not answered) until
    /// [`ApiServer::release_watches`]: a slow or partitioned server.
    pub fn hold_watches(&self) {
        self.shared.hold.send_replace(Held::All);
    }
    /// Holds the new watch requests of the resources at `plurals` (e.g.
    /// `deployments`) until [`ApiServer::release_watches`]; other watches,
    /// lists and writes are served: one informer's cache lags the others'.
    pub fn hold_watches_of(&self, plurals: &[&str]) {
        self.shared.hold.send_replace(Held::Plurals(plurals.iter().map(|p| p.to_string()).collect()));
    }
    /// Answers the held watch requests, judged against the state at release.
    pub fn release_watches(&self) {
        self.shared.hold.send_replace(Held::Nothing);
    }

    /// Chooses how a watch from a compacted resourceVersion is refused.
    pub fn set_gone_style(&self, style: GoneStyle) {
        self.shared.state.lock().gone_style = style;
    }

    /// Serves watch-lists (`sendInitialEvents=true`) or, when `false`,
    /// refuses them as a server with the WatchList feature gate off does
    /// (`422 Invalid`).
    pub fn set_watch_list(&self, enabled: bool) {
        self.shared.state.lock().watch_list = enabled;
    }

    /// Answers the next request of `kind` with an error Status of `code`.
    pub fn fail_next(&self, kind: RequestKind, code: u16) {
        self.fail_next_where(move |r| r.kind == kind, code);
    }
    /// Answers the next request matching `matches` with an error Status of
    /// `code` (e.g. `410` for a request with a `continue` token).
    pub fn fail_next_where(&self, matches: impl Fn(&RecordedRequest) -> bool + Send + 'static, code: u16) {
        self.shared.state.lock().failures.push(Failure { matches: Box::new(matches), code });
    }

    /// Every write (create, update, patch, delete) is answered `latency`
    /// later, as if each were an etcd round trip that long.
    pub fn set_write_latency(&self, latency: std::time::Duration) {
        self.shared.state.lock().write_latency = latency;
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state.lock().requests.clone()
    }
    pub fn request_count(&self) -> usize {
        self.shared.state.lock().requests.len()
    }
    /// The writes (create, update, patch, delete) received so far, including
    /// refused and dry-run ones.
    pub fn writes(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(RecordedRequest::is_write).collect()
    }
    /// Forgets the requests received so far (e.g. after seeding).
    pub fn clear_requests(&self) {
        self.shared.state.lock().requests.clear();
    }
    /// The list requests received so far.
    pub fn lists(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(RecordedRequest::is_list).collect()
    }
    /// The watch requests received so far.
    pub fn watches(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(RecordedRequest::is_watch).collect()
    }
    /// Watch streams currently open (answered and not yet ended).
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }
}
