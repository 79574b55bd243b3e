//! What an informer's cache costs per object, with and without the
//! `strip` transform, on objects shaped as a real cluster writes them:
//! Deployments created by `kubectl apply` (client-side: the last-applied
//! annotation and an `Update` managed-fields entry) whose status the
//! deployment controller wrote, and Pods created by server-side apply whose
//! status the kubelet wrote. The loopback API server records managedFields
//! as upstream serialises them.
//!
//! A benchmark, not a test (`#[ignore]`): run it with
//! `cargo test --release -p e2e --test all -- --ignored --nocapture cache_footprint::`.

use std::time::Duration;

use e2e::apiserver::{ApiServer, ResourceType};
use e2e::eventually;
use informer_host::informer::{InformerOptions, SharedIndexInformer, Strip, strip_fields};
use informer_host::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const OBJECTS: usize = 300;
const NS: &str = "shop";

fn deployment(i: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": format!("web-{i}"), "namespace": NS, "labels": {"app": format!("web-{i}"), "team": "storefront"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": format!("web-{i}")}},
            "template": {
                "metadata": {"labels": {"app": format!("web-{i}"), "team": "storefront"}},
                "spec": {"containers": [{
                    "name": "web", "image": format!("registry.example.com/shop/web:1.{i}.0"),
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "MODE", "value": "production"}, {"name": "CACHE_TTL", "value": "30s"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}],
                }],
                "volumes": [{"name": "config", "configMap": {"name": "web-config"}}]},
            },
        },
    })
}

fn deployment_status() -> Value {
    let condition = |ty: &str, reason: &str, message: &str| {
        json!({"type": ty, "status": "True", "lastUpdateTime": "2026-12-01T10:00:00Z",
               "lastTransitionTime": "2026-12-01T10:00:00Z", "reason": reason, "message": message})
    };
    json!({"status": {
        "observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
        "conditions": [
            condition("Available", "MinimumReplicasAvailable", "Deployment has minimum availability."),
            condition("Progressing", "NewReplicaSetAvailable", "ReplicaSet \"web-7d4b9c\" has successfully progressed."),
        ],
    }})
}

fn pod(i: usize) -> Value {
    let mut d = deployment(i);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-{i}-7d4b9c-x2k9p"), "namespace": NS,
                     "labels": {"app": format!("web-{i}"), "pod-template-hash": "7d4b9c"}},
        "spec": d["spec"]["template"]["spec"].take(),
    })
}

fn pod_status(i: usize) -> Value {
    let condition = |ty: &str| json!({"type": ty, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-12-01T10:00:05Z"});
    json!({"status": {
        "phase": "Running", "hostIP": "10.0.3.17", "podIP": format!("10.244.{}.{}", i / 250, i % 250),
        "startTime": "2026-12-01T10:00:01Z", "qosClass": "Burstable",
        "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"),
                       condition("ContainersReady"), condition("PodScheduled")],
        "containerStatuses": [{
            "name": "web", "ready": true, "restartCount": 0, "started": true,
            "image": format!("registry.example.com/shop/web:1.{i}.0"),
            "imageID": "registry.example.com/shop/web@sha256:4b8f2c5c2b1f0f0d9a4e7b6c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e",
            "containerID": "containerd://9f3c1e0b7a2d4c6e8f0a1b3c5d7e9f1a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e",
            "state": {"running": {"startedAt": "2026-12-01T10:00:04Z"}},
        }],
    }})
}

/// Writes the objects as the cluster would have.
async fn populate(server: &ApiServer) {
    server.register(ResourceType::pods());
    server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).unwrap();
    let client = server.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client, NS);
    for i in 0..OBJECTS {
        // `kubectl apply` (client-side): the input kept in an annotation.
        let mut d = deployment(i);
        d["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/last-applied-configuration": format!("{}\n", deployment(i))});
        let d: Deployment = serde_json::from_value(d).unwrap();
        let pp = PostParams { field_manager: Some("kubectl-client-side-apply".into()), ..Default::default() };
        deployments.create(&pp, &d).await.unwrap();
        let status = PatchParams { field_manager: Some("kube-controller-manager".into()), ..Default::default() };
        deployments.patch_status(&format!("web-{i}"), &status, &Patch::Merge(deployment_status())).await.unwrap();
        // `kubectl apply --server-side`, then the kubelet's status.
        let name = format!("web-{i}-7d4b9c-x2k9p");
        pods.patch(&name, &PatchParams::apply("kubectl"), &Patch::Apply(pod(i))).await.unwrap();
        let kubelet = PatchParams { field_manager: Some("kubelet".into()), ..Default::default() };
        pods.patch_status(&name, &kubelet, &Patch::Merge(pod_status(i))).await.unwrap();
    }
}

/// The cache's bytes per object of one informer of `kind` with `strip`.
async fn bytes_per_object(server: &ApiServer, api_version: &str, kind: &str, strip: Strip) -> f64 {
    let source = KubeSource::new(server.client(), &KubeResource::new(api_version, kind), KubeSourceOptions::default());
    let informer = SharedIndexInformer::new(source, InformerOptions { name: kind.into(), ..Default::default() });
    if strip.any() {
        informer.set_transform(strip_fields(strip)).unwrap();
    }
    let stop = CancellationToken::new();
    let run = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    eventually("the informer synced", || informer.has_synced()).await;
    let objects = informer.indexer().list();
    assert_eq!(objects.len(), OBJECTS);
    let bytes: usize = objects.iter().map(|o| o.bytes_held()).sum();
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), run).await;
    bytes as f64 / objects.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored --nocapture"]
async fn bench_cache_bytes_per_object_with_and_without_strip() {
    let server = ApiServer::start().await;
    populate(&server).await;
    let variants = [
        ("none", Strip::default()),
        ("managed-fields", Strip { managed_fields: true, last_applied: false }),
        ("managed-fields + last-applied", Strip { managed_fields: true, last_applied: true }),
    ];
    println!("cache bytes per object, {OBJECTS} objects of each kind");
    println!("{:<12} {:<32} {:>12} {:>8}", "kind", "strip", "bytes/object", "vs none");
    for (api_version, kind) in [("apps/v1", "Deployment"), ("v1", "Pod")] {
        let mut base = 0.0;
        for (name, strip) in variants {
            let b = bytes_per_object(&server, api_version, kind, strip).await;
            if !strip.any() {
                base = b;
            }
            println!("{kind:<12} {name:<32} {b:>12.0} {:>7.0}%", 100.0 * b / base);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_with_strip_caches_objects_without_managed_fields() {
    use informer_host::app::{App, KubeOptions, RunOptions};
    use informer_host::config::Config;

    let server = ApiServer::start().await;
    server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).unwrap();
    let deployments: Api<Deployment> = Api::namespaced(server.client(), NS);
    let mut d = deployment(0);
    d["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": deployment(0).to_string(), "keep": "me"});
    let pp = PostParams { field_manager: Some("kubectl-client-side-apply".into()), ..Default::default() };
    deployments.create(&pp, &serde_json::from_value(d).unwrap()).await.unwrap();
    let on_server = server.get("apps/v1", "Deployment", Some(NS), "web-0").unwrap();
    assert!(on_server["metadata"]["managedFields"].is_array(), "the server records them: {on_server}");

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, None);
    let mut text = String::new();
    for (name, strip) in [("plain", ""), ("stripped", "strip = [\"managed-fields\", \"last-applied\"]")] {
        text.push_str(&format!(
            "[[informer]]\nname = \"{name}\"\nsource = \"kube\"\napi_version = \"apps/v1\"\nkind = \"Deployment\"\n{strip}\n\n"
        ));
    }
    let config = Config::parse(&text, "host.toml", dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let opts =
        RunOptions { kube: KubeOptions { kubeconfig: Some(kubeconfig), context: None }, ..RunOptions::default() };
    let app = App::start(&config, &opts).await.unwrap();
    eventually("ready", || app.readiness().ready).await;
    let cached = |informer: &str| -> Value {
        let i = app.observed.informers().into_iter().find(|i| i.name == informer).unwrap().informer;
        i.indexer().get("shop/web-0").unwrap().parse().unwrap()
    };
    let plain = cached("plain");
    assert!(plain["metadata"]["managedFields"].is_array());
    let stripped = cached("stripped");
    assert!(stripped["metadata"].get("managedFields").is_none(), "{stripped}");
    assert_eq!(stripped["metadata"]["annotations"], json!({"keep": "me"}));
    assert_eq!(stripped["spec"], plain["spec"]);
    app.shutdown().await;
}

/// The process's resident set now and its peak since the last reset
/// (`VmRSS`, `VmHWM`), in bytes.
fn rss_and_peak() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Peak RSS of the initial sync of 10 000 ConfigMaps (~1 KiB each) by
/// paged lists (500 a page) or, with `SYNC_LIST=watch-list`, by a
/// watch-list: one way per process (an allocator that already grew for
/// one way would hide the other's growth). Measured from a reset peak
/// (`/proc/self/clear_refs`) once the test API server, in this process,
/// holds the objects; the server's own buffers during the sync count too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored --nocapture, once per SYNC_LIST"]
async fn bench_initial_sync_peak_rss_paged_against_watch_list() {
    const N: usize = 10_000;
    let watch_list = std::env::var("SYNC_LIST").as_deref() == Ok("watch-list");
    let server = ApiServer::start().await;
    let value = "x".repeat(900);
    for i in 0..N {
        let cm = e2e::apiserver::config_map("shop", &format!("cm{i:05}"), &[("app", "web")], &[("v", &value)]);
        server.create(cm).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (before, _) = rss_and_peak();
    let started = std::time::Instant::now();
    let options = KubeSourceOptions { watch_list, ..KubeSourceOptions::default() };
    let source = KubeSource::new(server.client(), &KubeResource::new("v1", "ConfigMap"), options);
    let informer = SharedIndexInformer::new(source, InformerOptions::default());
    let stop = CancellationToken::new();
    let run = tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    eventually("synced", || informer.has_synced()).await;
    let took = started.elapsed();
    assert_eq!(informer.indexer().len(), N);
    let (after, peak) = rss_and_peak();
    stop.cancel();
    let _ = run.await;
    let mib = |b: usize| b.saturating_sub(before) as f64 / (1 << 20) as f64;
    println!(
        "initial sync of {N} ConfigMaps (~1 KiB) by {}: peak RSS +{:.1} MiB, after +{:.1} MiB, {:.0} ms",
        if watch_list { "watch-list" } else { "paged lists (500)" },
        mib(peak),
        mib(after),
        took.as_secs_f64() * 1e3
    );
}
