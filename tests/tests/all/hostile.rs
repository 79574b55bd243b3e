//! The sandbox against a hostile plugin (issue 10): each test carries one
//! attack of the `hostile` test plugin and checks what a user would notice
//! (a notification skipped or delivered, a counter, a log line, a refused
//! swap), never a duration. Against the host before the fixes (6ec53c0)
//! each of the findings' tests fails: the attack ran to its end, was counted
//! as delivered or as some other trap, grew the host's memory or log without
//! bound, or crossed a tenant's boundary.
//!
//! Most tests drive one plugin instance directly through
//! [`ResourceEventHandler::deliver_many`], the entry point the informer's
//! delivery workers use, so that every outcome is known exactly; those run
//! on plain threads, as the workers' blocking calls do (wasi's stderr
//! blocks on a runtime of its own). The ones that need an informer use tokio's paused clock, so
//! the one-second pause after a crash costs nothing. The last test fuzzes
//! the protocol with random scripts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use e2e::eventually;
use e2e::plugins::{Log, Running, observing_log_limits, spec, wasm};
use informer_host::informer::{
    DeletedObject, Delivered, HandlerError, Notification, Object, ObjectRef, ResourceEventHandler,
};
use informer_host::plugin::{
    Level, Limits, LoadedPlugin, LogLimits, LogSink, PluginError, PluginRuntime, PluginSpec, PluginStats,
    RuntimeConfig, WasmHandler,
};
use informer_host::registry::{OnSwap, PluginDef, PluginRegistry, RegistryError, TenantPolicy, WasmSource};
use informer_host::source::MemorySource;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Longest error text the host keeps from a guest, and the most its cut
/// note (`… (N more bytes cut)`) adds.
const MAX_ERROR: usize = 4096;
const CUT_NOTE: usize = 48;

/// One runtime for the whole binary: each component is compiled once.
fn rt() -> &'static PluginRuntime {
    static RT: OnceLock<PluginRuntime> = OnceLock::new();
    RT.get_or_init(|| PluginRuntime::new(RuntimeConfig::default()).unwrap())
}

fn cm(name: &str) -> ObjectRef {
    let obj = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
        "data": {"v": "1"},
    });
    Arc::new(Object::from_json(obj.to_string()).unwrap())
}

fn adds(names: &[&str]) -> Vec<Notification> {
    names.iter().map(|n| Notification::Add { obj: cm(n), is_in_initial_list: false }).collect()
}

fn counter(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Every trap counter, by cause.
fn traps(s: &PluginStats) -> [u64; 5] {
    [&s.traps_fuel, &s.traps_deadline, &s.traps_memory, &s.traps_other, &s.traps_protocol].map(counter)
}

/// One instance of a plugin, driven the way a delivery worker drives it.
struct Direct {
    plugin: LoadedPlugin,
    handler: WasmHandler,
    log: Log,
}

impl Direct {
    /// `hostile` (granted `log`) named `name`, configured with `config`.
    fn hostile(name: &str, config: Value, limits: impl FnOnce(&mut Limits)) -> Direct {
        let log = Log::default();
        let mut s = spec(name, "hostile", &log);
        s.config_json = config.to_string();
        limits(&mut s.limits);
        Direct::load(s, log)
    }

    fn load(spec: PluginSpec, log: Log) -> Direct {
        let plugin = rt().load(spec).unwrap();
        let handler = plugin.handler(None).unwrap();
        Direct { plugin, handler, log }
    }

    fn deliver(&mut self, batch: &[Notification]) -> Delivered {
        let refs: Vec<&Notification> = batch.iter().collect();
        self.handler.deliver_many(&refs)
    }

    fn stats(&self) -> &PluginStats {
        &self.plugin.stats
    }
}

/// The message of the crash at `at`, or a panic describing `d`.
fn crash_at(d: &Delivered, at: usize) -> &str {
    match d.errors.last() {
        Some((i, HandlerError::Crashed(msg))) if *i == at => msg,
        _ => panic!("expected a crash at item {at}, got {d:?}"),
    }
}

// ---- Finding 1: `begin`/`done` may re-arm only for the batch in flight ----

/// A guest that calls `delivery.begin`/`done` out of protocol in a loop,
/// spinning between calls, so that a host re-arming each time would give
/// it a thousand calls' budgets for one notification.
fn rearm(how: &str) -> Value {
    json!({"attack": "rearm", "how": how, "rounds": 1000, "work": 500_000, "name": "loop"})
}

const FUEL: u64 = 10_000_000;

fn fuel_limited(l: &mut Limits) {
    l.fuel_per_call = Some(FUEL);
    l.deadline_per_call = Duration::from_secs(30);
}

#[test]
fn a_rearm_loop_in_a_batch_traps_at_once_skipping_only_its_item() {
    for how in ["out-of-range", "backwards", "repeat"] {
        let mut p = Direct::hostile(&format!("rearm-{how}"), rearm(how), fuel_limited);
        let batch = adds(&["a", "loop", "b"]);
        let d = p.deliver(&batch);
        let msg = crash_at(&d, 1);
        assert!(msg.contains("protocol violation"), "{how}: {msg}");
        assert_eq!(d.handled, 2, "{how}: {d:?}");
        assert_eq!(d.errors.len(), 1, "{how}: {d:?}");
        // The item after it comes again and is delivered, by a fresh instance.
        let d = p.deliver(&batch[2..]);
        assert_eq!(d, Delivered { handled: 1, ..Delivered::default() }, "{how}");
        assert_eq!(p.log.events(), ["add ns/a rv=1 initial=false", "add ns/b rv=1 initial=false"], "{how}");
        assert_eq!(traps(p.stats()), [0, 0, 0, 0, 1], "{how}: one protocol trap, nothing else");
        // Each `on-batch` call is bounded by its items + 1 calls' fuel; the
        // attack's thousand rounds alone would burn hundreds of calls' worth.
        let fuel = counter(&p.stats().fuel_consumed);
        assert!(fuel <= (3 + 1 + 1 + 1) * FUEL, "{how}: {fuel} fuel for 3 items of {FUEL} each");
    }
}

/// A guest whose `on-batch` traps before any item begins, while its
/// one-notification exports behave: nothing is skipped (the host probes
/// the batch one item at a time), but the handler reports the crash, and
/// the listener backs off as after any crash. (Without the backoff, such a
/// guest got a call's budget plus a fresh instance's `init`, ten calls'
/// worth, per notification, as fast as it could trap.)
#[test]
fn a_batch_that_traps_before_any_item_is_backed_off_skipping_nothing() {
    let mut p = Direct::hostile("batch-trap", json!({"attack": "batch-trap"}), fuel_limited);
    let batch = adds(&["a", "b", "c"]);
    let d = p.deliver(&batch);
    assert_eq!(d.handled, 0, "{d:?}");
    assert!(d.errors.is_empty(), "nothing skipped or failed: {d:?}");
    assert!(d.crashed_between.as_deref().is_some_and(|m| m.contains("unreachable")), "{d:?}");
    // Not counted: a probe that finds an item at fault counts that one.
    assert_eq!(traps(p.stats()), [0, 0, 0, 0, 0]);
    // Delivered again, probed one at a time: each once, in order.
    assert_eq!(p.deliver(&batch), Delivered { handled: 3, ..Delivered::default() });
    assert_eq!(
        p.log.events(),
        ["add ns/a rv=1 initial=false", "add ns/b rv=1 initial=false", "add ns/c rv=1 initial=false"]
    );
}

#[test]
fn delivery_calls_outside_a_batch_trap() {
    // One notification per call (after a trap, in a replay, for plugins
    // without `on-batch`): there is no batch whose budget `begin` could
    // re-arm, so any `delivery` call is out of protocol.
    for how in ["out-of-range", "backwards", "repeat"] {
        let mut p = Direct::hostile(&format!("single-{how}"), rearm(how), fuel_limited);
        let err = p.handler.on_add(&cm("loop"), false).unwrap_err();
        assert!(matches!(&err, HandlerError::Crashed(m) if m.contains("protocol violation")), "{how}: {err:?}");
        assert_eq!(traps(p.stats()), [0, 0, 0, 0, 1], "{how}");
        assert!(counter(&p.stats().fuel_consumed) <= FUEL, "{how}");
        p.handler.on_add(&cm("fine"), false).unwrap();
    }
}

/// Finding 1 and the out-of-order `done` of the minor findings, through a
/// real informer: the attack is stopped, counted as a protocol trap, logged,
/// and its notification skipped (not counted as delivered); its neighbour on
/// the informer and the attacker's own later notifications are served.
#[tokio::test(start_paused = true)]
async fn a_rearm_loop_on_an_informer_is_skipped_logged_and_spares_the_neighbours() {
    traced::init();
    // `backwards` is an out-of-order `done`: `done(i - 1)` while `i` runs.
    for how in ["out-of-range", "backwards", "repeat"] {
        let name = format!("informer-rearm-{how}");
        let src = MemorySource::new();
        // The initial list: one batch.
        for n in ["a", "b", "loop", "c", "d"] {
            src.apply_config_map("ns", n, "1").unwrap();
        }
        let (hlog, rlog) = (Log::default(), Log::default());
        let mut s = spec(&name, "hostile", &hlog);
        s.config_json = rearm(how).to_string();
        fuel_limited(&mut s.limits);
        let hostile = rt().load(s).unwrap();
        let recorder = rt().load(spec("neighbour", "recorder", &rlog)).unwrap();
        let run = Running::start(&src);
        let (h, r) = (run.add(&hostile), run.add(&recorder));
        eventually("sync", || h.has_synced() && r.has_synced()).await;
        src.apply_config_map("ns", "e", "1").unwrap();
        eventually("the attacker's next notification", || hlog.events().len() == 5).await;
        eventually("the neighbour's", || rlog.events().len() == 6).await;

        let mut seen = hlog.events();
        seen.sort();
        let expected: Vec<String> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| format!("add ns/{n} rv={} initial={}", rv(&src, n), *n != "e"))
            .collect();
        assert_eq!(seen, expected, "{how}");
        assert_eq!(h.stats().crashed.load(Ordering::Relaxed), 1, "{how}");
        assert_eq!(h.stats().delivered.load(Ordering::Relaxed), 5, "{how}");
        assert_eq!(r.stats().delivered.load(Ordering::Relaxed), 6, "{how}");
        assert_eq!(traps(&hostile.stats), [0, 0, 0, 0, 1], "{how}");
        let fuel = counter(&hostile.stats.fuel_consumed);
        // At most (items + 1) calls' fuel per `on-batch` call; 6 items in at
        // most 3 calls here.
        assert!(fuel <= (6 + 3) * FUEL, "{how}: {fuel}");
        let crash = traced::lines(|l| l.field("handler") == Some(&name) && l.level == "ERROR");
        assert!(
            crash.iter().any(|l| l.message.contains("skipped") && l.message.contains("protocol violation")),
            "{how}: the trap is logged, naming its cause: {crash:#?}"
        );
        run.stop().await;
    }
}

fn rv(src: &MemorySource, name: &str) -> String {
    let key = format!("ns/{name}");
    src.objects().into_iter().find(|o| o.key() == key).unwrap().resource_version().unwrap().to_string()
}

/// An `init` gets ten calls' budget, and no more: a load whose `init`
/// spins fails as an init trap, one that needs a few calls' worth loads.
#[test]
fn init_has_ten_calls_budget() {
    let log = Log::default();
    let mut s = spec("spin-in-init", "spin", &log);
    s.config_json = json!({"in_init": true}).to_string();
    s.limits.fuel_per_call = Some(1_000_000);
    match rt().load(s) {
        Err(PluginError::InitTrap { message, .. }) => assert!(message.contains("out of fuel"), "{message}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a spinning init should not load"),
    }
    // A few calls' fuel in `init`: it loads; the same work in a
    // notification is stopped.
    let config = json!({"attack": "slow-init", "spins": 200_000});
    let mut p = Direct::hostile("slow-init", config, |l| l.fuel_per_call = Some(1_000_000));
    let script = json!({"attack": "script", "steps": [{"spin": 200_000}]});
    let mut q = Direct::hostile("slow-call", script, |l| l.fuel_per_call = Some(1_000_000));
    assert_eq!(p.handler.on_add(&cm("a"), false), Ok(()));
    let err = q.handler.on_add(&cm("a"), false).unwrap_err();
    assert!(matches!(&err, HandlerError::Crashed(m) if m.contains("out of fuel")), "{err:?}");
}

// ---- A guest cannot wait past its deadline ----

/// Runs `f` on a thread of its own and returns what it returned, or panics
/// naming `what` if it is still running after a minute (a guest the host
/// let sleep for ever would hold the test for ever).
fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("{what}: still blocked after a minute"))
}

/// A guest that sleeps (`std::thread::sleep`: a WASI clock subscription
/// the host blocks on, outside any epoch check) wakes by the end of its
/// call and is stopped there, in `init` and in a notification, even when
/// it asks to sleep for ever; a short sleep within the deadline still
/// works. Before, such a plugin held its delivery worker and a host thread
/// for as long as it asked, whatever its deadline.
#[test]
fn a_sleeping_guest_wakes_at_its_deadline_and_is_stopped_there() {
    let short = |l: &mut Limits| l.deadline_per_call = Duration::from_millis(100);
    let message = within_a_minute("a sleeping init", move || {
        let log = Log::default();
        let mut s = spec("sleep-in-init", "hostile", &log);
        s.config_json = json!({"attack": "sleep-init", "ms": u64::MAX}).to_string();
        short(&mut s.limits);
        match rt().load(s) {
            Err(PluginError::InitTrap { message, .. }) => message,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("an init sleeping for ever should not load"),
        }
    });
    assert!(message.contains("deadline of 1s per call exceeded"), "ten calls' deadline: {message}");

    let err = within_a_minute("a sleeping call", move || {
        let forever = json!({"attack": "script", "steps": [{"sleep": u64::MAX}]});
        let mut p = Direct::hostile("sleep-in-call", forever, short);
        p.handler.on_add(&cm("a"), false).unwrap_err()
    });
    assert!(matches!(&err, HandlerError::Crashed(m) if m.contains("deadline of 100ms per call exceeded")), "{err:?}");

    let nap = json!({"attack": "script", "steps": [{"sleep": 5}, "ok"]});
    let mut p = Direct::hostile("short-nap", nap, |_| {});
    assert_eq!(p.handler.on_add(&cm("a"), false), Ok(()), "a sleep within the deadline is a sleep");
}

// ---- Finding 2: what a guest hands the host is bounded ----

#[test]
fn done_beyond_the_batch_with_huge_errors_traps_and_keeps_none() {
    // A thousand errors of 1 MiB each: before the fix the host kept them
    // all (and with more, aborted), and counted the item as delivered.
    let config = json!({"attack": "done-flood", "count": 1000, "bytes": 1 << 20, "name": "flood"});
    let mut p = Direct::hostile("done-flood", config, |l| l.memory_bytes = 16 << 20);
    let d = p.deliver(&adds(&["a", "flood", "b"]));
    let msg = crash_at(&d, 1);
    assert!(msg.contains("protocol violation") && msg.contains("delivery.done(3)"), "{msg}");
    assert_eq!(d.handled, 2);
    assert_eq!(d.errors.len(), 1, "no error of the flood was kept: {d:?}");
    assert!(msg.len() <= 2 * MAX_ERROR, "{}", msg.len());
    assert_eq!(traps(p.stats()), [0, 0, 0, 0, 1]);
}

fn assert_cut(msg: &str) {
    assert!(msg.len() <= MAX_ERROR + CUT_NOTE, "an error of {} bytes was kept", msg.len());
    assert!(msg.ends_with("more bytes cut)"), "the cut is said: …{}", &msg[msg.len().saturating_sub(40)..]);
}

#[test]
fn huge_errors_from_a_guest_are_cut_to_4_kib() {
    // Reported through `done` inside a batch...
    for (name, config) in [
        ("done-error", json!({"attack": "done-error", "bytes": 1 << 20, "name": "big"})),
        ("big-error", json!({"attack": "big-error", "bytes": 8 << 20, "name": "big"})),
    ] {
        let mut p = Direct::hostile(name, config, |_| {});
        let d = p.deliver(&adds(&["a", "big", "b"]));
        assert_eq!(d.handled, 3, "{name}: {d:?}");
        match &d.errors[..] {
            [(1, HandlerError::Failed(msg))] => assert_cut(msg),
            other => panic!("{name}: expected one failure at 1, got {other:?}"),
        }
        // ...and returned from a call of its own.
        match p.handler.on_add(&cm("big"), false) {
            Err(HandlerError::Failed(msg)) if name == "big-error" => assert_cut(&msg),
            Err(HandlerError::Crashed(msg)) if name == "done-error" => assert!(msg.contains("protocol violation")),
            other => panic!("{name}: {other:?}"),
        }
    }
    // ...and from `init`.
    let log = Log::default();
    let mut s = spec("init-error", "hostile", &log);
    s.config_json = json!({"attack": "init-error", "bytes": 8 << 20}).to_string();
    match rt().load(s) {
        Err(PluginError::Init { message, .. }) => assert_cut(&message),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("init should fail"),
    }
}

#[test]
fn leaked_object_handles_count_against_the_memory_cap() {
    // 4 MiB allows 32 768 handles of 128 bytes; the guest takes 200 000.
    let config = json!({"attack": "lend-leak", "count": 200_000, "name": "leak"});
    let mut p = Direct::hostile("lend-leak", config, |l| l.memory_bytes = 4 << 20);
    let batch = adds(&["a", "leak", "b"]);
    let d = p.deliver(&batch);
    let msg = crash_at(&d, 1);
    assert!(msg.contains("memory cap") && msg.contains("object handles"), "{msg}");
    assert_eq!(d.handled, 2);
    assert_eq!(traps(p.stats()), [0, 0, 1, 0, 0]);
    assert_eq!(p.deliver(&batch[2..]), Delivered { handled: 1, ..Delivered::default() });
}

/// A handle keeps its object version alive after the cache has moved on:
/// a guest that keeps one handle per call on versions of 1 MiB objects is
/// stopped once they add up to its cap (here 4 MiB), not after the 32 768
/// handles a count alone would allow (32 GiB of objects).
#[test]
fn kept_handles_count_the_objects_they_keep_alive() {
    let big = |name: &str| -> Notification {
        let obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
            "data": {"v": "x".repeat(1 << 20)},
        });
        Notification::Add { obj: Arc::new(Object::from_json(obj.to_string()).unwrap()), is_in_initial_list: false }
    };
    // `begin` first: the trap is then this item's, not a batch's to probe.
    let keep = json!({"attack": "script", "steps": [{"begin": 0}, {"lend": [0, true]}, "ok"]});
    let mut p = Direct::hostile("keep-big", keep, |l| l.memory_bytes = 4 << 20);
    let mut kept = 0;
    let msg = loop {
        let d = p.deliver(&[big(&format!("o{kept}"))]);
        if let Some((_, HandlerError::Crashed(msg))) = d.errors.first() {
            break msg.clone();
        }
        kept += 1;
        assert!(kept < 16, "{kept} objects of 1 MiB kept alive under a 4 MiB cap");
    };
    assert!(msg.contains("memory cap") && msg.contains("bytes of objects alive"), "{msg}");
    // Objects and the instance's own memory share the cap: as many fit as
    // the memory leaves room for, and the next one does not.
    let memory: usize = msg
        .split(" beside ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no memory figure in {msg}"));
    let object = (1 << 20) + 128;
    assert!(memory > 0 && memory + kept * object <= 4 << 20, "{kept} kept beside {memory}: {msg}");
    assert!(memory + (kept + 1) * object > 4 << 20, "a {}th would have fit beside {memory}: {msg}", kept + 1);
    assert_eq!(traps(p.stats()), [0, 0, 1, 0, 0]);
}

/// `pointer` parses the whole object on the host: each call costs the
/// call's fuel as many units as the object has bytes, so a guest cannot
/// make the host parse a 1 MiB object thousands of times for the fuel of a
/// few instructions.
#[test]
fn host_work_a_guest_causes_is_paid_for_in_fuel() {
    let obj = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big", "namespace": "ns", "resourceVersion": "1"},
        "data": {"v": "x".repeat(1 << 20)},
    });
    let big =
        Notification::Add { obj: Arc::new(Object::from_json(obj.to_string()).unwrap()), is_in_initial_list: false };
    let parse = |n: u32| json!({"attack": "script", "steps": [{"begin": 0}, {"pointer": n}, "ok"]});
    let fuel = |l: &mut Limits| l.fuel_per_call = Some(10_000_000);
    // Five parses of 1 MiB fit in 10 million.
    let mut p = Direct::hostile("few-parses", parse(5), fuel);
    assert_eq!(p.deliver(std::slice::from_ref(&big)), Delivered { handled: 1, ..Delivered::default() });
    // Two thousand do not: stopped at the tenth.
    let mut p = Direct::hostile("many-parses", parse(2_000), fuel);
    let d = p.deliver(std::slice::from_ref(&big));
    assert!(crash_at(&d, 0).contains("out of fuel"), "{d:?}");
    assert_eq!(traps(p.stats())[0], 1, "counted as a fuel trap: {:?}", traps(p.stats()));
}

/// `delivery.metadata` copies every record of the batch into the guest and
/// `log` copies and escapes its line, whatever the log budget keeps: both
/// are charged to the call's host work, so a loop of either runs out of
/// fuel rather than costing the host far more than the guest pays.
#[test]
fn metadata_copies_and_log_lines_are_paid_for_in_fuel() {
    // About 100 KiB of labels: each metadata call copies them.
    let labels: serde_json::Map<String, Value> = (0..100).map(|i| (format!("l{i}"), json!("v".repeat(1000)))).collect();
    let obj = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "labelled", "namespace": "ns", "resourceVersion": "1", "labels": labels},
    });
    let labelled =
        Notification::Add { obj: Arc::new(Object::from_json(obj.to_string()).unwrap()), is_in_initial_list: false };
    let fuel = |l: &mut Limits| l.fuel_per_call = Some(10_000_000);
    let run = |name: &str, step: Value| {
        let mut p = Direct::hostile(name, json!({"attack": "script", "steps": [{"begin": 0}, step, "ok"]}), fuel);
        p.deliver(std::slice::from_ref(&labelled))
    };
    assert_eq!(run("few-copies", json!({"metadata": 10})), Delivered { handled: 1, ..Delivered::default() });
    let d = run("many-copies", json!({"metadata": 2_000}));
    assert!(crash_at(&d, 0).contains("out of fuel"), "{d:?}");
    // 64 KiB lines: the first is kept, the rest dropped, and all are paid.
    assert_eq!(run("few-lines", json!({"log": [10, 65_536]})), Delivered { handled: 1, ..Delivered::default() });
    let d = run("many-lines", json!({"log": [2_000, 65_536]}));
    assert!(crash_at(&d, 0).contains("out of fuel"), "{d:?}");
}

// ---- Finding 5: logs and stderr within a budget ----

/// The default budget: 100 lines and 64 KiB per call, 4 KiB per line.
fn per_call_log_limits() -> LogLimits {
    let limits = observing_log_limits();
    assert_eq!((limits.lines_per_call, limits.max_line_bytes), (100, 4096));
    limits
}

#[test]
fn a_log_flood_is_cut_to_the_per_call_budget_and_the_drops_counted() {
    traced::init();
    let config = json!({"attack": "log-flood", "lines": 1000, "bytes": 100});
    let mut p = Direct::hostile("log-flood", config, |l| l.log = per_call_log_limits());
    let d = p.deliver(&adds(&["a", "b", "c"]));
    assert_eq!(d, Delivered { handled: 3, ..Delivered::default() });
    // Each item: its flood (re-armed by `begin`/`done` around the item
    // before it), then its own line after `begin`.
    let emitted = p.log.events().len() as u64;
    assert!(emitted <= 3 * (100 + 1), "{emitted} lines from one call of 3 items");
    assert_eq!(p.log.count("add ns/"), 3, "each item's own line, after `begin`, is within its budget");
    let dropped = counter(&p.stats().log_dropped_lines);
    assert_eq!(emitted + dropped, 3 * 1000 + 3, "every line is either logged or counted as dropped");
    assert!(counter(&p.stats().log_dropped_bytes) >= dropped * 100);
    let said = traced::lines(|l| l.field("plugin") == Some("log-flood") && l.message.starts_with("dropped "));
    assert!(!said.is_empty(), "one line says that lines were dropped");

    // One huge line is cut to 4 KiB.
    let config = json!({"attack": "log-flood", "lines": 1, "bytes": 1 << 20});
    let mut p = Direct::hostile("log-line", config, |l| l.log = per_call_log_limits());
    p.deliver(&adds(&["a"]));
    let flood = p.log.events().into_iter().find(|l| l.starts_with("xxx")).expect("the cut line");
    assert_cut(&flood);
}

/// A controller's write names are the guest's: a name with a newline must
/// not become a second line of the host's log (in its text format) saying
/// whatever the guest likes, about whichever tenant.
#[tokio::test]
async fn a_write_target_cannot_forge_a_host_log_line() {
    use informer_host::cluster::embedded::EmbeddedCluster;
    use informer_host::cluster::{Patch, Target, WriteRequest};
    use informer_host::controller::{GuardConfig, WriteGuard, WriteRule};
    traced::init();
    let rule = WriteRule {
        api_groups: vec!["".into()],
        kinds: vec!["ConfigMap".into()],
        verbs: vec!["patch".into()],
        names: vec![],
    };
    let guard = WriteGuard::new(
        GuardConfig { rules: vec![rule], ..GuardConfig::new("forger") },
        EmbeddedCluster::in_memory().writer(),
    );
    let name = "x\nINFO plugin=victim tenant=b write: delete everything";
    let escaped = name.replace('\n', "\\n");
    for kind in ["ConfigMap", "Secret"] {
        let target =
            Target { api_version: "v1".into(), kind: kind.into(), namespace: Some("ns".into()), name: name.into() };
        let patch = WriteRequest::Patch { target, patch: Patch::Merge(json!({})) };
        assert!(guard.write(patch).await.is_err(), "no such object ({kind}), or not allowed (Secret)");
    }
    let lines = traced::lines(|l| l.field("plugin") == Some("forger"));
    assert_eq!(lines.len(), 2, "a failed write and a refused one: {lines:?}");
    for line in &lines {
        let text = format!("{} {:?}", line.message, line.fields);
        assert!(!line.message.contains('\n'), "{text}");
        assert!(line.field("object").is_some_and(|o| o.contains(&escaped) && !o.contains('\n')), "{text}");
    }
}

/// The lines the host's log got from a plugin's stderr.
fn stderr_lines(plugin: &str) -> Vec<traced::Line> {
    traced::lines(|l| l.field("plugin") == Some(plugin) && l.message.starts_with("stderr: "))
}

#[test]
fn stderr_goes_to_the_log_only_with_the_grant_and_within_the_budget() {
    traced::init();
    let config = json!({"attack": "stderr-flood", "lines": 1000, "bytes": 100});
    // Granted `log`: stderr shares the log budget.
    let mut p = Direct::hostile("stderr-granted", config.clone(), |l| l.log = per_call_log_limits());
    assert_eq!(p.deliver(&adds(&["a"])), Delivered { handled: 1, ..Delivered::default() });
    let forwarded = stderr_lines("stderr-granted").len();
    assert!((1..=100).contains(&forwarded), "{forwarded} stderr lines forwarded");
    assert!(counter(&p.stats().log_dropped_lines) >= 900);

    // Not granted `log` (the plugin cannot import it): nothing goes through.
    let mut s = PluginSpec::new("stderr-denied", wasm("hostile-quiet"));
    s.config_json = config.to_string();
    let mut p = Direct::load(s, Log::default());
    assert_eq!(p.deliver(&adds(&["a", "b"])), Delivered { handled: 2, ..Delivered::default() });
    assert_eq!(p.handler.on_add(&cm("c"), false), Ok(()));
    assert!(stderr_lines("stderr-denied").is_empty(), "{:#?}", stderr_lines("stderr-denied"));
    assert_eq!(counter(&p.stats().log_dropped_lines), 0, "nothing was even offered to the log");
}

// ---- Finding 3: a swap lands only in the load it was prepared for ----

/// A log sink that, once armed, holds the first `init` line logged through
/// it until released: the `init` of a version being prepared by a swap.
#[derive(Clone, Default)]
struct Gate {
    armed: Arc<AtomicBool>,
    held: Arc<AtomicBool>,
    release: Arc<(Mutex<bool>, parking_lot::Condvar)>,
}

impl Gate {
    fn sink(&self) -> LogSink {
        let gate = self.clone();
        LogSink(Arc::new(move |_: Level, line: &str| {
            if line.starts_with("init ") && gate.armed.swap(false, Ordering::SeqCst) {
                gate.held.store(true, Ordering::SeqCst);
                let (open, cv) = &*gate.release;
                let mut open = open.lock();
                while !*open {
                    cv.wait(&mut open);
                }
            }
        }))
    }

    fn open(&self) {
        let (open, cv) = &*self.release;
        *open.lock() = true;
        cv.notify_all();
    }
}

fn namespaces(allowed: &'static [&'static str]) -> informer_host::plugin::Visibility {
    Arc::new(move |o: &Object| o.namespace().is_some_and(|ns| allowed.contains(&ns)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_racing_an_unload_and_reload_under_a_tenant_is_superseded() {
    let src = MemorySource::new();
    let run = Running::start(&src);
    let registry = PluginRegistry::new(rt().clone());
    registry.add_informer("cms", run.informer.clone());
    registry.set_tenant(
        "team-a",
        TenantPolicy {
            visibility: namespaces(&["team-a"]),
            max_plugins: None,
            fuel_per_call: None,
            deadline_per_call: None,
            memory_bytes: None,
            max_pending: None,
        },
    );
    let def = |log: &Log, tenant: Option<&str>| {
        let mut spec = spec("racer", "hostile", log);
        spec.tenant = tenant.map(str::to_string);
        spec.grants.cache = true;
        PluginDef {
            spec,
            informer: "cms".into(),
            resync: Duration::ZERO,
            on_swap: OnSwap::Continue,
            visibility: None,
            max_pending: None,
        }
    };
    // P, loaded without a tenant: it may see every namespace.
    let gate = Gate::default();
    let mut old = def(&Log::default(), None);
    old.spec.log_sink = Some(gate.sink());
    registry.load(old).unwrap();

    // A swap prepared from that load, held in its new version's `init`...
    gate.armed.store(true, Ordering::SeqCst);
    let swap = tokio::task::spawn_blocking({
        let registry = registry.clone();
        move || registry.swap("racer", WasmSource::File(wasm("hostile")))
    });
    eventually("the swap preparing its version", || gate.held.load(Ordering::SeqCst)).await;
    // ...while P is unloaded and loaded again under tenant `team-a`.
    registry.unload("racer").unwrap();
    let log = Log::default();
    registry.load(def(&log, Some("team-a"))).unwrap();
    gate.open();

    let err = swap.await.unwrap().unwrap_err();
    assert!(matches!(err, RegistryError::Superseded(ref n) if n == "racer"), "{err}");
    let status = registry.get("racer").unwrap();
    assert_eq!(status.tenant.as_deref(), Some("team-a"));
    assert_eq!(status.staged_version, None, "nothing was staged into the new load");
    assert_eq!(status.swaps, 0);
    // And the new load sees only its tenant's objects.
    src.apply_config_map("team-b", "secret", "1").unwrap();
    src.apply_config_map("team-a", "mine", "1").unwrap();
    eventually("team-a's object", || log.count("add ") == 1).await;
    assert_eq!(log.events(), ["add team-a/mine rv=2 initial=false"]);
    run.stop().await;
}

// ---- The protocol, fuzzed ----

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    const ITEMS: usize = 6;
    const FUZZ_FUEL: u64 = 3_000_000;

    fn limits(l: &mut Limits) {
        l.fuel_per_call = Some(FUZZ_FUEL);
        l.deadline_per_call = Duration::from_secs(10);
        l.log = LogLimits {
            max_line_bytes: 200,
            lines_per_call: 5,
            bytes_per_call: 600,
            lines_per_second: u32::MAX,
            bytes_per_second: usize::MAX,
        };
    }

    /// A script step (see `plugins/tests/hostile`), with indices and slots a
    /// little past the batch as often as inside it.
    fn step() -> impl Strategy<Value = Value> {
        let index = 0..(ITEMS as u32 + 3);
        // Up to two slots per item (updates).
        let slot = 0..(2 * ITEMS as u32 + 3);
        prop_oneof![
            4 => index.clone().prop_map(|i| json!({"begin": i})),
            4 => (index, prop::option::of(0usize..10_000)).prop_map(|(i, e)| json!({"done": [i, e]})),
            2 => (0u32..12, 0usize..400).prop_map(|(n, b)| json!({"log": [n, b]})),
            2 => (0u32..12, 0usize..400).prop_map(|(n, b)| json!({"stderr": [n, b]})),
            2 => (slot, any::<bool>()).prop_map(|(s, keep)| json!({"lend": [s, keep]})),
            1 => (0u64..1_000_000).prop_map(|n| json!({"spin": n})),
            1 => Just(json!("trap")),
            1 => Just(json!("ok")),
            1 => (0usize..10_000).prop_map(|b| json!({"err": b})),
        ]
    }

    /// A batch of the given kinds (0 add, 1 update, 2 delete, 3 tombstone),
    /// so that slots (two per update) and items differ.
    fn batch(kinds: &[u8]) -> Vec<Notification> {
        (0..)
            .zip(kinds)
            .map(|(i, kind)| {
                let obj = cm(&format!("o{i}"));
                match kind {
                    0 => Notification::Add { obj, is_in_initial_list: false },
                    1 => Notification::Update { old: cm(&format!("o{i}")), new: obj },
                    2 => Notification::Delete(DeletedObject::Object(obj)),
                    _ => Notification::Delete(DeletedObject::FinalStateUnknown { key: obj.key().into(), obj }),
                }
            })
            .collect()
    }

    fn outcome(e: Option<&HandlerError>) -> &'static str {
        match e {
            None => "delivered",
            Some(HandlerError::Failed(_)) => "failed",
            Some(HandlerError::Crashed(_)) => "crashed",
        }
    }

    /// Delivers notifications of `kinds` through `script` as a worker would:
    /// what a call did not report handled comes again. Checks the bounds on
    /// the way; returns each item's outcome.
    fn run(steps: Vec<Value>, kinds: &[u8]) -> Vec<&'static str> {
        let config = json!({"attack": "script", "steps": steps});
        let mut p = Direct::hostile("fuzz", config, limits);
        let batch = batch(kinds);
        let items = batch.len();
        let mut outcomes = Vec::new();
        let mut idle = 0;
        while outcomes.len() < items {
            let rest = &batch[outcomes.len()..];
            let (fuel, lines) = (counter(&p.stats().fuel_consumed), p.log.len());
            let d = p.deliver(rest);
            assert!(d.handled <= rest.len(), "{d:?}");
            // A trap no item was blamed for may hand back nothing once; the
            // next call then goes one at a time and must make progress.
            idle = if d.handled == 0 { idle + 1 } else { 0 };
            assert!(idle < 2, "no progress in two calls");
            let spent = counter(&p.stats().fuel_consumed) - fuel;
            assert!(spent <= (rest.len() as u64 + 1) * FUZZ_FUEL, "{spent} fuel for {} items", rest.len());
            // A batch may log a call's lines, and as many again after each
            // `begin` and `done`; a fresh instance's `init`, a call's more.
            let logged = p.log.len() - lines;
            assert!(logged <= 5 * (2 * rest.len() + 2), "{logged} lines for {} items", rest.len());
            let mut errors = d.errors.iter().peekable();
            for i in 0..d.handled {
                let e = errors.next_if(|(at, _)| *at == i).map(|(_, e)| e);
                if let Some(HandlerError::Crashed(_)) = e {
                    assert_eq!(i, d.handled - 1, "a crash ends the call: {d:?}");
                }
                if let Some(HandlerError::Failed(m) | HandlerError::Crashed(m)) = e {
                    assert!(m.len() <= 2 * MAX_ERROR + 512, "an error of {} bytes", m.len());
                }
                outcomes.push(outcome(e));
            }
            assert!(errors.next().is_none(), "errors past what was handled: {d:?}");
        }
        for line in p.log.lines() {
            assert!(line.len() <= 200 + CUT_NOTE, "a log line of {} bytes", line.len());
        }
        let crashed = outcomes.iter().filter(|o| **o == "crashed").count() as u64;
        assert!(crashed <= traps(p.stats()).iter().sum(), "each skipped item is a counted trap");
        outcomes
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn random_scripts_never_break_the_hosts_bounds(
            steps in prop::collection::vec(step(), 0..8),
            kinds in prop::collection::vec(0u8..4, 1..=ITEMS),
        ) {
            let outcomes = run(steps, &kinds);
            prop_assert_eq!(outcomes.len(), kinds.len(), "each item counted exactly once");
        }
    }
}

/// The host's own log (`tracing`), captured as JSON lines for the whole
/// test binary; tests pick their lines by the plugin's name.
mod traced {
    use super::*;

    #[derive(Debug, Clone)]
    pub struct Line {
        pub level: String,
        pub message: String,
        pub fields: serde_json::Map<String, Value>,
    }

    impl Line {
        pub fn field(&self, name: &str) -> Option<&str> {
            self.fields.get(name).and_then(Value::as_str)
        }
    }

    static BUFFER: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

    struct Capture;

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            BUFFER.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    pub fn init() {
        static INIT: OnceLock<()> = OnceLock::new();
        INIT.get_or_init(|| {
            tracing_subscriber::fmt()
                .json()
                .with_max_level(tracing::Level::INFO)
                .with_writer(|| Capture)
                .try_init()
                .expect("the only subscriber of this binary");
        });
    }

    /// Every captured line `keep` accepts.
    pub fn lines(keep: impl Fn(&Line) -> bool) -> Vec<Line> {
        let text = String::from_utf8_lossy(&BUFFER.lock().unwrap()).into_owned();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| {
                let mut fields = v.get("fields")?.as_object()?.clone();
                let message = fields.remove("message")?.as_str()?.to_string();
                Some(Line { level: v.get("level")?.as_str()?.to_string(), message, fields })
            })
            .filter(|l| keep(l))
            .collect()
    }
}
