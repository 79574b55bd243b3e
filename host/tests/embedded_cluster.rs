//! The embedded cluster: every write kind through the `ClusterWriter`
//! trait, seen by `SharedIndexInformer`s over views of the store, with the
//! API server's semantics (resourceVersions, generation, status
//! subresource, preconditions, apply, finalizers, dry runs, Events, garbage
//! collection), and file edits still flowing in.
//!
//! Store-only tests run on paused time (waits are virtual); the file test
//! needs real filesystem events and polls with a bounded wait.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use informer_host::cluster::embedded::EmbeddedCluster;
use informer_host::cluster::{
    ClusterWriter, DeleteOptions, EventType, Patch, Target, WriteError, WriteParams, WriteRequest,
};
use informer_host::informer::{FnHandler, InformerOptions, Notification, ObjectRef, SharedIndexInformer};
use informer_host::source::manifests::ManifestFilter;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TIMEOUT: Duration = Duration::from_secs(10);

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a recording handler saw: ("add" | "update" | "delete", object).
type Seen = Arc<Mutex<Vec<(&'static str, ObjectRef)>>>;

/// An informer over a view of `cluster`, and what its handler saw.
struct Watcher {
    informer: SharedIndexInformer,
    seen: Seen,
    stop: CancellationToken,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Watcher {
    async fn start(cluster: &Arc<EmbeddedCluster>, filter: ManifestFilter) -> Watcher {
        let informer = SharedIndexInformer::new(cluster.view(filter), InformerOptions::default());
        let seen: Seen = Arc::default();
        let record = seen.clone();
        let registration = informer
            .add_event_handler(FnHandler(move |n: &Notification| {
                let entry = match n {
                    Notification::Add { obj, .. } => ("add", obj.clone()),
                    Notification::Update { new, .. } => ("update", new.clone()),
                    Notification::Delete(d) => ("delete", d.object().clone()),
                };
                record.lock().push(entry);
                Ok(())
            }))
            .unwrap();
        let stop = CancellationToken::new();
        tokio::spawn({
            let (informer, stop) = (informer.clone(), stop.clone());
            async move { informer.run(stop).await }
        });
        wait_for("the initial list", || registration.has_synced()).await;
        Watcher { informer, seen, stop }
    }

    fn count(&self) -> usize {
        self.seen.lock().len()
    }

    /// Waits for the notification number `n` (0-based) and returns it.
    async fn nth(&self, n: usize) -> (&'static str, ObjectRef) {
        wait_for(&format!("notification {n}"), || self.count() > n).await;
        self.seen.lock()[n].clone()
    }
}

fn params(manager: &str) -> WriteParams {
    WriteParams { field_manager: manager.into(), dry_run: false, impersonate: None }
}

fn dry(manager: &str) -> WriteParams {
    WriteParams { dry_run: true, ..params(manager) }
}

fn target(api_version: &str, kind: &str, ns: &str, name: &str) -> Target {
    Target { api_version: api_version.into(), kind: kind.into(), namespace: Some(ns.into()), name: name.into() }
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": name}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}},
        "status": {"replicas": 7}})
}

async fn write(cluster: &EmbeddedCluster, req: WriteRequest, p: WriteParams) -> Result<Option<Value>, WriteError> {
    ClusterWriter::write(cluster, req, p).await
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn obj_rv(o: &ObjectRef) -> u64 {
    o.resource_version().unwrap().parse().unwrap()
}

fn field(o: &ObjectRef, pointer: &str) -> Value {
    o.pointer_value(pointer).unwrap_or(Value::Null)
}

#[tokio::test(start_paused = true)]
async fn create_patch_and_status_as_the_api_server_does_them() {
    let cluster = EmbeddedCluster::in_memory();
    let w = Watcher::start(&cluster, ManifestFilter::default().kind("Deployment")).await;
    let d = target("apps/v1", "Deployment", "ns", "web");

    let created = write(&cluster, WriteRequest::Create(deployment("web")), params("ctl")).await.unwrap().unwrap();
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(created["metadata"]["uid"].is_string() && created["metadata"]["creationTimestamp"].is_string());
    assert!(created.get("status").is_none(), "a create does not set a status subresource");
    assert_eq!(created["metadata"]["managedFields"][0]["manager"], "ctl");
    let (what, seen) = w.nth(0).await;
    assert_eq!((what, obj_rv(&seen)), ("add", rv(&created)));

    // A spec change: a new resourceVersion and generation 2.
    let patch = Patch::Merge(json!({"spec": {"replicas": 3}}));
    let scaled =
        write(&cluster, WriteRequest::Patch { target: d.clone(), patch }, params("ctl")).await.unwrap().unwrap();
    assert_eq!(scaled["metadata"]["generation"], 2);
    let (what, seen) = w.nth(1).await;
    assert_eq!(what, "update");
    assert!(obj_rv(&seen) > rv(&created));
    assert_eq!(field(&seen, "/spec/replicas"), 3);

    // Metadata only: no generation bump.
    let patch = Patch::Merge(json!({"metadata": {"labels": {"tier": "front"}}}));
    let labelled =
        write(&cluster, WriteRequest::Patch { target: d.clone(), patch }, params("ctl")).await.unwrap().unwrap();
    assert_eq!(labelled["metadata"]["generation"], 2);

    // The status subresource changes only status, and no generation.
    let patch = Patch::Merge(json!({"status": {"readyReplicas": 3}, "spec": {"replicas": 9}}));
    let status = write(&cluster, WriteRequest::PatchStatus { target: d.clone(), patch }, params("kubelet"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status["status"]["readyReplicas"], 3);
    assert_eq!(status["spec"]["replicas"], 3, "a status write does not change the spec");
    assert_eq!(status["metadata"]["generation"], 2);
    let (_, seen) = w.nth(3).await;
    assert_eq!(field(&seen, "/status/readyReplicas"), 3);

    // A main write does not change status.
    let patch = Patch::Merge(json!({"status": {"readyReplicas": 0}}));
    let main = write(&cluster, WriteRequest::Patch { target: d.clone(), patch }, params("ctl")).await.unwrap().unwrap();
    assert_eq!(main["status"]["readyReplicas"], 3);
    assert_eq!(rv(&main), rv(&status), "a write that changes nothing stores nothing");

    // ReplaceStatus likewise.
    let mut body = status.clone();
    body["status"] = json!({"readyReplicas": 1});
    body["spec"]["replicas"] = json!(5);
    let replaced = write(&cluster, WriteRequest::ReplaceStatus(body), params("kubelet")).await.unwrap().unwrap();
    assert_eq!(
        (replaced["status"]["readyReplicas"].clone(), replaced["spec"]["replicas"].clone()),
        (json!(1), json!(3))
    );
    assert_eq!(replaced["metadata"]["generation"], 2);

    // JSON patch, and a failing test op is Invalid.
    let patch = Patch::Json(json!([{"op": "replace", "path": "/spec/replicas", "value": 4}]));
    let j = write(&cluster, WriteRequest::Patch { target: d.clone(), patch }, params("ctl")).await.unwrap().unwrap();
    assert_eq!((j["spec"]["replicas"].clone(), j["metadata"]["generation"].clone()), (json!(4), json!(3)));
    let patch = Patch::Json(json!([{"op": "test", "path": "/spec/replicas", "value": 99}]));
    let e = write(&cluster, WriteRequest::Patch { target: d.clone(), patch }, params("ctl")).await.unwrap_err();
    assert!(matches!(e, WriteError::Invalid { .. }), "{e:?}");
}

#[tokio::test(start_paused = true)]
async fn creates_are_validated_and_unique() {
    let cluster = EmbeddedCluster::in_memory();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}, "data": {}});
    let created = write(&cluster, WriteRequest::Create(cm.clone()), params("ctl")).await.unwrap().unwrap();
    assert!(created["metadata"].get("generation").is_none(), "ConfigMaps keep no generation");
    let e = write(&cluster, WriteRequest::Create(cm), params("ctl")).await.unwrap_err();
    assert_eq!(e, WriteError::AlreadyExists("configmaps \"a\" already exists".into()));

    let generated =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "job-", "namespace": "ns"}});
    let g = write(&cluster, WriteRequest::Create(generated), params("ctl")).await.unwrap().unwrap();
    let name = g["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("job-") && name.len() == 9, "{name}");

    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_Valid", "namespace": "ns"}});
    match write(&cluster, WriteRequest::Create(bad), params("ctl")).await {
        Err(WriteError::Invalid { causes, .. }) => assert_eq!(causes[0].field, "metadata.name"),
        other => panic!("{other:?}"),
    }
    let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns"}});
    match write(&cluster, WriteRequest::Create(nameless), params("ctl")).await {
        Err(WriteError::Invalid { causes, .. }) => assert_eq!(causes[0].reason, "FieldValueRequired"),
        other => panic!("{other:?}"),
    }
    let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "other"}});
    let patch = Patch::Apply { config: cfg, force: false };
    match write(&cluster, WriteRequest::Patch { target: target("v1", "ConfigMap", "ns", "a"), patch }, params("ctl"))
        .await
    {
        Err(WriteError::Invalid { causes, .. }) => assert_eq!(causes[0].field, "metadata.namespace"),
        other => panic!("{other:?}"),
    }
    let missing = target("v1", "ConfigMap", "ns", "nope");
    let patch = Patch::Merge(json!({"data": {"x": "y"}}));
    let e = write(&cluster, WriteRequest::Patch { target: missing, patch }, params("ctl")).await.unwrap_err();
    assert!(matches!(e, WriteError::NotFound(_)), "{e:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stale_replace_is_a_conflict() {
    let cluster = EmbeddedCluster::in_memory();
    let first = write(&cluster, WriteRequest::Create(deployment("web")), params("ctl")).await.unwrap().unwrap();
    let mut newer = first.clone();
    newer["spec"]["replicas"] = json!(2);
    let second = write(&cluster, WriteRequest::Replace(newer), params("ctl")).await.unwrap().unwrap();
    assert!(rv(&second) > rv(&first));
    assert_eq!(second["metadata"]["generation"], 2);
    let mut stale = first.clone();
    stale["spec"]["replicas"] = json!(5);
    let e = write(&cluster, WriteRequest::Replace(stale.clone()), params("ctl")).await.unwrap_err();
    assert!(matches!(&e, WriteError::Conflict(m) if m.contains("the object has been modified")), "{e:?}");
    // Without a resourceVersion the replace is unconditional.
    stale["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let third = write(&cluster, WriteRequest::Replace(stale), params("ctl")).await.unwrap().unwrap();
    assert_eq!(third["spec"]["replicas"], 5);
}

#[tokio::test(start_paused = true)]
async fn apply_records_managers_and_conflicts_unless_forced() {
    let cluster = EmbeddedCluster::in_memory();
    let t = target("v1", "ConfigMap", "ns", "cfg");
    let cfg = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "ns"}, "data": {"k": v}});
    let apply =
        |v: &str, force: bool| WriteRequest::Patch { target: t.clone(), patch: Patch::Apply { config: cfg(v), force } };

    let a = write(&cluster, apply("1", false), params("alice")).await.unwrap().unwrap();
    assert_eq!(a["metadata"]["managedFields"][0]["manager"], "alice");
    assert_eq!(a["metadata"]["managedFields"][0]["operation"], "Apply");
    assert_eq!(a["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:data": {"f:k": {}}}));
    // The same value from another manager shares the field; a different one conflicts.
    write(&cluster, apply("1", false), params("bob")).await.unwrap();
    let e = write(&cluster, apply("2", false), params("bob")).await.unwrap_err();
    assert!(matches!(&e, WriteError::Conflict(m) if m.contains("\"alice\"") && m.contains(".data.k")), "{e:?}");
    let forced = write(&cluster, apply("2", true), params("bob")).await.unwrap().unwrap();
    assert_eq!(forced["data"]["k"], "2");
    let managers: Vec<&str> = forced["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["bob"]);
    // An apply needs a field manager.
    let e = write(&cluster, apply("3", false), params("")).await.unwrap_err();
    assert!(matches!(e, WriteError::Invalid { .. }), "{e:?}");
}

#[tokio::test(start_paused = true)]
async fn finalizers_delay_deletion_until_the_last_is_removed() {
    let cluster = EmbeddedCluster::in_memory();
    let w = Watcher::start(&cluster, ManifestFilter::default().kind("Deployment")).await;
    let t = target("apps/v1", "Deployment", "ns", "web");
    let mut d = deployment("web");
    d["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    let created = write(&cluster, WriteRequest::Create(d), params("ctl")).await.unwrap().unwrap();

    let wrong_uid = DeleteOptions { uid: Some("nope".into()), ..DeleteOptions::default() };
    let e = write(&cluster, WriteRequest::Delete { target: t.clone(), options: wrong_uid }, params("ctl")).await;
    assert!(matches!(e, Err(WriteError::Conflict(ref m)) if m.contains("Precondition failed: UID")), "{e:?}");
    let wrong_rv = DeleteOptions { resource_version: Some("1000".into()), ..DeleteOptions::default() };
    let e = write(&cluster, WriteRequest::Delete { target: t.clone(), options: wrong_rv }, params("ctl")).await;
    assert!(matches!(e, Err(WriteError::Conflict(_))), "{e:?}");

    let options =
        DeleteOptions { uid: created["metadata"]["uid"].as_str().map(String::from), ..DeleteOptions::default() };
    let marked =
        write(&cluster, WriteRequest::Delete { target: t.clone(), options }, params("ctl")).await.unwrap().unwrap();
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["metadata"]["generation"], 2);
    let (what, seen) = w.nth(1).await;
    assert_eq!(what, "update");
    assert!(field(&seen, "/metadata/deletionTimestamp").is_string());
    assert!(cluster.get(&t).is_some(), "still there while a finalizer is");

    let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    write(&cluster, WriteRequest::Patch { target: t.clone(), patch }, params("ctl")).await.unwrap();
    let (what, seen) = w.nth(2).await;
    assert_eq!(what, "delete");
    assert!(field(&seen, "/metadata/finalizers").is_null());
    assert!(cluster.get(&t).is_none());
    let e = write(&cluster, WriteRequest::Delete { target: t, options: DeleteOptions::default() }, params("ctl")).await;
    assert!(matches!(e, Err(WriteError::NotFound(_))), "{e:?}");
}

#[tokio::test(start_paused = true)]
async fn dry_runs_answer_and_change_nothing() {
    let cluster = EmbeddedCluster::in_memory();
    let w = Watcher::start(&cluster, ManifestFilter::default()).await;
    let t = target("apps/v1", "Deployment", "ns", "web");
    let would = write(&cluster, WriteRequest::Create(deployment("web")), dry("ctl")).await.unwrap().unwrap();
    assert_eq!(would["metadata"]["generation"], 1);
    assert!(would["metadata"].get("resourceVersion").is_none());
    assert!(cluster.get(&t).is_none());
    let rv0 = cluster.store().resource_version();

    write(&cluster, WriteRequest::Create(deployment("web")), params("ctl")).await.unwrap();
    let patch = Patch::Merge(json!({"spec": {"replicas": 5}}));
    let would = write(&cluster, WriteRequest::Patch { target: t.clone(), patch }, dry("ctl")).await.unwrap().unwrap();
    assert_eq!(would["spec"]["replicas"], 5);
    let options = DeleteOptions::default();
    write(&cluster, WriteRequest::Delete { target: t.clone(), options }, dry("ctl")).await.unwrap();
    let event = WriteRequest::RecordEvent {
        involved: t.clone(),
        event_type: EventType::Normal,
        reason: "Scaled".into(),
        message: "m".into(),
    };
    write(&cluster, event, dry("ctl")).await.unwrap();
    assert_eq!(cluster.store().resource_version(), rv0 + 1, "only the real create was stored");
    assert_eq!(cluster.get(&t).unwrap()["spec"]["replicas"], 1);
    // The next thing the informer sees after the create is the next real write.
    write(&cluster, WriteRequest::Create(deployment("next")), params("ctl")).await.unwrap();
    let (_, first) = w.nth(0).await;
    let (_, second) = w.nth(1).await;
    assert_eq!((first.name(), second.name()), ("web", "next"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(w.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn events_are_objects_an_event_informer_sees() {
    let cluster = EmbeddedCluster::in_memory();
    let events = Watcher::start(&cluster, ManifestFilter::default().kind("Event")).await;
    let t = target("apps/v1", "Deployment", "ns", "web");
    let created = write(&cluster, WriteRequest::Create(deployment("web")), params("ctl")).await.unwrap().unwrap();
    let record = || WriteRequest::RecordEvent {
        involved: t.clone(),
        event_type: EventType::Warning,
        reason: "Rolled".into(),
        message: "config changed".into(),
    };
    let ev = write(&cluster, record(), params("reloader")).await.unwrap().unwrap();
    assert_eq!(ev["metadata"]["namespace"], "ns");
    assert_eq!(ev["involvedObject"]["uid"], created["metadata"]["uid"]);
    assert_eq!(ev["involvedObject"]["kind"], "Deployment");
    assert_eq!(
        (ev["reason"].as_str(), ev["type"].as_str(), ev["count"].as_i64()),
        (Some("Rolled"), Some("Warning"), Some(1))
    );
    assert_eq!(ev["source"]["component"], "reloader");
    assert!(ev["firstTimestamp"].is_string() && ev["lastTimestamp"].is_string());
    let (what, seen) = events.nth(0).await;
    assert_eq!((what, seen.kind(), seen.namespace()), ("add", "Event", Some("ns")));
    // The same Event again is aggregated.
    let again = write(&cluster, record(), params("reloader")).await.unwrap().unwrap();
    assert_eq!((again["metadata"]["name"].clone(), again["count"].clone()), (ev["metadata"]["name"].clone(), json!(2)));
    let (what, seen) = events.nth(1).await;
    assert_eq!((what, field(&seen, "/count")), ("update", json!(2)));
}

#[tokio::test(start_paused = true)]
async fn deleting_an_owner_deletes_its_dependents() {
    let cluster = EmbeddedCluster::in_memory();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    let owner = write(&cluster, WriteRequest::Create(ns), params("ctl")).await.unwrap().unwrap();
    assert_eq!(owner["status"]["phase"], "Active");
    let reference = json!([{"apiVersion": "v1", "kind": "Namespace", "name": "team", "uid": owner["metadata"]["uid"], "controller": true}]);
    for name in ["quota", "limits"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "team", "ownerReferences": reference}});
        write(&cluster, WriteRequest::Create(cm), params("ctl")).await.unwrap();
    }
    let unowned = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mine", "namespace": "team"}});
    write(&cluster, WriteRequest::Create(unowned), params("ctl")).await.unwrap();
    let t = Target { api_version: "v1".into(), kind: "Namespace".into(), namespace: None, name: "team".into() };
    let gone =
        write(&cluster, WriteRequest::Delete { target: t, options: DeleteOptions::default() }, params("ctl")).await;
    assert_eq!(gone, Ok(None));
    assert_eq!(cluster.store().keys(), ["/ConfigMap/team/mine"]);
}

fn write_file(dir: &Path, rel: &str, text: &str) {
    std::fs::write(dir.join(rel), text).unwrap();
}

#[tokio::test]
async fn file_edits_flow_beside_controller_writes() {
    let dir = tempfile::tempdir().unwrap();
    let cm = |name: &str, value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: ns\ndata:\n  value: {value:?}\n"
        )
    };
    write_file(dir.path(), "a.yaml", &cm("a", "one"));
    // A Secret of the same name does not clash with the ConfigMap.
    write_file(dir.path(), "s.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: a\n  namespace: ns\n");
    let cluster = EmbeddedCluster::open(dir.path()).unwrap();
    assert!(cluster.source().unwrap().errors().is_empty(), "{:?}", cluster.source().unwrap().errors());
    let w = Watcher::start(&cluster, ManifestFilter::default().kind("ConfigMap")).await;
    let (what, a) = w.nth(0).await;
    assert_eq!((what, a.key(), field(&a, "/data/value")), ("add", "ns/a", json!("one")));
    assert!(a.uid().is_some(), "file objects get a uid");

    // A controller's write is seen at once and the file is not rewritten.
    let t = target("v1", "ConfigMap", "ns", "a");
    let patch = Patch::Merge(json!({"metadata": {"annotations": {"seen": "yes"}}}));
    write(&cluster, WriteRequest::Patch { target: t.clone(), patch }, params("ctl")).await.unwrap();
    let (what, patched) = w.nth(1).await;
    assert_eq!((what, field(&patched, "/metadata/annotations/seen")), ("update", json!("yes")));
    assert_eq!(std::fs::read_to_string(dir.path().join("a.yaml")).unwrap(), cm("a", "one"));
    let created = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made", "namespace": "ns"}});
    write(&cluster, WriteRequest::Create(created), params("ctl")).await.unwrap();
    let (what, made) = w.nth(2).await;
    assert_eq!((what, made.key()), ("add", "ns/made"));

    // The program keeps only the views (and writers): they keep the
    // directory watched.
    let store = cluster.store().clone();
    drop(cluster);

    // A file edit re-applies the file's object, keeping its uid.
    write_file(dir.path(), "a.yaml", &cm("a", "two"));
    let (what, edited) = w.nth(3).await;
    assert_eq!((what, field(&edited, "/data/value")), ("update", json!("two")));
    assert_eq!(edited.uid(), a.uid());
    assert!(obj_rv(&edited) > obj_rv(&made));

    // A removed file deletes its object; the controller's object stays.
    std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
    let (what, removed) = w.nth(4).await;
    assert_eq!((what, removed.key()), ("delete", "ns/a"));
    assert!(w.informer.store().get("ns/made").is_some());
    assert!(store.get("/Secret/ns/a").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_view_sees_objects_enter_and_leave_its_selector() {
    let cluster = EmbeddedCluster::in_memory();
    let w = Watcher::start(&cluster, ManifestFilter::default().kind("ConfigMap").labels("app=a").unwrap()).await;
    let t = target("v1", "ConfigMap", "ns", "x");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns", "labels": {"app": "a"}}});
    write(&cluster, WriteRequest::Create(cm), params("ctl")).await.unwrap();
    let relabel = |app: &str| WriteRequest::Patch {
        target: t.clone(),
        patch: Patch::Merge(json!({"metadata": {"labels": {"app": app}}})),
    };
    write(&cluster, relabel("b"), params("ctl")).await.unwrap();
    write(&cluster, relabel("a"), params("ctl")).await.unwrap();
    let whats: Vec<&str> = [w.nth(0).await.0, w.nth(1).await.0, w.nth(2).await.0].into();
    assert_eq!(whats, ["add", "delete", "add"]);
}

#[tokio::test(start_paused = true)]
async fn apply_creates_and_removes_what_its_manager_no_longer_applies() {
    let cluster = EmbeddedCluster::in_memory();
    let t = target("apps/v1", "Deployment", "ns", "web");
    let cfg = |labels: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns", "labels": labels},
            "spec": {"replicas": 2}})
    };
    let apply = |config: Value| WriteRequest::Patch { target: t.clone(), patch: Patch::Apply { config, force: false } };
    let created = write(&cluster, apply(cfg(json!({"a": "1", "b": "2"}))), params("ctl")).await.unwrap().unwrap();
    assert_eq!((created["metadata"]["generation"].clone(), created["spec"]["replicas"].clone()), (json!(1), json!(2)));
    assert!(created["metadata"]["uid"].is_string());
    assert_eq!(created["metadata"]["managedFields"][0]["operation"], "Apply");
    let again = write(&cluster, apply(cfg(json!({"a": "1"}))), params("ctl")).await.unwrap().unwrap();
    assert_eq!(again["metadata"]["labels"], json!({"a": "1"}));
    assert_eq!(again["metadata"]["generation"], 1, "labels are metadata");
    // Another manager's update takes the field it changed.
    let patch = Patch::Merge(json!({"spec": {"replicas": 5}}));
    write(&cluster, WriteRequest::Patch { target: t.clone(), patch }, params("hpa")).await.unwrap();
    let e = write(&cluster, apply(cfg(json!({"a": "1"}))), params("ctl")).await.unwrap_err();
    assert!(matches!(&e, WriteError::Conflict(m) if m.contains("\"hpa\"") && m.contains(".spec.replicas")), "{e:?}");
}

#[tokio::test(start_paused = true)]
async fn orphan_deletes_keep_dependents_without_the_reference() {
    let cluster = EmbeddedCluster::in_memory();
    let owner = write(&cluster, WriteRequest::Create(deployment("web")), params("ctl")).await.unwrap().unwrap();
    let reference =
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": owner["metadata"]["uid"]}]);
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": "ns", "ownerReferences": reference}});
    write(&cluster, WriteRequest::Create(rs), params("ctl")).await.unwrap();
    let options =
        DeleteOptions { propagation: Some(informer_host::cluster::Propagation::Orphan), ..DeleteOptions::default() };
    let t = target("apps/v1", "Deployment", "ns", "web");
    write(&cluster, WriteRequest::Delete { target: t, options }, params("ctl")).await.unwrap();
    let kept = cluster.get(&target("apps/v1", "ReplicaSet", "ns", "web-1")).expect("orphaned, not deleted");
    assert_eq!(kept["metadata"]["ownerReferences"], json!([]));
}

#[tokio::test]
async fn a_file_edit_keeps_the_status_controllers_wrote_and_bumps_generation() {
    let dir = tempfile::tempdir().unwrap();
    let deploy = |replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: ns\nspec:\n  replicas: {replicas}\n"
        )
    };
    write_file(dir.path(), "web.yaml", &deploy(1));
    let cluster = EmbeddedCluster::open(dir.path()).unwrap();
    let w = Watcher::start(&cluster, ManifestFilter::default().kind("Deployment")).await;
    let (_, seeded) = w.nth(0).await;
    assert_eq!(field(&seeded, "/metadata/generation"), 1);
    let t = target("apps/v1", "Deployment", "ns", "web");
    let patch = Patch::Merge(json!({"status": {"readyReplicas": 1}}));
    write(&cluster, WriteRequest::PatchStatus { target: t.clone(), patch }, params("ctl")).await.unwrap();
    w.nth(1).await;
    write_file(dir.path(), "web.yaml", &deploy(3));
    let (what, edited) = w.nth(2).await;
    assert_eq!(what, "update");
    assert_eq!(field(&edited, "/spec/replicas"), 3);
    assert_eq!(field(&edited, "/metadata/generation"), 2);
    assert_eq!(field(&edited, "/status/readyReplicas"), 1);
}

#[tokio::test]
async fn a_guarded_create_with_generate_name_is_named_by_the_store() {
    use informer_host::controller::{GuardConfig, WriteGuard, WriteRule};
    let cluster = EmbeddedCluster::in_memory();
    let rule = WriteRule {
        api_groups: vec!["".into()],
        kinds: vec!["ConfigMap".into()],
        verbs: vec!["create".into()],
        names: vec![],
    };
    let guard = WriteGuard::new(GuardConfig { rules: vec![rule], ..GuardConfig::new("ctl") }, cluster.writer());
    let job = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "job-", "namespace": "ns"}});
    let a = guard.write(WriteRequest::Create(job.clone())).await.unwrap().unwrap();
    let b = guard.write(WriteRequest::Create(job)).await.unwrap().unwrap();
    let (a, b) = (a["metadata"]["name"].as_str().unwrap(), b["metadata"]["name"].as_str().unwrap());
    assert!(a.starts_with("job-") && b.starts_with("job-") && a != b, "{a} {b}");
}

fn config_map(name: &str, bytes: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"},
        "data": {"k": "x".repeat(bytes)}})
}

/// What etcd refuses, the store refuses with the API server's answers: an
/// object over 1.5 MiB, and growth past the store's quota (deletes and
/// shrinking writes still pass); the history keeps a bounded number of
/// bytes, and a watch from before it relists.
#[tokio::test(start_paused = true)]
async fn the_store_is_bounded_as_etcd_bounds_a_cluster() {
    use informer_host::cluster::embedded::MAX_OBJECT_BYTES;
    let cluster = EmbeddedCluster::in_memory();
    let too_large = write(&cluster, WriteRequest::Create(config_map("big", MAX_OBJECT_BYTES)), params("m")).await;
    assert_eq!(
        too_large,
        Err(WriteError::ServerError { code: 500, message: "etcdserver: request is too large".into() })
    );
    assert!(cluster.store().keys().is_empty());
    // A patch that grows an object past the limit is refused the same way,
    // and leaves the object as it was.
    write(&cluster, WriteRequest::Create(config_map("grows", 1000)), params("m")).await.unwrap();
    let cm = target("v1", "ConfigMap", "ns", "grows");
    let grow = Patch::Merge(json!({"data": {"more": "y".repeat(MAX_OBJECT_BYTES)}}));
    let refused = write(&cluster, WriteRequest::Patch { target: cm.clone(), patch: grow }, params("m")).await;
    assert!(matches!(refused, Err(WriteError::ServerError { code: 500, .. })), "{refused:?}");
    assert_eq!(cluster.get(&cm).unwrap()["data"]["k"].as_str().unwrap().len(), 1000);

    // The quota: ten objects of ~10 KiB fit in 120 KiB, the twelfth does not.
    let store = cluster.store();
    store.set_quota_bytes(store.bytes() + 120 * 1024);
    for i in 0..11 {
        write(&cluster, WriteRequest::Create(config_map(&format!("q{i}"), 10 * 1024)), params("m")).await.unwrap();
    }
    let full = write(&cluster, WriteRequest::Create(config_map("q11", 10 * 1024)), params("m")).await;
    assert_eq!(
        full,
        Err(WriteError::ServerError { code: 500, message: "etcdserver: mvcc: database space exceeded".into() })
    );
    // Shrinking and deleting still work, and free room.
    let q0 = target("v1", "ConfigMap", "ns", "q0");
    let shrink = Patch::Merge(json!({"data": {"k": "small"}}));
    write(&cluster, WriteRequest::Patch { target: q0.clone(), patch: shrink }, params("m")).await.unwrap();
    let q1 = target("v1", "ConfigMap", "ns", "q1");
    write(&cluster, WriteRequest::Delete { target: q1, options: DeleteOptions::default() }, params("m")).await.unwrap();
    write(&cluster, WriteRequest::Create(config_map("q11", 10 * 1024)), params("m")).await.unwrap();

    // The history keeps about 30 KiB: a watch from the first write's
    // version is compacted away, and the informer relists instead.
    store.set_history_bytes(30 * 1024);
    let first = rv(&cluster.get(&cm).unwrap());
    for i in 0..5 {
        let patch = Patch::Merge(json!({"data": {"k": format!("{i}").repeat(10 * 1024)}}));
        write(&cluster, WriteRequest::Patch { target: q0.clone(), patch }, params("m")).await.unwrap();
    }
    let view = cluster.view(ManifestFilter::default().kind("ConfigMap"));
    let gone = informer_host::informer::ListerWatcher::watch(&view, &first.to_string()).await;
    assert!(gone.is_err_and(|e| e.to_string().contains("too old resource version")), "a compacted watch is Gone");
}
