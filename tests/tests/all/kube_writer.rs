//! `KubeWriter` against the loopback API server: each write as the HTTP
//! request the Kubernetes API expects, and each answer (object, Status,
//! plain-text 429, no answer at all) as the typed result a controller gets.

use std::time::Duration;

use e2e::apiserver::{ApiServer, RecordedRequest, RequestKind, ResourceType, Rule, config_map};
use informer_host::cluster::kube_writer::KubeWriter;
use informer_host::cluster::{
    ClusterWriter, DeleteOptions, EventType, Patch, Propagation, Target, WriteError, WriteParams, WriteRequest,
};
use serde_json::{Value, json};

const MANAGER: &str = "reloader";

fn params() -> WriteParams {
    WriteParams { field_manager: MANAGER.into(), dry_run: false, impersonate: None }
}

fn writer(server: &ApiServer) -> KubeWriter {
    KubeWriter::from_config(server.config()).expect("kube client").with_timeout(Duration::from_secs(10))
}

fn target(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Target {
    Target {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.map(Into::into),
        name: name.into(),
    }
}

fn cm_target(name: &str) -> Target {
    target("v1", "ConfigMap", Some("default"), name)
}

async fn write(writer: &KubeWriter, request: WriteRequest) -> Result<Option<Value>, WriteError> {
    writer.write(request, params()).await
}

/// The write requests the server received since the last `clear_requests`.
fn last_write(server: &ApiServer) -> RecordedRequest {
    server.writes().pop().expect("a write request")
}

#[tokio::test]
async fn create_posts_the_object_and_a_second_create_is_already_exists() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    let created = write(&writer, WriteRequest::Create(config_map("default", "app", &[], &[("k", "v")])))
        .await
        .expect("created")
        .expect("the object");
    assert_eq!(created["metadata"]["name"], "app");
    assert!(created["metadata"]["uid"].is_string(), "the server's answer: {created}");
    assert_eq!(server.get("v1", "ConfigMap", Some("default"), "app").expect("stored")["data"]["k"], "v");

    let post = last_write(&server);
    assert_eq!((post.method.as_str(), post.path.as_str()), ("POST", "/api/v1/namespaces/default/configmaps"));
    assert_eq!(post.param("fieldManager"), Some(MANAGER));
    assert_eq!(post.param("dryRun"), None);
    assert_eq!(post.content_type.as_deref(), Some("application/json"));

    let again = write(&writer, WriteRequest::Create(config_map("default", "app", &[], &[]))).await;
    assert!(matches!(again, Err(WriteError::AlreadyExists(_))), "{again:?}");
}

#[tokio::test]
async fn replace_carries_the_resource_version_and_a_stale_one_is_a_conflict() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    let v1 = server.create(config_map("default", "app", &[], &[("k", "1")])).unwrap();
    let mut next = v1.clone();
    next["data"]["k"] = json!("2");
    let v2 = write(&writer, WriteRequest::Replace(next)).await.unwrap().unwrap();
    assert_eq!(v2["data"]["k"], "2");
    assert_ne!(v2["metadata"]["resourceVersion"], v1["metadata"]["resourceVersion"]);
    let put = last_write(&server);
    assert_eq!((put.method.as_str(), put.path.as_str()), ("PUT", "/api/v1/namespaces/default/configmaps/app"));
    assert_eq!(put.param("fieldManager"), Some(MANAGER));

    // v1's resourceVersion is stale now.
    let mut stale = v1.clone();
    stale["data"]["k"] = json!("3");
    let answer = write(&writer, WriteRequest::Replace(stale)).await;
    assert!(matches!(answer, Err(WriteError::Conflict(_))), "{answer:?}");
    assert_eq!(server.get("v1", "ConfigMap", Some("default"), "app").unwrap()["data"]["k"], "2");
}

#[tokio::test]
async fn merge_json_and_apply_patches_with_their_content_types() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    server.create(config_map("default", "app", &[], &[("k", "1")])).unwrap();

    let merged = write(
        &writer,
        WriteRequest::Patch {
            target: cm_target("app"),
            patch: Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        },
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(merged["metadata"]["labels"]["team"], "a");
    let sent = last_write(&server);
    assert_eq!((sent.method.as_str(), sent.content_type.as_deref()), ("PATCH", Some("application/merge-patch+json")));
    assert_eq!(sent.path, "/api/v1/namespaces/default/configmaps/app");

    let patched = write(
        &writer,
        WriteRequest::Patch {
            target: cm_target("app"),
            patch: Patch::Json(json!([{"op": "replace", "path": "/data/k", "value": "2"}])),
        },
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(patched["data"]["k"], "2");
    assert_eq!(last_write(&server).content_type.as_deref(), Some("application/json-patch+json"));

    // Server-side apply: `reloader` owns data.owned; another manager's
    // differing value conflicts unless forced.
    let config = |value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app", "namespace": "default"}, "data": {"owned": value}})
    };
    let applied = write(
        &writer,
        WriteRequest::Patch { target: cm_target("app"), patch: Patch::Apply { config: config("mine"), force: false } },
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(applied["data"]["owned"], "mine");
    let sent = last_write(&server);
    assert_eq!(sent.content_type.as_deref(), Some("application/apply-patch+yaml"));
    assert_eq!(sent.param("fieldManager"), Some(MANAGER));
    assert_eq!(sent.param("force"), None);

    let other = WriteParams { field_manager: "intruder".into(), ..params() };
    let apply = |force| WriteRequest::Patch {
        target: cm_target("app"),
        patch: Patch::Apply { config: config("theirs"), force },
    };
    let conflict = writer.write(apply(false), other.clone()).await;
    assert!(matches!(&conflict, Err(WriteError::Conflict(m)) if m.contains(MANAGER)), "{conflict:?}");
    let forced = writer.write(apply(true), other).await.unwrap().unwrap();
    assert_eq!(forced["data"]["owned"], "theirs");
    assert_eq!(last_write(&server).param("force"), Some("true"));
}

#[tokio::test]
async fn delete_sends_preconditions_and_propagation_and_answers_what_is_left() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    let cm = server.create(config_map("default", "app", &[], &[])).unwrap();
    let delete = |uid: &str| WriteRequest::Delete {
        target: cm_target("app"),
        options: DeleteOptions {
            uid: Some(uid.into()),
            resource_version: None,
            propagation: Some(Propagation::Foreground),
        },
    };

    let wrong = write(&writer, delete("00000000-0000-0000-0000-000000000000")).await;
    assert!(matches!(wrong, Err(WriteError::Conflict(_))), "{wrong:?}");
    assert!(server.get("v1", "ConfigMap", Some("default"), "app").is_some());
    let sent = last_write(&server);
    assert_eq!((sent.method.as_str(), sent.path.as_str()), ("DELETE", "/api/v1/namespaces/default/configmaps/app"));
    let body = sent.json().expect("DeleteOptions");
    assert_eq!(body["kind"], "DeleteOptions");
    assert_eq!(body["propagationPolicy"], "Foreground");
    assert_eq!(body["preconditions"]["uid"], "00000000-0000-0000-0000-000000000000");

    // A ConfigMap's DELETE answers a Success Status: gone, nothing to hand back.
    let uid = cm["metadata"]["uid"].as_str().unwrap();
    assert_eq!(write(&writer, delete(uid)).await, Ok(None));
    assert!(server.get("v1", "ConfigMap", Some("default"), "app").is_none());
    let gone = write(&writer, delete(uid)).await;
    assert!(matches!(gone, Err(WriteError::NotFound(_))), "{gone:?}");

    // A custom resource's DELETE answers the deleted object: still None.
    server.register(ResourceType::new("example.com", "v1", "Widget", "widgets", true));
    let widget = |finalizers: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default", "finalizers": finalizers}})
    };
    server.create(widget(json!([]))).unwrap();
    let delete_widget = || WriteRequest::Delete {
        target: target("example.com/v1", "Widget", Some("default"), "w"),
        options: DeleteOptions::default(),
    };
    assert_eq!(write(&writer, delete_widget()).await, Ok(None));

    // With a finalizer it stays, marked: the answer is the object.
    server.create(widget(json!(["example.com/cleanup"]))).unwrap();
    let marked = write(&writer, delete_widget()).await.unwrap().expect("the object, marked for deletion");
    assert!(marked["metadata"]["deletionTimestamp"].is_string(), "{marked}");
    assert!(server.get("example.com/v1", "Widget", Some("default"), "w").is_some());
}

#[tokio::test]
async fn status_writes_go_to_the_status_subresource() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    let deployment = server
        .create(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
        .unwrap();

    let mut with_status = deployment.clone();
    with_status["status"] = json!({"observedGeneration": 1, "replicas": 1});
    // A spec change in a status write is not stored.
    with_status["spec"]["replicas"] = json!(5);
    let answered = write(&writer, WriteRequest::ReplaceStatus(with_status)).await.unwrap().unwrap();
    assert_eq!(answered["status"]["replicas"], 1);
    assert_eq!(answered["spec"]["replicas"], 1);
    let sent = last_write(&server);
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("PUT", "/apis/apps/v1/namespaces/default/deployments/web/status")
    );

    let patched = write(
        &writer,
        WriteRequest::PatchStatus {
            target: target("apps/v1", "Deployment", Some("default"), "web"),
            patch: Patch::Merge(json!({"status": {"readyReplicas": 1}})),
        },
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(patched["status"]["readyReplicas"], 1);
    let sent = last_write(&server);
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("PATCH", "/apis/apps/v1/namespaces/default/deployments/web/status")
    );
    assert_eq!(sent.param("fieldManager"), Some(MANAGER));

    // ConfigMaps have no status subresource (discovery lists none): refused
    // before sending, not the server's 404 for a route it does not have,
    // which would read as "no such object".
    server.create(config_map("default", "app", &[], &[])).unwrap();
    server.clear_requests();
    let no_status = write(
        &writer,
        WriteRequest::PatchStatus { target: cm_target("app"), patch: Patch::Merge(json!({"status": {}})) },
    )
    .await;
    let Err(WriteError::BadRequest(why)) = no_status else { panic!("{no_status:?}") };
    assert_eq!(why, "ConfigMap default/app: ConfigMap has no status subresource");
    assert!(server.writes().is_empty(), "nothing was sent");
    // The embedded cluster answers the same.
    let embedded = informer_host::cluster::embedded::EmbeddedCluster::in_memory();
    embedded.write(WriteRequest::Create(config_map("default", "app", &[], &[])), params()).await.unwrap();
    let status = WriteRequest::ReplaceStatus(config_map("default", "app", &[], &[]));
    assert_eq!(embedded.write(status, params()).await, Err(WriteError::BadRequest(why)));

    // A 404 that names no object (the path itself is not served: a CRD
    // deleted since discovery): what discovery said about ConfigMaps is
    // asked again on the next write.
    server.fail_next_where(|r| r.method == "PATCH", 404);
    let gone = write(&writer, WriteRequest::Patch { target: cm_target("app"), patch: Patch::Merge(json!({})) }).await;
    assert!(matches!(gone, Err(WriteError::NotFound(_))), "{gone:?}");
    let core_discoveries =
        || server.requests().iter().filter(|r| r.kind == RequestKind::Discovery && r.path == "/api/v1").count();
    let before = core_discoveries();
    write(&writer, WriteRequest::Create(config_map("default", "next", &[], &[]))).await.unwrap();
    assert_eq!(core_discoveries(), before + 1);
    // A 404 naming an object keeps the cache.
    let missing =
        write(&writer, WriteRequest::Patch { target: cm_target("missing"), patch: Patch::Merge(json!({"data": {}})) })
            .await;
    assert!(matches!(missing, Err(WriteError::NotFound(_))), "{missing:?}");
    write(&writer, WriteRequest::Create(config_map("default", "last", &[], &[]))).await.unwrap();
    assert_eq!(core_discoveries(), before + 1);
}

#[tokio::test]
async fn dry_run_sends_dry_run_all_and_stores_nothing() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    let dry = WriteParams { dry_run: true, ..params() };
    let answered = writer
        .write(WriteRequest::Create(config_map("default", "app", &[], &[("k", "v")])), dry.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answered["data"]["k"], "v");
    assert!(server.get("v1", "ConfigMap", Some("default"), "app").is_none());
    let sent = last_write(&server);
    assert_eq!(sent.param("dryRun"), Some("All"));
    assert!(sent.is_dry_run());

    server.create(config_map("default", "app", &[], &[("k", "v")])).unwrap();
    let patched = writer
        .write(
            WriteRequest::Patch { target: cm_target("app"), patch: Patch::Merge(json!({"data": {"k": "w"}})) },
            dry.clone(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(patched["data"]["k"], "w");
    assert_eq!(last_write(&server).param("dryRun"), Some("All"));
    assert_eq!(server.get("v1", "ConfigMap", Some("default"), "app").unwrap()["data"]["k"], "v");

    let deleted =
        writer.write(WriteRequest::Delete { target: cm_target("app"), options: DeleteOptions::default() }, dry).await;
    assert_eq!(deleted, Ok(None));
    let sent = last_write(&server);
    assert_eq!(sent.json().unwrap()["dryRun"], json!(["All"]), "DeleteOptions carry dryRun");
    assert!(server.get("v1", "ConfigMap", Some("default"), "app").is_some());
}

#[tokio::test]
async fn impersonation_sends_the_user_and_the_server_judges_it() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    server.grant(
        "system:serviceaccount:tenant-a:controller",
        Rule::new(&["create"], &[""], &["configmaps"]).in_namespace("default"),
    );
    let as_user = |user: &str| WriteParams { impersonate: Some(user.into()), ..params() };

    let allowed = writer
        .write(
            WriteRequest::Create(config_map("default", "app", &[], &[])),
            as_user("system:serviceaccount:tenant-a:controller"),
        )
        .await;
    assert!(allowed.is_ok(), "{allowed:?}");
    let sent = last_write(&server);
    assert_eq!(sent.impersonate_user.as_deref(), Some("system:serviceaccount:tenant-a:controller"));

    let denied = writer.write(WriteRequest::Create(config_map("default", "other", &[], &[])), as_user("mallory")).await;
    assert!(matches!(&denied, Err(WriteError::Forbidden(m)) if m.contains("mallory")), "{denied:?}");
    assert_eq!(last_write(&server).impersonate_user.as_deref(), Some("mallory"));
    assert!(server.get("v1", "ConfigMap", Some("default"), "other").is_none());

    // Without impersonation there is no header.
    write(&writer, WriteRequest::Create(config_map("default", "third", &[], &[]))).await.unwrap();
    assert_eq!(last_write(&server).impersonate_user, None);
}

#[tokio::test]
async fn an_invalid_object_is_invalid_with_its_causes() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    let answer = write(&writer, WriteRequest::Create(config_map("default", "Not_A_Name", &[], &[]))).await;
    let Err(WriteError::Invalid { message, causes }) = answer else { panic!("expected Invalid, got {answer:?}") };
    assert!(message.contains("Not_A_Name"), "{message}");
    assert!(!causes.is_empty());
    assert!(causes.iter().all(|c| c.field == "metadata.name" && c.reason == "FieldValueInvalid"), "{causes:?}");
}

/// Bodies past 3 MiB and JSON patches past 10 000 operations are the API
/// server's `413 RequestEntityTooLarge`, a server error the controller sees
/// with its code; the embedded cluster answers the same.
#[tokio::test]
async fn a_body_or_a_patch_too_large_for_the_api_server_is_413() {
    use informer_host::cluster::MAX_REQUEST_BODY_BYTES;
    use informer_host::cluster::embedded::EmbeddedCluster;
    let server = ApiServer::start().await;
    let writer = writer(&server);
    let big = "x".repeat(MAX_REQUEST_BODY_BYTES);
    let answer = write(&writer, WriteRequest::Create(config_map("default", "big", &[], &[("k", &big)]))).await;
    let too_large = WriteError::ServerError { code: 413, message: "Request entity too large: limit is 3145728".into() };
    assert_eq!(answer, Err(too_large.clone()));
    assert!(server.get("v1", "ConfigMap", Some("default"), "big").is_none());
    assert_eq!(WriteError::body_too_large(), too_large);

    write(&writer, WriteRequest::Create(config_map("default", "app", &[], &[("k", "v")]))).await.unwrap();
    let ops = Value::Array(vec![json!({"op": "test", "path": "/data/k", "value": "v"}); 10_001]);
    let patch = WriteRequest::Patch { target: cm_target("app"), patch: Patch::Json(ops) };
    let refused = WriteError::ServerError {
        code: 413,
        message: "The allowed maximum operations in a JSON patch is 10000, got 10001".into(),
    };
    assert_eq!(write(&writer, patch.clone()).await, Err(refused.clone()));
    let embedded = EmbeddedCluster::in_memory();
    embedded.write(WriteRequest::Create(config_map("default", "app", &[], &[("k", "v")])), params()).await.unwrap();
    assert_eq!(embedded.write(patch, params()).await, Err(refused));
}

#[tokio::test]
async fn an_unknown_kind_is_named_and_nothing_is_written() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    let widget =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}});
    let answer = write(&writer, WriteRequest::Create(widget)).await;
    assert!(
        matches!(&answer, Err(WriteError::BadRequest(m)) if m.contains("\"Widget\"") && m.contains("\"example.com/v1\"")),
        "{answer:?}"
    );
    let answer = write(
        &writer,
        WriteRequest::Delete {
            target: target("v1", "Gadget", Some("default"), "g"),
            options: DeleteOptions::default(),
        },
    )
    .await;
    assert!(
        matches!(&answer, Err(WriteError::BadRequest(m)) if m.contains("\"Gadget\"") && m.contains("\"v1\"")),
        "{answer:?}"
    );
    assert!(server.writes().is_empty());

    // Served once registered (a CRD created meanwhile): unknown kinds are not cached.
    server.register(ResourceType::new("example.com", "v1", "Widget", "widgets", true));
    let widget =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}});
    write(&writer, WriteRequest::Create(widget)).await.expect("served now");
}

#[tokio::test]
async fn discovery_is_asked_once_per_kind() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    for name in ["a", "b", "c"] {
        write(&writer, WriteRequest::Create(config_map("default", name, &[], &[]))).await.unwrap();
    }
    let discovery: Vec<String> =
        server.requests().iter().filter(|r| r.kind == RequestKind::Discovery).map(|r| r.path.clone()).collect();
    assert_eq!(discovery, ["/api/v1"]);
    let resolved = writer.resolve("apps/v1", "Deployment").await.unwrap();
    assert_eq!((resolved.resource.plural.as_str(), resolved.namespaced), ("deployments", true));
    assert!(resolved.subresources.iter().any(|s| s == "status"), "{resolved:?}");
    let ns = writer.resolve("v1", "Namespace").await.unwrap();
    assert!(!ns.namespaced);
}

#[tokio::test]
async fn a_namespace_that_does_not_fit_the_scope_sends_nothing() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "victim"}})).unwrap();
    // A guard that judged "tenant-a" must not have approved a cluster-scoped delete.
    let answer = write(
        &writer,
        WriteRequest::Delete {
            target: target("v1", "Namespace", Some("tenant-a"), "victim"),
            options: DeleteOptions::default(),
        },
    )
    .await;
    assert!(matches!(&answer, Err(WriteError::BadRequest(m)) if m.contains("cluster-scoped")), "{answer:?}");
    let answer = write(
        &writer,
        WriteRequest::Patch { target: target("v1", "ConfigMap", None, "app"), patch: Patch::Merge(json!({})) },
    )
    .await;
    assert!(matches!(&answer, Err(WriteError::BadRequest(m)) if m.contains("namespaced")), "{answer:?}");
    let answer =
        write(&writer, WriteRequest::Patch { target: cm_target("../secrets/x"), patch: Patch::Merge(json!({})) }).await;
    assert!(matches!(answer, Err(WriteError::BadRequest(_))), "{answer:?}");
    assert!(server.writes().is_empty());
    assert!(server.get("v1", "Namespace", None, "victim").is_some());
}

#[tokio::test]
async fn an_event_is_recorded_as_client_go_records_it() {
    let server = ApiServer::start().await;
    let writer = writer(&server).with_reporting_instance("host-0");
    let cm = server.create(config_map("default", "app", &[], &[])).unwrap();
    let event = write(
        &writer,
        WriteRequest::RecordEvent {
            involved: cm_target("app"),
            event_type: EventType::Warning,
            reason: "Reloaded".into(),
            message: "rolled web".into(),
        },
    )
    .await
    .unwrap()
    .expect("the Event");
    let sent = last_write(&server);
    assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/api/v1/namespaces/default/events"));
    assert_eq!(sent.param("fieldManager"), Some(MANAGER));
    let body = sent.json().unwrap();
    let name = body["metadata"]["name"].as_str().unwrap();
    let hex = name.strip_prefix("app.").expect("<involved>.<hex>");
    assert!(!hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["kind"], "Event");
    assert_eq!(body["metadata"]["namespace"], "default");
    assert_eq!(
        body["involvedObject"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "app",
            "uid": cm["metadata"]["uid"], "resourceVersion": cm["metadata"]["resourceVersion"]})
    );
    assert_eq!(
        (body["type"].as_str(), body["reason"].as_str(), body["message"].as_str()),
        (Some("Warning"), Some("Reloaded"), Some("rolled web"))
    );
    assert_eq!(body["source"], json!({"component": MANAGER, "host": "host-0"}));
    assert_eq!(body["reportingComponent"], MANAGER);
    assert_eq!(body["reportingInstance"], "host-0");
    assert_eq!(body["count"], 1);
    assert!(body["firstTimestamp"].is_string());
    assert_eq!(body["firstTimestamp"], body["lastTimestamp"]);
    assert!(body.get("eventTime").is_none_or(Value::is_null), "a legacy Event has no eventTime: {body}");
    assert_eq!(event["metadata"]["name"], name);

    // About a cluster-scoped object: the Event goes to `default`; names stay unique.
    server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})).unwrap();
    let involved = target("v1", "Namespace", None, "team");
    let record = || WriteRequest::RecordEvent {
        involved: involved.clone(),
        event_type: EventType::Normal,
        reason: "Defaulted".into(),
        message: "quota created".into(),
    };
    let first = write(&writer, record()).await.unwrap().unwrap();
    let second = write(&writer, record()).await.unwrap().unwrap();
    assert_eq!(first["metadata"]["namespace"], "default");
    assert!(first["involvedObject"].get("namespace").is_none_or(Value::is_null));
    assert_ne!(first["metadata"]["name"], second["metadata"]["name"]);
}

#[tokio::test]
async fn a_plain_text_429_is_rate_limited_with_retry_after_and_not_retried() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    write(&writer, WriteRequest::Create(config_map("default", "a", &[], &[]))).await.unwrap();
    server.clear_requests();
    server.throttle(1, 7);
    let answer = write(&writer, WriteRequest::Create(config_map("default", "b", &[], &[]))).await;
    assert!(matches!(answer, Err(WriteError::RateLimited { retry_after_seconds: Some(7), .. })), "{answer:?}");
    assert_eq!(server.request_count(), 1, "the workqueue retries, not the client: {:?}", server.requests());
}

#[tokio::test]
async fn a_refused_connection_is_a_server_error_without_code() {
    let server = ApiServer::start().await;
    let writer = writer(&server);
    // Kind cached: the write itself is refused.
    write(&writer, WriteRequest::Create(config_map("default", "a", &[], &[]))).await.unwrap();
    server.refuse_connections().await;
    let answer = write(&writer, WriteRequest::Create(config_map("default", "b", &[], &[]))).await;
    assert!(matches!(&answer, Err(WriteError::ServerError { code: 0, message }) if !message.is_empty()), "{answer:?}");
    // Kind not cached: discovery is refused.
    let answer = write(
        &writer,
        WriteRequest::Delete {
            target: target("apps/v1", "Deployment", Some("default"), "d"),
            options: DeleteOptions::default(),
        },
    )
    .await;
    assert!(matches!(answer, Err(WriteError::ServerError { code: 0, .. })), "{answer:?}");
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_timeout() {
    // Accepts connections and reads nothing back: a hung API server.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let writer = KubeWriter::from_config(config).unwrap().with_timeout(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let answer = write(&writer, WriteRequest::Create(config_map("default", "a", &[], &[]))).await;
    assert!(matches!(&answer, Err(WriteError::Timeout(m)) if m.contains("ConfigMap default/a")), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "bounded by the writer's timeout");
    hold.abort();
}

#[tokio::test]
async fn a_create_with_generate_name_passes_the_guard_and_the_server_names_it() {
    use informer_host::controller::{GuardConfig, NamespaceScope, WriteGuard, WriteRule};
    let server = ApiServer::start().await;
    let guard = WriteGuard::new(
        GuardConfig {
            rules: vec![WriteRule {
                api_groups: vec!["".into()],
                kinds: vec!["ConfigMap".into()],
                verbs: vec!["create".into()],
                names: vec![],
            }],
            tenant: Some("t".into()),
            scope: Some(NamespaceScope { namespaces: vec!["default".into()], cluster_scoped: false }),
            ..GuardConfig::new(MANAGER)
        },
        std::sync::Arc::new(writer(&server)),
    );
    let job = |ns: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "job-", "namespace": ns}});
    let created = guard.write(WriteRequest::Create(job("default"))).await.expect("created").expect("the object");
    let name = created["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("job-") && name.len() == "job-".len() + 5, "{name}");
    assert!(server.get("v1", "ConfigMap", Some("default"), name).is_some());
    assert_eq!(last_write(&server).path, "/api/v1/namespaces/default/configmaps");

    // Outside the tenant's namespaces: refused by name prefix, unsent.
    let before = server.writes().len();
    let e = guard.write(WriteRequest::Create(job("other"))).await.unwrap_err();
    assert_eq!(
        e,
        WriteError::Forbidden("create ConfigMap other/job-*: namespace other is not one of tenant t's".into())
    );
    assert_eq!(server.writes().len(), before);
}
