//! Reconciles per second of controllers on one informer of the embedded
//! store: a no-op controller, and one that writes a merge patch per key
//! (through the write guard into the embedded store) and then reconciles
//! the update its patch caused to nothing, as a level-driven controller
//! does. 1, 10 and 100 controllers share the informer; each reconciles
//! every key once.
//!
//! `cargo bench -p informer-host --bench controllers`

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use informer_host::cluster::embedded::EmbeddedCluster;
use informer_host::cluster::{WriteParams, WriteRequest};
use informer_host::controller::{ControllerOptions, ControllerRunner, GuardConfig, WriteGuard, WriteRule};
use informer_host::informer::{InformerOptions, SharedIndexInformer};
use informer_host::plugin::{Grants, PluginRuntime, PluginSpec, RuntimeConfig};
use informer_host::source::manifests::ManifestFilter;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const KEYS: usize = 1000;

async fn run(controllers: usize, write: bool, runtime: &PluginRuntime) -> (Duration, u64) {
    let cluster = EmbeddedCluster::in_memory();
    let params = WriteParams { field_manager: "seed".into(), dry_run: false, impersonate: None };
    for i in 0..KEYS {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "a", "name": format!("cm-{i}")}, "data": {"k": "v"}});
        cluster.write_now(WriteRequest::Create(cm), &params).unwrap();
    }
    let informer =
        SharedIndexInformer::new(cluster.view(ManifestFilter::default().kind("ConfigMap")), InformerOptions::default());
    let stop = CancellationToken::new();
    tokio::spawn({
        let (i, s) = (informer.clone(), stop.clone());
        async move { i.run(s).await }
    });
    let informers: HashMap<String, SharedIndexInformer> = [("cms".to_string(), informer)].into();
    let started = Instant::now();
    let mut runners = Vec::new();
    for c in 0..controllers {
        let mut spec = PluginSpec::new(format!("c{c}"), plugin_build::plugin_path("test-controller"));
        spec.grants = Grants { log: true, cache: true, kube: true, ..Grants::default() };
        spec.config_json = json!({"label": write}).to_string();
        let config = GuardConfig {
            rules: vec![WriteRule {
                api_groups: vec!["".into()],
                kinds: vec!["ConfigMap".into()],
                verbs: vec!["patch".into()],
                names: vec![],
            }],
            qps: 1e9,
            burst: 1_000_000,
            ..GuardConfig::new(format!("c{c}"))
        };
        let guard = Arc::new(WriteGuard::new(config, cluster.writer()));
        let options = ControllerOptions::new("cms", "ConfigMap");
        runners.push(ControllerRunner::start(runtime, spec, &informers, guard, options, None).unwrap());
    }
    // Done when every controller reconciled every key at least once, its
    // queue is idle, and (when writing) every key carries the label.
    let labelled = |i: usize| {
        let t = informer_host::cluster::Target {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("a".into()),
            name: format!("cm-{i}"),
        };
        cluster.get(&t).is_some_and(|o| o.pointer("/metadata/labels/reconciled").is_some())
    };
    loop {
        let idle = runners.iter().all(|r| {
            r.stats().succeeded.load(Ordering::Relaxed) >= KEYS as u64
                && r.queue().is_empty()
                && r.queue().processing_len() == 0
        });
        if idle && (!write || (0..KEYS).all(labelled)) {
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
    println!("Reconciles of {KEYS} ConfigMaps on the embedded store (from controller start, loads included):");
    for write in [false, true] {
        for controllers in [1, 10, 100] {
            let (elapsed, done) = rt.block_on(run(controllers, write, &runtime));
            println!(
                "  {:<34} {:>4} controller(s): {:>8} reconciles in {:>9.1?}: {:>9.0} reconciles/s",
                if write { "patch once, then reconcile to nothing" } else { "no-op" },
                controllers,
                done,
                elapsed,
                done as f64 / elapsed.as_secs_f64()
            );
        }
    }
}
