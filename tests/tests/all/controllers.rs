//! Controllers on a real informer: the workqueue's outcomes (done,
//! requeue-after, errors and traps with backoff) and the write guard, with
//! the `test-controller` plugin.
//!
//! Writes go to [`MemoryCluster`], a minimal writer over the memory source
//! (create, replace with its resourceVersion precondition, merge patch) that
//! records every request and can be told to answer conflicts: these tests
//! are about the runner and the guard, not about API-server semantics
//! (those are tested against the embedded store and the test API server).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::eventually;
use e2e::plugins::{Log, Running, runtime, spec};
use futures::future::BoxFuture;
use informer_host::cluster::{ClusterWriter, Patch, Target, WriteError, WriteParams, WriteRequest};
use informer_host::controller::{
    ControllerOptions, ControllerRunner, GuardConfig, MAX_QUEUED_BY_IMPORT, Mapping, NamespaceScope, Secondary,
    WriteGuard, WriteRule,
};
use informer_host::informer::{
    InformerOptions, ListResult, ListerWatcher, SharedIndexInformer, SourceError, WatchStream,
};
use informer_host::plugin::{Grants, Limits};
use informer_host::source::MemorySource;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Writes into a [`MemorySource`]; see the module documentation.
#[derive(Clone)]
struct MemoryCluster {
    src: MemorySource,
    requests: Arc<Mutex<Vec<(WriteRequest, WriteParams)>>>,
    conflicts: Arc<Mutex<usize>>,
    /// How long each answer takes (a slow API server).
    latency: Arc<Mutex<Duration>>,
}

impl MemoryCluster {
    fn new(src: &MemorySource) -> Self {
        MemoryCluster {
            src: src.clone(),
            requests: Default::default(),
            conflicts: Default::default(),
            latency: Default::default(),
        }
    }

    fn requests(&self) -> Vec<(WriteRequest, WriteParams)> {
        self.requests.lock().clone()
    }

    fn key(t: &Target) -> String {
        match &t.namespace {
            Some(ns) => format!("{ns}/{}", t.name),
            None => t.name.clone(),
        }
    }

    fn apply(&self, request: WriteRequest, dry_run: bool) -> Result<Option<Value>, WriteError> {
        let stored = |v: Value| -> Result<Option<Value>, WriteError> {
            if dry_run {
                return Ok(Some(v));
            }
            let o = self.src.apply(v).map_err(|e| WriteError::BadRequest(e.to_string()))?;
            Ok(Some(serde_json::from_str(o.json()).unwrap()))
        };
        match request {
            WriteRequest::Create(v) => {
                let key = Self::key(&Target::of(&v)?);
                if self.src.get(&key).is_some() {
                    return Err(WriteError::AlreadyExists(key));
                }
                stored(v)
            }
            WriteRequest::Replace(v) => {
                let key = Self::key(&Target::of(&v)?);
                let current = self.src.get(&key).ok_or_else(|| WriteError::NotFound(key.clone()))?;
                let rv = v.pointer("/metadata/resourceVersion").and_then(Value::as_str);
                if rv.is_some_and(|rv| Some(rv) != current.resource_version()) {
                    return Err(WriteError::Conflict(format!("{key}: the object has been modified")));
                }
                stored(v)
            }
            WriteRequest::Patch { target, patch: Patch::Merge(p) } => {
                let key = Self::key(&target);
                let current = self.src.get(&key).ok_or_else(|| WriteError::NotFound(key.clone()))?;
                let mut v: Value = serde_json::from_str(current.json()).unwrap();
                json_patch::merge(&mut v, &p);
                stored(v)
            }
            other => Err(WriteError::BadRequest(format!("MemoryCluster does not do {}", other.verb()))),
        }
    }
}

impl ClusterWriter for MemoryCluster {
    fn write(&self, request: WriteRequest, params: WriteParams) -> BoxFuture<'_, Result<Option<Value>, WriteError>> {
        self.requests.lock().push((request.clone(), params.clone()));
        let conflict = {
            let mut c = self.conflicts.lock();
            let conflict = *c > 0;
            *c = c.saturating_sub(1);
            conflict
        };
        let latency = *self.latency.lock();
        Box::pin(async move {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            if conflict {
                return Err(WriteError::Conflict(
                    "the object has been modified; please apply your changes to the latest version and try again"
                        .into(),
                ));
            }
            self.apply(request, params.dry_run)
        })
    }
}

fn rule(verbs: &[&str]) -> WriteRule {
    WriteRule {
        api_groups: vec!["".into()],
        kinds: vec!["ConfigMap".into()],
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        names: vec![],
    }
}

struct Setup {
    src: MemorySource,
    run: Running,
    cluster: MemoryCluster,
    log: Log,
}

impl Setup {
    fn new(objects: &[(&str, &str)]) -> Setup {
        let src = MemorySource::new();
        for (ns, name) in objects {
            src.apply_config_map(ns, name, "v").unwrap();
        }
        let run = Running::start(&src);
        let cluster = MemoryCluster::new(&src);
        Setup { src, run, cluster, log: Log::default() }
    }

    fn start(&self, config: Value, guard: GuardConfig, limits: Option<Limits>) -> ControllerRunner {
        let mut c = self.prepare(config, guard, limits);
        c.run();
        c
    }

    /// As [`Setup::start`], without starting the workers.
    fn prepare(&self, config: Value, guard: GuardConfig, limits: Option<Limits>) -> ControllerRunner {
        let informers = [("cms".to_string(), self.run.informer.clone())].into();
        let options = ControllerOptions::new("cms", "ConfigMap");
        self.prepare_on(config, guard, limits, &informers, options, &self.cluster)
    }

    /// As [`Setup::prepare`], on these informers, with these options,
    /// writing to `cluster`.
    fn prepare_on(
        &self,
        config: Value,
        guard: GuardConfig,
        limits: Option<Limits>,
        informers: &HashMap<String, SharedIndexInformer>,
        options: ControllerOptions,
        cluster: &MemoryCluster,
    ) -> ControllerRunner {
        let mut s = spec(&guard.plugin, "test-controller", &self.log);
        s.grants = Grants { log: true, cache: true, kube: true, ..Grants::default() };
        s.config_json = config.to_string();
        if let Some(l) = limits {
            s.limits = Limits { log: s.limits.log.clone(), ..l };
        }
        let guard = Arc::new(WriteGuard::new(guard, Arc::new(cluster.clone())));
        ControllerRunner::prepare(&runtime(), s, informers, guard, options, None).unwrap()
    }

    /// When each `reconcile <key>` line was logged.
    fn reconciles(&self, key: &str) -> Vec<Instant> {
        let line = format!("reconcile {key}");
        self.log.timed_lines().into_iter().filter(|(_, l)| *l == line).map(|(t, _)| t).collect()
    }
}

fn guard(name: &str) -> GuardConfig {
    GuardConfig { rules: vec![rule(&["create", "update", "patch"])], ..GuardConfig::new(name) }
}

fn gaps(times: &[Instant]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// A controller whose watch never lists (a kind the server does not serve,
/// a list the host may not make) still stops when removed or replaced:
/// its workers wait for the caches only until the queue shuts down.
/// (They waited for ever, and whoever stopped it with them: a Plugin
/// worker, a reload, the host's shutdown.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_whose_watch_never_syncs_still_stops() {
    let s = Setup::new(&[("a", "x")]);
    // Never run: it never lists, never syncs.
    let never = SharedIndexInformer::new(MemorySource::new(), InformerOptions::default());
    let informers = [("cms".to_string(), s.run.informer.clone()), ("never".to_string(), never)].into();
    let options = ControllerOptions {
        secondaries: vec![Secondary { informer: "never".into(), mapping: Mapping::Label("no-such-label".into()) }],
        ..ControllerOptions::new("cms", "ConfigMap")
    };
    let mut c = s.prepare_on(json!({}), guard("stuck"), None, &informers, options, &s.cluster);
    c.run();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(s.reconciles("a/x").is_empty(), "reconciled before every cache synced");
    let stopped = tokio::time::timeout(Duration::from_secs(10), c.stop()).await;
    assert!(stopped.is_ok(), "stop() hung on a watch that never synced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_is_reconciled_and_written_once_and_its_own_update_reconciles_to_nothing() {
    let s = Setup::new(&[("a", "x"), ("a", "y")]);
    let c = s.start(json!({"label": true}), guard("labeller"), None);
    eventually("both labelled", || {
        ["a/x", "a/y"].iter().all(|k| s.src.get(k).is_some_and(|o| o.label("reconciled") == Some("yes")))
    })
    .await;
    // The update each patch caused was reconciled too, and wrote nothing.
    eventually("reconciles of the updates", || s.reconciles("a/x").len() == 2 && s.reconciles("a/y").len() == 2).await;
    let writes = s.cluster.requests();
    assert_eq!(writes.len(), 2, "{writes:#?}");
    assert!(writes.iter().all(|(r, p)| r.verb() == "patch" && p.field_manager == "labeller" && !p.dry_run));
    assert_eq!(c.guard().stats.succeeded.load(std::sync::atomic::Ordering::Relaxed), 2);
    c.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_requeued_and_the_retry_succeeds() {
    let s = Setup::new(&[("a", "x")]);
    *s.cluster.conflicts.lock() = 2;
    let c = s.start(json!({"label": true, "replace": true}), guard("replacer"), None);
    eventually("labelled", || s.src.get("a/x").is_some_and(|o| o.label("reconciled") == Some("yes"))).await;
    let replaces = s.cluster.requests().iter().filter(|(r, _)| r.verb() == "update").count();
    assert_eq!(replaces, 3, "two conflicts, then the write that succeeded");
    let failed = s.log.count("write a/x failed: conflict");
    assert_eq!(failed, 2, "{:#?}", s.log.lines());
    c.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_reconcile_backs_off_exponentially_and_success_forgets_its_failures() {
    let s = Setup::new(&[("a", "x")]);
    let c = s.start(json!({"fail": {"a/x": 4}}), guard("failer"), None);
    eventually("the fifth reconcile", || s.reconciles("a/x").len() == 5).await;
    let g = gaps(&s.reconciles("a/x"));
    // client-go's default: 5 ms, doubling per failure of the key.
    for (gap, min) in g.iter().zip([5, 10, 20, 40]) {
        assert!(*gap >= Duration::from_millis(min), "gaps {g:?}: want at least 5, 10, 20, 40 ms");
    }
    eventually("forgotten after success", || c.queue().num_requeues(&"a/x".to_string()) == 0).await;
    assert_eq!(c.stats().failed.load(std::sync::atomic::Ordering::Relaxed), 4);
    c.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_after_is_honoured() {
    let s = Setup::new(&[("a", "x")]);
    let c = s.start(json!({"requeue_after_ms": {"a/x": 40}}), guard("poller"), None);
    eventually("three reconciles", || s.reconciles("a/x").len() >= 3).await;
    let g = gaps(&s.reconciles("a/x"));
    assert!(g.iter().all(|gap| *gap >= Duration::from_millis(40)), "gaps {g:?}");
    // A requeue after success is not a failure: no backoff accumulates.
    assert_eq!(c.queue().num_requeues(&"a/x".to_string()), 0);
    c.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_that_panics_or_spins_is_retried_with_backoff_and_the_other_keys_keep_going() {
    let s = Setup::new(&[("a", "panics"), ("a", "spins"), ("a", "fine")]);
    let limits = Limits { deadline_per_call: Duration::from_millis(50), fuel_per_call: None, ..Limits::default() };
    let config = json!({"panic": {"a/panics": 1}, "spin": "a/spins", "label": true});
    let c = s.start(config, guard("trapper"), Some(limits));
    eventually("fine is labelled", || s.src.get("a/fine").is_some_and(|o| o.label("reconciled") == Some("yes"))).await;
    eventually("retries of both", || s.reconciles("a/panics").len() >= 3 && s.reconciles("a/spins").len() >= 3).await;
    let g = gaps(&s.reconciles("a/panics"));
    assert!(g[1] > g[0] || g[1] >= Duration::from_millis(10), "backoff grows: {g:?}");
    let stats = c.loaded().stats.clone();
    let ord = std::sync::atomic::Ordering::Relaxed;
    assert!(c.stats().trapped.load(ord) >= 4, "trapped {}", c.stats().trapped.load(ord));
    assert!(stats.traps_deadline.load(ord) >= 2 && stats.traps_other.load(ord) >= 2);
    c.stop().await;
    s.run.stop().await;
}

/// A write to a server slower than the reconcile's deadline ends with the
/// call, not at the guard's 10 s timeout: the worker is free again, and
/// the key retried, within about the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_slower_than_the_calls_deadline_ends_at_the_deadline() {
    let s = Setup::new(&[("a", "x")]);
    *s.cluster.latency.lock() = Duration::from_secs(60);
    let limits = Limits { deadline_per_call: Duration::from_millis(300), fuel_per_call: None, ..Limits::default() };
    let c = s.start(json!({"label": true}), guard("patient"), Some(limits));
    eventually("three reconciles", || s.reconciles("a/x").len() >= 3).await;
    let g = gaps(&s.reconciles("a/x"));
    // Each attempt ends at its 300 ms deadline (the guest sees the write
    // time out, or traps on the deadline first), then backs off 5, 10 ms.
    assert!(g.iter().all(|gap| *gap < Duration::from_secs(3)), "gaps {g:?}: the write outlived the call");
    let ord = std::sync::atomic::Ordering::Relaxed;
    assert!(c.guard().stats.failed.load(ord) >= 2, "failed {}", c.guard().stats.failed.load(ord));
    assert!(s.src.get("a/x").is_some_and(|o| o.label("reconciled").is_none()), "nothing was written");
    c.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_outside_the_rules_or_the_tenants_namespaces_is_forbidden_and_nothing_is_sent() {
    let s = Setup::new(&[("a", "x")]);
    // Rules allow creating ConfigMaps, but the tenant owns only namespace a.
    let g = GuardConfig {
        tenant: Some("t".into()),
        scope: Some(NamespaceScope { namespaces: vec!["a".into()], cluster_scoped: false }),
        ..guard("intruder")
    };
    let c = s.start(json!({"write_to": "b"}), g, None);
    eventually("three refusals", || c.guard().stats.refused.load(std::sync::atomic::Ordering::Relaxed) >= 3).await;
    assert!(s.cluster.requests().is_empty(), "{:#?}", s.cluster.requests());
    assert!(s.src.get("b/x").is_none());
    c.stop().await;

    // No rule for `create`: refused as well, naming the plugin.
    let g = GuardConfig { rules: vec![rule(&["patch"])], ..guard("no-create") };
    let c = s.start(json!({"write_to": "a2"}), g, None);
    eventually("a refusal", || c.stats().failed.load(std::sync::atomic::Ordering::Relaxed) >= 1).await;
    assert!(s.cluster.requests().is_empty());
    assert!(
        s.log.lines().iter().any(|l| l
            == "create in a2 failed: forbidden: plugin no-create has no write rule allowing create ConfigMap a2/x"),
        "{:#?}",
        s.log.lines()
    );
    c.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_sends_dry_run_and_changes_nothing() {
    let s = Setup::new(&[("a", "x")]);
    let c = s.start(
        json!({"label": true, "requeue_after_ms": {"a/x": 3600000}}),
        GuardConfig { dry_run: true, ..guard("careful") },
        None,
    );
    eventually("a dry-run write", || !s.cluster.requests().is_empty()).await;
    let (r, p) = &s.cluster.requests()[0];
    assert!(p.dry_run && r.verb() == "patch");
    assert!(s.src.get("a/x").unwrap().label("reconciled").is_none());
    assert_eq!(c.guard().stats.dry_run.load(std::sync::atomic::Ordering::Relaxed), 1);
    c.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_enqueues_traps_at_the_per_call_bound_and_queues_at_most_that() {
    let s = Setup::new(&[("a", "flood"), ("a", "fine")]);
    let config = json!({"flood": {"key": "a/flood", "count": 5000, "key_bytes": 40}, "label": true});
    let c = s.start(config, guard("flooder"), None);
    eventually("fine is labelled", || s.src.get("a/fine").is_some_and(|o| o.label("reconciled") == Some("yes"))).await;
    eventually("the flood trapped", || c.loaded().stats.traps_protocol.load(std::sync::atomic::Ordering::Relaxed) >= 1)
        .await;
    // 1000 distinct keys got in before the 1001st enqueue trapped; the
    // reconcile never finished, so `flooded` was never logged.
    assert_eq!(s.log.count("flooded a/flood"), 0);
    let queued = c.queue().len() + c.queue().waiting_len() + c.queue().processing_len();
    assert!(queued <= 1_000 + 3, "queued {queued}");
    c.stop().await;
    s.run.stop().await;
}

/// Keys a controller's `map` returns are the guest's choice like its
/// enqueues, and count against the same bound: a map answering 10 000 new
/// keys for each of 15 objects queues at most 100 000, not 150 000 (each
/// key held two or three times in host memory: every event of the
/// watched kind could add 10-20 thousand, without end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_a_map_returns_count_against_the_queue_bound() {
    let s = Setup::new(&[("a", "x")]);
    let others = MemorySource::new();
    for i in 0..15 {
        others.apply_config_map("a", &format!("o{i}"), "v").unwrap();
    }
    let others = Running::start(&others);
    let informers =
        [("cms".to_string(), s.run.informer.clone()), ("others".to_string(), others.informer.clone())].into();
    let options = ControllerOptions {
        secondaries: vec![Secondary { informer: "others".into(), mapping: Mapping::Plugin }],
        ..ControllerOptions::new("cms", "ConfigMap")
    };
    // Workers not started: nothing leaves the queue.
    let c = s.prepare_on(json!({"map_keys": 10_000}), guard("mapper"), None, &informers, options, &s.cluster);
    let queued = || c.queue().len() + c.queue().waiting_len();
    eventually("the map filled the queue", || queued() >= MAX_QUEUED_BY_IMPORT).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(queued() <= MAX_QUEUED_BY_IMPORT + 1, "queued {}", queued());
    c.stop().await;
    others.stop().await;
    s.run.stop().await;
}

/// A controller's handlers run on its tenant's delivery workers, as a
/// handler plugin's do: five of tenant a's controllers whose `map` stalls
/// (12 s each, past this test's 10 s wait) would hold every shared worker
/// an informer has (4), yet tenant b's controller maps and reconciles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_stalled_maps_do_not_hold_back_another_tenants_controller() {
    let s = Setup::new(&[("b", "x")]);
    let others = MemorySource::new();
    others.apply_config_map("b", "o", "v").unwrap();
    let others = Running::start(&others);
    let informers: HashMap<String, SharedIndexInformer> =
        [("cms".to_string(), s.run.informer.clone()), ("others".to_string(), others.informer.clone())].into();
    let options = ControllerOptions {
        secondaries: vec![Secondary { informer: "others".into(), mapping: Mapping::Plugin }],
        ..ControllerOptions::new("cms", "ConfigMap")
    };
    let start = |tenant: &str, name: &str, config: Value, deadline: Duration| {
        let mut spec = spec(name, "test-controller", &s.log);
        spec.tenant = Some(tenant.into());
        spec.grants = Grants { log: true, cache: true, kube: true, ..Grants::default() };
        spec.config_json = config.to_string();
        spec.limits.fuel_per_call = None;
        spec.limits.deadline_per_call = deadline;
        let guard = Arc::new(WriteGuard::new(guard(name), Arc::new(s.cluster.clone())));
        let mut c = ControllerRunner::prepare(&runtime(), spec, &informers, guard, options.clone(), None).unwrap();
        c.run();
        c
    };
    let stalled: Vec<ControllerRunner> =
        (0..5).map(|i| start("a", &format!("stall{i}"), json!({"map_stall": true}), Duration::from_secs(12))).collect();
    let mapper = start("b", "mapper", json!({"map_keys": 1}), Duration::from_secs(1));
    eventually("b reconciles the key its map returned", || !s.reconciles("b/mapped-o-0").is_empty()).await;
    mapper.stop().await;
    for c in stalled {
        c.stop().await;
    }
    others.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_cannot_be_an_object_key_traps_and_queues_nothing() {
    let s = Setup::new(&[("a", "long")]);
    let config = json!({"flood": {"key": "a/long", "count": 1, "key_bytes": 1 << 20}});
    let c = s.start(config, guard("long-keys"), None);
    eventually("the enqueue trapped", || {
        c.loaded().stats.traps_protocol.load(std::sync::atomic::Ordering::Relaxed) >= 1
    })
    .await;
    assert!(c.queue().len() + c.queue().waiting_len() <= 1, "only a/long itself, requeued with backoff");
    assert!(s.log.lines().iter().all(|l| l != "flooded a/long"));
    c.stop().await;
    s.run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_takes_over_the_keys_waiting_for_a_delay_and_the_old_one_stops() {
    let s = Setup::new(&[("a", "x"), ("a", "y")]);
    let old = s.start(json!({"requeue_after_ms": {"a/x": 3_600_000}}), guard("v1"), None);
    eventually("a/x waits an hour", || old.queue().ready_at(&"a/x".to_string()).is_some()).await;
    let due = old.queue().ready_at(&"a/x".to_string()).unwrap();
    let before = s.reconciles("a/x").len();

    // Prepared: its handlers queue every key, nothing is reconciled yet.
    let mut next = s.prepare(json!({"requeue_after_ms": {"a/x": 3_600_000}}), guard("v2"), None);
    eventually("v2 queued both keys", || next.queue().len() == 2).await;
    assert_eq!(s.reconciles("a/x").len(), before, "nothing reconciled before the take-over");
    next.take_over(old).await;
    eventually("v2 reconciled both", || next.stats().succeeded.load(std::sync::atomic::Ordering::Relaxed) >= 2).await;
    // The hour-long wait was handed over (v2's own requeue asks for the
    // same hour from now: the earlier deadline, the handed-over one, wins).
    let handed = next.queue().ready_at(&"a/x".to_string()).expect("a/x still waits");
    assert!(handed <= due + Duration::from_millis(5), "handed-over deadline {handed:?} vs {due:?}");
    next.stop().await;
    s.run.stop().await;
}

/// A version that is replaced (or removed) stops after its in-flight
/// reconcile: it does not work through its backlog first, which a hostile
/// controller could make last hours (up to 100 000 keys, a deadline each).
/// What it still had queued, keys its guest enqueued included, goes to the
/// new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_version_stops_after_its_in_flight_reconcile_and_hands_over_its_backlog() {
    let s = Setup::new(&[("a", "start")]);
    // Each reconcile creates a ConfigMap named after its key in `out`, and
    // every create takes 100 ms: the twenty keys the first one enqueues
    // are a two-second backlog.
    *s.cluster.latency.lock() = Duration::from_millis(100);
    let flood = json!({"write_to": "out", "flood": {"key": "a/start", "count": 20, "key_bytes": 10}});
    let old = s.start(flood, guard("v1"), None);
    eventually("the flood", || s.log.count("flooded a/start") == 1).await;
    let mut next = s.prepare(json!({"write_to": "out"}), guard("v2"), None);
    let flooded = || s.log.lines().into_iter().filter(|l| l.starts_with("reconcile flood-")).count();
    // The old version works through its backlog until the take-over
    // begins: counted from there, so a slow `prepare` on a loaded machine
    // does not count against the stop.
    let before = flooded();
    next.take_over(old).await;
    // The old version's in-flight reconcile, perhaps one more taken before
    // the stop, and perhaps the new version's first: not the backlog.
    let during = flooded() - before;
    assert!(during <= 4, "{during} of the {} keys still queued were reconciled during the take-over", 20 - before);
    eventually("every enqueued key reconciled by v2", || {
        (0..20).all(|i| {
            let name = format!("flood-{i}-");
            s.src.get(&format!("out/{name}{}", "x".repeat(10 - name.len()))).is_some()
        })
    })
    .await;
    next.stop().await;
    s.run.stop().await;
}

/// A memory source whose first list answers only after `delay`: an
/// informer that is slow to sync, as one over a large or distant
/// collection is.
struct ListsLate {
    source: MemorySource,
    delay: Duration,
    listed: Arc<Mutex<Option<Instant>>>,
}

impl ListerWatcher for ListsLate {
    fn list(&self) -> BoxFuture<'_, Result<ListResult, SourceError>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            let list = self.source.list().await;
            self.listed.lock().get_or_insert_with(Instant::now);
            list
        })
    }
    fn watch(&self, resource_version: &str) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        self.source.watch(resource_version)
    }
    fn describe(&self) -> String {
        "memory, listing late".into()
    }
}

/// client-go's `WaitForCacheSync` before the workers start: a reconcile
/// never reads a secondary cache that has not listed yet. The primary
/// lists at once; the secondary, which holds the object the reconcile
/// labels, lists 300 ms later, and nothing maps its objects to primary
/// keys. A reconcile run before that list would find nothing, write
/// nothing, and never be asked again: the object would stay unlabelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reconcile_runs_before_every_informer_of_the_controller_has_synced() {
    let s = Setup::new(&[("a", "x")]);
    let late_src = MemorySource::new();
    late_src.apply_config_map("a", "x", "v").unwrap();
    let listed = Arc::new(Mutex::new(None));
    let late = SharedIndexInformer::new(
        ListsLate { source: late_src.clone(), delay: Duration::from_millis(300), listed: listed.clone() },
        InformerOptions::default(),
    );
    let cluster = MemoryCluster::new(&late_src);
    let informers: HashMap<String, SharedIndexInformer> =
        [("cms".to_string(), s.run.informer.clone()), ("late".to_string(), late.clone())].into();
    let options = ControllerOptions {
        secondaries: vec![Secondary { informer: "late".into(), mapping: Mapping::Label("no-such-label".into()) }],
        ..ControllerOptions::new("cms", "ConfigMap")
    };
    // Compiling the plugin takes longer than the delay: the late informer
    // starts only once the controller is ready to run.
    let config = json!({"label": true, "informer": "late"});
    let mut c = s.prepare_on(config, guard("waits-for-sync"), None, &informers, options, &cluster);
    let late = Running::run(late);
    c.run();

    eventually("labelled", || late_src.get("a/x").is_some_and(|o| o.label("reconciled") == Some("yes"))).await;
    let first = s.reconciles("a/x")[0];
    let listed = listed.lock().expect("the late informer listed");
    assert!(first >= listed, "the first reconcile ran {:?} before the late informer listed", listed - first);
    assert_eq!(cluster.requests().len(), 1, "{:#?}", cluster.requests());
    c.stop().await;
    late.stop().await;
    s.run.stop().await;
}
