//! End to end: Go's runtime in the sandbox. Go plugins (`plugins/*/go-*`,
//! built with `sdk/go` by `plugins/build-other-languages.sh`) start
//! without the `clocks` grant (their monotonic clock only counts reads),
//! die cleanly when their heap outgrows the memory cap while the host
//! keeps serving the others, and read objects through every accessor of
//! the SDK, its cache import, and every function of the controller world
//! (`plugins/tests/go-kube-probe` against a scripted writer). The recorder's
//! side-by-side and panic tests are in `other_languages`; the Go
//! namespace-defaults controller's in `example_controllers`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use e2e::eventually;
use e2e::plugins::{Log, Running, runtime, spec};
use futures::future::BoxFuture;
use informer_host::cluster::{
    Cause, ClusterWriter, DeleteOptions, EventType, Patch, Propagation, Target, WriteError, WriteParams, WriteRequest,
};
use informer_host::controller::{
    ControllerOptions, ControllerRunner, GuardConfig, Mapping, Secondary, WriteGuard, WriteRule,
};
use informer_host::informer::SharedIndexInformer;
use informer_host::plugin::{Grants, Limits};
use informer_host::source::MemorySource;
use serde_json::{Value, json};

fn cm(src: &MemorySource, name: &str, v: &str) {
    src.apply_config_map("ns", name, v).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_runtime_starts_with_and_without_the_clocks_grant() {
    let rt = runtime();
    for clocks in [false, true] {
        let log = Log::default();
        let mut s = spec("go-recorder", "go-recorder", &log);
        s.grants = Grants { log: true, clocks, ..Grants::default() };
        let plugin = rt.load(s).unwrap_or_else(|e| panic!("clocks={clocks}: {e}"));
        // The load's probe instance, then one more.
        let _handler = plugin.handler(None).unwrap_or_else(|e| panic!("clocks={clocks}: {e}"));
        assert_eq!(log.lines(), ["init {}", "init {}"], "clocks={clocks}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_heap_past_the_memory_cap_traps_and_the_host_keeps_serving_others() {
    let src = MemorySource::new();
    let (hlog, rlog) = (Log::default(), Log::default());
    let rt = runtime();
    let mut s = spec("go-memory-hog", "go-memory-hog", &hlog);
    s.config_json = json!({"name": "hog"}).to_string();
    s.limits =
        Limits { memory_bytes: 48 << 20, fuel_per_call: None, deadline_per_call: Duration::from_secs(10), ..s.limits };
    let hog = rt.load(s).unwrap();
    let recorder = rt.load(spec("go-recorder", "go-recorder", &rlog)).unwrap();
    let run = Running::start(&src);
    let (hreg, rreg) = (run.add(&hog), run.add(&recorder));
    eventually("sync", || hreg.has_synced() && rreg.has_synced()).await;
    for i in 0..3 {
        cm(&src, "hog", &i.to_string());
    }
    cm(&src, "fine", "1");
    eventually("delivery after the traps", || !hlog.events().is_empty() && rlog.events().len() >= 4).await;
    assert_eq!(hlog.events(), ["add ns/fine rv=4 initial=false"]);
    assert_eq!(hog.stats.traps_memory.load(Ordering::Relaxed), 3, "three memory traps");
    assert_eq!(hreg.stats().crashed.load(Ordering::Relaxed), 3);
    // The other Go plugin, in the same host, saw everything, untroubled.
    assert_eq!(
        rlog.events(),
        [
            "add ns/hog rv=1 initial=false",
            "update ns/hog rv=1->2",
            "update ns/hog rv=2->3",
            "add ns/fine rv=4 initial=false"
        ]
    );
    assert_eq!(rreg.stats().crashed.load(Ordering::Relaxed), 0);
    run.stop().await;
}

/// Every accessor of the SDK agrees with the object's body (the recorder's
/// `check_json` returns an error otherwise), through objects far larger
/// than one page and many calls reusing the SDK's arena.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_accessors_agree_with_the_body_for_small_and_large_objects() {
    let src = MemorySource::new();
    let log = Log::default();
    let rt = runtime();
    let mut s = spec("go-recorder", "go-recorder", &log);
    s.config_json = json!({"check_json": true}).to_string();
    // Decoding the 3 MiB object with encoding/json (twice for its update)
    // takes more than the default 100 million fuel: this test is about
    // the accessors, not the budget.
    s.limits = Limits { fuel_per_call: None, deadline_per_call: Duration::from_secs(10), ..s.limits };
    let plugin = rt.load(s).unwrap();
    let run = Running::start(&src);
    let reg = run.add(&plugin);
    eventually("sync", || reg.has_synced()).await;
    let big = "x".repeat(3 << 20);
    src.apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big", "namespace": "ns", "labels": {"app": "a", "team": "t"}},
        "data": {"v": big},
    }))
    .unwrap(); // rv 1
    for i in 0..200 {
        cm(&src, &format!("o{i}"), "1"); // rv 2..=201
    }
    cm(&src, "big", "small now"); // rv 202
    let stat = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let handled = || stat(&reg.stats().delivered) + stat(&reg.stats().failed) + stat(&reg.stats().crashed);
    eventually("all handled", || handled() >= 202).await;
    let last = log.lines().into_iter().rev().take(3).collect::<Vec<_>>();
    assert_eq!(stat(&reg.stats().failed), 0, "an accessor disagreed: {last:?}");
    let p = &plugin.stats;
    let traps = [&p.traps_fuel, &p.traps_deadline, &p.traps_memory, &p.traps_other].map(stat);
    assert_eq!(stat(&reg.stats().crashed), 0, "traps (fuel, deadline, memory, other) {traps:?}; {last:?}");
    assert_eq!(stat(&reg.stats().delivered), 202);
    assert_eq!(log.events()[0], "add ns/big rv=1 initial=false");
    assert_eq!(log.events().last().unwrap(), "update ns/big rv=1->202");
    run.stop().await;
}

/// The SDK's `cache` import in a handler (`plugins/examples/go-cache-reader`, the
/// Go twin of `cache-reader`): the same lines as the Rust one, three per
/// notification through one batch, every object it read handed back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_reads_the_informer_cache_like_the_rust_twin() {
    let mut seen = Vec::new();
    for plugin in ["cache-reader", "go-cache-reader"] {
        let src = MemorySource::new();
        for name in ["a", "b", "c"] {
            cm(&src, name, "1");
        }
        let log = Log::default();
        let mut s = spec(plugin, plugin, &log);
        s.grants.cache = true;
        s.config_json = json!({"probe": ["ns/a", "ns/zz"]}).to_string();
        let plugin_ = runtime().load(s).unwrap_or_else(|e| panic!("{plugin}: {e}"));
        let run = Running::start(&src);
        let reg = run.add(&plugin_);
        eventually("sync", || reg.has_synced()).await;
        cm(&src, "d", "2");
        eventually("the add seen", || reg.stats().delivered.load(Ordering::Relaxed) == 4).await;
        assert_eq!(reg.stats().crashed.load(Ordering::Relaxed), 0, "{plugin}: {:?}", log.lines());
        let lines = log.lines();
        assert_eq!(lines.len(), 16, "{plugin}: {lines:#?}");
        assert_eq!(lines[12], "cache ns holds 4 objects; ns/d cached=true", "{plugin}");
        assert_eq!(log.count("probe ns/zz found=false"), 4, "{plugin}");
        // The initial list's order is the source's; the lines are compared
        // as a set.
        let mut lines = lines;
        lines.sort();
        seen.push(lines);
        run.stop().await;
    }
    assert_eq!(seen[0], seen[1], "the Go reader logs what the Rust one logs");
}

/// A writer answering the Go probe's writes, in order, from a script, and
/// keeping each request as the host received it.
struct Scripted {
    answers: parking_lot::Mutex<Vec<Result<Option<Value>, WriteError>>>,
    requests: parking_lot::Mutex<Vec<WriteRequest>>,
}

impl ClusterWriter for Scripted {
    fn write(&self, request: WriteRequest, _: WriteParams) -> BoxFuture<'_, Result<Option<Value>, WriteError>> {
        self.requests.lock().push(request);
        let answer = self.answers.lock().remove(0);
        Box::pin(async move { answer })
    }
}

/// The Go SDK's glue of world `controller`, both ways, through every
/// write of the `kube` import (`plugins/tests/go-kube-probe`): each request the
/// host receives is exactly what the Go code asked for (a target with and
/// without namespace, each patch type, delete's preconditions and
/// propagation passed in memory, both event types), and each `kube-error`
/// case comes back to Go with its payload (invalid's causes, rate-limited
/// with and without Retry-After, a server error's code). Also the stores,
/// `enqueue` (now and later) and the `map` export's list of keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_controller_glue_carries_every_write_and_every_error_case() {
    let src = MemorySource::new();
    for (ns, name) in [("ns", "probe"), ("ns", "trigger"), ("other", "x")] {
        src.apply_config_map(ns, name, "1").unwrap();
    }
    let err = |e: WriteError| Err(e);
    let answers = vec![
        Ok(Some(json!({"stored": 1}))),
        err(WriteError::NotFound("gone".into())),
        err(WriteError::AlreadyExists("there".into())),
        err(WriteError::Conflict("stale".into())),
        err(WriteError::Invalid {
            message: "bad object".into(),
            causes: vec![
                Cause { reason: "FieldValueRequired".into(), message: "Required value".into(), field: "spec.x".into() },
                Cause { reason: "FieldValueInvalid".into(), message: "bad".into(), field: "metadata.name".into() },
            ],
        }),
        err(WriteError::RateLimited { message: "slow down".into(), retry_after_seconds: Some(7) }),
        err(WriteError::RateLimited { message: "busy".into(), retry_after_seconds: None }),
        Ok(Some(json!({"marked": true}))),
        Ok(None),
        err(WriteError::Timeout("too slow".into())),
        err(WriteError::ServerError { code: 503, message: "unavailable".into() }),
        err(WriteError::Forbidden("no events".into())),
        err(WriteError::BadRequest("malformed".into())),
    ];
    let writer = Arc::new(Scripted { answers: parking_lot::Mutex::new(answers), requests: Default::default() });
    let run = Running::start(&src);
    let log = Log::default();
    let mut s = spec("go-kube-probe", "go-kube-probe", &log);
    s.grants = Grants { log: true, cache: true, kube: true, ..Grants::default() };
    let everything =
        WriteRule { api_groups: vec!["*".into()], kinds: vec!["*".into()], verbs: vec!["*".into()], names: vec![] };
    let guard = GuardConfig { rules: vec![everything], qps: 1000.0, burst: 1000, ..GuardConfig::new("go-kube-probe") };
    let guard = Arc::new(WriteGuard::new(guard, writer.clone()));
    let informers: HashMap<String, SharedIndexInformer> =
        [("cms".to_string(), run.informer.clone()), ("others".to_string(), run.informer.clone())].into();
    let mut options = ControllerOptions::new("cms", "ConfigMap");
    options.secondaries = vec![Secondary { informer: "others".into(), mapping: Mapping::Plugin }];
    let mut c = ControllerRunner::prepare(&runtime(), s, &informers, guard, options, None).unwrap();
    c.run();
    let has = |line: &str| log.lines().iter().any(|l| l == line);
    eventually("enqueued, mapped and later keys reconciled", || {
        ["reconcile ns/enqueued", "reconcile ns/later", "reconcile ns/mapped-by-others", "reconcile ns/also-mapped"]
            .iter()
            .all(|l| has(l))
    })
    .await;
    c.stop().await;
    run.stop().await;

    let lines: Vec<String> = log.lines().iter().map(|l| l.trim_end().to_string()).collect();
    let start = lines.iter().position(|l| l == "reconcile ns/probe").expect("ns/probe reconciled");
    let probe: Vec<&str> = lines[start + 1..start + 15].iter().map(String::as_str).collect();
    assert_eq!(
        probe,
        [
            r#"create ok {"stored":1}"#,
            "replace err not-found: not found: gone",
            "patch-merge err already-exists: already exists: there",
            "patch-json err conflict: conflict: stale",
            "patch-apply-force err invalid cause=spec.x|FieldValueRequired|Required value \
             cause=metadata.name|FieldValueInvalid|bad: invalid: bad object; spec.x: Required value; metadata.name: bad",
            "patch-status-apply err rate-limited retry=7: rate limited (retry after 7s): slow down",
            "replace-status err rate-limited: rate limited: busy",
            r#"delete-marked=true ok {"marked":true}"#,
            "delete-marked=false ok",
            "delete-orphan err timeout: timeout: too slow",
            "event-warning err server-error code=503: server error 503: unavailable",
            "event-normal err forbidden: forbidden: no events",
            "create-generate err bad-request: bad request: malformed",
            "stores all=3 ns=2 indexed=2 probe=true none=false \
             unknown=no informer \"no-such-informer\" is watched by this controller (it watches: cms, others)",
        ]
    );

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "namespace": "ns"}});
    let inside =
        Target { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: Some("ns".into()), name: "p1".into() };
    let cluster = Target { api_version: "v1".into(), kind: "Namespace".into(), namespace: None, name: "n1".into() };
    let delete = |target: &Target, uid: Option<&str>, rv: Option<&str>, propagation| WriteRequest::Delete {
        target: target.clone(),
        options: DeleteOptions { uid: uid.map(String::from), resource_version: rv.map(String::from), propagation },
    };
    let event = |involved: &Target, event_type, message: &str| WriteRequest::RecordEvent {
        involved: involved.clone(),
        event_type,
        reason: "Probed".into(),
        message: message.into(),
    };
    let expected = vec![
        WriteRequest::Create(cm.clone()),
        WriteRequest::Replace(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "7"}}),
        ),
        WriteRequest::Patch { target: inside.clone(), patch: Patch::Merge(json!({"data": {"a": "1"}})) },
        WriteRequest::Patch {
            target: cluster.clone(),
            patch: Patch::Json(json!([{"op": "add", "path": "/metadata/labels/x", "value": "y"}])),
        },
        WriteRequest::Patch { target: inside.clone(), patch: Patch::Apply { config: cm.clone(), force: true } },
        WriteRequest::PatchStatus { target: inside.clone(), patch: Patch::Apply { config: cm.clone(), force: false } },
        WriteRequest::ReplaceStatus(cm.clone()),
        delete(&inside, Some("u1"), Some("42"), Some(Propagation::Foreground)),
        delete(&cluster, None, None, None),
        delete(&inside, None, None, Some(Propagation::Orphan)),
        event(&inside, EventType::Warning, "a warning"),
        event(&cluster, EventType::Normal, "a normal one"),
        WriteRequest::Create(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "c-", "namespace": "ns"}}),
        ),
    ];
    assert_eq!(*writer.requests.lock(), expected);
}
