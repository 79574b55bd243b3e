//! End to end: plugins written in Python (componentize-py), JavaScript
//! (componentize-js), C (clang for wasm32-wasi, wit-bindgen-c and
//! wit-component through `tests/c-plugin-build`) and Go (`go build` for
//! wasip1 with `sdk/go`, componentized by the same tool), built by
//! `plugins/build-other-languages.sh`, run side by side with their Rust twins
//! on one real informer over the memory source, and must log exactly the
//! same lines.
//!
//! The script runs once per test process and installs its toolchains on the
//! first run (PyPI, npm, Debian, crates.io); after that it only rebuilds what
//! changed. The Python and JavaScript components are large (12 to 18 MB), so
//! the runtime keeps its compiled code in `target/wasm-cache` and every test
//! loads each plugin once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use e2e::plugins::{Running, shared_runtime, wasm};
use informer_host::informer::{
    DeletedObject, Delivered, HandlerError, Notification, Object, ObjectRef, Registration, ResourceEventHandler,
    deliver_each,
};
use informer_host::plugin::{
    BATCHED_WORLD, Grants, Level, LoadedPlugin, LogSink, PluginError, PluginRuntime, PluginSpec, RuntimeConfig,
};
use informer_host::source::MemorySource;
use parking_lot::Mutex;
use serde_json::json;

/// The non-Rust recorders, by folder under `plugins/examples`.
const RECORDERS: [&str; 4] = ["python-recorder", "js-recorder", "c-recorder", "go-recorder"];

/// Lines a plugin logged, with the instant and level of each.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(Instant, Level, String)>>>);

impl Log {
    fn sink(&self) -> LogSink {
        let lines = self.0.clone();
        LogSink(Arc::new(move |level: Level, m: &str| lines.lock().push((Instant::now(), level, m.to_string()))))
    }
    fn lines(&self) -> Vec<String> {
        self.0.lock().iter().map(|(_, _, l)| l.clone()).collect()
    }
    /// Lines other than `init …`.
    fn events(&self) -> Vec<String> {
        self.lines().into_iter().filter(|l| !l.starts_with("init ")).collect()
    }
    fn leveled(&self) -> Vec<(Level, String)> {
        self.0.lock().iter().map(|(_, level, l)| (*level, l.clone())).collect()
    }
    fn when(&self, line: &str) -> Option<Instant> {
        self.0.lock().iter().find(|(_, _, l)| l == line).map(|(t, _, _)| *t)
    }
    fn count(&self, prefix: &str) -> usize {
        self.lines().iter().filter(|l| l.starts_with(prefix)).count()
    }
}

fn repo() -> PathBuf {
    plugin_build::repo_root()
}

/// Runs `plugins/build-other-languages.sh` for every plugin; its output
/// when it failed.
fn build_all() -> Result<(), String> {
    let out = Command::new("bash")
        .arg("plugins/build-other-languages.sh")
        .current_dir(repo())
        .output()
        .map_err(|e| format!("cannot run plugins/build-other-languages.sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "plugins/build-other-languages.sh failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn spec(plugin: &str, log: &Log) -> PluginSpec {
    let mut s = PluginSpec::new(plugin, wasm(plugin));
    // The other languages' plugins target `batched-handler` (log only, with
    // the batch path): their toolchains import every interface of a world,
    // used or not, and `delivery` needs no grant.
    s.grants = Grants { log: true, ..Grants::default() };
    s.log_sink = Some(log.sink());
    s.limits.log = e2e::plugins::observing_log_limits();
    s
}

/// Loads one at a time: tests running in parallel would otherwise compile
/// the same large component twice, on the same two cores.
fn try_load(spec: PluginSpec) -> Result<LoadedPlugin, PluginError> {
    static LOADING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = LOADING.lock();
    shared_runtime().load(spec)
}

fn load(spec: PluginSpec) -> LoadedPlugin {
    let name = spec.name.clone();
    let plugin = try_load(spec).unwrap_or_else(|e| panic!("loading {name}: {e}"));
    let i = &plugin.info;
    eprintln!(
        "{name}: {} bytes, compiled in {:?} (from cache: {}), instantiated in {:?}",
        i.size_bytes, i.compile_time, i.from_cache, i.instantiate_time
    );
    plugin
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn cm(src: &MemorySource, name: &str, v: &str) {
    src.apply_config_map("ns", name, v).unwrap();
}

/// The scripted sequence of `wasm_plugins.rs`'s recorder test, delivered to
/// the Rust recorder and `other` side by side: both log the same lines.
async fn same_sequence_as_the_rust_recorder(other: &str) {
    let src = MemorySource::new();
    cm(&src, "a", "1"); // rv 1
    cm(&src, "b", "1"); // rv 2
    let (rlog, olog) = (Log::default(), Log::default());
    let rust = load(spec("recorder", &rlog));
    let theirs = load(spec(other, &olog));
    let run = Running::start(&src);
    let (rreg, oreg) = (run.add(&rust), run.add(&theirs));
    eventually("initial sync", || rreg.has_synced() && oreg.has_synced()).await;
    cm(&src, "a", "2"); // rv 3
    src.delete("ns/b"); // rv 4
    cm(&src, "c", "1"); // rv 5
    eventually("live events", || rlog.events().len() >= 5 && olog.events().len() >= 5).await;
    src.delete_while_disconnected("ns/c"); // rv 6, never watched: a tombstone
    eventually("tombstone", || rlog.events().len() >= 7 && olog.events().len() >= 7).await;

    let mut initial = olog.events()[..2].to_vec();
    initial.sort();
    assert_eq!(initial, ["add ns/a rv=1 initial=true", "add ns/b rv=2 initial=true"], "{other}");
    assert_eq!(
        olog.events()[2..],
        [
            "update ns/a rv=1->3",
            "delete ns/b rv=4",
            "add ns/c rv=5 initial=false",
            "update ns/a rv=3->3",
            "delete-tombstone ns/c rv=5",
        ],
        "{other}"
    );
    // The initial adds may come in either order; all the rest is fixed.
    let sorted = |mut v: Vec<String>| {
        v[..2].sort();
        v
    };
    assert_eq!(sorted(olog.events()), sorted(rlog.events()), "{other} and the Rust recorder differ");
    assert_eq!(olog.lines().iter().filter(|l| l.starts_with("init ")).collect::<Vec<_>>(), ["init {}", "init {}"]);
    assert_eq!(olog.count("init "), rlog.count("init "));
    assert_eq!(oreg.stats().delivered.load(Ordering::Relaxed), 7);
    assert_eq!(oreg.stats().crashed.load(Ordering::Relaxed), 0);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_recorder_logs_what_the_rust_recorder_logs() {
    same_sequence_as_the_rust_recorder("python-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_recorder_logs_what_the_rust_recorder_logs() {
    same_sequence_as_the_rust_recorder("js-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_recorder_logs_what_the_rust_recorder_logs() {
    same_sequence_as_the_rust_recorder("c-recorder").await;
}

/// An exception escaping `other` (configured to throw on `bad`; in C a
/// trap, `abort()`) is handled like the Rust `panic-on` plugin's panic on the
/// same object: that notification skipped, delivery resumed a second later,
/// in a fresh instance (init logged again).
async fn exception_is_handled_like_a_rust_panic(other: &str) {
    let src = MemorySource::new();
    let (plog, olog) = (Log::default(), Log::default());
    let mut ps = spec("panic-on", &plog);
    ps.config_json = json!({"name": "bad"}).to_string();
    let panicky = load(ps);
    let mut os = spec(other, &olog);
    os.config_json = json!({"throw_on": "bad"}).to_string();
    let theirs = load(os);
    let run = Running::start(&src);
    let (preg, oreg) = (run.add(&panicky), run.add(&theirs));
    eventually("sync", || preg.has_synced() && oreg.has_synced()).await;
    cm(&src, "before", "1"); // rv 1
    cm(&src, "bad", "1"); // rv 2
    cm(&src, "after", "1"); // rv 3
    eventually("both resume", || plog.events().len() >= 2 && olog.events().len() >= 2).await;
    assert_eq!(olog.events(), ["add ns/before rv=1 initial=false", "add ns/after rv=3 initial=false"], "{other}");
    assert_eq!(olog.events(), plog.events());
    let before = olog.when("add ns/before rv=1 initial=false").unwrap();
    let resumed = olog.when("add ns/after rv=3 initial=false").unwrap();
    assert!(resumed - before >= Duration::from_secs(1), "{other} resumed only {:?} later", resumed - before);
    assert_eq!(oreg.stats().crashed.load(Ordering::Relaxed), 1, "{other}");
    assert_eq!(theirs.stats.restarts.load(Ordering::Relaxed), 1, "{other}");
    assert_eq!(theirs.stats.traps_other.load(Ordering::Relaxed), 1, "{other}: not a fuel, deadline or memory trap");
    // Load probe, the registration's instance, the fresh one after the trap.
    assert_eq!(olog.count("init "), 3, "{other}");
    assert_eq!(olog.count("init "), plog.count("init "));
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_recorder_logs_what_the_rust_recorder_logs() {
    same_sequence_as_the_rust_recorder("go-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_exception_is_handled_like_a_rust_panic() {
    exception_is_handled_like_a_rust_panic("python-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_throw_is_handled_like_a_rust_panic() {
    exception_is_handled_like_a_rust_panic("js-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_trap_is_handled_like_a_rust_panic() {
    exception_is_handled_like_a_rust_panic("c-recorder").await;
}

/// An error the guest returns on purpose (Python `informer_guest.Error`, JS
/// `PluginError`, C `ig_error`) is an `err` result, as a Rust plugin's
/// `Err`: counted as failed, no trap, no restart; in `init` it refuses the
/// load.
async fn returned_errors_are_results_not_traps(other: &str) {
    let mut bad = spec(other, &Log::default());
    bad.config_json = "{not json".into();
    match try_load(bad) {
        Ok(_) => panic!("{other}: a config that is not JSON should be refused"),
        Err(e) => {
            assert!(matches!(e, PluginError::Init { .. }), "{other}: {e}");
            assert!(e.to_string().contains("invalid plugin configuration"), "{e}");
        }
    }

    let src = MemorySource::new();
    let log = Log::default();
    let mut s = spec(other, &log);
    s.config_json = json!({"fail_on": "bad"}).to_string();
    let plugin = load(s);
    let run = Running::start(&src);
    let reg = run.add(&plugin);
    eventually("sync", || reg.has_synced()).await;
    cm(&src, "before", "1");
    cm(&src, "bad", "1");
    cm(&src, "after", "1");
    eventually("delivery", || log.events().len() >= 2).await;
    assert_eq!(log.events(), ["add ns/before rv=1 initial=false", "add ns/after rv=3 initial=false"], "{other}");
    assert_eq!(reg.stats().failed.load(Ordering::Relaxed), 1, "{other}");
    assert_eq!(reg.stats().crashed.load(Ordering::Relaxed), 0, "{other}");
    assert_eq!(plugin.stats.restarts.load(Ordering::Relaxed), 0, "{other}");
    assert_eq!(log.count("init "), 2, "{other}: the instance was replaced");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_panic_is_handled_like_a_rust_panic() {
    exception_is_handled_like_a_rust_panic("go-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_errors_are_results_not_traps() {
    returned_errors_are_results_not_traps("python-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_errors_are_results_not_traps() {
    returned_errors_are_results_not_traps("js-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_errors_are_results_not_traps() {
    returned_errors_are_results_not_traps("c-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_errors_are_results_not_traps() {
    returned_errors_are_results_not_traps("go-recorder").await;
}

/// A config map `ns/<name>` at resourceVersion `rv`, as the informer caches it.
fn config_map(name: &str, rv: u32) -> ObjectRef {
    Arc::new(
        Object::from_value(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string(),
                         "uid": format!("uid-{name}"), "labels": {"app": name}},
            "data": {"v": rv.to_string()},
        }))
        .unwrap(),
    )
}

/// One batch holding every kind of notification (initial and live adds, an
/// update, a delete, a tombstone), handed to `plugin`'s `on-batch` in one
/// call; what its handler returned, and the lines it logged.
fn one_batch(plugin: &str, config: serde_json::Value) -> (Delivered, Vec<String>) {
    let (a1, b2, a3, c5) = (config_map("a", 1), config_map("b", 2), config_map("a", 3), config_map("c", 5));
    let batch = [
        Notification::Add { obj: a1.clone(), is_in_initial_list: true },
        Notification::Add { obj: b2.clone(), is_in_initial_list: false },
        Notification::Update { old: a1, new: a3 },
        Notification::Delete(DeletedObject::Object(b2)),
        Notification::Delete(DeletedObject::FinalStateUnknown { key: "ns/c".into(), obj: c5 }),
    ];
    let log = Log::default();
    let mut s = spec(plugin, &log);
    s.config_json = config.to_string();
    let loaded = load(s);
    assert_eq!(loaded.info.world, BATCHED_WORLD, "{plugin} exports the batch path");
    let mut handler = loaded.handler(None).unwrap();
    let refs: Vec<&Notification> = batch.iter().collect();
    (handler.deliver_many(&refs), log.events())
}

/// Every kind of notification in one `on-batch` call reaches `other` as it
/// reaches the Rust recorder: the same lines in the same order, from the
/// batch's metadata buffer and lent objects.
fn batch_of_every_kind_logs_what_the_rust_recorder_logs(other: &str) {
    let (rust, rust_lines) = one_batch("recorder", json!({}));
    let (theirs, lines) = one_batch(other, json!({}));
    assert!(rust.all_ok(5) && theirs.all_ok(5), "{other}: {:?}", theirs.errors);
    assert_eq!(
        lines,
        [
            "add ns/a rv=1 initial=true",
            "add ns/b rv=2 initial=false",
            "update ns/a rv=1->3",
            "delete ns/b rv=2",
            "delete-tombstone ns/c rv=5",
        ],
        "{other}"
    );
    assert_eq!(lines, rust_lines, "{other}");
}

/// Inside one batch, an error returned for an item is that item's result
/// (the others handled), and a trap (an exception, `ig_trap`) is blamed on
/// exactly the item that raised it: the batch stops there, the items before
/// it were handled once, and the listener goes on after it.
fn errors_and_traps_inside_a_batch_are_the_items_own(other: &str) {
    let (failed, lines) = one_batch(other, json!({"fail_on": "b"}));
    assert_eq!(failed.handled, 5, "{other}");
    let at: Vec<usize> = failed.errors.iter().map(|(i, _)| *i).collect();
    assert_eq!(at, [1, 3], "{other}: {:?}", failed.errors);
    assert!(failed.errors.iter().all(|(_, e)| matches!(e, HandlerError::Failed(m) if m == "told to fail on b")));
    assert_eq!(lines, ["add ns/a rv=1 initial=true", "update ns/a rv=1->3", "delete-tombstone ns/c rv=5"], "{other}");

    let (crashed, lines) = one_batch(other, json!({"throw_on": "b"}));
    assert_eq!(crashed.handled, 2, "{other}: {:?}", crashed.errors);
    assert!(matches!(crashed.errors[..], [(1, HandlerError::Crashed(_))]), "{other}: {:?}", crashed.errors);
    assert_eq!(lines, ["add ns/a rv=1 initial=true"], "{other}");
}

/// The informer's initial list reaches `other` in `on-batch` calls; an
/// exception (a trap) on one object among them skips exactly that one, and
/// every other object is logged exactly once.
async fn trap_inside_a_batch_skips_exactly_that_notification(other: &str) {
    let src = MemorySource::new();
    for i in 0..40 {
        cm(&src, &format!("o{i}"), "1"); // rv i+1
    }
    let log = Log::default();
    let mut s = spec(other, &log);
    s.config_json = json!({"throw_on": "o17"}).to_string();
    let plugin = load(s);
    let run = Running::start(&src);
    eventually("informer synced", || run.informer.has_synced()).await;
    let reg = run.add(&plugin);
    eventually("initial list handled", || reg.has_synced() && log.events().len() >= 39).await;
    let mut got = log.events();
    got.sort();
    let mut expected: Vec<String> =
        (0..40).filter(|&i| i != 17).map(|i| format!("add ns/o{i} rv={} initial=true", i + 1)).collect();
    expected.sort();
    assert_eq!(got, expected, "{other}: each object but o17 exactly once");
    assert_eq!(reg.stats().crashed.load(Ordering::Relaxed), 1, "{other}");
    assert_eq!(plugin.stats.traps_other.load(Ordering::Relaxed), 1, "{other}");
    assert_eq!(plugin.info.world, BATCHED_WORLD, "{other} exports the batch path");
    run.stop().await;
}

/// Every metadata accessor of `other`'s SDK, read from the batch's metadata
/// buffer, agrees with the object's body (the recorder's `check_json`
/// returns an error otherwise): no labels and many, empty and non-ASCII
/// values, a long one, absent uid and resource version, a cluster-scoped
/// object, an update that changes the labels.
fn metadata_accessors_agree_with_the_body_in_a_batch(other: &str) {
    let object = |value: serde_json::Value| -> ObjectRef { Arc::new(Object::from_value(&value).unwrap()) };
    let plain =
        object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain", "namespace": "ns"}}));
    let labelled = |rv: &str, labels: serde_json::Value| {
        object(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "many", "namespace": "ns", "uid": "u-1", "resourceVersion": rv, "labels": labels},
        }))
    };
    let many = labelled("7", json!({"app": "web", "tier": "", "z-üni": "välue", "long": "x".repeat(300)}));
    let relabelled = labelled("8", json!({"app": "api"}));
    let cluster = object(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "team-a", "uid": "u-2", "resourceVersion": "9", "labels": {"team": "a"}},
    }));
    let batch = [
        Notification::Add { obj: plain, is_in_initial_list: true },
        Notification::Add { obj: many.clone(), is_in_initial_list: true },
        Notification::Add { obj: cluster, is_in_initial_list: false },
        Notification::Update { old: many, new: relabelled },
    ];
    let log = Log::default();
    let mut s = spec(other, &log);
    s.config_json = json!({"check_json": true}).to_string();
    let mut handler = load(s).handler(None).unwrap();
    let refs: Vec<&Notification> = batch.iter().collect();
    let delivered = handler.deliver_many(&refs);
    assert!(delivered.all_ok(4), "{other}: {:?}", delivered.errors);
    assert_eq!(
        log.events(),
        [
            "add ns/plain rv=none initial=true",
            "add ns/many rv=7 initial=true",
            "add team-a rv=9 initial=false",
            "update ns/many rv=7->8",
        ],
        "{other}"
    );
}

#[test]
fn python_batch_of_every_kind_logs_what_the_rust_recorder_logs() {
    batch_of_every_kind_logs_what_the_rust_recorder_logs("python-recorder");
}

#[test]
fn js_batch_of_every_kind_logs_what_the_rust_recorder_logs() {
    batch_of_every_kind_logs_what_the_rust_recorder_logs("js-recorder");
}

#[test]
fn c_batch_of_every_kind_logs_what_the_rust_recorder_logs() {
    batch_of_every_kind_logs_what_the_rust_recorder_logs("c-recorder");
}

#[test]
fn go_batch_of_every_kind_logs_what_the_rust_recorder_logs() {
    batch_of_every_kind_logs_what_the_rust_recorder_logs("go-recorder");
}

#[test]
fn python_metadata_accessors_agree_with_the_body_in_a_batch() {
    metadata_accessors_agree_with_the_body_in_a_batch("python-recorder");
}

#[test]
fn js_metadata_accessors_agree_with_the_body_in_a_batch() {
    metadata_accessors_agree_with_the_body_in_a_batch("js-recorder");
}

#[test]
fn c_metadata_accessors_agree_with_the_body_in_a_batch() {
    metadata_accessors_agree_with_the_body_in_a_batch("c-recorder");
}

#[test]
fn go_metadata_accessors_agree_with_the_body_in_a_batch() {
    metadata_accessors_agree_with_the_body_in_a_batch("go-recorder");
}

#[test]
fn python_errors_and_traps_inside_a_batch_are_the_items_own() {
    errors_and_traps_inside_a_batch_are_the_items_own("python-recorder");
}

#[test]
fn js_errors_and_traps_inside_a_batch_are_the_items_own() {
    errors_and_traps_inside_a_batch_are_the_items_own("js-recorder");
}

#[test]
fn c_errors_and_traps_inside_a_batch_are_the_items_own() {
    errors_and_traps_inside_a_batch_are_the_items_own("c-recorder");
}

#[test]
fn go_errors_and_traps_inside_a_batch_are_the_items_own() {
    errors_and_traps_inside_a_batch_are_the_items_own("go-recorder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_trap_inside_a_batch_skips_exactly_that_notification() {
    trap_inside_a_batch_skips_exactly_that_notification("python-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_trap_inside_a_batch_skips_exactly_that_notification() {
    trap_inside_a_batch_skips_exactly_that_notification("js-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_trap_inside_a_batch_skips_exactly_that_notification() {
    trap_inside_a_batch_skips_exactly_that_notification("c-recorder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_panic_inside_a_batch_skips_exactly_that_notification() {
    trap_inside_a_batch_skips_exactly_that_notification("go-recorder").await;
}

/// `other`, the twin of the Rust `label-audit`, logs the same warnings on
/// the same sequence, and refuses a misspelt option as Rust does.
async fn label_audit_warns_like_the_rust_one(other: &str) {
    let src = MemorySource::new();
    let labelled = |name: &str, labels: serde_json::Value| {
        src.apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
        }))
        .unwrap();
    };
    labelled("complete", json!({"app": "x", "team": "y"}));
    labelled("bare", json!({}));
    let (rlog, olog) = (Log::default(), Log::default());
    let config = json!({"required": ["app", "team"]}).to_string();
    let mut rs = spec("label-audit", &rlog);
    rs.config_json = config.clone();
    let rust = load(rs);
    let mut os = spec(other, &olog);
    os.config_json = config;
    let theirs = load(os);
    let run = Running::start(&src);
    let (rreg, oreg) = (run.add(&rust), run.add(&theirs));
    eventually("sync", || rreg.has_synced() && oreg.has_synced()).await;
    labelled("complete", json!({"app": "x"})); // update: loses `team`
    labelled("half", json!({"team": "y"}));
    src.delete("ns/bare");
    let delivered = |r: &Registration| r.stats().delivered.load(Ordering::Relaxed);
    eventually("all delivered", || delivered(&rreg) == 5 && delivered(&oreg) == 5).await;
    let expected = [
        (Level::Warn, "ConfigMap ns/bare is missing required labels: app, team".to_string()),
        (Level::Warn, "ConfigMap ns/complete is missing required labels: team".to_string()),
        (Level::Warn, "ConfigMap ns/half is missing required labels: app".to_string()),
    ];
    assert_eq!(olog.leveled(), expected, "{other}");
    assert_eq!(olog.leveled(), rlog.leveled());
    run.stop().await;

    // A configuration error is refused at load, naming the plugin, as in Rust.
    for plugin in ["label-audit", other] {
        let mut s = spec(plugin, &Log::default());
        s.config_json = json!({"requried": ["app"]}).to_string();
        match try_load(s) {
            Ok(_) => panic!("{plugin}: a misspelt option should be refused"),
            Err(e) => {
                assert!(matches!(e, PluginError::Init { .. }), "{plugin}: {e}");
                let text = e.to_string();
                assert!(text.contains(plugin) && text.contains("unknown field `requried`"), "{text}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_label_audit_warns_like_the_rust_one() {
    label_audit_warns_like_the_rust_one("python-label-audit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_label_audit_warns_like_the_rust_one() {
    label_audit_warns_like_the_rust_one("go-label-audit").await;
}

#[test]
fn the_build_script_is_idempotent_when_nothing_changed() {
    build_all().unwrap_or_else(|e| panic!("building the non-Rust plugins failed:\n{e}"));
    let outputs = || -> Vec<(PathBuf, std::time::SystemTime)> {
        let dir = repo().join("target/plugins/other");
        let mut v: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
            .map(|p| {
                let t = std::fs::metadata(&p).unwrap().modified().unwrap();
                (p, t)
            })
            .collect();
        v.sort();
        v
    };
    let before = outputs();
    for plugin in RECORDERS.iter().chain(&["python-label-audit", "go-label-audit", "go-memory-hog"]) {
        let file = format!("{}.wasm", plugin.replace('-', "_"));
        assert!(before.iter().any(|(p, _)| p.ends_with(Path::new(&file))), "no {file} in {before:?}");
    }
    build_all().unwrap_or_else(|e| panic!("the second run failed:\n{e}"));
    assert_eq!(outputs(), before, "an up-to-date run rebuilt something");
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// The language of a plugin folder, by its prefix (Rust has none).
fn language(plugin: &str) -> &'static str {
    ["python", "js", "c", "go"].into_iter().find(|l| plugin.starts_with(&format!("{l}-"))).unwrap_or("rust")
}

/// What [`measure`] found for one plugin.
struct Figures {
    plugin: String,
    size_bytes: u64,
    /// Compiled from scratch (a runtime without a disk cache).
    compile: Duration,
    /// Loaded from the disk cache, as a restarted host sees it.
    from_disk_cache: Duration,
    /// Instantiation from the `InstancePre` plus `init`: the median of
    /// [`INSTANCES`].
    instantiate: Duration,
    rss_per_instance: u64,
    /// Initial adds of [`OBJECTS`] objects on one informer, per second.
    adds_per_sec: f64,
    /// Aggregate notifications/s of the same initial adds to each of
    /// [`HANDLERS`] instances registered at once (K > 1 only).
    per_handlers: Vec<(usize, f64)>,
    /// Nanoseconds per notification inside one handler: one call each (as
    /// before the batch path) and 256 per `on-batch` call.
    one_by_one_ns: f64,
    batched_ns: f64,
    /// Lines the plugin logged in all.
    lines: usize,
}

const INSTANCES: usize = 20;
const OBJECTS: usize = 5_000;
/// Handlers on one informer for the throughput-against-handlers figures.
const HANDLERS: [usize; 2] = [1, 10];

/// Loads `plugin` without and with the disk cache, makes [`INSTANCES`]
/// instances of it, then registers it on an informer holding [`OBJECTS`]
/// config maps and times their initial adds; then, for each K of `ks`
/// above 1, the initial adds to K instances registered at once.
async fn measure(plugin: &str, ks: &[usize]) -> Figures {
    let lines = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut s = spec(plugin, &Log::default());
    let counter = lines.clone();
    s.log_sink = Some(LogSink(Arc::new(move |_: Level, _: &str| {
        counter.fetch_add(1, Ordering::Relaxed);
    })));
    // Compiled from scratch: a runtime without a disk cache.
    let fresh = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let loaded = fresh.load(s.clone()).unwrap();
    assert!(!loaded.info.from_cache);
    // Compiled code from the disk cache (as a restarted host sees it).
    let _ = try_load(s.clone()).unwrap();
    let cached_rt = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(repo().join("target/wasm-cache")),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let cached = cached_rt.load(s.clone()).unwrap();
    assert!(cached.info.from_cache);

    let before = rss_bytes();
    let mut handlers = Vec::new();
    let mut times = Vec::new();
    for _ in 0..INSTANCES {
        let h = loaded.handler(None).unwrap();
        times.push(h.instantiate_time());
        handlers.push(h);
    }
    let rss_per_instance = rss_bytes().saturating_sub(before) / INSTANCES as u64;
    drop(handlers);
    times.sort();
    // Off the async worker: WASI calls block (as on the host's delivery threads).
    let (one_by_one_ns, batched_ns) = tokio::task::block_in_place(|| per_notification(&loaded));

    let src = MemorySource::new();
    for i in 0..OBJECTS {
        cm(&src, &format!("o{i}"), "x");
    }
    let run = Running::start(&src);
    eventually("informer synced", || run.informer.has_synced()).await;
    let started = Instant::now();
    let reg = run.add(&loaded);
    eventually("initial adds", || reg.has_synced()).await;
    let elapsed = started.elapsed();
    assert_eq!(reg.stats().delivered.load(Ordering::Relaxed), OBJECTS as u64, "{plugin}");
    assert_eq!(reg.stats().crashed.load(Ordering::Relaxed) + reg.stats().failed.load(Ordering::Relaxed), 0);
    run.stop().await;
    let mut per_handlers = vec![(1, OBJECTS as f64 / elapsed.as_secs_f64())];
    for &k in ks.iter().filter(|&&k| k > 1) {
        let run = Running::start(&src);
        eventually("informer synced", || run.informer.has_synced()).await;
        let started = Instant::now();
        let regs: Vec<_> = (0..k).map(|_| run.add(&loaded)).collect();
        eventually("initial adds to every handler", || regs.iter().all(|r| r.has_synced())).await;
        let elapsed = started.elapsed();
        for r in &regs {
            assert_eq!(r.stats().delivered.load(Ordering::Relaxed), OBJECTS as u64, "{plugin} at K = {k}");
        }
        run.stop().await;
        per_handlers.push((k, (k * OBJECTS) as f64 / elapsed.as_secs_f64()));
    }
    Figures {
        plugin: plugin.to_owned(),
        size_bytes: loaded.info.size_bytes,
        compile: loaded.info.compile_time,
        from_disk_cache: cached.info.compile_time,
        instantiate: times[INSTANCES / 2],
        rss_per_instance,
        adds_per_sec: OBJECTS as f64 / elapsed.as_secs_f64(),
        per_handlers,
        one_by_one_ns,
        batched_ns,
        lines: lines.load(Ordering::Relaxed),
    }
}

/// Nanoseconds per notification inside one handler of `plugin`, for 256
/// adds of ~1 KiB config maps: one component call each (`deliver_each`,
/// the path every language but Rust and Go took before it exported
/// `on-batch`), then all 256 in one `on-batch` call, alternating rounds
/// for [`PER_NOTIFICATION_FOR`] in all, at most [`PER_NOTIFICATION_ROUNDS`]
/// (a JavaScript instance called once per notification grows by about
/// 1 KiB per call inside componentize-js and reaches its 64 MiB cap after
/// about 66 000 calls; one `on-batch` call serves 256).
fn per_notification(plugin: &LoadedPlugin) -> (f64, f64) {
    let objs: Vec<ObjectRef> = (0..256).map(|i| config_map(&format!("o{i}"), i + 1)).collect();
    let batch: Vec<Notification> =
        objs.iter().map(|o| Notification::Add { obj: o.clone(), is_in_initial_list: false }).collect();
    let refs: Vec<&Notification> = batch.iter().collect();
    let mut h = plugin.handler(None).unwrap();
    let (mut each, mut many, mut rounds) = (Duration::ZERO, Duration::ZERO, 0u32);
    let started = Instant::now();
    while (started.elapsed() < PER_NOTIFICATION_FOR && rounds < PER_NOTIFICATION_ROUNDS) || rounds < 2 {
        let t = Instant::now();
        let d = deliver_each(&mut h, &refs);
        each += t.elapsed();
        assert!(d.all_ok(refs.len()), "{} one by one: {:?}", plugin.info.name, d.errors);
        // A batch whose items outrun one call's fuel together is handed
        // back part done (the handler then halves its batches): go on from
        // where it stopped, as the listener does.
        let (t, mut from) = (Instant::now(), 0);
        while from < refs.len() {
            let d = h.deliver_many(&refs[from..]);
            assert!(d.handled > 0 && d.errors.is_empty(), "{} batched: {:?}", plugin.info.name, d.errors);
            from += d.handled;
        }
        many += t.elapsed();
        rounds += 1;
    }
    let per = |d: Duration| d.as_nanos() as f64 / (rounds as f64 * refs.len() as f64);
    (per(each), per(many))
}

const PER_NOTIFICATION_FOR: Duration = Duration::from_secs(2);
const PER_NOTIFICATION_ROUNDS: u32 = 100;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// One line of figures per plugin.
fn table(rows: &[Figures]) -> String {
    let mut out = format!(
        "{:<16} {:>9} {:>10} {:>11} {:>12} {:>13} {:>10}\n",
        "plugin", "size MB", "compile s", "disk ms", "instance ms", "RSS/inst MiB", "adds/s"
    );
    for f in rows {
        out.push_str(&format!(
            "{:<16} {:>9.3} {:>10.2} {:>11.1} {:>12.2} {:>13.2} {:>10.0}\n",
            f.plugin,
            f.size_bytes as f64 / 1e6,
            f.compile.as_secs_f64(),
            f.from_disk_cache.as_secs_f64() * 1e3,
            f.instantiate.as_secs_f64() * 1e3,
            mib(f.rss_per_instance),
            f.adds_per_sec,
        ));
    }
    out
}

/// Figures of the recorders per language, not assertions:
/// `cargo test -p e2e --test all -- --ignored --nocapture other_languages::bench_recorders`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by hand"]
async fn bench_recorders_per_language() {
    let mut rows = Vec::new();
    for plugin in ["recorder"].iter().chain(&RECORDERS) {
        let f = measure(plugin, &[1]).await;
        // An init per instance (3 loads, the handlers, the registration), a line per add.
        assert_eq!(f.lines, 3 + INSTANCES + 1 + OBJECTS, "{plugin}");
        rows.push(f);
    }
    eprintln!("\n{}", table(&rows));
}

/// The figures of issue 6, not assertions: per language, side by side in
/// one run, the no-op and the metadata-only handler (`noop`, `metadata` and
/// their twins `<language>-noop`, `<language>-metadata`):
/// `cargo test -p e2e --test all -- --ignored --nocapture other_languages::bench_noop_and_metadata`.
///
/// Size, compile time (no cache), instantiate time (from the `InstancePre`,
/// with `init`; median of 20) and RSS per instance are the no-op plugin's;
/// notifications/s are initial adds of 5,000 objects on one informer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by hand"]
async fn bench_noop_and_metadata_per_language() {
    let mut rows = Vec::new();
    for lang in ["rust", "python", "js", "c", "go"] {
        for handler in ["noop", "metadata"] {
            let plugin = if lang == "rust" { handler.to_owned() } else { format!("{lang}-{handler}") };
            assert_eq!(language(&plugin), lang);
            let f = measure(&plugin, &HANDLERS).await;
            assert_eq!(f.lines, 0, "{plugin} logs nothing");
            rows.push(f);
        }
    }
    let mut per = format!(
        "ns per notification, one call each -> 256 per on-batch call:\n{:<8} {:>22} {:>22}\n",
        "language", "noop", "metadata"
    );
    for pair in rows.chunks(2) {
        let (noop, metadata) = (&pair[0], &pair[1]);
        let cell = |f: &Figures| {
            format!("{:.0} -> {:.0} ({:.1}x)", f.one_by_one_ns, f.batched_ns, f.one_by_one_ns / f.batched_ns)
        };
        per.push_str(&format!("{:<8} {:>22} {:>22}\n", language(&noop.plugin), cell(noop), cell(metadata)));
    }
    eprintln!("\n{}\n{per}\n{}", table(&rows), report(&rows));
}

/// The per-language fragment of `docs/benchmarks.md`
/// (`target/bench-reports/languages.md`, spliced in by `xtask bench-report
/// --languages`) and its plot, `docs/plots/languages-throughput.svg`;
/// returns the fragment.
fn report(rows: &[Figures]) -> String {
    let k_cols: Vec<String> = HANDLERS.iter().map(|k| format!("K = {k}")).collect();
    let mut md = format!(
        "| language | component | compile (no cache) | instantiate | RSS / instance | ns / notification (batched) | no-op/s {} | metadata/s {} |\n",
        k_cols.join(", "),
        k_cols.join(", ")
    );
    md.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    let rates =
        |f: &Figures| f.per_handlers.iter().map(|(_, r)| format!("{:.0} k", r / 1e3)).collect::<Vec<_>>().join(" / ");
    let mut series = Vec::new();
    for pair in rows.chunks(2) {
        let (noop, metadata) = (&pair[0], &pair[1]);
        let lang = match language(&noop.plugin) {
            "rust" => "Rust",
            "python" => "Python",
            "js" => "JavaScript",
            "c" => "C",
            _ => "Go",
        };
        md.push_str(&format!(
            "| {lang} | {:.2} MB | {:.2} s | {:.2} ms | {:.2} MiB | {:.0} (no-op) / {:.0} (metadata) | {} | {} |\n",
            noop.size_bytes as f64 / 1e6,
            noop.compile.as_secs_f64(),
            noop.instantiate.as_secs_f64() * 1e3,
            mib(noop.rss_per_instance),
            noop.batched_ns,
            metadata.batched_ns,
            rates(noop),
            rates(metadata),
        ));
        for (f, handler) in [(noop, "no-op"), (metadata, "metadata")] {
            let points = f.per_handlers.iter().map(|&(k, r)| (k as f64, r)).collect();
            series.push((format!("{lang} {handler}"), points));
        }
    }
    md.push_str(&format!(
        "\nInitial adds of {OBJECTS} config maps on one informer to K instances of each plugin, \
         aggregate notifications/s, one run (2 cores); size, compile, instantiate (median of {INSTANCES}, with `init`) \
         and RSS are the no-op plugin's; ns per notification inside one handler, 256 per `on-batch` call.\n"
    ));
    let dir = repo().join("target/bench-reports");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("languages.md"), &md).unwrap();
    plot::plot(
        &repo().join("docs/plots/languages-throughput.svg"),
        "Notifications/s against handlers, per language",
        "handlers on one informer (K)",
        "notifications/s",
        &series,
    );
    md
}

#[path = "../../../host/benches/common/plot.rs"]
mod plot;
