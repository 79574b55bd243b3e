//! The example controllers of `plugins/examples` (the reloader and
//! namespace-defaults) converge against both backends a controller writes
//! to, with the number of writes the docs promise (docs/controllers.md,
//! "Writes at a glance"):
//!
//! - the test API server, through a [`KubeWriter`] and informers on the
//!   kube source (writes counted in the server's request log);
//! - the embedded store, through [`EmbeddedCluster`] and informers on its
//!   views (writes counted by [`Counting`], a wrapper around its writer).
//!
//! One test body per controller runs on each backend. The test changes the
//! cluster as someone else would (the API server's control API, or the
//! embedded store directly): those changes are not counted. The
//! namespace-defaults body also runs the Python, JavaScript and Go twins
//! (`plugins/examples/python-namespace-defaults`, `plugins/examples/js-namespace-defaults`,
//! `plugins/examples/go-namespace-defaults`, built by
//! `plugins/build-other-languages.sh`), which must send exactly the writes
//! the Rust one sends.
//!
//! Every informer resyncs each second (the shortest resync there is), so
//! "no write on resync" is shown by waiting, after convergence, for
//! reconciles that only a resync can cause ([`Harness::resynced`]), then
//! checking that the write count did not move. No test sleeps to make a
//! point.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use e2e::apiserver::{ApiServer, RecordedRequest, RequestKind, ResourceType, namespace};
use e2e::eventually;
use e2e::plugins::{Log, is_other_language, shared_runtime, spec};
use futures::future::BoxFuture;
use informer_host::cluster::embedded::EmbeddedCluster;
use informer_host::cluster::kube_writer::KubeWriter;
use informer_host::cluster::{ClusterWriter, DeleteOptions, Patch, Target, WriteError, WriteParams, WriteRequest};
use informer_host::controller::{
    ControllerOptions, ControllerRunner, GuardConfig, Mapping, Secondary, WriteGuard, WriteRule,
};
use informer_host::informer::{InformerOptions, SharedIndexInformer};
use informer_host::plugin::Grants;
use informer_host::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use informer_host::source::manifests::ManifestFilter;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The informers' resync period: the minimum the informer allows.
const RESYNC: Duration = Duration::from_secs(1);

/// One write a controller sent, the same for both backends.
#[derive(Debug, Clone)]
struct Write {
    /// `create`, `update`, `patch`, `delete`.
    verb: &'static str,
    kind: String,
    namespace: Option<String>,
    /// Empty for a create whose name the server chose (an Event over HTTP).
    name: String,
    /// `merge`, `json` or `apply` for a patch.
    patch: Option<&'static str>,
    /// The field manager the write was sent with (over HTTP: only when the
    /// request names one).
    field_manager: Option<String>,
    /// The body: the object, the patch, or nothing.
    body: Value,
}

impl Write {
    /// `patch Deployment shop/web`.
    fn line(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {} {ns}/{}", self.verb, self.kind, self.name),
            None => format!("{} {} {}", self.verb, self.kind, self.name),
        }
    }
}

/// The kind served at a plural (the kinds these controllers write).
fn kind_of(plural: &str) -> String {
    match plural {
        "deployments" => "Deployment",
        "events" => "Event",
        "resourcequotas" => "ResourceQuota",
        "limitranges" => "LimitRange",
        "rolebindings" => "RoleBinding",
        "configmaps" => "ConfigMap",
        "secrets" => "Secret",
        "namespaces" => "Namespace",
        other => other,
    }
    .to_string()
}

impl Write {
    /// A write request the API server received.
    fn of_request(r: &RecordedRequest) -> Write {
        // /api/v1/namespaces/{ns}/{plural}[/{name}] or /apis/{g}/{v}/...
        let segments: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
        let rest = if segments[0] == "api" { &segments[2..] } else { &segments[3..] };
        let (namespace, rest) = match rest {
            ["namespaces", ns, plural, rest @ ..] => (Some(ns.to_string()), [&[*plural][..], rest].concat()),
            rest => (None, rest.to_vec()),
        };
        let verb = match r.kind {
            RequestKind::Create => "create",
            RequestKind::Update => "update",
            RequestKind::Patch => "patch",
            RequestKind::Delete => "delete",
            other => panic!("not a write: {other:?}"),
        };
        let patch = r.content_type.as_deref().and_then(|t| match t.split(';').next().unwrap_or("") {
            "application/merge-patch+json" => Some("merge"),
            "application/json-patch+json" => Some("json"),
            "application/apply-patch+yaml" => Some("apply"),
            _ => None,
        });
        Write {
            verb,
            kind: kind_of(rest[0]),
            namespace,
            name: rest.get(1).map(|n| n.to_string()).unwrap_or_default(),
            patch: patch.filter(|_| verb == "patch"),
            field_manager: r.param("fieldManager").map(str::to_owned),
            body: r.json().unwrap_or(Value::Null),
        }
    }

    /// A write the embedded store was asked for.
    fn of_write(request: &WriteRequest, params: &WriteParams) -> Write {
        let target = request.target().unwrap();
        let (patch, body) = match request {
            WriteRequest::Create(v) | WriteRequest::Replace(v) | WriteRequest::ReplaceStatus(v) => (None, v.clone()),
            WriteRequest::Patch { patch, .. } | WriteRequest::PatchStatus { patch, .. } => match patch {
                Patch::Merge(v) => (Some("merge"), v.clone()),
                Patch::Json(v) => (Some("json"), v.clone()),
                Patch::Apply { config, .. } => (Some("apply"), config.clone()),
            },
            WriteRequest::Delete { .. } => (None, Value::Null),
            WriteRequest::RecordEvent { reason, message, event_type, .. } => {
                (None, json!({"type": event_type.as_str(), "reason": reason, "message": message}))
            }
        };
        // The Event's name is the backend's choice, as over HTTP.
        let name = if matches!(request, WriteRequest::RecordEvent { .. }) { String::new() } else { target.name };
        let field_manager = Some(params.field_manager.clone());
        Write { verb: request.verb(), kind: target.kind, namespace: target.namespace, name, patch, field_manager, body }
    }
}

/// The embedded store's writer, recording each write it is asked for.
struct Counting {
    inner: Arc<dyn ClusterWriter>,
    writes: Arc<Mutex<Vec<Write>>>,
}

impl ClusterWriter for Counting {
    fn write(&self, request: WriteRequest, params: WriteParams) -> BoxFuture<'_, Result<Option<Value>, WriteError>> {
        self.writes.lock().push(Write::of_write(&request, &params));
        self.inner.write(request, params)
    }
}

/// Where the controller writes and its informers read.
enum Backend {
    Api(ApiServer),
    Embedded { cluster: Arc<EmbeddedCluster>, writes: Arc<Mutex<Vec<Write>>> },
}

/// Someone else's writes to the embedded store (not counted).
fn others() -> WriteParams {
    WriteParams { field_manager: "kubectl".into(), dry_run: false, impersonate: None }
}

impl Backend {
    async fn api(extra: &[ResourceType]) -> Backend {
        let server = ApiServer::start().await;
        for ty in extra {
            server.register(ty.clone());
        }
        Backend::Api(server)
    }

    fn embedded() -> Backend {
        Backend::Embedded { cluster: EmbeddedCluster::in_memory(), writes: Arc::default() }
    }

    fn informer(&self, api_version: &str, kind: &str) -> SharedIndexInformer {
        let options =
            InformerOptions { name: kind.to_lowercase(), default_resync_period: RESYNC, ..Default::default() };
        match self {
            Backend::Api(server) => {
                let source = KubeSource::new(
                    server.client(),
                    &KubeResource::new(api_version, kind),
                    KubeSourceOptions::default(),
                );
                SharedIndexInformer::new(source, options)
            }
            Backend::Embedded { cluster, .. } => SharedIndexInformer::new(
                cluster.view(ManifestFilter::default().api_version(api_version).kind(kind)),
                options,
            ),
        }
    }

    fn writer(&self) -> Arc<dyn ClusterWriter> {
        match self {
            Backend::Api(server) => Arc::new(KubeWriter::from_config(server.config()).unwrap()),
            Backend::Embedded { cluster, writes } => {
                Arc::new(Counting { inner: cluster.writer(), writes: writes.clone() })
            }
        }
    }

    /// Every write the controller sent, in order.
    fn writes(&self) -> Vec<Write> {
        match self {
            Backend::Api(server) => server.writes().iter().map(Write::of_request).collect(),
            Backend::Embedded { writes, .. } => writes.lock().clone(),
        }
    }

    fn lines(&self) -> Vec<String> {
        self.writes().iter().map(Write::line).collect()
    }

    /// Creates `obj`, or replaces it whole (as `kubectl replace`).
    fn put(&self, obj: Value) {
        match self {
            Backend::Api(server) => {
                server.apply(obj).unwrap();
            }
            Backend::Embedded { cluster, .. } => {
                let target = Target::of(&obj).unwrap();
                let request =
                    if cluster.get(&target).is_some() { WriteRequest::Replace(obj) } else { WriteRequest::Create(obj) };
                cluster.write_now(request, &others()).unwrap();
            }
        }
    }

    fn get(&self, target: &Target) -> Option<Value> {
        match self {
            Backend::Api(server) => {
                server.get(&target.api_version, &target.kind, target.namespace.as_deref(), &target.name)
            }
            Backend::Embedded { cluster, .. } => cluster.get(target).map(|v| (*v).clone()),
        }
    }

    /// The core/v1 Events stored in `namespace`.
    async fn events(&self, namespace: &str) -> Vec<Value> {
        match self {
            Backend::Api(server) => {
                let api = kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(server.client(), namespace);
                let list = api.list(&Default::default()).await.unwrap();
                list.items.into_iter().map(|e| serde_json::to_value(e).unwrap()).collect()
            }
            Backend::Embedded { cluster, .. } => {
                let prefix = format!("/Event/{namespace}/");
                let store = cluster.store();
                let keys = store.keys().into_iter().filter(|k| k.starts_with(&prefix));
                keys.filter_map(|k| store.get(&k)).map(|e| (*e).clone()).collect()
            }
        }
    }

    fn delete(&self, target: &Target) {
        match self {
            Backend::Api(server) => {
                server.delete(&target.api_version, &target.kind, target.namespace.as_deref(), &target.name).unwrap();
            }
            Backend::Embedded { cluster, .. } => {
                let request = WriteRequest::Delete { target: target.clone(), options: DeleteOptions::default() };
                cluster.write_now(request, &others()).unwrap();
            }
        }
    }
}

/// A controller on its informers over one backend.
struct Harness {
    backend: Backend,
    informers: HashMap<String, SharedIndexInformer>,
    controller: Option<ControllerRunner>,
    log: Log,
    stop: CancellationToken,
}

impl Harness {
    /// Starts `plugin` with its informers (name, apiVersion, kind; the
    /// first is the primary), and waits until everything synced.
    /// namespace-defaults (`plugin`: the Rust one or a twin) on the
    /// Namespaces, owning the three kinds it creates.
    async fn namespace_defaults(backend: Backend, plugin: &str, rules: Vec<WriteRule>) -> Harness {
        let informers = [
            ("namespaces", "v1", "Namespace"),
            ("resourcequotas", "v1", "ResourceQuota"),
            ("limitranges", "v1", "LimitRange"),
            ("rolebindings", "rbac.authorization.k8s.io/v1", "RoleBinding"),
        ];
        Harness::start(backend, plugin, &informers, Mapping::Owner, rules).await
    }

    async fn start(
        backend: Backend,
        plugin: &str,
        informers: &[(&str, &str, &str)],
        mapping: Mapping,
        rules: Vec<WriteRule>,
    ) -> Harness {
        let built: HashMap<String, SharedIndexInformer> =
            informers.iter().map(|(name, av, kind)| (name.to_string(), backend.informer(av, kind))).collect();
        let log = Log::default();
        let mut s = spec(plugin, plugin, &log);
        s.grants = Grants { log: true, cache: true, kube: true, ..Grants::default() };
        s.config_json = "{}".into();
        let guard = Arc::new(WriteGuard::new(GuardConfig { rules, ..GuardConfig::new(plugin) }, backend.writer()));
        let (primary, _, primary_kind) = informers[0];
        let options = ControllerOptions {
            secondaries: informers[1..]
                .iter()
                .map(|(name, ..)| Secondary { informer: name.to_string(), mapping: mapping.clone() })
                .collect(),
            ..ControllerOptions::new(primary, primary_kind)
        };
        let controller = {
            // A Python or JavaScript component takes seconds to compile: one
            // test compiles it (into the shared runtime and its disk cache),
            // the others wait and reuse it.
            static LOADING: Mutex<()> = Mutex::new(());
            let _one_at_a_time = is_other_language(plugin).then(|| LOADING.lock());
            ControllerRunner::start(shared_runtime(), s, &built, guard, options, None).unwrap()
        };
        let stop = CancellationToken::new();
        for informer in built.values() {
            tokio::spawn({
                let (informer, stop) = (informer.clone(), stop.clone());
                async move { informer.run(stop).await }
            });
        }
        eventually("the informers and the controller to sync", || {
            built.values().all(SharedIndexInformer::has_synced) && controller.has_synced()
        })
        .await;
        Harness { backend, informers: built, controller: Some(controller), log, stop }
    }

    fn controller(&self) -> &ControllerRunner {
        self.controller.as_ref().unwrap()
    }

    fn reconciled(&self) -> u64 {
        let stats = self.controller().stats();
        stats.succeeded.load(Ordering::SeqCst) + stats.failed.load(Ordering::SeqCst)
    }

    /// The cached object `key` of informer `informer`.
    fn cached(&self, informer: &str, key: &str) -> Option<Value> {
        self.informers[informer].store().get(key).map(|o| serde_json::from_str(o.json()).unwrap())
    }

    /// Waits until `condition` holds in the caches, then for two more
    /// reconciles. Nothing else changes meanwhile, so at most one of them
    /// is the reconcile of a change still in flight (the controller's own
    /// last write); at least one comes from a resync, which read caches
    /// where `condition` held. Every write a reconcile sends is received
    /// before the reconcile ends.
    async fn resynced(&self, what: &str, condition: impl Fn(&Harness) -> bool) {
        eventually(what, || condition(self)).await;
        let before = self.reconciled();
        eventually(format_args!("two reconciles after {what} (a resync)"), || self.reconciled() >= before + 2).await;
        assert_eq!(self.controller().stats().failed.load(Ordering::SeqCst), 0, "{:#?}", self.log.lines());
    }

    async fn stop(mut self) {
        self.controller.take().unwrap().stop().await;
        self.stop.cancel();
    }
}

/// What namespace-defaults may write: its three kinds (the RoleBinding
/// last).
fn namespace_defaults_rules() -> Vec<WriteRule> {
    vec![
        rule("", "ResourceQuota", &["patch"]),
        rule("", "LimitRange", &["patch"]),
        rule("rbac.authorization.k8s.io", "RoleBinding", &["patch", "delete"]),
    ]
}

fn namespaced(api_version: &str, kind: &str, namespace: &str, name: &str) -> Target {
    Target { api_version: api_version.into(), kind: kind.into(), namespace: Some(namespace.into()), name: name.into() }
}

fn cluster(api_version: &str, kind: &str, name: &str) -> Target {
    Target { api_version: api_version.into(), kind: kind.into(), namespace: None, name: name.into() }
}

fn rule(group: &str, kind: &str, verbs: &[&str]) -> WriteRule {
    WriteRule {
        api_groups: vec![group.into()],
        kinds: vec![kind.into()],
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        names: vec![],
    }
}

// ---------------------------------------------------------------- reloader

const ANNOTATION: &str = "informer-host.dev/config-hash";

fn web() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{
                        "name": "app", "image": "shop/web:1",
                        "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "web-config", "key": "mode"}}}],
                        "envFrom": [{"secretRef": {"name": "web-secret"}}],
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}],
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
                },
            },
        },
    })
}

fn web_config(labels: Value, mode: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web-config", "namespace": "shop", "labels": labels},
        "data": {"mode": mode, "app.conf": "listen 8080"},
    })
}

fn web_secret(token: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "web-secret", "namespace": "shop"},
        "data": {"TOKEN": token},
    })
}

/// A Deployment that uses no configuration: never written.
fn plain() -> Value {
    let mut d = web();
    d["metadata"]["name"] = json!("plain");
    d["spec"]["template"]["spec"] = json!({"containers": [{"name": "app", "image": "shop/plain:1"}]});
    d
}

fn annotation(obj: &Value, pointer: &str) -> Option<String> {
    obj.pointer(pointer)?.get(ANNOTATION)?.as_str().map(str::to_owned)
}

async fn reloader_converges(backend: Backend) {
    backend.put(namespace("shop"));
    backend.put(web_config(json!({"app": "web"}), "blue"));
    backend.put(web_secret("czNjcmV0"));
    backend.put(web());
    backend.put(plain());
    let h = Harness::start(
        backend,
        "reloader",
        &[("deployments", "apps/v1", "Deployment"), ("configmaps", "v1", "ConfigMap"), ("secrets", "v1", "Secret")],
        Mapping::Plugin,
        vec![rule("apps", "Deployment", &["patch"]), rule("", "Event", &["create"])],
    )
    .await;
    let b = &h.backend;
    let deployment = |h: &Harness| h.cached("deployments", "shop/web").unwrap();
    let meta_hash = |h: &Harness| annotation(&deployment(h), "/metadata/annotations");
    let template_hash = |h: &Harness| annotation(&deployment(h), "/spec/template/metadata/annotations");

    // First sight: one merge patch of the Deployment's own annotations,
    // which does not roll it; no Event. Then resyncs write nothing.
    h.resynced("the hash on web", |h| meta_hash(h).is_some()).await;
    assert_eq!(b.lines(), ["patch Deployment shop/web"], "{:#?}", h.log.lines());
    let first = &b.writes()[0];
    assert_eq!(first.patch, Some("merge"));
    let hash = meta_hash(&h).unwrap();
    let (first_body, locked) = without_resource_version(&first.body);
    assert_eq!(first_body, json!({"metadata": {"annotations": {ANNOTATION: hash}}}), "no pod template change");
    assert!(locked.is_some(), "the patch is made on a version: {:#}", first.body);
    assert_eq!(template_hash(&h), None);
    assert_eq!(hash.len(), 64, "a SHA-256 in hex: {hash}");

    // A label-only change of the ConfigMap: mapped, reconciled, not written.
    b.put(web_config(json!({"app": "web", "tier": "front"}), "blue"));
    h.resynced("the label in the cache", |h| {
        h.cached("configmaps", "shop/web-config").is_some_and(|c| c["metadata"]["labels"]["tier"] == "front")
    })
    .await;
    assert_eq!(b.writes().len(), 1, "{:#?}", b.lines());

    // The ConfigMap's data changes: one patch that rolls (metadata and pod
    // template), made on the version the cache shows, and one Event.
    let version = deployment(&h)["metadata"]["resourceVersion"].as_str().map(str::to_owned);
    b.put(web_config(json!({"app": "web", "tier": "front"}), "green"));
    h.resynced("a new hash on web's pod template", |h| template_hash(h).is_some_and(|t| t != hash)).await;
    let rolled = template_hash(&h).unwrap();
    assert_eq!(meta_hash(&h).as_deref(), Some(rolled.as_str()));
    let writes = b.writes();
    assert_eq!(b.lines()[1..], ["patch Deployment shop/web", "create Event shop/"], "{:#?}", h.log.lines());
    let (roll_body, locked) = without_resource_version(&writes[1].body);
    assert_eq!(
        roll_body,
        json!({"metadata": {"annotations": {ANNOTATION: rolled}},
               "spec": {"template": {"metadata": {"annotations": {ANNOTATION: rolled}}}}})
    );
    assert_eq!(locked, version, "the roll is made on the cached version");
    assert_event(&writes[2], "ConfigChanged", &rolled);

    // The Secret's data changes: the same again.
    b.put(web_secret("bjN3LXMzY3IzdA=="));
    h.resynced("another hash on web's pod template", |h| template_hash(h).is_some_and(|t| t != rolled)).await;
    let again = template_hash(&h).unwrap();
    assert_eq!(b.lines()[3..], ["patch Deployment shop/web", "create Event shop/"], "{:#?}", h.log.lines());
    assert_event(&b.writes()[4], "ConfigChanged", &again);

    // The server has what the caches show; `plain` was never written.
    let stored = b.get(&namespaced("apps/v1", "Deployment", "shop", "web")).unwrap();
    assert_eq!(annotation(&stored, "/spec/template/metadata/annotations"), Some(again));
    // Generation: 1 at creation, unchanged by the metadata-only patch, one
    // more per roll.
    assert_eq!(stored["metadata"]["generation"], 3, "{stored:#}");
    assert!(b.writes().iter().all(|w| w.name != "plain"));
    // Both Events are stored, about web.
    let events = b.events("shop").await;
    assert_eq!(events.len(), 2, "{events:#?}");
    for e in &events {
        assert_eq!((&e["reason"], &e["type"]), (&json!("ConfigChanged"), &json!("Normal")), "{e:#}");
        let involved = &e["involvedObject"];
        assert_eq!(
            (&involved["kind"], &involved["namespace"], &involved["name"], &involved["uid"]),
            (&json!("Deployment"), &json!("shop"), &json!("web"), &stored["metadata"]["uid"]),
            "{e:#}"
        );
    }
    assert_eq!(b.writes().len(), 5, "{:#?}", b.lines());
    h.stop().await;
}

/// A patch body without its `metadata.resourceVersion`, and that version
/// (the reloader's optimistic lock).
fn without_resource_version(body: &Value) -> (Value, Option<String>) {
    let mut body = body.clone();
    let version = body["metadata"].as_object_mut().and_then(|m| m.remove("resourceVersion"));
    (body, version.and_then(|v| v.as_str().map(str::to_owned)))
}

/// The Event about `web`: its reason and the start of the new hash.
fn assert_event(w: &Write, reason: &str, hash: &str) {
    let body = &w.body;
    assert_eq!(body["reason"], reason, "{body:#}");
    assert_eq!(body["type"], "Normal", "{body:#}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains(&hash[..12]), "{message}");
    if let Some(involved) = body.get("involvedObject") {
        assert_eq!(
            (&involved["kind"], &involved["namespace"], &involved["name"]),
            (&json!("Deployment"), &json!("shop"), &json!("web"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_converges_against_the_api_server() {
    reloader_converges(Backend::api(&[]).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloader_converges_against_the_embedded_store() {
    reloader_converges(Backend::embedded()).await;
}

// ------------------------------------------------------ namespace-defaults

const TENANT: &str = "informer-host.dev/tenant";

fn tenant_namespace(name: &str, tenant: Option<&str>) -> Value {
    let mut ns = namespace(name);
    if let Some(t) = tenant {
        ns["metadata"]["labels"] = json!({TENANT: t});
    }
    ns
}

fn quota(ns: &str) -> Target {
    namespaced("v1", "ResourceQuota", ns, "tenant-default")
}

fn limits(ns: &str) -> Target {
    namespaced("v1", "LimitRange", ns, "tenant-default")
}

fn binding(ns: &str) -> Target {
    namespaced("rbac.authorization.k8s.io/v1", "RoleBinding", ns, "tenant-admins")
}

/// What the namespace-defaults controllers apply to the tenant `tenant`'s
/// Namespace `ns` (with `uid`), with their default configuration: each
/// language's twin must send exactly these.
fn namespace_defaults(ns: &str, uid: &Value, tenant: &str) -> [Value; 3] {
    let metadata = |name: &str| {
        json!({
            "name": name, "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "namespace-defaults", TENANT: tenant},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": ns, "uid": uid, "controller": true}],
        })
    };
    [
        json!({
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata("tenant-default"),
            "spec": {"hard": {"pods": "50", "requests.cpu": "8", "requests.memory": "16Gi"}},
        }),
        json!({
            "apiVersion": "v1", "kind": "LimitRange", "metadata": metadata("tenant-default"),
            "spec": {"limits": [{
                "type": "Container",
                "default": {"cpu": "500m", "memory": "512Mi"},
                "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
            }]},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata("tenant-admins"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "Group", "name": format!("tenant:{tenant}"), "apiGroup": "rbac.authorization.k8s.io"}],
        }),
    ]
}

/// `plugin`: `namespace-defaults` or its Python or JavaScript twin.
async fn namespace_defaults_converge(backend: Backend, plugin: &str) {
    backend.put(tenant_namespace("team-a", Some("a")));
    backend.put(tenant_namespace("scratch", None));
    let h = Harness::namespace_defaults(backend, plugin, namespace_defaults_rules()).await;
    let b = &h.backend;
    let all_cached = |h: &Harness| {
        h.cached("resourcequotas", "team-a/tenant-default").is_some()
            && h.cached("limitranges", "team-a/tenant-default").is_some()
            && h.cached("rolebindings", "team-a/tenant-admins").is_some()
    };

    // The tenant's Namespace gets its three defaults, one forced apply
    // each, owned by it; the unlabelled one gets nothing. Resyncs (and the
    // updates the applies caused) write nothing.
    h.resynced("the three defaults in the caches", all_cached).await;
    let applied = [
        "patch ResourceQuota team-a/tenant-default",
        "patch LimitRange team-a/tenant-default",
        "patch RoleBinding team-a/tenant-admins",
    ];
    assert_eq!(b.lines(), applied, "{:#?}", h.log.lines());
    assert!(b.writes().iter().all(|w| w.patch == Some("apply")), "{:#?}", b.writes());
    assert!(b.writes().iter().all(|w| w.field_manager.as_deref() == Some(plugin)), "{:#?}", b.writes());
    let uid = b.get(&cluster("v1", "Namespace", "team-a")).unwrap()["metadata"]["uid"].clone();
    let bodies: Vec<Value> = b.writes().into_iter().map(|w| w.body).collect();
    assert_eq!(bodies, namespace_defaults("team-a", &uid, "a"), "{plugin}");
    let created = [
        "created ResourceQuota team-a/tenant-default for tenant a",
        "created LimitRange team-a/tenant-default for tenant a",
        "created RoleBinding team-a/tenant-admins for tenant a",
    ];
    assert_eq!(h.log.lines(), created, "{plugin}");
    for target in [quota("team-a"), limits("team-a"), binding("team-a")] {
        let obj = b.get(&target).unwrap_or_else(|| panic!("{target} is stored"));
        let owner = &obj["metadata"]["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["name"], &owner["uid"], &owner["controller"]),
            (&json!("Namespace"), &json!("team-a"), &uid, &json!(true)),
            "{target}: {obj:#}"
        );
        assert_eq!(obj["metadata"]["labels"][TENANT], "a", "{target}: {obj:#}");
    }
    let stored_quota = b.get(&quota("team-a")).unwrap();
    assert_eq!(stored_quota["spec"]["hard"], json!({"pods": "50", "requests.cpu": "8", "requests.memory": "16Gi"}));
    let stored_binding = b.get(&binding("team-a")).unwrap();
    assert_eq!(stored_binding["roleRef"]["name"], "admin");
    assert_eq!(stored_binding["subjects"][0]["name"], "tenant:a");
    for target in [quota("scratch"), limits("scratch"), binding("scratch")] {
        assert!(b.get(&target).is_none(), "{target} is not a tenant's");
    }

    // Someone deletes the ResourceQuota: restored by one apply, and only
    // that.
    b.delete(&quota("team-a"));
    h.resynced("the ResourceQuota restored in the cache", |h| {
        h.cached("resourcequotas", "team-a/tenant-default")
            .is_some_and(|q| q["metadata"]["uid"] != stored_quota["metadata"]["uid"])
    })
    .await;
    assert_eq!(b.lines()[3..], ["patch ResourceQuota team-a/tenant-default"], "{:#?}", h.log.lines());
    assert_eq!(b.writes()[3].body, namespace_defaults("team-a", &uid, "a")[0], "{plugin}");
    assert!(b.get(&quota("team-a")).is_some());

    // The unlabelled Namespace becomes a tenant's: its three defaults.
    b.put(tenant_namespace("scratch", Some("b")));
    h.resynced("scratch's defaults in the caches", |h| {
        h.cached("resourcequotas", "scratch/tenant-default").is_some()
            && h.cached("limitranges", "scratch/tenant-default").is_some()
            && h.cached("rolebindings", "scratch/tenant-admins").is_some()
    })
    .await;
    assert_eq!(b.lines()[4..], applied.map(|l| l.replace("team-a", "scratch")), "{:#?}", h.log.lines());
    let scratch_uid = b.get(&cluster("v1", "Namespace", "scratch")).unwrap()["metadata"]["uid"].clone();
    let bodies: Vec<Value> = b.writes()[4..].iter().map(|w| w.body.clone()).collect();
    assert_eq!(bodies, namespace_defaults("scratch", &scratch_uid, "b"), "{plugin}");
    assert_eq!(b.get(&binding("scratch")).unwrap()["subjects"][0]["name"], "tenant:b");
    assert_eq!(b.writes().len(), 7);
    assert!(b.writes().iter().all(|w| w.field_manager.as_deref() == Some(plugin)), "{:#?}", b.writes());
    let logged = h.log.lines();
    assert_eq!(
        logged[3..],
        [
            "created ResourceQuota team-a/tenant-default for tenant a".to_string(),
            "created ResourceQuota scratch/tenant-default for tenant b".into(),
            "created LimitRange scratch/tenant-default for tenant b".into(),
            "created RoleBinding scratch/tenant-admins for tenant b".into()
        ],
        "{plugin}"
    );
    h.stop().await;
}

async fn namespace_defaults_against_the_api_server(plugin: &str) {
    let types = [
        ResourceType::builtin("", "v1", "ResourceQuota", "resourcequotas", true).with_status_subresource(),
        ResourceType::builtin("", "v1", "LimitRange", "limitranges", true),
        ResourceType::builtin("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true),
    ];
    namespace_defaults_converge(Backend::api(&types).await, plugin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_converge_against_the_api_server() {
    namespace_defaults_against_the_api_server("namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_converge_against_the_embedded_store() {
    namespace_defaults_converge(Backend::embedded(), "namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_namespace_defaults_converge_against_the_api_server() {
    namespace_defaults_against_the_api_server("python-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_namespace_defaults_converge_against_the_embedded_store() {
    namespace_defaults_converge(Backend::embedded(), "python-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_namespace_defaults_converge_against_the_api_server() {
    namespace_defaults_against_the_api_server("js-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_namespace_defaults_converge_against_the_embedded_store() {
    namespace_defaults_converge(Backend::embedded(), "js-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_namespace_defaults_converge_against_the_api_server() {
    namespace_defaults_against_the_api_server("go-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_namespace_defaults_converge_against_the_embedded_store() {
    namespace_defaults_converge(Backend::embedded(), "go-namespace-defaults").await;
}

/// A write the controller's rules do not allow (here: the RoleBinding) is
/// refused by the host before it leaves, and the `forbidden` the SDK
/// answers, returned from `reconcile`, fails the reconcile (requeued with
/// backoff) without trapping the instance: the same in every language.
async fn forbidden_write_fails_the_reconcile(plugin: &str) {
    let backend = Backend::embedded();
    backend.put(tenant_namespace("team-a", Some("a")));
    let mut rules = namespace_defaults_rules();
    rules.pop();
    let h = Harness::namespace_defaults(backend, plugin, rules).await;
    let stats = h.controller().stats();
    eventually("three failed reconciles", || {
        stats.failed.load(Ordering::SeqCst) + stats.trapped.load(Ordering::SeqCst) >= 3
    })
    .await;
    assert_eq!(stats.trapped.load(Ordering::SeqCst), 0, "{plugin} trapped: {:#?}", h.log.lines());
    let lines = h.backend.lines();
    assert!(lines.iter().all(|l| !l.contains("RoleBinding")), "{plugin}: {lines:#?}");
    assert!(lines.contains(&"patch LimitRange team-a/tenant-default".to_string()), "{plugin}: {lines:#?}");
    assert!(h.log.lines().iter().all(|l| !l.contains("RoleBinding")), "{plugin}: {:#?}", h.log.lines());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_write_fails_the_reconcile_in_rust() {
    forbidden_write_fails_the_reconcile("namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_write_fails_the_reconcile_in_python() {
    forbidden_write_fails_the_reconcile("python-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_write_fails_the_reconcile_in_javascript() {
    forbidden_write_fails_the_reconcile("js-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_write_fails_the_reconcile_in_go() {
    forbidden_write_fails_the_reconcile("go-namespace-defaults").await;
}

/// A RoleBinding's roleRef cannot change: one the controller finds bound to
/// another ClusterRole (its configuration changed) is deleted, exactly
/// that one (by uid), and applied again. The same in every language.
async fn role_ref_change_replaces_the_binding(plugin: &str) {
    let backend = Backend::embedded();
    backend.put(tenant_namespace("team-a", Some("a")));
    let mut edit = namespace_defaults("team-a", &json!("stale"), "a")[2].clone();
    edit["roleRef"]["name"] = json!("edit");
    edit["metadata"].as_object_mut().unwrap().remove("ownerReferences");
    backend.put(edit);
    let old_uid = backend.get(&binding("team-a")).unwrap()["metadata"]["uid"].clone();
    let h = Harness::namespace_defaults(backend, plugin, namespace_defaults_rules()).await;
    let b = &h.backend;
    h.resynced("the binding to admin in the cache", |h| {
        h.cached("rolebindings", "team-a/tenant-admins").is_some_and(|r| r["roleRef"]["name"] == "admin")
    })
    .await;
    let expected = [
        "patch ResourceQuota team-a/tenant-default",
        "patch LimitRange team-a/tenant-default",
        "delete RoleBinding team-a/tenant-admins",
        "patch RoleBinding team-a/tenant-admins",
    ];
    assert_eq!(b.lines(), expected, "{plugin}: {:#?}", h.log.lines());
    let uid = b.get(&cluster("v1", "Namespace", "team-a")).unwrap()["metadata"]["uid"].clone();
    assert_eq!(b.writes()[3].body, namespace_defaults("team-a", &uid, "a")[2], "{plugin}");
    let stored = b.get(&binding("team-a")).unwrap();
    assert_ne!(stored["metadata"]["uid"], old_uid, "{plugin}: replaced, not patched");
    assert_eq!(h.log.lines()[2], "updated RoleBinding team-a/tenant-admins for tenant a", "{plugin}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_ref_change_replaces_the_binding_in_rust() {
    role_ref_change_replaces_the_binding("namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_ref_change_replaces_the_binding_in_python() {
    role_ref_change_replaces_the_binding("python-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_ref_change_replaces_the_binding_in_javascript() {
    role_ref_change_replaces_the_binding("js-namespace-defaults").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_ref_change_replaces_the_binding_in_go() {
    role_ref_change_replaces_the_binding("go-namespace-defaults").await;
}

// ------------------------------------------------------ benchmark

fn deployment_using(ns: &str, name: &str, config_map: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": format!("registry.example/{name}:1.0"),
                "envFrom": [{"configMapRef": {"name": config_map}}],
                "env": [{"name": "MODE", "value": "production"}],
                "ports": [{"containerPort": 8080}]}]}}},
    })
}

/// What the reloader's `map` costs per changed ConfigMap with N
/// Deployments in its namespace, reading them all (no index) against one
/// field-index lookup, and what the index costs the cache per Deployment
/// added. Run with
/// `cargo test -p e2e --test all -- --ignored --nocapture bench_reloader_map`
/// (the host crate unoptimised, its dependencies and the guest optimised).
#[test]
#[ignore]
fn bench_reloader_map_with_and_without_a_field_index() {
    use informer_host::controller::{ControllerCtx, KeyQueue};
    use informer_host::informer::{Indexer, Object, ObjectRef, field_index, parse_field_path};
    use informer_host::plugin::CacheView;
    use std::time::Instant;

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let path = "$.spec.template.spec['containers','initContainers'][*].envFrom[*].configMapRef.name";
    println!(
        "| deployments in the namespace | map, no index | map, field index | ratio | add, no index | add, field index |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for n in [10usize, 100, 1000] {
        let objs: Vec<ObjectRef> = (0..n)
            .map(|i| {
                Arc::new(Object::from_value(&deployment_using("shop", &format!("d{i}"), &format!("cfg-{i}"))).unwrap())
            })
            .collect();
        let fill = |indexed: bool| {
            let indexer = Indexer::new();
            if indexed {
                let f = field_index(vec![parse_field_path(path).unwrap()]);
                indexer.add_indexers([("configmaps".to_string(), f)].into()).unwrap();
            }
            let t = Instant::now();
            for o in &objs {
                indexer.add(o.clone());
            }
            (indexer, t.elapsed() / n as u32)
        };
        let (plain, add_plain) = fill(false);
        let (indexed, add_indexed) = fill(true);
        let changed: ObjectRef = Arc::new(
            Object::from_value(&e2e::apiserver::config_map("shop", &format!("cfg-{}", n / 2), &[], &[("A", "1")]))
                .unwrap(),
        );
        let per_map = |indexer: Indexer, config: &str| {
            let ctx = Arc::new(ControllerCtx {
                runtime: rt.handle().clone(),
                guard: Arc::new(WriteGuard::new(GuardConfig::new("reloader"), EmbeddedCluster::in_memory().writer())),
                primary: Some(CacheView::new(indexer.clone())),
                stores: [
                    ("deployments".to_string(), CacheView::new(indexer)),
                    ("configmaps".to_string(), CacheView::new(Indexer::new())),
                    ("secrets".to_string(), CacheView::new(Indexer::new())),
                ]
                .into(),
                keys: KeyQueue::default(),
            });
            let log = Log::default();
            let mut s = spec("reloader", "reloader", &log);
            s.grants = Grants { log: true, cache: true, kube: true, ..Grants::default() };
            s.config_json = config.into();
            let loaded = shared_runtime().load_controller(s, ctx.clone()).unwrap();
            let mut instance = loaded.instance(ctx).unwrap();
            assert_eq!(instance.map("configmaps", &changed).unwrap(), [format!("shop/d{}", n / 2)]);
            let rounds = (20_000 / n).max(20) as u32;
            let t = Instant::now();
            for _ in 0..rounds {
                instance.map("configmaps", &changed).unwrap();
            }
            t.elapsed() / rounds
        };
        let scan = per_map(plain, "{}");
        let lookup = per_map(indexed, r#"{"configmap_index": "configmaps"}"#);
        println!(
            "| {n} | {scan:.1?} | {lookup:.1?} | {:.0} × | {add_plain:.1?} | {add_indexed:.1?} |",
            scan.as_secs_f64() / lookup.as_secs_f64()
        );
    }
}

/// What the reloader's two field indexes (ConfigMaps and Secrets, as in
/// `examples/host.toml`) cost the cache per Deployment added and updated,
/// built apart (`field_index` each: a parse per index) against built
/// together (`field_indexers`: one parse shared), side by side. Run with
/// `cargo test -p e2e --test all -- --ignored --nocapture bench_field_indexes`.
#[test]
#[ignore]
fn bench_field_indexes_apart_and_sharing_one_parse() {
    use informer_host::informer::{
        IndexFunc, Indexer, Object, ObjectRef, field_index, field_indexers, parse_field_path,
    };
    use std::collections::{BTreeMap, HashMap};
    use std::time::{Duration, Instant};

    let queries: BTreeMap<String, Vec<String>> = [
        ("configmaps", "$.spec.template.spec['containers','initContainers'][*].envFrom[*].configMapRef.name"),
        ("secrets", "$.spec.template.spec.volumes[*].secret.secretName"),
    ]
    .into_iter()
    .map(|(name, q)| (name.to_string(), vec![q.to_string()]))
    .collect();
    let apart = || -> HashMap<String, IndexFunc> {
        queries.iter().map(|(n, q)| (n.clone(), field_index(vec![parse_field_path(&q[0]).unwrap()]))).collect()
    };
    let version = |i: usize, rev: usize| -> ObjectRef {
        let mut d = deployment_using("shop", &format!("d{i}"), &format!("cfg-{i}-{rev}"));
        d["metadata"]["resourceVersion"] = json!(rev.to_string());
        Arc::new(Object::from_value(&d).unwrap())
    };
    let n = 1000;
    let (first, second): (Vec<_>, Vec<_>) = (0..n).map(|i| (version(i, 1), version(i, 2))).unzip();
    // Per Deployment: add, then update (the index reads both versions).
    let run = |indexes: HashMap<String, IndexFunc>| -> (Duration, Duration) {
        let indexer = Indexer::new();
        indexer.add_indexers(indexes).unwrap();
        let t = Instant::now();
        first.iter().for_each(|o| drop(indexer.add(o.clone())));
        let add = t.elapsed() / n as u32;
        let t = Instant::now();
        second.iter().for_each(|o| drop(indexer.update(o.clone())));
        (add, t.elapsed() / n as u32)
    };
    println!("| two field indexes, {n} Deployments | add | update |");
    println!("| --- | --- | --- |");
    for round in 0..3 {
        let ((a1, u1), (a2, u2)) = (run(apart()), run(field_indexers(&queries).unwrap()));
        println!("| apart (round {round}) | {a1:.1?} | {u1:.1?} |");
        println!("| sharing one parse (round {round}) | {a2:.1?} | {u2:.1?} |");
    }
}
