//! What the host's write checks cost: merge patches of one ConfigMap against
//! the loopback test API server, side by side in one run, through
//!
//! - a raw `kube::Api` patch (the baseline a controller process would use),
//! - the host's `KubeWriter` (the backend the guard sends through),
//! - the `WriteGuard` over that `KubeWriter` (rules, tenant namespaces,
//!   QPS bucket, timeout, logging and counting, then the write).
//!
//! Rounds alternate the three so drift on the machine hits all alike.
//!
//! `cargo bench -p e2e --bench write_guard`

use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::apiserver::{ApiServer, config_map, namespace};
use informer_host::cluster::kube_writer::KubeWriter;
use informer_host::cluster::{ClusterWriter, Patch, Target, WriteParams, WriteRequest};
use informer_host::controller::{GuardConfig, NamespaceScope, WriteGuard, WriteRule};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PatchParams};
use serde_json::json;

const ROUNDS: usize = 10;
const PER_ROUND: usize = 200;

fn request(i: usize) -> WriteRequest {
    WriteRequest::Patch {
        target: Target {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("shop".into()),
            name: "cm".into(),
        },
        patch: Patch::Merge(json!({"data": {"n": i.to_string()}})),
    }
}

fn params() -> WriteParams {
    WriteParams { field_manager: "bench".into(), dry_run: false, impersonate: None }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let server = ApiServer::start().await;
        server.create(namespace("shop")).unwrap();
        server.create(config_map("shop", "cm", &[], &[("n", "0")])).unwrap();
        let api: Api<ConfigMap> = Api::namespaced(server.client(), "shop");
        let writer: Arc<dyn ClusterWriter> = Arc::new(KubeWriter::from_config(server.config()).unwrap());
        let config = GuardConfig {
            rules: vec![WriteRule {
                api_groups: vec!["".into()],
                kinds: vec!["ConfigMap".into()],
                verbs: vec!["patch".into()],
                names: vec![],
            }],
            tenant: Some("shop".into()),
            scope: Some(NamespaceScope { namespaces: vec!["shop".into()], cluster_scoped: false }),
            // The bucket must not be what is measured.
            qps: 1e9,
            burst: 1_000_000,
            ..GuardConfig::new("bench")
        };
        let guard = WriteGuard::new(config, writer.clone());
        let (mut raw, mut backend, mut guarded) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        let mut i = 0;
        // Warm up connections and discovery.
        for _ in 0..50 {
            i += 1;
            guard.write(request(i)).await.unwrap();
        }
        for _ in 0..ROUNDS {
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                i += 1;
                let p = kube::api::Patch::Merge(json!({"data": {"n": i.to_string()}}));
                api.patch("cm", &PatchParams { field_manager: Some("bench".into()), ..Default::default() }, &p)
                    .await
                    .unwrap();
            }
            raw += t.elapsed();
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                i += 1;
                writer.write(request(i), params()).await.unwrap();
            }
            backend += t.elapsed();
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                i += 1;
                guard.write(request(i)).await.unwrap();
            }
            guarded += t.elapsed();
        }
        let n = (ROUNDS * PER_ROUND) as u32;
        let per = |d: Duration| d / n;
        println!("Merge patches of one ConfigMap against the loopback test API server, {n} each, interleaved:");
        println!("  raw kube::Api::patch              {:>10.1?} per write", per(raw));
        println!(
            "  KubeWriter                        {:>10.1?} per write ({:+.1} % vs raw)",
            per(backend),
            pct(backend, raw)
        );
        println!(
            "  WriteGuard → KubeWriter           {:>10.1?} per write ({:+.1} % vs raw, {:+.1} % vs KubeWriter)",
            per(guarded),
            pct(guarded, raw),
            pct(guarded, backend)
        );
    });
}

fn pct(a: Duration, b: Duration) -> f64 {
    (a.as_secs_f64() / b.as_secs_f64() - 1.0) * 100.0
}
