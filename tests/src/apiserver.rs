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
//! - `GET .../{plural}/{name}`: one object or a `404 NotFound` Status.
//!
//! Errors are `metav1.Status` objects with the HTTP code, as the real server
//! sends them. The control API ([`ApiServer`]) creates, updates and deletes
//! objects, sends bookmarks, compacts history, drops or expires every open
//! watch, holds new watches back, injects failures, and records every request.
//! It may not depend on the code under test: it knows nothing of the informer.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// A resource type the server serves: `group/version`, `kind`, `plural`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The path segment, e.g. `configmaps`.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ResourceType {
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }
    /// `v1` `ConfigMap` (`configmaps`), namespaced. Registered by default.
    pub fn config_maps() -> Self {
        Self::new("", "v1", "ConfigMap", "configmaps", true)
    }
    /// `v1` `Secret` (`secrets`), namespaced. Registered by default.
    pub fn secrets() -> Self {
        Self::new("", "v1", "Secret", "secrets", true)
    }
    /// `v1` `Namespace` (`namespaces`), cluster-scoped. Registered by default.
    pub fn namespaces() -> Self {
        Self::new("", "v1", "Namespace", "namespaces", false)
    }
    /// `apps/v1` `Deployment` (`deployments`), namespaced. Registered by default.
    pub fn deployments() -> Self {
        Self::new("apps", "v1", "Deployment", "deployments", true)
    }
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
    /// The collection path, e.g. `/api/v1/namespaces/ns/configmaps`.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let root = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) => format!("{root}/namespaces/{ns}/{}", self.plural),
            None => format!("{root}/{}", self.plural),
        }
    }
}

/// How a watch from a compacted resourceVersion is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GoneStyle {
    /// `200 OK`, then one `ERROR` event with a `410 Expired` Status, then the
    /// end of the stream: what a server with the watch cache sends.
    #[default]
    ErrorEvent,
    /// An HTTP `410 Gone` response whose body is the `Expired` Status.
    HttpStatus,
}

/// What a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    List,
    Watch,
    /// `GET` of one object.
    Get,
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
}

impl RecordedRequest {
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
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    ty: usize,
    namespace: String,
    name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Added,
    Modified,
    Deleted,
}

/// One change in history. `object` is the new state (for a delete: the last
/// state, at the delete's resourceVersion); `prev` the state before.
struct Entry {
    rv: u64,
    change: Change,
    key: Key,
    object: Arc<Value>,
    prev: Option<Arc<Value>>,
}

enum Signal {
    Event(Arc<Entry>),
    Bookmark(u64),
    /// Close the connection abruptly.
    Drop,
    /// Send an `ERROR` 410 event, then end the stream.
    Expire {
        oldest: u64,
    },
}

type FailureMatcher = Box<dyn Fn(&RecordedRequest) -> bool + Send>;

struct Failure {
    matches: FailureMatcher,
    code: u16,
}

struct State {
    types: Vec<ResourceType>,
    /// The current revision: the resourceVersion of the last change.
    rv: u64,
    /// The oldest revision history still answers for.
    compacted: u64,
    /// The objects at `compacted`.
    base: BTreeMap<Key, Arc<Value>>,
    /// Every change after `compacted`, in order.
    log: Vec<Arc<Entry>>,
    /// The objects now.
    objects: BTreeMap<Key, Arc<Value>>,
    watchers: Vec<mpsc::UnboundedSender<Signal>>,
    requests: Vec<RecordedRequest>,
    failures: Vec<Failure>,
    gone_style: GoneStyle,
    next_uid: u64,
}

struct Shared {
    state: Mutex<State>,
    /// `true` while new watch requests are held back.
    hold: watch::Sender<bool>,
    open_watches: AtomicUsize,
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
    task: JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.state.lock().watchers.clear();
    }
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
                ],
                rv: 1,
                compacted: 1,
                base: BTreeMap::new(),
                log: Vec::new(),
                objects: BTreeMap::new(),
                watchers: Vec::new(),
                requests: Vec::new(),
                failures: Vec::new(),
                gone_style: GoneStyle::default(),
                next_uid: 1,
            }),
            hold: watch::Sender::new(false),
            open_watches: AtomicUsize::new(0),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        ApiServer { shared, addr, task }
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
    /// A `kube::Client` pointed at this server (needs a tokio runtime).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("kube client")
    }

    /// Serves another resource type (e.g. a custom resource).
    pub fn register(&self, ty: ResourceType) {
        let mut st = self.shared.state.lock();
        if !st.types.contains(&ty) {
            st.types.push(ty);
        }
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
        st.next_uid += 1;
        let meta = obj["metadata"].as_object_mut().expect("metadata");
        meta.insert("uid".into(), json!(format!("00000000-0000-4000-8000-{:012x}", st.next_uid)));
        meta.insert("creationTimestamp".into(), json!(rfc3339_now()));
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
        self.shared.hold.send_replace(true);
    }
    /// Answers the held watch requests, judged against the state at release.
    pub fn release_watches(&self) {
        self.shared.hold.send_replace(false);
    }

    /// Chooses how a watch from a compacted resourceVersion is refused.
    pub fn set_gone_style(&self, style: GoneStyle) {
        self.shared.state.lock().gone_style = style;
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

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state.lock().requests.clone()
    }
    pub fn request_count(&self) -> usize {
        self.shared.state.lock().requests.len()
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

impl State {
    fn type_of(&self, api_version: &str, kind: &str) -> anyhow::Result<usize> {
        self.types
            .iter()
            .position(|t| t.kind == kind && t.api_version() == api_version)
            .ok_or_else(|| anyhow!("no resource type registered for {api_version} {kind}"))
    }

    /// Finds the key of `obj` and fixes its namespace.
    fn normalize(&self, mut obj: Value) -> anyhow::Result<(Key, Value)> {
        let api_version = obj["apiVersion"].as_str().context("object has no apiVersion")?.to_string();
        let kind = obj["kind"].as_str().context("object has no kind")?.to_string();
        let ty = self.type_of(&api_version, &kind)?;
        let meta = obj.get_mut("metadata").and_then(Value::as_object_mut).context("object has no metadata")?;
        let name = meta.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).context("no metadata.name")?;
        let name = name.to_string();
        let namespace = if self.types[ty].namespaced {
            let ns = meta.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or("default");
            let ns = ns.to_string();
            meta.insert("namespace".into(), json!(ns));
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        Ok((Key { ty, namespace, name }, obj))
    }

    /// Applies one change (its resourceVersion already stamped as `self.rv`)
    /// and tells every watch.
    fn commit(&mut self, change: Change, key: Key, obj: Value, prev: Option<Arc<Value>>) -> Value {
        let object = Arc::new(obj);
        match change {
            Change::Deleted => self.objects.remove(&key),
            _ => self.objects.insert(key.clone(), object.clone()),
        };
        let entry = Arc::new(Entry { rv: self.rv, change, key, object: object.clone(), prev });
        self.log.push(entry.clone());
        self.watchers.retain(|w| w.send(Signal::Event(entry.clone())).is_ok());
        (*object).clone()
    }

    /// The objects as they were at resourceVersion `rv` (`compacted <= rv <= self.rv`).
    fn snapshot_at(&self, rv: u64) -> BTreeMap<Key, Arc<Value>> {
        if rv >= self.rv {
            return self.objects.clone();
        }
        let mut objects = self.base.clone();
        for e in self.log.iter().take_while(|e| e.rv <= rv) {
            match e.change {
                Change::Deleted => objects.remove(&e.key),
                _ => objects.insert(e.key.clone(), e.object.clone()),
            };
        }
        objects
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Connections live in the set: aborting this task closes them all.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Where a path points.
struct Route {
    ty: usize,
    namespace: Option<String>,
    name: Option<String>,
}

fn route(types: &[ResourceType], path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return None,
    };
    let ty = types.iter().position(|t| t.group == group && t.version == version && t.plural == plural)?;
    let t = &types[ty];
    if namespace.is_some() && !t.namespaced {
        return None;
    }
    if t.namespaced && namespace.is_none() && name.is_some() {
        return None;
    }
    Some(Route { ty, namespace: namespace.map(Into::into), name: name.map(Into::into) })
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let uri = req.uri().to_string();
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let is_watch = match param("watch").map(|w| parse_bool(&w)) {
        None => false,
        Some(Some(b)) => b,
        Some(None) => return Ok(status_response(400, "BadRequest", "watch: invalid boolean value".into())),
    };
    let (route, kind, failure) = {
        let mut st = shared.state.lock();
        let route = route(&st.types, &path);
        let kind = match (&route, req.method()) {
            (Some(r), &Method::GET) if r.name.is_some() => RequestKind::Get,
            (Some(_), &Method::GET) if is_watch => RequestKind::Watch,
            (Some(_), &Method::GET) => RequestKind::List,
            _ => RequestKind::Other,
        };
        let rec =
            RecordedRequest { method: req.method().to_string(), uri, path: path.clone(), query: query.clone(), kind };
        let failure = st.failures.iter().position(|f| (f.matches)(&rec)).map(|i| st.failures.remove(i).code);
        st.requests.push(rec);
        (route, kind, failure)
    };
    if let Some(code) = failure {
        let message = match code {
            410 => "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response to continue with a possibly inconsistent result.".to_string(),
            _ => format!("injected failure for {path}"),
        };
        return Ok(status_response(code, reason_for(code), message));
    }
    let Some(route) = route else {
        return Ok(status_response(404, "NotFound", "the server could not find the requested resource".into()));
    };
    if req.method() != Method::GET {
        return Ok(status_response(
            405,
            "MethodNotAllowed",
            format!("{} is not supported by this server", req.method()),
        ));
    }
    Ok(match kind {
        RequestKind::Watch => {
            let mut hold = shared.hold.subscribe();
            let _ = hold.wait_for(|held| !*held).await;
            serve_watch(&shared, &route, &query)
        }
        RequestKind::Get => serve_get(&shared, &route),
        _ => serve_list(&shared, &route, &query),
    })
}

fn serve_get(shared: &Shared, route: &Route) -> Response<Body> {
    let st = shared.state.lock();
    let ty = &st.types[route.ty];
    let name = route.name.clone().unwrap_or_default();
    let key = Key { ty: route.ty, namespace: route.namespace.clone().unwrap_or_default(), name: name.clone() };
    match st.objects.get(&key) {
        Some(obj) => json_response(StatusCode::OK, obj.to_string()),
        None => {
            let mut status = status_object(404, "NotFound", format!("{} \"{name}\" not found", ty.plural));
            status["details"] = json!({"name": name, "kind": ty.plural});
            json_response(StatusCode::NOT_FOUND, status.to_string())
        }
    }
}

/// What a list or watch selects: type, namespace, labels, fields.
struct Filter {
    ty: usize,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn new(route: &Route, query: &[(String, String)]) -> Result<Filter, String> {
        let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("");
        Ok(Filter {
            ty: route.ty,
            namespace: route.namespace.clone(),
            labels: LabelSelector::parse(param("labelSelector"))?,
            fields: FieldSelector::parse(param("fieldSelector"))?,
        })
    }

    fn is_filtered(&self) -> bool {
        !self.labels.0.is_empty() || !self.fields.0.is_empty()
    }

    fn selects(&self, key: &Key, obj: &Value) -> bool {
        key.ty == self.ty
            && self.namespace.as_ref().is_none_or(|ns| *ns == key.namespace)
            && self.labels.matches(obj)
            && self.fields.matches(key)
    }

    /// The event this watch sees for `e`, as a JSON line, if any.
    fn render(&self, e: &Entry) -> Option<String> {
        let now = self.selects(&e.key, &e.object);
        let before = e.prev.as_ref().is_some_and(|p| self.selects(&e.key, p));
        match e.change {
            Change::Added if now => Some(event_line("ADDED", &e.object)),
            Change::Deleted if now => Some(event_line("DELETED", &e.object)),
            Change::Modified if now && before => Some(event_line("MODIFIED", &e.object)),
            Change::Modified if now => Some(event_line("ADDED", &e.object)),
            Change::Modified if before => {
                // It left the selection: its previous state, at this version.
                let mut gone = e.prev.as_deref().cloned().unwrap_or_default();
                gone["metadata"]["resourceVersion"] = json!(e.rv.to_string());
                Some(event_line("DELETED", &gone))
            }
            _ => None,
        }
    }
}

fn serve_list(shared: &Shared, route: &Route, query: &[(String, String)]) -> Response<Body> {
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let filter = match Filter::new(route, query) {
        Ok(f) => f,
        Err(msg) => return status_response(400, "BadRequest", msg),
    };
    let limit = match param("limit").map(str::parse::<i64>) {
        None => None,
        Some(Ok(n)) => (n > 0).then_some(n as usize),
        Some(Err(_)) => return status_response(400, "BadRequest", "limit: invalid value".into()),
    };
    let st = shared.state.lock();
    let ty = &st.types[route.ty];
    let (snapshot_rv, start_after, limit) = if let Some(token) = param("continue") {
        if param("resourceVersion").is_some() {
            return status_response(
                400,
                "BadRequest",
                "specifying resource version is not allowed when using continue".into(),
            );
        }
        let Some((rv, start)) = decode_continue(token) else {
            return status_response(400, "BadRequest", "continue key is not valid".into());
        };
        if rv < st.compacted {
            let mut status = status_object(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response to continue with a possibly inconsistent result.".into(),
            );
            status["metadata"] = json!({"continue": encode_continue(st.rv, &start)});
            return json_response(StatusCode::GONE, status.to_string());
        }
        (rv, Some(start), limit)
    } else {
        let rv = param("resourceVersion");
        let rvm = param("resourceVersionMatch");
        match (rv, rvm) {
            (None, Some(_)) => {
                return status_response(
                    400,
                    "BadRequest",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
                );
            }
            (None, None) => (st.rv, None, limit),
            (Some(v), m) => {
                let Ok(n) = v.parse::<u64>() else {
                    return status_response(400, "BadRequest", format!("resourceVersion: Invalid value: {v:?}"));
                };
                match m {
                    None | Some("NotOlderThan") if n > st.rv => return too_large(n, st.rv),
                    // "0" is served from the watch cache, which ignores limit.
                    None | Some("NotOlderThan") => (st.rv, None, if n == 0 { None } else { limit }),
                    Some("Exact") if n == 0 => {
                        return status_response(
                            400,
                            "BadRequest",
                            "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"".into(),
                        );
                    }
                    Some("Exact") if n < st.compacted => {
                        return status_response(
                            410,
                            "Expired",
                            format!("too old resource version: {n} ({})", st.compacted),
                        );
                    }
                    Some("Exact") if n > st.rv => return too_large(n, st.rv),
                    Some("Exact") => (n, None, limit),
                    Some(other) => {
                        return status_response(
                            400,
                            "BadRequest",
                            format!("resourceVersionMatch: Unsupported value: {other:?}"),
                        );
                    }
                }
            }
        }
    };
    let snapshot = st.snapshot_at(snapshot_rv);
    let range = match &start_after {
        Some(k) => snapshot.range((Bound::Excluded(k.clone()), Bound::Unbounded)),
        None => snapshot.range(..),
    };
    let mut selected = range.filter(|(k, v)| filter.selects(k, v));
    let mut items: Vec<String> = Vec::new();
    let mut last_key = None;
    for (k, v) in selected.by_ref() {
        items.push(v.to_string());
        last_key = Some(k.clone());
        if limit.is_some_and(|l| items.len() >= l) {
            break;
        }
    }
    let remaining = selected.count();
    let mut metadata = json!({"resourceVersion": snapshot_rv.to_string()});
    if remaining > 0
        && let Some(k) = last_key
    {
        metadata["continue"] = json!(encode_continue(snapshot_rv, &k));
        if !filter.is_filtered() {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    let body = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[{}]}}",
        json!(format!("{}List", ty.kind)),
        json!(ty.api_version()),
        metadata,
        items.join(",")
    );
    json_response(StatusCode::OK, body)
}

fn too_large(requested: u64, current: u64) -> Response<Body> {
    let mut status =
        status_object(504, "Timeout", format!("Too large resource version: {requested}, current: {current}"));
    status["details"] = json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1
    });
    let mut response = json_response(StatusCode::GATEWAY_TIMEOUT, status.to_string());
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    response
}

fn serve_watch(shared: &Arc<Shared>, route: &Route, query: &[(String, String)]) -> Response<Body> {
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let filter = match Filter::new(route, query) {
        Ok(f) => f,
        Err(msg) => return status_response(400, "BadRequest", msg),
    };
    let bookmarks = match param("allowWatchBookmarks").map(parse_bool) {
        None => false,
        Some(Some(b)) => b,
        Some(None) => return status_response(400, "BadRequest", "allowWatchBookmarks: invalid value".into()),
    };
    let timeout = match param("timeoutSeconds").map(str::parse::<u64>) {
        None => None,
        Some(Ok(s)) => Some(Duration::from_secs(s)),
        Some(Err(_)) => return status_response(400, "BadRequest", "timeoutSeconds: invalid value".into()),
    };
    let from = match param("resourceVersion").map(str::parse::<u64>) {
        None | Some(Ok(0)) => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return status_response(400, "BadRequest", "resourceVersion: invalid value".into()),
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let mut lines = Vec::new();
    let ty = {
        let mut st = shared.state.lock();
        match from {
            Some(n) if n < st.compacted => {
                let message = format!("too old resource version: {n} ({})", st.compacted);
                return match st.gone_style {
                    GoneStyle::HttpStatus => status_response(410, "Expired", message),
                    GoneStyle::ErrorEvent => {
                        let line = event_line("ERROR", &status_object(410, "Expired", message));
                        let body = Full::new(Bytes::from(line)).map_err(|never| match never {}).boxed_unsync();
                        watch_response(body)
                    }
                };
            }
            // Events strictly after n.
            Some(n) => {
                lines.extend(st.log.iter().filter(|e| e.rv > n).filter_map(|e| filter.render(e)));
            }
            // Get state and start at most recent: synthetic adds.
            None => {
                lines.extend(
                    st.objects.iter().filter(|(k, v)| filter.selects(k, v)).map(|(_, v)| event_line("ADDED", v)),
                );
            }
        }
        st.watchers.push(tx);
        st.types[route.ty].clone()
    };
    let (body_tx, mut body_rx) = mpsc::unbounded_channel::<Result<Frame<Bytes>, std::io::Error>>();
    shared.open_watches.fetch_add(1, Ordering::SeqCst);
    tokio::spawn(watch_task(shared.clone(), filter, ty, bookmarks, timeout, lines, rx, body_tx));
    let stream = futures::stream::poll_fn(move |cx| body_rx.poll_recv(cx));
    watch_response(StreamBody::new(stream).boxed_unsync())
}

#[allow(clippy::too_many_arguments)]
async fn watch_task(
    shared: Arc<Shared>,
    filter: Filter,
    ty: ResourceType,
    bookmarks: bool,
    timeout: Option<Duration>,
    backlog: Vec<String>,
    mut signals: mpsc::UnboundedReceiver<Signal>,
    body: mpsc::UnboundedSender<Result<Frame<Bytes>, std::io::Error>>,
) {
    struct Open(Arc<Shared>);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _open = Open(shared);
    let send = |line: String| body.send(Ok(Frame::data(Bytes::from(line)))).is_ok();
    for line in backlog {
        if !send(line) {
            return;
        }
    }
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    loop {
        let signal = tokio::select! {
            s = signals.recv() => s,
            _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => return,
            _ = body.closed() => return,
        };
        match signal {
            None => return,
            Some(Signal::Event(e)) => {
                if let Some(line) = filter.render(&e)
                    && !send(line)
                {
                    return;
                }
            }
            Some(Signal::Bookmark(rv)) => {
                if bookmarks {
                    let obj = json!({
                        "kind": ty.kind,
                        "apiVersion": ty.api_version(),
                        "metadata": {"resourceVersion": rv.to_string(), "creationTimestamp": null},
                    });
                    if !send(event_line("BOOKMARK", &obj)) {
                        return;
                    }
                }
            }
            Some(Signal::Drop) => {
                // A body error makes hyper abort the connection mid-chunk.
                let _ = body.send(Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "dropped by test")));
                return;
            }
            Some(Signal::Expire { oldest }) => {
                let status =
                    status_object(410, "Expired", format!("too old resource version: watch expired ({oldest})"));
                let _ = send(event_line("ERROR", &status));
                return;
            }
        }
    }
}

fn event_line(kind: &str, object: &Value) -> String {
    format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
}

fn watch_response(body: Body) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .expect("response")
}

fn json_response(code: StatusCode, body: String) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync())
        .expect("response")
}

/// A `metav1.Status` failure object.
fn status_object(code: u16, reason: &str, message: String) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn status_response(code: u16, reason: &str, message: String) -> Response<Body> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, status_object(code, reason, message).to_string())
}

/// The `StatusReason` the API server uses for an HTTP code.
fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

fn encode_continue(rv: u64, start: &Key) -> String {
    let raw = format!("{rv}\0{}\0{}\0{}", start.ty, start.namespace, start.name);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Option<(u64, Key)> {
    let bytes: Option<Vec<u8>> =
        (0..token.len()).step_by(2).map(|i| token.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.split('\0');
    let rv = parts.next()?.parse().ok()?;
    let ty = parts.next()?.parse().ok()?;
    let key = Key { ty, namespace: parts.next()?.into(), name: parts.next()?.into() };
    Some((rv, key))
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Decodes an `application/x-www-form-urlencoded` query.
fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if s.get(i + 1..i + 3).is_some_and(|h| u8::from_str_radix(h, 16).is_ok()) => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).expect("hex"));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn rfc3339_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Exists,
    NotExists,
    In,
    NotIn,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector (Kubernetes `labels.Parse`): requirements joined
/// by commas, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<(String, LabelOp, Vec<String>)>);

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Not,
    Eq,
    NotEq,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
}

fn lex(s: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '!' if chars.peek() == Some(&'=') => {
                chars.next();
                toks.push(Tok::NotEq);
            }
            '!' => toks.push(Tok::Not),
            '=' => {
                if chars.peek() == Some(&'=') {
                    chars.next();
                }
                toks.push(Tok::Eq);
            }
            '(' => toks.push(Tok::Open),
            ')' => toks.push(Tok::Close),
            ',' => toks.push(Tok::Comma),
            '>' => toks.push(Tok::Gt),
            '<' => toks.push(Tok::Lt),
            c => {
                let mut id = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || "!=(),<>".contains(n) {
                        break;
                    }
                    id.push(n);
                    chars.next();
                }
                toks.push(Tok::Ident(id));
            }
        }
    }
    toks
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e,!f,g in (x,y),h notin (z),i>1,j<2`. The empty
    /// string selects everything.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let err = |what: &str| format!("unable to parse requirement: {what} in label selector {s:?}");
        let toks = lex(s);
        let mut reqs = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            let negated = toks[i] == Tok::Not;
            if negated {
                i += 1;
            }
            let Some(Tok::Ident(key)) = toks.get(i) else { return Err(err("expected a key")) };
            i += 1;
            let ident = |i: usize| match toks.get(i) {
                Some(Tok::Ident(v)) => Some(v.clone()),
                _ => None,
            };
            let req = if negated {
                (key.clone(), LabelOp::NotExists, vec![])
            } else {
                match toks.get(i) {
                    None | Some(Tok::Comma) => (key.clone(), LabelOp::Exists, vec![]),
                    Some(op @ (Tok::Eq | Tok::NotEq)) => {
                        i += 1;
                        let value = ident(i).inspect(|_| i += 1).unwrap_or_default();
                        let op = if *op == Tok::Eq { LabelOp::In } else { LabelOp::NotIn };
                        (key.clone(), op, vec![value])
                    }
                    Some(op @ (Tok::Gt | Tok::Lt)) => {
                        i += 1;
                        let n =
                            ident(i).and_then(|v| v.parse::<i64>().ok()).ok_or_else(|| err("expected an integer"))?;
                        i += 1;
                        (key.clone(), if *op == Tok::Gt { LabelOp::Gt(n) } else { LabelOp::Lt(n) }, vec![])
                    }
                    Some(Tok::Ident(op)) if op == "in" || op == "notin" => {
                        let op = if op == "in" { LabelOp::In } else { LabelOp::NotIn };
                        i += 1;
                        if toks.get(i) != Some(&Tok::Open) {
                            return Err(err("expected '('"));
                        }
                        i += 1;
                        let mut values = Vec::new();
                        loop {
                            match toks.get(i) {
                                Some(Tok::Ident(v)) => values.push(v.clone()),
                                Some(Tok::Close) if values.is_empty() => {
                                    return Err(err("for 'in', 'notin' operators, values set can't be empty"));
                                }
                                _ => return Err(err("expected a value")),
                            }
                            i += 1;
                            match toks.get(i) {
                                Some(Tok::Comma) => i += 1,
                                Some(Tok::Close) => break,
                                _ => return Err(err("expected ',' or ')'")),
                            }
                        }
                        i += 1;
                        (key.clone(), op, values)
                    }
                    _ => return Err(err("unexpected token")),
                }
            };
            reqs.push(req);
            match toks.get(i) {
                None => break,
                Some(Tok::Comma) if i + 1 < toks.len() => i += 1,
                _ => return Err(err("expected ','")),
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj["metadata"]["labels"].as_object();
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|(key, op, values)| match (op, get(key)) {
            (LabelOp::Exists, v) => v.is_some(),
            (LabelOp::NotExists, v) => v.is_none(),
            (LabelOp::In, Some(v)) => values.iter().any(|x| x == v),
            (LabelOp::In, None) => false,
            (LabelOp::NotIn, Some(v)) => !values.iter().any(|x| x == v),
            (LabelOp::NotIn, None) => true,
            (LabelOp::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v > *n),
            (LabelOp::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v < *n),
            (LabelOp::Gt(_) | LabelOp::Lt(_), None) => false,
        })
    }
}

/// A parsed field selector over `metadata.name` and `metadata.namespace`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(bool, String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=a,metadata.namespace!=b` (`=`, `==`, `!=`).
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: {s:?}; can't understand {part:?}"));
            };
            let is_name = match field.trim() {
                "metadata.name" => true,
                "metadata.namespace" => false,
                other => return Err(format!("field label not supported: {other}")),
            };
            reqs.push((is_name, field.trim().to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    fn matches(&self, key: &Key) -> bool {
        self.0.iter().all(|(is_name, _, equal, value)| {
            let actual = if *is_name { &key.name } else { &key.namespace };
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(l: &[(&str, &str)]) -> Value {
        config_map("ns", "x", l, &[])
    }

    #[test]
    fn label_selector_equality_and_existence() {
        let s = LabelSelector::parse("app=web,tier!=db,env,!legacy").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("env", "p")])));
        assert!(s.matches(&labels(&[("app", "web"), ("env", "p"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "p"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "p"), ("legacy", "")])));
        assert!(!s.matches(&labels(&[("app", "api"), ("env", "p")])));
        assert!(LabelSelector::parse("").unwrap().matches(&labels(&[])));
        assert!(LabelSelector::parse("app==web").unwrap().matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn label_selector_set_based() {
        let s = LabelSelector::parse("env in (prod, staging),tier notin (db),x>2").unwrap();
        assert!(s.matches(&labels(&[("env", "prod"), ("x", "3")])));
        assert!(s.matches(&labels(&[("env", "staging"), ("tier", "fe"), ("x", "9")])));
        assert!(!s.matches(&labels(&[("env", "dev"), ("x", "3")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("tier", "db"), ("x", "3")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("x", "1")])));
    }

    #[test]
    fn label_selector_rejects_garbage() {
        for bad in ["app=web,", "in (a)", "a in ()", "a in (b", "a b", "=x", "a>b"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn field_selector() {
        let s = FieldSelector::parse("metadata.name=a,metadata.namespace!=kube-system").unwrap();
        let key = |ns: &str, n: &str| Key { ty: 0, namespace: ns.into(), name: n.into() };
        assert!(s.matches(&key("default", "a")));
        assert!(!s.matches(&key("kube-system", "a")));
        assert!(!s.matches(&key("default", "b")));
        assert!(FieldSelector::parse("spec.nodeName=x").unwrap_err().contains("field label not supported"));
    }

    #[test]
    fn routes() {
        let types = vec![ResourceType::config_maps(), ResourceType::namespaces(), ResourceType::deployments()];
        let r = route(&types, "/api/v1/namespaces/ns/configmaps").unwrap();
        assert_eq!((r.ty, r.namespace.as_deref(), r.name.as_deref()), (0, Some("ns"), None));
        let r = route(&types, "/api/v1/configmaps").unwrap();
        assert_eq!((r.ty, r.namespace.as_deref()), (0, None));
        let r = route(&types, "/api/v1/namespaces/ns").unwrap();
        assert_eq!((r.ty, r.name.as_deref()), (1, Some("ns")));
        let r = route(&types, "/apis/apps/v1/namespaces/ns/deployments/d").unwrap();
        assert_eq!((r.ty, r.namespace.as_deref(), r.name.as_deref()), (2, Some("ns"), Some("d")));
        assert!(route(&types, "/api/v1/namespaces/ns/namespaces").is_none());
        assert!(route(&types, "/api/v1/pods").is_none());
        assert!(route(&types, "/healthz").is_none());
    }

    #[test]
    fn query_and_continue_round_trip() {
        let q = parse_query("labelSelector=app%3Dweb%2Ctier%21%3Ddb&watch=true&x=a+b");
        assert_eq!(q[0], ("labelSelector".into(), "app=web,tier!=db".into()));
        assert_eq!(q[2].1, "a b");
        let key = Key { ty: 3, namespace: "ns".into(), name: "n".into() };
        assert_eq!(decode_continue(&encode_continue(42, &key)), Some((42, key)));
        assert_eq!(decode_continue("zz"), None);
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let ts = rfc3339_now();
        assert_eq!(ts.len(), 20, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
    }

    async fn get(server: &ApiServer, path_and_query: &str) -> (u16, Value) {
        let req = hyper::Request::get(path_and_query).body(Vec::new()).unwrap();
        match server.client().request_text(req).await {
            Ok(text) => (200, serde_json::from_str(&text).unwrap()),
            Err(kube::Error::Api(s)) => (s.code, serde_json::to_value(&*s).unwrap()),
            Err(e) => panic!("{e}"),
        }
    }

    #[tokio::test]
    async fn list_resource_version_semantics_and_paging() {
        let server = ApiServer::start().await;
        let a = server.create(config_map("ns", "a", &[], &[])).unwrap();
        server.create(config_map("ns", "b", &[], &[])).unwrap();
        let rv_ab = server.resource_version();
        server.create(config_map("ns", "c", &[], &[])).unwrap();
        server.delete_config_map("ns", "a").unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "2");

        let (code, list) = get(&server, "/api/v1/namespaces/ns/configmaps").await;
        assert_eq!(code, 200);
        assert_eq!(list["kind"], "ConfigMapList");
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["metadata"]["resourceVersion"], server.resource_version());
        let names: Vec<_> = list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].clone()).collect();
        assert_eq!(names, vec!["b", "c"]);
        assert_eq!(list["items"][0]["kind"], "ConfigMap");

        // Exact: the state at that version.
        let (_, list) =
            get(&server, &format!("/api/v1/configmaps?resourceVersion={rv_ab}&resourceVersionMatch=Exact")).await;
        assert_eq!(list["metadata"]["resourceVersion"], rv_ab);
        assert_eq!(list["items"].as_array().unwrap().len(), 2);
        assert_eq!(list["items"][0]["metadata"]["name"], "a");

        // Future versions time out; compacted ones are gone.
        // (Raw: kube's client retries a 504 fifteen times.)
        let (head, body, _) = raw_get(&server, "/api/v1/configmaps?resourceVersion=999").await;
        assert!(head.starts_with("HTTP/1.1 504 Gateway Timeout\r\n"), "{head}");
        assert!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head}");
        let status: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["reason"], "Timeout");
        assert_eq!(status["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        server.compact();
        let (code, status) =
            get(&server, &format!("/api/v1/configmaps?resourceVersion={rv_ab}&resourceVersionMatch=Exact")).await;
        assert_eq!((code, status["reason"].as_str()), (410, Some("Expired")));

        // Paging over a consistent snapshot, even across compaction-free changes.
        for n in ["d", "e", "f"] {
            server.create(config_map("ns", n, &[], &[])).unwrap();
        }
        let (_, page1) = get(&server, "/api/v1/configmaps?limit=2").await;
        let token = page1["metadata"]["continue"].as_str().unwrap().to_string();
        assert_eq!(page1["metadata"]["remainingItemCount"], 3);
        server.create(config_map("ns", "g", &[], &[])).unwrap();
        let (_, page2) = get(&server, &format!("/api/v1/configmaps?limit=2&continue={token}")).await;
        let (_, page3) = get(
            &server,
            &format!("/api/v1/configmaps?limit=2&continue={}", page2["metadata"]["continue"].as_str().unwrap()),
        )
        .await;
        assert_eq!(page3["metadata"].get("continue"), None);
        let all: Vec<_> = [&page1, &page2, &page3]
            .iter()
            .flat_map(|p| p["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].clone()))
            .collect();
        assert_eq!(all, vec!["b", "c", "d", "e", "f"]);
        assert_eq!(page3["metadata"]["resourceVersion"], page1["metadata"]["resourceVersion"]);
        server.compact();
        let (code, _) = get(&server, &format!("/api/v1/configmaps?limit=2&continue={token}")).await;
        assert_eq!(code, 410);

        let (code, status) = get(&server, "/api/v1/configmaps?labelSelector=a%20in%20(").await;
        assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
        let (code, _) = get(&server, "/api/v1/namespaces/ns/configmaps/b").await;
        assert_eq!(code, 200);
        let (code, status) = get(&server, "/api/v1/namespaces/ns/configmaps/nope").await;
        assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
        let (code, _) = get(&server, "/apis/example.com/v1/widgets").await;
        assert_eq!(code, 404);
        assert_eq!(server.lists().len(), 9);
    }

    /// A raw HTTP exchange: the head, the de-chunked body, and whether the
    /// body ended with the terminating chunk.
    async fn raw_get(server: &ApiServer, path_and_query: &str) -> (String, String, bool) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let req = format!("GET {path_and_query} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await.unwrap().unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, mut rest) = text.split_once("\r\n\r\n").unwrap();
        if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            return (head.to_string(), rest.to_string(), true);
        }
        let mut body = String::new();
        loop {
            let Some((size, after)) = rest.split_once("\r\n") else { return (head.to_string(), body, false) };
            let size = usize::from_str_radix(size, 16).unwrap();
            if size == 0 {
                return (head.to_string(), body, true);
            }
            body.push_str(&after[..size]);
            rest = after[size..].strip_prefix("\r\n").unwrap();
        }
    }

    #[tokio::test]
    async fn watch_wire_format() {
        let server = ApiServer::start().await;
        server.create(config_map("ns", "a", &[("app", "web")], &[])).unwrap();
        let rv = server.resource_version();
        server.create(config_map("ns", "b", &[("app", "web")], &[])).unwrap();
        server.create(config_map("ns", "c", &[("app", "db")], &[])).unwrap();
        let (head, body, clean) = raw_get(
            &server,
            &format!(
                "/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb&allowWatchBookmarks=true&timeoutSeconds=1"
            ),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
        // Only b: a is not after rv, c does not match. After timeoutSeconds
        // the stream ends cleanly, with the terminating chunk.
        assert!(clean);
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines.len(), 1, "{body}");
        assert!(lines[0].starts_with(r#"{"type":"ADDED","object":{"#), "{body}");
        let ev: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(ev["object"]["metadata"]["name"], "b");
        assert_eq!(ev["object"]["kind"], "ConfigMap");
        assert!(
            ev["object"]["metadata"]["uid"].is_string() && ev["object"]["metadata"]["creationTimestamp"].is_string()
        );

        // Compacted: an ERROR event (default) or an HTTP 410.
        server.compact();
        let (head, body, clean) =
            raw_get(&server, &format!("/api/v1/configmaps?watch=true&resourceVersion={rv}")).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && clean, "{head}");
        assert!(body.starts_with(r#"{"type":"ERROR","object":{"#), "{body}");
        let ev: Value = serde_json::from_str(body.trim_end()).unwrap();
        assert_eq!(ev["object"]["kind"], "Status");
        assert_eq!(ev["object"]["code"], 410);
        assert_eq!(ev["object"]["reason"], "Expired");
        assert!(ev["object"]["message"].as_str().unwrap().starts_with("too old resource version: "));
        server.set_gone_style(GoneStyle::HttpStatus);
        let (head, body, _) = raw_get(&server, &format!("/api/v1/configmaps?watch=true&resourceVersion={rv}")).await;
        assert!(head.starts_with("HTTP/1.1 410 Gone\r\n"), "{head}");
        let status: Value = serde_json::from_str(&body).unwrap();
        assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("Expired")));
    }

    #[tokio::test]
    async fn watch_selection_changes_bookmarks_and_drops() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let server = ApiServer::start().await;
        let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let req = "GET /api/v1/configmaps?watch=true&labelSelector=app%3Dweb&allowWatchBookmarks=true HTTP/1.1\r\nHost: x\r\n\r\n";
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut lines = BufReader::new(stream).lines();
        // Headers.
        while !lines.next_line().await.unwrap().unwrap().is_empty() {}
        let mut next_event = async || loop {
            let line = lines.next_line().await.unwrap().unwrap();
            if line.starts_with('{') {
                return serde_json::from_str::<Value>(&line).unwrap();
            }
        };
        server.create(config_map("ns", "a", &[("app", "db")], &[])).unwrap();
        server.update(config_map("ns", "a", &[("app", "web")], &[])).unwrap();
        let ev = next_event().await;
        assert_eq!(
            (ev["type"].as_str(), ev["object"]["metadata"]["resourceVersion"].as_str()),
            (Some("ADDED"), Some("3"))
        );
        server.update(config_map("ns", "a", &[("app", "web")], &[("k", "v")])).unwrap();
        assert_eq!(next_event().await["type"], "MODIFIED");
        server.update(config_map("ns", "a", &[("app", "db")], &[])).unwrap();
        let ev = next_event().await;
        assert_eq!(ev["type"], "DELETED");
        // The previous state, at the new version.
        assert_eq!(ev["object"]["metadata"]["labels"]["app"], "web");
        assert_eq!(ev["object"]["metadata"]["resourceVersion"], "5");
        let rv = server.bookmark();
        let ev = next_event().await;
        assert_eq!(
            ev,
            json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"resourceVersion": rv, "creationTimestamp": null}}})
        );
        assert_eq!(server.open_watches(), 1);
        assert_eq!(server.drop_watches(), 1);
        // The connection ends without the terminating chunk.
        while let Ok(Some(line)) = lines.next_line().await {
            assert_ne!(line, "0", "clean end after a drop");
        }
        crate::eventually("the dropped watch to close", || server.open_watches() == 0).await;
    }
}
