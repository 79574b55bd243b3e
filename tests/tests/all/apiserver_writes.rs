//! The test API server's write path, driven with a real `kube::Client`
//! (typed k8s-openapi objects and `DynamicObject`s) and, where the exact
//! bytes matter, with raw HTTP: every Status body is compared whole against
//! what the API conventions and `k8s.io/apimachinery/pkg/api/errors` define.

use std::time::Duration;

use e2e::apiserver::{ApiServer, RequestKind, ResourceType, Rule, namespace};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy, WatchEvent, WatchParams,
};
use kube::discovery::{Discovery, Scope};
use serde_json::{Value, json};

/// A raw HTTP/1.1 exchange: status code, headers (lower-cased), body.
async fn raw(
    server: &ApiServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await.unwrap().unwrap();
    let text = String::from_utf8(out).unwrap();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let code = head[9..12].parse().unwrap();
    let head = head.to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        let mut body = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size, 16).unwrap();
            if size == 0 {
                break;
            }
            body.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
        body
    } else {
        rest.to_string()
    };
    (code, head, body)
}

async fn raw_json(server: &ApiServer, method: &str, path: &str, content_type: &str, body: &str) -> (u16, Value) {
    let (code, _, body) = raw(server, method, path, &[("Content-Type", content_type)], body).await;
    (code, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")))
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}))
        .unwrap()
}

fn deployment(name: &str, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]}}},
        "status": {"replicas": 7}
    }))
    .unwrap()
}

fn widgets() -> ResourceType {
    ResourceType::new("example.com", "v1", "Widget", "widgets", true)
}

fn widget_api(client: kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Widget"), "widgets");
    Api::namespaced_with(client, ns, &ar)
}

/// Collects the next `n` watch events of `api` after `rv`.
async fn next_events<K>(api: &Api<K>, rv: &str, n: usize) -> Vec<(String, String, String)>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let stream = api.watch(&WatchParams::default().timeout(2), rv).await.unwrap();
    let events: Vec<_> =
        tokio::time::timeout(Duration::from_secs(5), stream.take(n).try_collect::<Vec<_>>()).await.unwrap().unwrap();
    events
        .into_iter()
        .map(|e| match e {
            WatchEvent::Added(o) => {
                ("ADDED".into(), o.meta().name.clone().unwrap(), o.meta().resource_version.clone().unwrap())
            }
            WatchEvent::Modified(o) => {
                ("MODIFIED".into(), o.meta().name.clone().unwrap(), o.meta().resource_version.clone().unwrap())
            }
            WatchEvent::Deleted(o) => {
                ("DELETED".into(), o.meta().name.clone().unwrap(), o.meta().resource_version.clone().unwrap())
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

async fn started() -> (ApiServer, kube::Client) {
    let server = ApiServer::start().await;
    server.create(namespace("shop")).unwrap();
    let client = server.client();
    (server, client)
}

#[tokio::test]
async fn create_sets_server_fields_and_refuses_duplicates() {
    let (server, client) = started().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let start = server.resource_version();
    let a = cms.create(&PostParams::default(), &cm("a", json!({"k": "v"}))).await.unwrap();
    let meta = &a.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("shop"));
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    assert_eq!(meta.resource_version.as_deref(), Some(server.resource_version().as_str()));
    assert_eq!(meta.generation, None, "ConfigMaps have no generation");
    let mf = meta.managed_fields.as_ref().unwrap();
    assert_eq!(mf[0].operation.as_deref(), Some("Update"));
    assert_eq!(mf[0].fields_v1.as_ref().unwrap().0, json!({"f:data": {"f:k": {}}}));

    // The same name again: 409 AlreadyExists, body as NewAlreadyExists builds it.
    let (code, status) = raw_json(
        &server,
        "POST",
        "/api/v1/namespaces/shop/configmaps",
        "application/json",
        &serde_json::to_string(&cm("a", json!({}))).unwrap(),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"a\" already exists", "reason": "AlreadyExists",
            "details": {"name": "a", "kind": "configmaps"}, "code": 409})
    );
    let e = api_error(cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));

    // generateName: the prefix and five characters.
    let mut g = cm("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let g = cms.create(&PostParams::default(), &g).await.unwrap();
    let name = g.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    // A Deployment gets generation 1 and its status reset.
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let d = deploys.create(&PostParams::default(), &deployment("web", "nginx:1")).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert_eq!(d.status, None);

    // resourceVersion must not be set on create; the namespace must exist.
    let e = api_error(cms.create(&PostParams::default(), &a).await.unwrap_err());
    assert_eq!((e.code, e.message.as_str()), (400, "resourceVersion should not be set on objects to be created"));
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let e = api_error(nowhere.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (404, "NotFound", "namespaces \"nowhere\" not found"));

    // Every stored write is a watch event with a new resourceVersion.
    let events = next_events(&cms, &start, 2).await;
    assert_eq!(events[0].0, "ADDED");
    assert_eq!(events[0].1, "a");
    assert_eq!(events[1].1, name);
    assert!(events[0].2.parse::<u64>().unwrap() < events[1].2.parse::<u64>().unwrap());
}

#[tokio::test]
async fn invalid_objects_are_422_with_causes() {
    let (server, client) = started().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}).to_string();
    let (code, status) =
        raw_json(&server, "POST", "/api/v1/namespaces/shop/configmaps", "application/json", &body).await;
    assert_eq!(code, 422);
    let detail = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": {detail}"),
            "reason": "Invalid",
            "details": {"name": "Bad_Name", "kind": "ConfigMap", "causes": [
                {"reason": "FieldValueInvalid", "message": format!("Invalid value: \"Bad_Name\": {detail}"), "field": "metadata.name"}]},
            "code": 422})
    );
    // No name at all; a group's kind is qualified.
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}, "spec": {}}).to_string();
    let (code, status) =
        raw_json(&server, "POST", "/apis/apps/v1/namespaces/shop/deployments", "application/json", &body).await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        "Deployment.apps \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    assert_eq!(
        status["details"],
        json!({"group": "apps", "kind": "Deployment", "causes": [{"reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required", "field": "metadata.name"}]})
    );
    // PUT with a name other than the URL's: 400, as checkName answers.
    let cms: Api<ConfigMap> = Api::namespaced(client, "shop");
    cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap();
    let e = api_error(cms.replace("a", &PostParams::default(), &cm("b", json!({}))).await.unwrap_err());
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (400, "BadRequest", "the name of the object (b) does not match the name on the URL (a)")
    );
    // Protobuf bodies are not spoken: 415, as for any media type a server
    // does not serve. YAML is.
    let (code, status) =
        raw_json(&server, "POST", "/api/v1/namespaces/shop/configmaps", "application/vnd.kubernetes.protobuf", "k8s\0")
            .await;
    assert_eq!((code, status["reason"].as_str()), (415, Some("UnsupportedMediaType")));
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\n";
    let (code, _) = raw_json(&server, "POST", "/api/v1/namespaces/shop/configmaps", "application/yaml", yaml).await;
    assert_eq!(code, 201);
    // Bad dryRun values are the options' 422.
    let (code, status) = raw_json(
        &server,
        "POST",
        "/api/v1/namespaces/shop/configmaps?dryRun=Some",
        "application/json",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}).to_string(),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\""
    );
    assert_eq!(status["details"]["group"], "meta.k8s.io");
}

#[tokio::test]
async fn replace_is_optimistically_concurrent() {
    let (server, client) = started().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let v1 = cms.create(&PostParams::default(), &cm("a", json!({"k": "1"}))).await.unwrap();
    let mut next = v1.clone();
    next.data = Some([("k".to_string(), "2".to_string())].into());
    let v2 = cms.replace("a", &PostParams::default(), &next).await.unwrap();
    assert_ne!(v2.metadata.resource_version, v1.metadata.resource_version);
    assert_eq!(v2.metadata.uid, v1.metadata.uid);

    // Stale: 409 Conflict, worded as the registry's OptimisticLockErrorMsg.
    let body = serde_json::to_string(&next).unwrap();
    let (code, status) =
        raw_json(&server, "PUT", "/api/v1/namespaces/shop/configmaps/a", "application/json", &body).await;
    assert_eq!(code, 409);
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again",
            "reason": "Conflict", "details": {"name": "a", "kind": "configmaps"}, "code": 409})
    );
    // Without a resourceVersion a ConfigMap update is unconditional...
    let mut unconditional = next.clone();
    unconditional.metadata.resource_version = None;
    unconditional.data = Some([("k".to_string(), "3".to_string())].into());
    cms.replace("a", &PostParams::default(), &unconditional).await.unwrap();
    // ...and a no-op is not a write: same resourceVersion, no event.
    let before = server.resource_version();
    let same = cms.replace("a", &PostParams::default(), &unconditional).await.unwrap();
    assert_eq!(same.metadata.resource_version.as_deref(), Some(before.as_str()));
    assert_eq!(server.resource_version(), before);

    // A custom resource needs the resourceVersion.
    server.register(widgets());
    let w = widget_api(client, "shop");
    let mut obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 1}}))
    .unwrap();
    let created = w.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    obj.data["spec"]["size"] = json!(2);
    let e = api_error(w.replace("w", &PostParams::default(), &obj).await.unwrap_err());
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "Widget.example.com \"w\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    obj.metadata.resource_version = created.metadata.resource_version.clone();
    let replaced = w.replace("w", &PostParams::default(), &obj).await.unwrap();
    assert_eq!(replaced.metadata.generation, Some(2), "a spec change bumps generation");
    let mut relabelled = replaced.clone();
    relabelled.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    let relabelled = w.replace("w", &PostParams::default(), &relabelled).await.unwrap();
    assert_eq!(relabelled.metadata.generation, Some(2), "metadata changes do not");
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let (server, client) = started().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    cms.create(&PostParams::default(), &cm("a", json!({"k": "1", "gone": "x"}))).await.unwrap();
    let p = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"l": "v"}}, "data": {"gone": null}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.labels.unwrap()["l"], "v");
    assert_eq!(p.data.unwrap().len(), 1);
    // JSON patch (RFC 6902), raw: kube's Patch::Json needs a feature the
    // workspace does not enable.
    let ops = json!([{"op": "test", "path": "/data/k", "value": "1"},
        {"op": "replace", "path": "/data/k", "value": "2"}])
    .to_string();
    let path = "/api/v1/namespaces/shop/configmaps/a";
    let (code, p) = raw_json(&server, "PATCH", path, "application/json-patch+json", &ops).await;
    assert_eq!((code, &p["data"]["k"]), (200, &json!("2")));
    // The test op now fails: 422.
    let (code, status) = raw_json(&server, "PATCH", path, "application/json-patch+json", &ops).await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    // A resourceVersion in a patch is a precondition.
    let e = api_error(
        cms.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"k": "9"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    // force is for apply only.
    let (code, status) = raw_json(
        &server,
        "PATCH",
        "/api/v1/namespaces/shop/configmaps/a?force=true",
        "application/merge-patch+json",
        "{}",
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );

    // Strategic merge: containers merge by name.
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    deploys.create(&PostParams::default(), &deployment("web", "nginx:1")).await.unwrap();
    let p = deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "image": "envoy"}]}}}})),
        )
        .await
        .unwrap();
    let containers = p.spec.template.spec.unwrap().containers;
    assert_eq!(containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["main", "sidecar"]);
    assert_eq!(p.metadata.generation, Some(2));

    // Custom resources take no strategic merge patch: 415.
    server.register(widgets());
    let w = widget_api(client, "shop");
    w.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let e = api_error(
        w.patch("w", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"a": 1}}))).await.unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (415, "UnsupportedMediaType"));
    assert_eq!(
        e.message,
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
}

#[tokio::test]
async fn server_side_apply_owns_fields_and_conflicts() {
    let (server, client) = started().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
        "data": {"k": "1", "extra": "e"}});
    let a = cms.patch("a", &PatchParams::apply("alice"), &Patch::Apply(&applied)).await.unwrap();
    assert_eq!(a.data.as_ref().unwrap()["k"], "1");
    let mf = a.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!((mf[0].manager.as_deref(), mf[0].operation.as_deref()), (Some("alice"), Some("Apply")));
    assert_eq!(mf[0].fields_v1.as_ref().unwrap().0, json!({"f:data": {"f:k": {}, "f:extra": {}}}));

    // Bob applies another value for data.k: 409 Conflict naming the field.
    let bob = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "2"}});
    let (code, status) = raw_json(
        &server,
        "PATCH",
        "/api/v1/namespaces/shop/configmaps/a?fieldManager=bob",
        "application/apply-patch+yaml",
        &bob.to_string(),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Apply failed with 1 conflict: conflict with \"alice\": .data.k",
            "reason": "Conflict",
            "details": {"causes": [{"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.k"}]},
            "code": 409})
    );
    // The same value is shared ownership, not a conflict.
    let same = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1"}});
    cms.patch("a", &PatchParams::apply("carol"), &Patch::Apply(&same)).await.unwrap();
    // Forced, bob takes data.k from alice (carol, who shared it, loses it too).
    let forced = cms.patch("a", &PatchParams::apply("bob").force(), &Patch::Apply(&bob)).await.unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["k"], "2");
    let owners: Vec<(String, Value)> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.fields_v1.unwrap().0))
        .collect();
    assert_eq!(
        owners,
        vec![
            ("alice".to_string(), json!({"f:data": {"f:extra": {}}})),
            ("bob".to_string(), json!({"f:data": {"f:k": {}}}))
        ]
    );
    // Alice stops applying `extra`: it is removed, as nobody else owns it.
    let alice2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"other": "o"}});
    let a2 = cms.patch("a", &PatchParams::apply("alice"), &Patch::Apply(&alice2)).await.unwrap();
    let data = a2.data.unwrap();
    assert!(!data.contains_key("extra") && data["k"] == "2" && data["other"] == "o", "{data:?}");

    // An update (merge patch) takes ownership; a later apply conflicts with
    // it, printed with its operation's apiVersion.
    cms.patch(
        "a",
        &PatchParams { field_manager: Some("editor".into()), ..Default::default() },
        &Patch::Merge(json!({"data": {"other": "edited"}})),
    )
    .await
    .unwrap();
    let e = api_error(cms.patch("a", &PatchParams::apply("alice"), &Patch::Apply(&alice2)).await.unwrap_err());
    assert_eq!(e.code, 409);
    assert_eq!(e.message, "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.other");

    // Apply without a field manager: the options' 422.
    let (code, status) =
        raw_json(&server, "PATCH", "/api/v1/namespaces/shop/configmaps/a", "application/apply-patch+yaml", "{}").await;
    assert_eq!(code, 422);
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            "reason": "Invalid",
            "details": {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                {"reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager"}]},
            "code": 422})
    );
    // Apply as YAML creates (201).
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fromyaml\ndata:\n  a: b\n";
    let (code, created) = raw_json(
        &server,
        "PATCH",
        "/api/v1/namespaces/shop/configmaps/fromyaml?fieldManager=y",
        "application/apply-patch+yaml",
        yaml,
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(created["data"]["a"], "b");
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let (_server, client) = started().await;
    let deploys: Api<Deployment> = Api::namespaced(client, "shop");
    let d = deploys.create(&PostParams::default(), &deployment("web", "nginx:1")).await.unwrap();
    // A status write ignores spec changes and keeps generation.
    let mut s = d.clone();
    s.spec.replicas = Some(5);
    s.status = Some(serde_json::from_value(json!({"replicas": 3, "observedGeneration": 1})).unwrap());
    let after = deploys.replace_status("web", &PostParams::default(), &s).await.unwrap();
    assert_eq!(after.spec.replicas, Some(1));
    assert_eq!(after.status.as_ref().unwrap().replicas, Some(3));
    assert_eq!(after.metadata.generation, Some(1));
    let mf = after.metadata.managed_fields.clone().unwrap();
    assert!(mf.iter().any(|m| m.subresource.as_deref() == Some("status")), "{mf:?}");
    // A main-resource write ignores status changes; a spec change bumps generation.
    let mut m = after.clone();
    m.status.as_mut().unwrap().replicas = Some(99);
    m.spec.replicas = Some(2);
    let main = deploys.replace("web", &PostParams::default(), &m).await.unwrap();
    assert_eq!(main.status.as_ref().unwrap().replicas, Some(3));
    assert_eq!(main.metadata.generation, Some(2));
    // PATCH and GET on /status.
    let p = deploys
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 2}, "spec": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!((p.status.as_ref().unwrap().ready_replicas, p.spec.replicas), (Some(2), Some(2)));
    assert_eq!(p.metadata.generation, Some(2));
    let got = deploys.get_status("web").await.unwrap();
    assert_eq!(got.metadata.resource_version, p.metadata.resource_version);
}

#[tokio::test]
async fn delete_answers_finalizers_and_preconditions() {
    let (server, client) = started().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let a = cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap();
    // A ConfigMap delete answers a Success Status naming it.
    let (code, status) =
        raw_json(&server, "DELETE", "/api/v1/namespaces/shop/configmaps/a", "application/json", "").await;
    assert_eq!(code, 200);
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": "a", "kind": "configmaps", "uid": a.metadata.uid.unwrap()}})
    );
    let e = api_error(cms.delete("a", &DeleteParams::default()).await.unwrap_err());
    assert_eq!(e.code, 404);
    assert_eq!(e.message, "configmaps \"a\" not found");

    // Preconditions: a stale uid or resourceVersion is a 409.
    let b = cms.create(&PostParams::default(), &cm("b", json!({}))).await.unwrap();
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some("nope".into()), resource_version: None }),
        ..Default::default()
    };
    let e = api_error(cms.delete("b", &dp).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on configmaps \"b\": StorageError: invalid object, Code: 4, Key: /registry/configmaps/shop/b, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: nope, UID in object meta: {}",
            b.metadata.uid.as_deref().unwrap()
        )
    );
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: None, resource_version: Some("1".into()) }),
        ..Default::default()
    };
    assert_eq!(api_error(cms.delete("b", &dp).await.unwrap_err()).code, 409);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: b.metadata.uid.clone(),
            resource_version: b.metadata.resource_version.clone(),
        }),
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..Default::default()
    };
    assert!(cms.delete("b", &dp).await.unwrap().is_right());
    let (code, status) = raw_json(
        &server,
        "DELETE",
        "/api/v1/namespaces/shop/configmaps/x",
        "application/json",
        r#"{"propagationPolicy":"Sideways"}"#,
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );

    // Finalizers: the delete marks the object and answers it; removing the
    // last finalizer deletes it.
    server.register(widgets());
    let w = widget_api(client, "shop");
    let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "finalizers": ["example.com/cleanup"]}, "spec": {}}))
    .unwrap();
    w.create(&PostParams::default(), &obj).await.unwrap();
    let start = server.resource_version();
    let marked = w.delete("w", &DeleteParams::default()).await.unwrap().left().expect("the object");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.generation, Some(2));
    assert!(w.get("w").await.is_ok());
    w.patch("w", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    assert_eq!(api_error(w.get("w").await.unwrap_err()).code, 404);
    let events = next_events(&w, &start, 2).await;
    assert_eq!(events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(), vec!["MODIFIED", "DELETED"]);
    // Custom resources answer the deleted object itself.
    w.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "v"}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let gone = w.delete("v", &DeleteParams::default()).await.unwrap().left().expect("the object");
    assert_eq!(gone.metadata.name.as_deref(), Some("v"));
}

#[tokio::test]
async fn dry_run_stores_nothing_and_is_recorded() {
    let (server, client) = started().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "shop");
    let dry = PostParams { dry_run: true, ..Default::default() };
    let before = server.resource_version();
    let c = cms.create(&dry, &cm("a", json!({"k": "v"}))).await.unwrap();
    assert!(c.metadata.uid.is_some());
    assert_eq!(c.metadata.resource_version, None, "a dry-run create has no resourceVersion");
    assert_eq!(api_error(cms.get("a").await.unwrap_err()).code, 404);
    assert_eq!(server.resource_version(), before);
    cms.create(&PostParams::default(), &cm("a", json!({"k": "v"}))).await.unwrap();
    let rv = server.resource_version();
    let p =
        cms.patch("a", &PatchParams::default().dry_run(), &Patch::Merge(json!({"data": {"k": "w"}}))).await.unwrap();
    assert_eq!(p.data.unwrap()["k"], "w");
    assert!(cms.delete("a", &DeleteParams::default().dry_run()).await.unwrap().is_right());
    assert_eq!(cms.get("a").await.unwrap().data.unwrap()["k"], "v");
    assert_eq!(server.resource_version(), rv, "no write, so no event either");
    let writes = server.writes();
    assert_eq!(writes.len(), 4);
    assert!(writes[0].is_dry_run() && !writes[1].is_dry_run() && writes[2].is_dry_run() && writes[3].is_dry_run());
    assert_eq!(writes[0].param("dryRun"), Some("All"));
    assert_eq!(writes[2].content_type.as_deref(), Some("application/merge-patch+json"));
    assert_eq!(writes[3].kind, RequestKind::Delete);

    // A DELETE's options are its body when it has one (the query's are then
    // ignored), else its query: the apiserver's DeleteResource handler.
    let path = "/api/v1/namespaces/shop/configmaps/a";
    let (code, _) = raw_json(&server, "DELETE", &format!("{path}?dryRun=All"), "application/json", "").await;
    assert_eq!(code, 200);
    assert!(cms.get("a").await.is_ok(), "dryRun=All in the query of a DELETE without a body is a dry run");
    let (code, _) = raw_json(&server, "DELETE", &format!("{path}?dryRun=All"), "application/json", "{}").await;
    assert_eq!(code, 200);
    assert_eq!(api_error(cms.get("a").await.unwrap_err()).code, 404, "a body's options win: deleted for real");
    let writes = server.writes();
    assert!(writes[4].is_dry_run() && !writes[5].is_dry_run());
}

#[tokio::test]
async fn impersonated_user_without_rights_is_forbidden() {
    let (server, _) = started().await;
    let mut config = server.config();
    config.auth_info.impersonate = Some("bob".into());
    let bob = kube::Client::try_from(config).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(bob, "shop");
    let e = api_error(cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "configmaps is forbidden: User \"bob\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"shop\""
    );
    let (code, status) =
        raw_json(&server, "GET", "/apis/apps/v1/namespaces/shop/deployments/web", "application/json", "").await;
    assert_eq!(code, 404, "without impersonation: admin");
    assert_eq!(status["message"], "deployments.apps \"web\" not found");
    let (_, _, body) = raw(
        &server,
        "PATCH",
        "/apis/apps/v1/namespaces/shop/deployments/web/status",
        &[("Impersonate-User", "bob")],
        "{}",
    )
    .await;
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "deployments.apps \"web\" is forbidden: User \"bob\" cannot patch resource \"deployments/status\" in API group \"apps\" in the namespace \"shop\"",
            "reason": "Forbidden", "details": {"name": "web", "group": "apps", "kind": "deployments"}, "code": 403})
    );
    server.grant("bob", Rule::new(&["create", "get"], &[""], &["configmaps"]).in_namespace("shop"));
    cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap();
    assert_eq!(api_error(cms.delete("a", &DeleteParams::default()).await.unwrap_err()).code, 403);
    assert!(server.writes().iter().all(|r| r.impersonate_user.as_deref() == Some("bob")));
    assert!(server.get("v1", "ConfigMap", Some("shop"), "a").is_some());
}

#[tokio::test]
async fn events_are_stored_and_listable() {
    let (_server, client) = started().await;
    let events: Api<Event> = Api::namespaced(client.clone(), "shop");
    let ev: Event = serde_json::from_value(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web.1"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/ctl",
        "reportingInstance": "ctl-0", "action": "Reconcile", "reason": "Synced", "type": "Normal",
        "regarding": {"kind": "Deployment", "name": "web", "namespace": "shop"}, "note": "done"}))
    .unwrap();
    events.create(&PostParams::default(), &ev).await.unwrap();
    let mut bad = ev.clone();
    bad.metadata.name = Some("web.2".into());
    bad.reporting_controller = None;
    let e = api_error(events.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(
        (e.code, e.message.as_str()),
        (422, "Event.events.k8s.io \"web.2\" is invalid: reportingController: Required value")
    );
    let core: Api<CoreEvent> = Api::namespaced(client, "shop");
    let ce: CoreEvent = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web.3"}, "involvedObject": {"kind": "Deployment", "name": "web", "namespace": "shop"},
        "reason": "Synced", "message": "done", "type": "Normal"}))
    .unwrap();
    core.create(&PostParams::default(), &ce).await.unwrap();
    assert_eq!(events.list(&Default::default()).await.unwrap().items.len(), 1);
    assert_eq!(core.list(&Default::default()).await.unwrap().items[0].reason.as_deref(), Some("Synced"));
}

#[tokio::test]
async fn discovery_lists_types_and_crds_created_later() {
    let (server, client) = started().await;
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) = discovery.resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")).unwrap();
    assert_eq!((ar.plural.as_str(), caps.scope), ("deployments", Scope::Namespaced));
    assert!(discovery.resolve_gvk(&GroupVersionKind::gvk("", "v1", "Namespace")).unwrap().1.scope == Scope::Cluster);
    assert!(!discovery.has_group("example.com"));
    let (code, doc) = raw_json(&server, "GET", "/apis/apps/v1", "application/json", "").await;
    assert_eq!(code, 200);
    assert_eq!(doc["kind"], "APIResourceList");
    assert_eq!(
        doc["resources"][1],
        json!({"name": "deployments/status", "singularName": "", "namespaced": true, "kind": "Deployment", "verbs": ["get", "patch", "update"]})
    );

    // Creating a CRD serves its resource and shows it in discovery.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) =
        discovery.resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Gadget")).expect("the CRD's kind");
    assert_eq!((ar.plural.as_str(), caps.scope), ("gadgets", Scope::Cluster));
    assert!(
        caps.subresources.iter().any(|(s, _)| s.plural == "gadgets/status" || s.plural == "status"),
        "{:?}",
        caps.subresources
    );
    let gadgets: Api<DynamicObject> = Api::all_with(client, &ar);
    let g = gadgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g"}, "spec": {"x": 1}}))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(g.metadata.generation, Some(1));
    assert!(server.requests().iter().any(|r| r.kind == RequestKind::Discovery && r.path == "/apis/example.com/v1"));
}

#[tokio::test]
async fn throttled_requests_get_429_with_retry_after() {
    let (server, client) = started().await;
    server.throttle(1, 3);
    let (code, head, body) = raw(&server, "GET", "/api/v1/namespaces/shop/configmaps", &[], "").await;
    assert_eq!(code, 429);
    assert!(head.contains("retry-after: 3\r\n"), "{head}");
    assert!(head.contains("content-type: text/plain; charset=utf-8"), "{head}");
    assert_eq!(body, "Too many requests, please try again later.\n");
    let cms: Api<ConfigMap> = Api::namespaced(client, "shop");
    assert!(cms.list(&Default::default()).await.is_ok(), "only one request was throttled");
    assert_eq!(server.lists().len(), 2);
}

#[tokio::test]
async fn refused_connections_then_the_same_port_again() {
    let (server, _) = started().await;
    let addr = server.addr();
    server.refuse_connections().await;
    assert!(!server.is_accepting());
    let err = tokio::net::TcpStream::connect(addr).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    let before = server.request_count();
    server.accept_connections().await;
    // A fresh client: a pooled connection of the old one would be dead.
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "shop");
    assert!(cms.list(&Default::default()).await.is_ok());
    assert_eq!(server.request_count(), before + 1);

    server.refuse_connections_for(Duration::from_millis(200)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    e2e::eventually("connections accepted again", || server.is_accepting()).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
}

#[tokio::test]
async fn every_write_is_one_watch_event() {
    let (server, client) = started().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "shop");
    let start = server.resource_version();
    cms.create(&PostParams::default(), &cm("a", json!({"k": "1"}))).await.unwrap();
    // Forced: the create's manager owns data.k (kube sends no User-Agent, so
    // that manager is ""), and an apply of another value would conflict.
    cms.patch(
        "a",
        &PatchParams::apply("m").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a"}, "data": {"k": "2"}})),
    )
    .await
    .unwrap();
    let got = cms.get("a").await.unwrap();
    cms.replace("a", &PostParams::default(), &got).await.unwrap(); // no-op: no event
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let events = next_events(&cms, &start, 3).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(kinds, vec!["ADDED", "MODIFIED", "DELETED"]);
    let rvs: Vec<u64> = events.iter().map(|e| e.2.parse().unwrap()).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
    assert_eq!(rvs[2].to_string(), server.resource_version());
}
