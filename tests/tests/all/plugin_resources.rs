//! `Plugin` and `TenantPolicy` resources against the loopback API server:
//! the CRDs applied as a platform team applies `deploy/crds/`, a tenant's
//! Plugin loaded from a ConfigMap key, its status, a new component swapped
//! with nothing lost, deletion unloading it, and a spec over its tenant's
//! policy refused with the limit named.

use std::sync::Arc;
use std::time::Duration;

use e2e::apiserver::{ApiServer, Rule, config_map};
use e2e::oci_registry::{Artifact, OciRegistry};
use e2e::plugins::{Log, runtime, wasm};
use e2e::wait_until;
use informer_host::app::{App, KubeOptions, RunOptions};
use informer_host::config::Config;
use informer_host::coordination::{Coordinator, CoordinatorConfig};
use informer_host::kube_plugins::crd::{
    ComponentSource, ControllerSpec, Grant, KeySelector, LimitsSpec, MappedBy, OciSource, PluginSpec, SecondaryWatch,
    TenantPolicySpec, WatchSpec, WriteRuleSpec,
};
use informer_host::kube_plugins::{Plugin, PluginResources, PluginResourcesOptions, TenantPolicy, crds};
use informer_host::metrics::Metrics;
use informer_host::oci::{OciConfig, OciPuller};
use informer_host::registry::PluginRegistry;
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

const NS: &str = "team-a";
/// Loading compiles a component; on a loaded CI machine that takes seconds.
const LOAD: Duration = Duration::from_secs(60);

struct Cluster {
    server: ApiServer,
    client: kube::Client,
    registry: PluginRegistry,
    resources: Arc<PluginResources>,
    log: Log,
    stop: CancellationToken,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The server with the CRDs, namespace `team-a`, its policy (memory ≤
/// 32Mi, grant `log` only), a ConfigMap `components` holding `swap-v1` and
/// `swap-v2`, and the controller running.
async fn cluster() -> Cluster {
    cluster_pulling(None).await
}

async fn cluster_pulling(oci: Option<Arc<OciPuller>>) -> Cluster {
    let (server, client) = tenant_cluster(Some(2)).await;
    let registry = PluginRegistry::new(runtime());
    let log = Log::default();
    let stop = CancellationToken::new();
    let options = PluginResourcesOptions {
        identity: "replica-0".into(),
        log_sink: Some(log.sink()),
        oci,
        // Status counters are refreshed at the resync.
        resync: Duration::from_secs(2),
        ..PluginResourcesOptions::default()
    };
    let resources = PluginResources::start(client.clone(), registry.clone(), options, stop.clone());
    Cluster { server, client, registry, resources, log, stop }
}

/// The API server with the CRDs, namespace `team-a`, its policy and the
/// `components` ConfigMap.
async fn tenant_cluster(max_plugins: Option<u32>) -> (ApiServer, kube::Client) {
    let server = ApiServer::start().await;
    let client = server.client();
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds() {
        crd_api.create(&PostParams::default(), &crd).await.expect("CRD created");
    }
    server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).unwrap();
    let policies: Api<TenantPolicy> = Api::all(client.clone());
    let policy = TenantPolicy::new(
        "team-a",
        TenantPolicySpec {
            namespaces: vec![NS.into()],
            namespace_labels: None,
            max_plugins,
            limits: LimitsSpec { fuel_per_call: None, deadline: Some("2s".into()), memory: Some("32Mi".into()) },
            max_pending: None,
            allowed_grants: vec![Grant::Log],
            ..Default::default()
        },
    );
    policies.create(&PostParams::default(), &policy).await.expect("policy created");
    let components: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("components".into());
    cm.binary_data = Some(
        [("v1.wasm", "swap-v1"), ("v2.wasm", "swap-v2")]
            .into_iter()
            .map(|(k, p)| (k.to_string(), ByteString(std::fs::read(wasm(p)).expect("built plugin"))))
            .collect(),
    );
    components.create(&PostParams::default(), &cm).await.expect("components stored");
    (server, client)
}

fn recorder_spec(key: &str) -> PluginSpec {
    PluginSpec {
        component: ComponentSource {
            config_map: Some(KeySelector { name: "components".into(), key: key.into() }),
            ..Default::default()
        },
        watch: WatchSpec {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            label_selector: Some("app=watched".into()),
            field_selector: None,
            field_indexers: Default::default(),
        },
        resync: None,
        limits: LimitsSpec::default(),
        grants: vec![Grant::Log],
        config: None,
        on_swap: None,
        max_pending: None,
        controller: None,
    }
}

impl Cluster {
    fn plugins(&self) -> Api<Plugin> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn status(&self, name: &str) -> Value {
        self.server
            .get("informer-host.dev/v1alpha1", "Plugin", Some(NS), name)
            .map(|p| p["status"].clone())
            .unwrap_or(Value::Null)
    }

    fn condition(&self, name: &str, ty: &str) -> Option<(String, String, String)> {
        let status = self.status(name);
        let c = status["conditions"].as_array()?.iter().find(|c| c["type"] == ty)?.clone();
        let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        Some((s("status"), s("reason"), s("message")))
    }

    async fn until(&self, what: &str, mut cond: impl FnMut(&Cluster) -> bool) {
        if !wait_until(LOAD, || cond(self)).await {
            let statuses = ["rec", "reloader"].map(|p| format!("{p}: {}", self.status(p)));
            panic!("timed out waiting for {what}; statuses: {statuses:?}; log: {:?}", self.log.lines());
        }
    }

    fn watched(&self, name: &str) {
        self.server.create(config_map(NS, name, &[("app", "watched")], &[("k", "v")])).unwrap();
    }
}

fn digest(plugin: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(std::fs::read(wasm(plugin)).unwrap())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_resource_loads_reports_its_status_swaps_without_loss_and_unloads() {
    let c = cluster().await;
    c.watched("a");
    c.plugins().create(&PostParams::default(), &Plugin::new("rec", recorder_spec("v1.wasm"))).await.unwrap();

    c.until("Ready and Synced", |c| {
        c.condition("rec", "Ready").is_some_and(|r| r.0 == "True")
            && c.condition("rec", "Synced").is_some_and(|s| s.0 == "True")
    })
    .await;
    let status = c.status("rec");
    assert_eq!(status["digest"], digest("swap-v1"));
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["replica"], "replica-0");
    assert_eq!(c.condition("rec", "Degraded").unwrap().0, "False");
    assert!(c.log.events().iter().any(|l| l.starts_with("v1 ") && l.contains("team-a/a")), "{:?}", c.log.events());
    c.watched("b");
    c.until("v1 sees b", |c| c.log.events().iter().any(|l| l.starts_with("v1 ") && l.contains("team-a/b"))).await;

    // A new component: the same plugin, swapped between two notifications.
    let patch = json!({"spec": {"component": {"configMap": {"name": "components", "key": "v2.wasm"}}}});
    c.plugins().patch("rec", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    for name in ["c", "d", "e"] {
        c.watched(name);
    }
    c.until("the v2 digest", |c| c.status("rec")["digest"] == digest("swap-v2")).await;
    c.watched("f");
    c.until("v2 sees f", |c| c.log.events().iter().any(|l| l.starts_with("v2 ") && l.contains("team-a/f"))).await;
    // Every object arrived exactly once, whichever version handled it.
    let events = c.log.events();
    for name in ["a", "b", "c", "d", "e", "f"] {
        let n = events.iter().filter(|l| l.contains(&format!("team-a/{name} "))).count();
        assert_eq!(n, 1, "object {name}: {events:?}");
    }
    assert_eq!(c.status("rec")["observedGeneration"], 2);
    assert_eq!(c.registry.list().len(), 1);

    // Deleting it unloads it and stops the informer it alone used.
    c.plugins().delete("rec", &DeleteParams::default()).await.unwrap();
    c.until("unloaded, the watch informer stopped and forgotten", |c| {
        c.registry.list().is_empty() && c.resources.loaded().is_empty() && c.registry.informers().is_empty()
    })
    .await;
}

/// A tenant at its policy's `maxPlugins` (2 here) gets no more: the third
/// Plugin is refused `TenantFull` before its component is fetched (its
/// key does not even exist, and the refusal says the tenant is full, not
/// that the component is missing), and is taken up again once a plugin of
/// the tenant goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tenant_gets_no_more_plugins_and_nothing_is_fetched_for_them() {
    let c = cluster().await;
    for (name, key) in [("p1", "v1.wasm"), ("p2", "v2.wasm"), ("p3", "missing.wasm")] {
        c.plugins().create(&PostParams::default(), &Plugin::new(name, recorder_spec(key))).await.unwrap();
        if name != "p3" {
            c.until("loaded", |c| c.condition(name, "Ready").is_some_and(|r| r.0 == "True")).await;
        }
    }
    c.until("the third refused", |c| c.condition("p3", "Ready").is_some_and(|r| r.0 == "False")).await;
    let (_, reason, message) = c.condition("p3", "Ready").unwrap();
    assert_eq!(reason, "TenantFull", "{message}");
    assert!(message.contains("runs the 2 oldest Plugins") && message.contains("2 are older"), "{message}");
    assert_eq!(c.resources.loaded().len(), 2);

    c.plugins().delete("p1", &DeleteParams::default()).await.unwrap();
    c.until("the third taken up again", |c| c.condition("p3", "Ready").is_some_and(|r| r.1 == "ComponentNotFound"))
        .await;
}

/// A tenant whose component spends long in `init` (here 8 s asleep, within
/// the 20 s its 2 s deadline gives `init`) holds back only its own
/// namespace: another tenant's Plugin created meanwhile is Ready first.
/// (With one worker for every namespace, team-b waited for team-a's init.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_plugin_loads_slowly_does_not_hold_back_another_tenant() {
    let c = cluster().await;
    let components: Api<ConfigMap> = Api::namespaced(c.client.clone(), NS);
    let slow = ByteString(std::fs::read(wasm("hostile")).expect("built plugin"));
    let patch = json!({"binaryData": {"slow.wasm": slow}});
    components.patch("components", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // team-b: its namespace, its policy, its component.
    const B: &str = "team-b";
    c.server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": B}})).unwrap();
    let policy = TenantPolicy::new(
        B,
        TenantPolicySpec { namespaces: vec![B.into()], allowed_grants: vec![Grant::Log], ..Default::default() },
    );
    Api::<TenantPolicy>::all(c.client.clone()).create(&PostParams::default(), &policy).await.unwrap();
    let swap = ByteString(std::fs::read(wasm("swap-v1")).expect("built plugin"));
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "components", "namespace": B},
        "binaryData": {"v1.wasm": swap}});
    c.server.create(cm).unwrap();

    let mut sleepy = recorder_spec("slow.wasm");
    sleepy.config = Some(json!({"attack": "sleep-init", "ms": 8_000}));
    c.plugins().create(&PostParams::default(), &Plugin::new("slow", sleepy)).await.unwrap();
    // team-a's Plugin is being loaded (compiled, then asleep in `init`).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let plugins_b: Api<Plugin> = Api::namespaced(c.client.clone(), B);
    plugins_b.create(&PostParams::default(), &Plugin::new("rec", recorder_spec("v1.wasm"))).await.unwrap();
    let ready = |ns: &str, name: &str| {
        c.server.get("informer-host.dev/v1alpha1", "Plugin", Some(ns), name).is_some_and(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
    };
    assert!(wait_until(LOAD, || ready(B, "rec")).await, "team-b's Plugin never became Ready");
    assert!(!ready(NS, "slow"), "team-b's Plugin was Ready only after team-a's slow init");
    assert!(wait_until(LOAD, || ready(NS, "slow")).await, "team-a's Plugin loads once its init is done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_over_its_tenant_policy_is_refused_naming_the_limit() {
    let c = cluster().await;
    let mut greedy = recorder_spec("v1.wasm");
    greedy.limits.memory = Some("128Mi".into());
    c.plugins().create(&PostParams::default(), &Plugin::new("rec", greedy)).await.unwrap();
    c.until("Ready=False", |c| c.condition("rec", "Ready").is_some_and(|r| r.0 == "False")).await;
    let (_, reason, message) = c.condition("rec", "Ready").unwrap();
    assert_eq!(reason, "OverTenantPolicy");
    assert!(
        message.contains("spec.limits.memory 128Mi exceeds the cap of TenantPolicy \"team-a\" (32Mi)"),
        "{message}"
    );
    assert!(c.registry.list().is_empty(), "nothing loads");

    // Lowering it (a new generation) loads it.
    let patch = json!({"spec": {"limits": {"memory": "16Mi"}}});
    c.plugins().patch("rec", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    c.until("Ready=True", |c| c.condition("rec", "Ready").is_some_and(|r| r.0 == "True")).await;
    assert_eq!(c.registry.list().len(), 1);

    // A grant the policy does not allow.
    let mut clocks = recorder_spec("v1.wasm");
    clocks.grants.push(Grant::Clocks);
    c.plugins().create(&PostParams::default(), &Plugin::new("timed", clocks)).await.unwrap();
    c.until("timed refused", |c| c.condition("timed", "Ready").is_some_and(|r| r.1 == "GrantNotAllowed")).await;

    // A namespace no policy matches.
    c.server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "stray"}})).unwrap();
    let stray: Api<Plugin> = Api::namespaced(c.client.clone(), "stray");
    stray.create(&PostParams::default(), &Plugin::new("rec", recorder_spec("v1.wasm"))).await.unwrap();
    let refused = || {
        c.server.get("informer-host.dev/v1alpha1", "Plugin", Some("stray"), "rec").is_some_and(|p| {
            p["status"]["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["reason"] == "NoTenantPolicy"))
        })
    };
    assert!(wait_until(LOAD, refused).await, "no policy: refused");
    assert_eq!(c.registry.list().len(), 1, "only the allowed plugin runs");

    // A missing component is a condition naming it.
    let mut missing = recorder_spec("v3.wasm");
    missing.watch.label_selector = None;
    c.plugins().create(&PostParams::default(), &Plugin::new("missing", missing)).await.unwrap();
    c.until("missing refused", |c| c.condition("missing", "Ready").is_some_and(|r| r.1 == "ComponentNotFound")).await;
    let (_, _, message) = c.condition("missing", "Ready").unwrap();
    assert!(message.contains("ConfigMap \"components\" in namespace \"team-a\" has no key \"v3.wasm\""), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_from_an_oci_registry_loads_and_a_new_digest_swaps_it() {
    let registry = OciRegistry::start().await;
    let v1 = registry.push("team-a/rec:v1", &Artifact::wasm(std::fs::read(wasm("swap-v1")).unwrap())).await;
    let v2 = registry.push("team-a/rec:v2", &Artifact::wasm(std::fs::read(wasm("swap-v2")).unwrap())).await;
    let cache = tempfile::tempdir().unwrap();
    let puller = OciPuller::new(OciConfig { plain_http: vec![registry.host()], ..OciConfig::new(cache.path()) });
    let c = cluster_pulling(Some(Arc::new(puller))).await;
    c.watched("a");
    let mut spec = recorder_spec("unused");
    spec.component = ComponentSource {
        oci: Some(OciSource { reference: v1.digest_reference.clone(), pull_secret: None }),
        ..Default::default()
    };
    c.plugins().create(&PostParams::default(), &Plugin::new("rec", spec)).await.unwrap();
    c.until("Ready from the registry", |c| c.condition("rec", "Ready").is_some_and(|r| r.0 == "True")).await;
    assert_eq!(c.status("rec")["digest"], v1.digest.as_str());
    c.until("v1 sees a", |c| c.log.events().iter().any(|l| l.starts_with("v1 ") && l.contains("team-a/a"))).await;

    let patch = json!({"spec": {"component": {"oci": {"reference": v2.digest_reference}}}});
    c.plugins().patch("rec", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    c.until("the v2 digest", |c| c.status("rec")["digest"] == v2.digest.as_str()).await;
    c.watched("b");
    c.until("v2 sees b", |c| c.log.events().iter().any(|l| l.starts_with("v2 ") && l.contains("team-a/b"))).await;
    assert_eq!(c.registry.list()[0].swaps, 1, "swapped, not loaded again");

    // A reference that does not exist: the running version keeps serving,
    // the plugin is Degraded with the registry's answer.
    let missing = format!("{}/team-a/rec:v3", registry.host());
    let patch = json!({"spec": {"component": {"oci": {"reference": missing}}}});
    c.plugins().patch("rec", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    c.until("Degraded NotFound", |c| {
        c.condition("rec", "Degraded").is_some_and(|d| d.0 == "True" && d.1 == "NotFound")
    })
    .await;
    assert_eq!(c.condition("rec", "Ready").unwrap().0, "True");
    assert_eq!(c.status("rec")["digest"], v2.digest.as_str());
}

struct Replica {
    registry: PluginRegistry,
    resources: Arc<PluginResources>,
}

fn replica(client: &kube::Client, i: usize) -> Replica {
    let registry = PluginRegistry::new(runtime());
    let identity = format!("replica-{i}");
    let config = CoordinatorConfig {
        lease_duration: Duration::from_secs(5),
        renew_deadline: Duration::from_secs(4),
        retry_period: Duration::from_millis(500),
        ..CoordinatorConfig::new("informer-host", identity.clone())
    };
    let coordinator = Coordinator::start(client.clone(), config, CancellationToken::new()).expect("coordinator");
    let options = PluginResourcesOptions { identity, ..PluginResourcesOptions::default() };
    let resources = PluginResources::start_coordinated(
        client.clone(),
        registry.clone(),
        options,
        Some(coordinator),
        CancellationToken::new(),
    );
    Replica { registry, resources }
}

/// The tenant cluster (capped at `max_plugins`) with the Leases'
/// namespace and `p` recorder Plugins `p0`, `p1`, … created in that order.
async fn cluster_with_plugins(max_plugins: Option<u32>, p: usize) -> (ApiServer, kube::Client) {
    let (server, client) = tenant_cluster(max_plugins).await;
    server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "informer-host"}})).unwrap();
    let plugins: Api<Plugin> = Api::namespaced(client.clone(), NS);
    for i in 0..p {
        plugins.create(&PostParams::default(), &Plugin::new(&format!("p{i}"), recorder_spec("v1.wasm"))).await.unwrap();
    }
    (server, client)
}

/// Samples the replicas every few milliseconds until aborted, recording
/// every plugin seen running on two at once.
fn sample_doubles(
    replicas: &Arc<parking_lot::Mutex<Vec<Replica>>>,
) -> (tokio::task::JoinHandle<()>, Arc<parking_lot::Mutex<Vec<String>>>) {
    let doubled = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let (replicas, found) = (replicas.clone(), doubled.clone());
    let task = tokio::spawn(async move {
        loop {
            let all: Vec<String> = running(&replicas.lock()).into_iter().flatten().collect();
            let mut seen = std::collections::BTreeSet::new();
            all.into_iter().filter(|n| !seen.insert(n.clone())).for_each(|n| found.lock().push(n));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (task, doubled)
}

/// The plugins each replica runs now, by registry name.
fn running(replicas: &[Replica]) -> Vec<Vec<String>> {
    replicas.iter().map(|r| r.registry.list().into_iter().map(|p| p.name).collect()).collect()
}

/// Three replicas share six Plugins: each runs on exactly one replica at
/// every instant (sampled every few milliseconds throughout), balanced; a
/// replica that stops gracefully hands its plugins over sooner than its
/// leases could expire; one that crashes loses them once they expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_plugin_resources_through_leases_each_running_on_exactly_one() {
    const P: usize = 6;
    let (server, client) = cluster_with_plugins(None, P).await;
    let replicas: Arc<parking_lot::Mutex<Vec<Replica>>> =
        Arc::new(parking_lot::Mutex::new((0..3).map(|i| replica(&client, i)).collect()));

    // The invariant, checked continuously until the end of the test.
    let (sampler, doubled) = sample_doubles(&replicas);
    let all_running = |replicas: &Arc<parking_lot::Mutex<Vec<Replica>>>| {
        running(&replicas.lock()).iter().map(Vec::len).sum::<usize>() == P
    };
    assert!(wait_until(LOAD, || all_running(&replicas)).await, "all running: {:?}", running(&replicas.lock()));
    // Balanced: the owned counts settle at most ⌈P/N⌉ + 1 each.
    let balanced = || running(&replicas.lock()).iter().all(|r| r.len() <= P.div_ceil(3) + 1);
    assert!(wait_until(LOAD, balanced).await, "balanced: {:?}", running(&replicas.lock()));

    // A graceful stop: the others run its plugins well before its leases
    // (5 s) could have expired.
    let leaving = replicas.lock().remove(0);
    let had = leaving.registry.list().len();
    let started = tokio::time::Instant::now();
    leaving.resources.shutdown().await;
    assert!(leaving.registry.list().is_empty(), "a stopped replica runs nothing");
    assert!(wait_until(LOAD, || all_running(&replicas)).await, "taken over: {:?}", running(&replicas.lock()));
    let handover = started.elapsed();
    assert!(handover < Duration::from_secs(5), "{had} plugins handed over in {handover:?}, not by lease expiry");

    // A crash: nothing released; the survivor runs them once they expire.
    let crashed = replicas.lock().remove(0);
    let started = tokio::time::Instant::now();
    crashed.resources.abandon().await;
    assert!(wait_until(LOAD, || all_running(&replicas)).await, "failed over: {:?}", running(&replicas.lock()));
    let failover = started.elapsed();
    assert!(failover >= Duration::from_secs(4), "taken over in {failover:?}: before the leases could expire");

    sampler.abort();
    assert!(doubled.lock().is_empty(), "plugins running on two replicas at once: {:?}", doubled.lock());
    // The survivor wrote the statuses of what it runs.
    let status = server.get("informer-host.dev/v1alpha1", "Plugin", Some(NS), "p0").unwrap()["status"].clone();
    assert_eq!(status["replica"], "replica-2", "{status}");
    let rest: Vec<Arc<PluginResources>> = replicas.lock().iter().map(|r| r.resources.clone()).collect();
    for r in rest {
        r.shutdown().await;
    }
}

/// `maxPlugins` holds across replicas: each replica ranks the namespace's
/// Plugins the same way (oldest first) and runs only those within the cap,
/// so two replicas run 2 of 4 Plugins, not 2 each. Lowering the cap stops
/// the newest; deleting one lets the next in line run, wherever it lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_plugins_holds_across_replicas_and_a_lowered_cap_stops_the_newest() {
    let (server, client) = cluster_with_plugins(Some(2), 4).await;
    let plugins: Api<Plugin> = Api::namespaced(client.clone(), NS);
    let replicas: Vec<Replica> = (0..2).map(|i| replica(&client, i)).collect();
    let all_running = || {
        let mut names: Vec<String> = running(&replicas).into_iter().flatten().collect();
        names.sort();
        names
    };
    let reason = |name: &str| {
        let status = server.get("informer-host.dev/v1alpha1", "Plugin", Some(NS), name).unwrap()["status"].clone();
        let ready = status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned());
        ready.map(|r| r["reason"].as_str().unwrap_or_default().to_owned()).unwrap_or_default()
    };
    let refused = |names: &[&str]| names.iter().all(|n| reason(n) == "TenantFull");
    let (p0, p1) = ("p0-", "p1-");
    let oldest = |n: usize| {
        let names: Vec<String> = all_running();
        names.len() == n && names.iter().all(|r| [p0, p1][..n].iter().any(|p| r.starts_with(p)))
    };
    assert!(
        wait_until(LOAD, || refused(&["p2", "p3"]) && oldest(2)).await,
        "two of four: {:?}, p2 {:?}, p3 {:?}",
        all_running(),
        reason("p2"),
        reason("p3")
    );
    // It stays so: the replicas each counting only their own would run more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(oldest(2), "{:?}", all_running());

    let policies: Api<TenantPolicy> = Api::all(client.clone());
    let lower = json!({"spec": {"maxPlugins": 1}});
    policies.patch("team-a", &PatchParams::default(), &Patch::Merge(&lower)).await.unwrap();
    assert!(wait_until(LOAD, || oldest(1) && refused(&["p1"])).await, "{:?}", all_running());

    plugins.delete("p0", &DeleteParams::default()).await.unwrap();
    assert!(
        wait_until(LOAD, || all_running().len() == 1 && all_running()[0].starts_with(p1)).await,
        "{:?}",
        all_running()
    );
    for r in replicas {
        r.resources.shutdown().await;
    }
}

/// A replica joining later gets its share handed over: the replica that
/// ran everything stops each plugin it hands over first, and only then
/// releases its lease (the coordinator keeps it until told), so the two
/// never run one plugin at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_joining_later_gets_its_share_once_the_first_stopped_it() {
    const P: usize = 4;
    let (_server, client) = cluster_with_plugins(None, P).await;
    let replicas = Arc::new(parking_lot::Mutex::new(vec![replica(&client, 0)]));
    let counts =
        |r: &Arc<parking_lot::Mutex<Vec<Replica>>>| running(&r.lock()).iter().map(Vec::len).collect::<Vec<_>>();
    assert!(wait_until(LOAD, || counts(&replicas) == [P]).await, "{:?}", running(&replicas.lock()));

    let (sampler, doubled) = sample_doubles(&replicas);
    replicas.lock().push(replica(&client, 1));
    assert!(wait_until(LOAD, || counts(&replicas) == [2, 2]).await, "{:?}", running(&replicas.lock()));
    sampler.abort();
    assert!(doubled.lock().is_empty(), "plugins running on two replicas at once: {:?}", doubled.lock());
    let rest: Vec<Arc<PluginResources>> = replicas.lock().iter().map(|r| r.resources.clone()).collect();
    for r in rest {
        r.shutdown().await;
    }
}

/// Creates Plugin `ghost`, a recorder watching a kind the API server does
/// not serve: it loads, and its watch never lists.
async fn create_ghost(client: &kube::Client) {
    let mut spec = recorder_spec("v1.wasm");
    spec.watch.api_version = "example.com/v1".into();
    spec.watch.kind = "Widget".into();
    let plugins: Api<Plugin> = Api::namespaced(client.clone(), NS);
    plugins.create(&PostParams::default(), &Plugin::new("ghost", spec)).await.unwrap();
}

/// A tenant's Plugin whose watch never lists (a kind the API server does
/// not serve) cannot keep the host's `/readyz` failing: its sync is the
/// Plugin's own (status `Synced`), listed on `/readyz` but not counted.
/// (One such Plugin kept its replica unready for good: a rollout never
/// finished and the PodDisruptionBudget blocked every drain.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_watch_never_lists_does_not_make_the_host_unready() {
    let (server, client) = tenant_cluster(None).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, Some("informer-host"));
    let config = Config::parse("[plugin_resources]\nidentity = \"host-a\"\n", "host.toml", dir.path()).unwrap();
    let opts =
        RunOptions { kube: KubeOptions { kubeconfig: Some(kubeconfig), context: None }, ..RunOptions::default() };
    let app = App::start(&config, &opts).await.unwrap();
    assert!(wait_until(LOAD, || app.readiness().ready).await, "{}", app.readiness().render());

    create_ghost(&client).await;
    let loaded = || {
        server.get("informer-host.dev/v1alpha1", "Plugin", Some(NS), "ghost").is_some_and(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
    };
    assert!(wait_until(LOAD, loaded).await, "ghost loaded");
    let listed = || app.readiness().render().contains("not counted for readiness");
    assert!(wait_until(LOAD, listed).await, "{}", app.readiness().render());
    let readiness = app.readiness();
    assert!(readiness.ready, "{}", readiness.render());
    app.shutdown().await;
}

/// A Plugin that never settles (here its watch never lists) is looked at
/// again after 1 s, 2 s, 4 s, … up to the resync, not every second for
/// ever: each look fetches its component (a GET of the ConfigMap, or a
/// registry pull) and usually writes its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_never_settles_is_polled_with_backoff() {
    let (server, client) = tenant_cluster(None).await;
    let options = PluginResourcesOptions { identity: "replica-0".into(), ..PluginResourcesOptions::default() };
    let resources =
        PluginResources::start(client.clone(), PluginRegistry::new(runtime()), options, CancellationToken::new());
    create_ghost(&client).await;
    let component_gets = || {
        server
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with("/namespaces/team-a/configmaps/components"))
            .count()
    };
    assert!(wait_until(LOAD, || component_gets() >= 1).await, "fetched once");
    tokio::time::sleep(Duration::from_secs(10)).await;
    // At 0, 1, 3 and 7 s (and perhaps as the 10 s end): not ten or more.
    let n = component_gets();
    assert!((2..=5).contains(&n), "{n} fetches in 10 s");
    resources.shutdown().await;
}

/// The host as deployed: `[plugin_resources]` in its TOML (with leases),
/// a kubeconfig; a tenant's Plugin is loaded and Ready, the host's
/// membership and plugin Leases are in the namespace, and a graceful
/// shutdown releases them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_loads_plugin_resources_from_its_config_and_hands_its_leases_over_at_shutdown() {
    let (server, client) = tenant_cluster(None).await;
    server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "informer-host"}})).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, Some("informer-host"));
    let text = "[plugin_resources]\nidentity = \"host-a\"\nleases = true\n";
    let config = Config::parse(text, "host.toml", dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let opts =
        RunOptions { kube: KubeOptions { kubeconfig: Some(kubeconfig), context: None }, ..RunOptions::default() };
    let app = App::start(&config, &opts).await.unwrap();

    let plugins: Api<Plugin> = Api::namespaced(client.clone(), NS);
    plugins.create(&PostParams::default(), &Plugin::new("rec", recorder_spec("v1.wasm"))).await.unwrap();
    let ready = || {
        server.get("informer-host.dev/v1alpha1", "Plugin", Some(NS), "rec").is_some_and(|p| {
            p["status"]["replica"] == "host-a"
                && p["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
    };
    assert!(wait_until(LOAD, ready).await, "Ready on host-a");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "informer-host");
    let held = |l: &Lease| l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
    let all = leases.list(&Default::default()).await.unwrap().items;
    assert!(
        all.iter()
            .any(|l| held(l) == "host-a" && l.metadata.name.as_deref().is_some_and(|n| n.starts_with("ih-plugin-"))),
        "{all:?}"
    );

    // What this replica runs, on /readyz and /metrics.
    let owns_it = || {
        app.readiness().render().contains(
            "[+]plugin resources: synced, replica host-a runs 1 of 1 Plugins (owns 1 through Leases; 1 live replicas)",
        )
    };
    assert!(wait_until(LOAD, owns_it).await, "{}", app.readiness().render());
    let metrics = Metrics::new(app.observed.clone()).encode();
    for line in [
        "informer_host_plugin_resources_running{replica=\"host-a\"} 1",
        "informer_host_leases_owned{replica=\"host-a\"} 1",
        "informer_host_leases_acquisitions_total{replica=\"host-a\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    app.shutdown().await;
    let all = leases.list(&Default::default()).await.unwrap().items;
    assert!(
        all.iter().all(|l| held(l).is_empty()),
        "released at shutdown: {:?}",
        all.iter().map(held).collect::<Vec<_>>()
    );
}

// ------------------------------------------------------- controller plugins

const HASH: &str = "informer-host.dev/config-hash";
/// The ServiceAccount team-a's controllers write as (TenantPolicy's
/// `impersonateServiceAccount`).
const PLUGINS_SA: &str = "system:serviceaccount:team-a:plugins";

/// `bytes` with a custom section appended: the same component under
/// another digest (a rebuild that changed nothing but its digest).
fn with_custom_section(mut bytes: Vec<u8>, note: &str) -> Vec<u8> {
    let leb = |mut n: usize, out: &mut Vec<u8>| loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        out.push(if n == 0 { byte } else { byte | 0x80 });
        if n == 0 {
            break;
        }
    };
    let mut payload = Vec::new();
    leb("note".len(), &mut payload);
    payload.extend_from_slice(b"note");
    payload.extend_from_slice(note.as_bytes());
    bytes.push(0); // custom section
    leb(payload.len(), &mut bytes);
    bytes.extend_from_slice(&payload);
    bytes
}

fn reloader_deployment(namespace: &str, config_map: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "app", "image": "nginx",
                    "envFrom": [{"configMapRef": {"name": config_map}}],
                }]},
            },
        },
    })
}

/// The reloader's hash annotation on Deployment `web` of `ns`, at `pointer`.
fn hash(c: &Cluster, ns: &str, pointer: &str) -> Option<String> {
    c.server
        .get("apps/v1", "Deployment", Some(ns), "web")
        .and_then(|d| d.pointer(pointer)?.get(HASH)?.as_str().map(str::to_string))
}

fn reloader_spec(reference: &str) -> PluginSpec {
    let rule = |groups: &[&str], kinds: &[&str], verbs: &[&str]| WriteRuleSpec {
        api_groups: groups.iter().map(|s| s.to_string()).collect(),
        kinds: kinds.iter().map(|s| s.to_string()).collect(),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        names: vec![],
    };
    let secondary = |store: &str, kind: &str| SecondaryWatch {
        field_indexers: Default::default(),
        store: store.into(),
        api_version: "v1".into(),
        kind: kind.into(),
        label_selector: None,
        mapped_by: MappedBy::Map,
        label: None,
    };
    PluginSpec {
        component: ComponentSource {
            oci: Some(OciSource { reference: reference.into(), pull_secret: None }),
            ..Default::default()
        },
        watch: WatchSpec {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            label_selector: None,
            field_selector: None,
            field_indexers: Default::default(),
        },
        grants: vec![Grant::Log, Grant::Cache, Grant::Kube],
        controller: Some(ControllerSpec {
            store: "deployments".into(),
            watches: vec![secondary("configmaps", "ConfigMap"), secondary("secrets", "Secret")],
            write_rules: vec![rule(&["apps"], &["Deployment"], &["patch"]), rule(&[""], &["Event"], &["create"])],
            max_concurrent_reconciles: Some(2),
            writes_per_second: None,
            dry_run: false,
        }),
        ..recorder_spec("unused")
    }
}

/// The platform team lets team-a's controllers patch Deployments and
/// record Events, written as team-a's `plugins` ServiceAccount; the
/// tenant's own RBAC gives that account the same (the test server judges
/// impersonated requests by such grants).
async fn allow_controllers(server: &ApiServer, client: &kube::Client) {
    let policies: Api<TenantPolicy> = Api::all(client.clone());
    let allow = json!({"spec": {
        "allowedGrants": ["log", "cache", "kube"],
        "allowedWriteRules": [
            {"apiGroups": ["apps"], "kinds": ["Deployment"], "verbs": ["patch", "update"]},
            {"apiGroups": [""], "kinds": ["Event"], "verbs": ["create"]},
        ],
        "maxConcurrentReconciles": 2,
        "impersonateServiceAccount": "plugins",
    }});
    policies.patch("team-a", &PatchParams::default(), &Patch::Merge(&allow)).await.unwrap();
    server.grant(PLUGINS_SA, Rule::new(&["patch"], &["apps"], &["deployments"]).in_namespace(NS));
    server.grant(PLUGINS_SA, Rule::new(&["create"], &[""], &["events"]).in_namespace(NS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_plugin_from_a_registry_writes_in_its_namespace_as_its_service_account_and_swaps() {
    let registry = OciRegistry::start().await;
    let bytes = std::fs::read(wasm("reloader")).expect("built reloader");
    let v1 = registry.push("team-a/reloader:v1", &Artifact::wasm(bytes.clone())).await;
    let v2 = registry.push("team-a/reloader:v2", &Artifact::wasm(with_custom_section(bytes, "v2"))).await;
    let cache = tempfile::tempdir().unwrap();
    let puller = OciPuller::new(OciConfig { plain_http: vec![registry.host()], ..OciConfig::new(cache.path()) });
    let c = cluster_pulling(Some(Arc::new(puller))).await;
    allow_controllers(&c.server, &c.client).await;
    c.server.create(config_map(NS, "web-config", &[], &[("A", "1")])).unwrap();
    c.server.create(reloader_deployment(NS, "web-config")).unwrap();
    // Another namespace's Deployment: not watched, never written.
    c.server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})).unwrap();
    c.server.create(config_map("team-b", "web-config", &[], &[("A", "1")])).unwrap();
    c.server.create(reloader_deployment("team-b", "web-config")).unwrap();

    // The reloader maps a changed ConfigMap through a field index of the
    // Deployments' cache (the roll below shows the lookup worked: without
    // the index the map finds nothing and nothing rolls).
    let mut spec = reloader_spec(&v1.digest_reference);
    let env_from = "$.spec.template.spec['containers','initContainers'][*].envFrom[*].configMapRef.name";
    spec.watch.field_indexers = [("configmaps".to_string(), vec![env_from.to_string()])].into();
    spec.config = Some(json!({"configmap_index": "configmaps"}));
    c.plugins().create(&PostParams::default(), &Plugin::new("reloader", spec)).await.unwrap();
    c.until("the first-sight patch", |c| hash(c, NS, "/metadata/annotations").is_some()).await;
    c.until("Ready and Synced", |c| {
        c.condition("reloader", "Ready").is_some_and(|r| r.0 == "True")
            && c.condition("reloader", "Synced").is_some_and(|s| s.0 == "True")
    })
    .await;
    assert_eq!(c.status("reloader")["digest"], v1.digest.as_str());
    c.until("the write counted in the status", |c| c.status("reloader")["counters"]["writes"] == 1).await;
    // No `resync` in the spec: nothing reconciles the Deployment again
    // until something changes (the shared informers' 1 s check period is
    // not the controller's resync).
    // Two readings 1.5 s apart agree once the first-sight update was
    // reconciled; a 1 s resync would keep them apart.
    let mut last = None;
    let mut stable = false;
    for _ in 0..20 {
        let now = c.resources.reconciles("team-a/reloader");
        if now.is_some() && now == last {
            stable = true;
            break;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert!(stable, "still reconciling with nothing changed: {last:?} reconciles");

    // A real change: a roll (the pod template's hash) and an Event.
    c.server.update(config_map(NS, "web-config", &[], &[("A", "2")])).unwrap();
    c.until("the roll", |c| hash(c, NS, "/spec/template/metadata/annotations").is_some()).await;
    let rolled = hash(&c, NS, "/spec/template/metadata/annotations");

    // The same controller under a new digest takes over; it acts on the
    // next change, and the old version has stopped.
    let patch = json!({"spec": {"component": {"oci": {"reference": v2.digest_reference}}}});
    c.plugins().patch("reloader", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    c.until("the v2 digest", |c| c.status("reloader")["digest"] == v2.digest.as_str()).await;
    c.server.update(config_map(NS, "web-config", &[], &[("A", "3")])).unwrap();
    c.until("the second roll", |c| hash(c, NS, "/spec/template/metadata/annotations") != rolled).await;

    let writes = c.server.writes();
    let patches: Vec<_> = writes.iter().filter(|r| r.method == "PATCH" && r.path.contains("/deployments/")).collect();
    assert_eq!(patches.len(), 3, "first sight, and one roll per change: {patches:#?}");
    for p in &patches {
        assert!(p.path.starts_with("/apis/apps/v1/namespaces/team-a/deployments/web"), "{p:#?}");
        assert_eq!(p.impersonate_user.as_deref(), Some(PLUGINS_SA), "{p:#?}");
    }
    // The reloader records its Event after the patch: the second one may
    // still be on its way when the roll is seen.
    let events =
        |c: &Cluster| c.server.writes().iter().filter(|r| r.method == "POST" && r.path.ends_with("/events")).count();
    c.until("the second roll's Event", |c| events(c) >= 2).await;
    assert_eq!(events(&c), 2, "one Event per roll");
    assert_eq!(hash(&c, "team-b", "/metadata/annotations"), None, "another namespace is never written");

    // Deleting it stops it: a change now is not acted on.
    c.plugins().delete("reloader", &DeleteParams::default()).await.unwrap();
    // Unloading drains the runner before it releases the informers, so
    // `loaded()` empties first: wait for both.
    c.until("unloaded, its informers stopped and forgotten", |c| {
        c.resources.loaded().is_empty() && c.registry.informers().is_empty()
    })
    .await;
    c.server.update(config_map(NS, "web-config", &[], &[("A", "4")])).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = c.server.writes().iter().filter(|r| r.method == "PATCH" && r.path.contains("/deployments/")).count();
    assert_eq!(after, 3, "no write after the controller was deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_plugin_asking_to_write_beyond_its_policy_is_refused_naming_the_rule() {
    let c = cluster().await;
    // team-a's policy allows no writes and one worker.
    c.plugins().create(&PostParams::default(), &Plugin::new("reloader", reloader_spec("unused"))).await.unwrap();
    c.until("refused", |c| c.condition("reloader", "Ready").is_some_and(|r| r.0 == "False")).await;
    let (_, reason, message) = c.condition("reloader", "Ready").unwrap();
    assert_eq!(reason, "GrantNotAllowed", "{message}");
    let policies: Api<TenantPolicy> = Api::all(c.client.clone());
    let grants = json!({"spec": {"allowedGrants": ["log", "cache", "kube"]}});
    policies.patch("team-a", &PatchParams::default(), &Patch::Merge(&grants)).await.unwrap();
    c.until("the write rule named", |c| c.condition("reloader", "Ready").is_some_and(|r| r.1 == "WriteRuleNotAllowed"))
        .await;
    let (_, _, message) = c.condition("reloader", "Ready").unwrap();
    assert_eq!(
        message,
        "spec.controller.writeRules[0] (patch apps/Deployment) is not within any allowedWriteRules of \
         TenantPolicy \"team-a\" (it allows no writes)"
    );
    let rules = json!({"spec": {"allowedWriteRules": [{"apiGroups": ["*"], "kinds": ["*"], "verbs": ["*"]}]}});
    policies.patch("team-a", &PatchParams::default(), &Patch::Merge(&rules)).await.unwrap();
    c.until("the worker cap named", |c| c.condition("reloader", "Ready").is_some_and(|r| r.1 == "OverTenantPolicy"))
        .await;
    let (_, _, message) = c.condition("reloader", "Ready").unwrap();
    assert!(
        message.starts_with("spec.controller.maxConcurrentReconciles 2 exceeds the cap of TenantPolicy"),
        "{message}"
    );
    assert!(c.resources.loaded().is_empty(), "nothing ran");
    assert!(c.server.writes().iter().all(|r| !r.path.contains("/deployments/")), "nothing was written");
}

/// A policy changed under a running controller reaches it, not only its
/// next version: here the ServiceAccount its writes impersonate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_change_reaches_a_running_controller() {
    let c = cluster().await;
    allow_controllers(&c.server, &c.client).await;
    let components: Api<ConfigMap> = Api::namespaced(c.client.clone(), NS);
    let bytes = std::fs::read(wasm("reloader")).expect("built reloader");
    let add = json!({"binaryData": {"reloader.wasm": ByteString(bytes)}});
    components.patch("components", &PatchParams::default(), &Patch::Merge(&add)).await.unwrap();
    c.server.create(config_map(NS, "web-config", &[], &[("A", "1")])).unwrap();
    c.server.create(reloader_deployment(NS, "web-config")).unwrap();
    let mut spec = reloader_spec("unused");
    spec.component = ComponentSource {
        config_map: Some(KeySelector { name: "components".into(), key: "reloader.wasm".into() }),
        ..Default::default()
    };
    c.plugins().create(&PostParams::default(), &Plugin::new("reloader", spec)).await.unwrap();
    c.until("the first-sight patch", |c| hash(c, NS, "/metadata/annotations").is_some()).await;

    // The platform team moves team-a's controllers to another account.
    const OTHER_SA: &str = "system:serviceaccount:team-a:restricted";
    c.server.grant(OTHER_SA, Rule::new(&["patch"], &["apps"], &["deployments"]).in_namespace(NS));
    c.server.grant(OTHER_SA, Rule::new(&["create"], &[""], &["events"]).in_namespace(NS));
    let policies: Api<TenantPolicy> = Api::all(c.client.clone());
    let moved = json!({"spec": {"impersonateServiceAccount": "restricted"}});
    policies.patch("team-a", &PatchParams::default(), &Patch::Merge(&moved)).await.unwrap();
    // Changes roll the Deployment; once the controller is loaded again
    // under the new policy, as the new account (before the fix, never).
    let patched_as = |c: &Cluster, user: &str| {
        c.server.writes().iter().any(|r| {
            r.method == "PATCH" && r.path.contains("/deployments/") && r.impersonate_user.as_deref() == Some(user)
        })
    };
    let mut moved_over = false;
    for i in 2..40 {
        c.server.update(config_map(NS, "web-config", &[], &[("A", &i.to_string())])).unwrap();
        if wait_until(Duration::from_millis(500), || patched_as(&c, OTHER_SA)).await {
            moved_over = true;
            break;
        }
    }
    assert!(moved_over, "no roll was written as {OTHER_SA}");
    let last = c.server.writes().into_iter().rfind(|r| r.method == "PATCH" && r.path.contains("/deployments/"));
    assert_eq!(last.unwrap().impersonate_user.as_deref(), Some(OTHER_SA));
}

/// A controller Plugin shared by two replicas runs on exactly one of them
/// at every instant; when its replica crashes, the other takes it over once
/// the lease expires and acts on the next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_plugin_runs_on_one_replica_and_fails_over_to_the_other() {
    let (server, client) = tenant_cluster(None).await;
    server.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "informer-host"}})).unwrap();
    allow_controllers(&server, &client).await;
    let components: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let bytes = std::fs::read(wasm("reloader")).expect("built reloader");
    let add = json!({"binaryData": {"reloader.wasm": ByteString(bytes)}});
    components.patch("components", &PatchParams::default(), &Patch::Merge(&add)).await.unwrap();
    server.create(config_map(NS, "web-config", &[], &[("A", "1")])).unwrap();
    server.create(reloader_deployment(NS, "web-config")).unwrap();
    let mut spec = reloader_spec("unused");
    spec.component = ComponentSource {
        config_map: Some(KeySelector { name: "components".into(), key: "reloader.wasm".into() }),
        ..Default::default()
    };
    let plugins: Api<Plugin> = Api::namespaced(client.clone(), NS);
    plugins.create(&PostParams::default(), &Plugin::new("reloader", spec)).await.unwrap();
    let replicas: Arc<parking_lot::Mutex<Vec<Replica>>> =
        Arc::new(parking_lot::Mutex::new((0..2).map(|i| replica(&client, i)).collect()));
    let owners = |replicas: &[Replica]| replicas.iter().filter(|r| !r.resources.loaded().is_empty()).count();
    let doubled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (replicas, doubled) = (replicas.clone(), doubled.clone());
        async move {
            loop {
                if owners(&replicas.lock()) > 1 {
                    doubled.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let on_template = || {
        server
            .get("apps/v1", "Deployment", Some(NS), "web")
            .and_then(|d| d.pointer("/spec/template/metadata/annotations")?.get(HASH)?.as_str().map(str::to_string))
    };
    let first_sight = || {
        server
            .get("apps/v1", "Deployment", Some(NS), "web")
            .is_some_and(|d| d["metadata"]["annotations"].get(HASH).is_some())
    };
    assert!(wait_until(LOAD, || owners(&replicas.lock()) == 1 && first_sight()).await, "running and acting");

    // Its replica crashes: nothing is released, the other takes it over
    // once the lease expires, and acts on the next change.
    let owner = replicas.lock().iter().position(|r| !r.resources.loaded().is_empty()).unwrap();
    let crashed = replicas.lock().remove(owner);
    crashed.resources.abandon().await;
    assert!(wait_until(LOAD, || owners(&replicas.lock()) == 1).await, "failed over");
    server.update(config_map(NS, "web-config", &[], &[("A", "2")])).unwrap();
    assert!(wait_until(LOAD, || on_template().is_some()).await, "the survivor rolls the Deployment");

    sampler.abort();
    assert!(!doubled.load(std::sync::atomic::Ordering::SeqCst), "the controller ran on two replicas at once");
    let patches =
        server.writes().into_iter().filter(|r| r.method == "PATCH" && r.path.contains("/deployments/")).count();
    assert_eq!(patches, 2, "first sight once, and one roll");
    let rest: Vec<Arc<PluginResources>> = replicas.lock().iter().map(|r| r.resources.clone()).collect();
    for r in rest {
        r.shutdown().await;
    }
}
