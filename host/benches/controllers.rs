//! Reconciles per second of controllers on the embedded store, 1, 10 and
//! 100 controllers at a time, each reconciling every key once:
//!
//! - `no-op`: `test-controller` answering `done` on 1000 ConfigMaps;
//! - `label`: `test-controller` writing a merge patch per ConfigMap
//!   (through the write guard into the embedded store) when the label is
//!   missing, then reconciling the update its patch caused to nothing, as a
//!   level-driven controller does (the first controller to get a key
//!   patches it; the others find it done);
//! - `reloader`: the Reloader example on 1000 Deployments in 10 namespaces,
//!   each using its own ConfigMap: it hashes the ConfigMap and records the hash on the
//!   Deployment with one patch, then reconciles that update to nothing.
//!
//! The clock starts once every controller is loaded and its queue holds
//! every key (compiling and the initial list are not measured), and stops
//! when every controller reconciled every key, its queue is idle, and the
//! writes are all in the store.
//!
//! `cargo bench -p informer-host --bench controllers`

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use informer_host::cluster::embedded::EmbeddedCluster;
use informer_host::cluster::{Target, WriteParams, WriteRequest};
use informer_host::controller::{
    ControllerOptions, ControllerRunner, GuardConfig, Mapping, Secondary, WriteGuard, WriteRule,
};
use informer_host::informer::{InformerOptions, SharedIndexInformer};
use informer_host::plugin::{Grants, PluginRuntime, PluginSpec, RuntimeConfig};
use informer_host::source::manifests::ManifestFilter;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const KEYS: usize = 1000;

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Noop,
    Label,
    Reloader,
}

impl Workload {
    fn describe(self) -> &'static str {
        match self {
            Workload::Noop => "no-op",
            Workload::Label => "label: patch once, then nothing",
            Workload::Reloader => "reloader: hash, patch once",
        }
    }
}

fn rule(group: &str, kind: &str) -> WriteRule {
    WriteRule { api_groups: vec![group.into()], kinds: vec![kind.into()], verbs: vec!["patch".into()], names: vec![] }
}

fn target(kind: &str, api_version: &str, i: usize) -> Target {
    Target { api_version: api_version.into(), kind: kind.into(), namespace: Some(namespace(i)), name: format!("x-{i}") }
}

/// Keys spread over 10 namespaces (the reloader maps a ConfigMap to the
/// Deployments of its namespace).
fn namespace(i: usize) -> String {
    format!("ns-{}", i % 10)
}

fn seed(cluster: &EmbeddedCluster, workload: Workload) {
    let params = WriteParams { field_manager: "seed".into(), dry_run: false, impersonate: None };
    let create = |v: Value| cluster.write_now(WriteRequest::Create(v), &params).unwrap();
    for i in 0..KEYS {
        create(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace(i), "name": format!("x-{i}")}, "data": {"k": format!("v{i}")}}),
        );
        if workload == Workload::Reloader {
            create(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"namespace": namespace(i), "name": format!("x-{i}")},
                "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx", "envFrom": [{"configMapRef": {"name": format!("x-{i}")}}]}]}}},
            }));
        }
    }
}

fn informer(cluster: &EmbeddedCluster, kind: &str, stop: &CancellationToken) -> SharedIndexInformer {
    let informer =
        SharedIndexInformer::new(cluster.view(ManifestFilter::default().kind(kind)), InformerOptions::default());
    tokio::spawn({
        let (i, s) = (informer.clone(), stop.clone());
        async move { i.run(s).await }
    });
    informer
}

/// Whether key `i` carries what the workload writes.
fn written(cluster: &EmbeddedCluster, workload: Workload, i: usize) -> bool {
    match workload {
        Workload::Noop => true,
        Workload::Label => cluster
            .get(&target("ConfigMap", "v1", i))
            .is_some_and(|o| o.pointer("/metadata/labels/reconciled").is_some()),
        Workload::Reloader => cluster
            .get(&target("Deployment", "apps/v1", i))
            .is_some_and(|o| o.pointer("/metadata/annotations/informer-host.dev~1config-hash").is_some()),
    }
}

async fn run(controllers: usize, workload: Workload, runtime: &PluginRuntime) -> (Duration, u64) {
    let cluster = EmbeddedCluster::in_memory();
    seed(&cluster, workload);
    let stop = CancellationToken::new();
    let mut informers: HashMap<String, SharedIndexInformer> = HashMap::new();
    informers.insert("configmaps".into(), informer(&cluster, "ConfigMap", &stop));
    if workload == Workload::Reloader {
        informers.insert("deployments".into(), informer(&cluster, "Deployment", &stop));
        informers.insert("secrets".into(), informer(&cluster, "Secret", &stop));
    }
    let mut runners = Vec::new();
    for c in 0..controllers {
        let name = format!("c{c}");
        let (plugin, config, rules, options) = match workload {
            Workload::Reloader => (
                "reloader",
                json!({}),
                vec![rule("apps", "Deployment"), WriteRule { verbs: vec!["create".into()], ..rule("", "Event") }],
                ControllerOptions {
                    secondaries: ["configmaps", "secrets"]
                        .map(|i| Secondary { informer: i.into(), mapping: Mapping::Plugin })
                        .to_vec(),
                    ..ControllerOptions::new("deployments", "Deployment")
                },
            ),
            _ => (
                "test-controller",
                json!({"label": workload == Workload::Label, "informer": "configmaps"}),
                vec![rule("", "ConfigMap")],
                ControllerOptions::new("configmaps", "ConfigMap"),
            ),
        };
        let mut spec = PluginSpec::new(name.clone(), plugin_build::plugin_path(plugin));
        spec.grants = Grants { log: true, cache: true, kube: true, ..Grants::default() };
        spec.config_json = config.to_string();
        let config = GuardConfig { rules, qps: 1e9, burst: 1_000_000, ..GuardConfig::new(name) };
        let guard = Arc::new(WriteGuard::new(config, cluster.writer()));
        runners.push(ControllerRunner::prepare(runtime, spec, &informers, guard, options, None).unwrap());
    }
    // Every key queued (the informers listed and replayed their caches).
    while !runners.iter().all(|r| r.queue().len() >= KEYS) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = Instant::now();
    for r in &mut runners {
        r.run();
    }
    let mut report = Instant::now();
    loop {
        if report.elapsed() > Duration::from_secs(10) {
            report = Instant::now();
            let unwritten = (0..KEYS).filter(|i| !written(&cluster, workload, *i)).count();
            let stats: Vec<_> = runners
                .iter()
                .map(|r| {
                    (
                        r.stats().succeeded.load(Ordering::Relaxed),
                        r.stats().failed.load(Ordering::Relaxed),
                        r.queue().len(),
                    )
                })
                .collect();
            eprintln!(
                "still waiting: {unwritten} keys unwritten; (succeeded, failed, queued) {:?}",
                &stats[..stats.len().min(3)]
            );
        }
        let idle = runners.iter().all(|r| {
            r.stats().succeeded.load(Ordering::Relaxed) >= KEYS as u64
                && r.queue().is_empty()
                && r.queue().processing_len() == 0
        });
        if idle && (0..KEYS).all(|i| written(&cluster, workload, i)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let done: u64 = runners.iter().map(|r| r.stats().succeeded.load(Ordering::Relaxed)).sum();
    for r in runners {
        r.stop().await;
    }
    stop.cancel();
    (elapsed, done)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let runtime = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    println!("Reconciles on the embedded store ({KEYS} keys; from the first reconcile, loads excluded):");
    for workload in [Workload::Noop, Workload::Label, Workload::Reloader] {
        for controllers in [1, 10, 100] {
            let (elapsed, done) = rt.block_on(run(controllers, workload, &runtime));
            println!(
                "  {:<32} {:>4} controller(s): {:>8} reconciles in {:>9.1?}: {:>9.0} reconciles/s",
                workload.describe(),
                controllers,
                done,
                elapsed,
                done as f64 / elapsed.as_secs_f64()
            );
        }
    }
}
