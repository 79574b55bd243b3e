//! A controller for the host's tests: each reconcile logs `reconcile <key>`
//! and then does what its config says, so a test can drive every outcome.
//!
//! Config (all optional):
//! - `fail`: `{"<key>": n}`: the first `n` reconciles of the key return an
//!   error.
//! - `panic`: `{"<key>": n}`: the first `n` reconciles of the key panic
//!   (the instance traps; the count lives in the host's view only through
//!   the log, since a trapped instance's memory is gone: so `n` counts per
//!   instance, and any `n > 0` means "always").
//! - `spin`: a key whose reconcile loops until the host stops it.
//! - `requeue_after_ms`: `{"<key>": ms}`: answer `requeue-after(ms)`.
//! - `label`: when the primary object (read from informer `informer`,
//!   default `cms`) lacks the label `reconciled=yes`, write it with a merge
//!   patch, or with `replace` when `replace` is true (a stale
//!   resourceVersion then conflicts). Idempotent, as a level-driven
//!   controller must be: the update it causes reconciles to nothing.
//! - `write_to`: a namespace: instead, create a ConfigMap named after the
//!   key there (for tests of the tenant's namespaces).
//! - `flood`: `{"key": k, "count": n, "key_bytes": b}`: reconciling `k`
//!   calls `queue.enqueue` `n` times with distinct keys of `b` bytes (for
//!   tests of the host's bounds on a guest's enqueues).
//! - `map_keys`: `n`: `map` returns `n` distinct keys for every object,
//!   `<namespace>/mapped-<name>-<i>` (for tests of the host's bounds on
//!   the keys a guest maps).
//! - `map_stall`: `map` sleeps until the host ends the call (it holds its
//!   delivery worker without burning a core).

use std::collections::BTreeMap;

use informer_guest::controller::kube::{self, Patch, Target};
use informer_guest::controller::{Action, Reconciler, queue, stores};
use informer_guest::{Config, info};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Settings {
    fail: BTreeMap<String, u32>,
    panic: BTreeMap<String, u32>,
    spin: Option<String>,
    requeue_after_ms: BTreeMap<String, u64>,
    label: bool,
    replace: bool,
    informer: String,
    write_to: Option<String>,
    flood: Option<Flood>,
    map_keys: u32,
    map_stall: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Flood {
    key: String,
    count: u32,
    key_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            fail: BTreeMap::new(),
            panic: BTreeMap::new(),
            spin: None,
            requeue_after_ms: BTreeMap::new(),
            label: false,
            replace: false,
            informer: "cms".into(),
            write_to: None,
            flood: None,
            map_keys: 0,
            map_stall: false,
        }
    }
}

#[derive(Default)]
struct TestController {
    settings: Settings,
    seen: BTreeMap<String, u32>,
}

impl Reconciler for TestController {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        self.settings = config.parse()?;
        Ok(())
    }

    fn map(&mut self, _informer: &str, obj: &informer_guest::Object) -> Vec<String> {
        if self.settings.map_stall {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name());
        (0..self.settings.map_keys).map(|i| format!("{ns}/mapped-{name}-{i}")).collect()
    }

    fn reconcile(&mut self, key: &str) -> Result<Action, String> {
        let n = self.seen.entry(key.to_string()).or_default();
        *n += 1;
        let n = *n;
        info!("reconcile {key}");
        let s = &self.settings;
        if s.panic.get(key).is_some_and(|&max| n <= max) {
            panic!("told to panic on {key}");
        }
        if s.spin.as_deref() == Some(key) {
            let mut spins: u64 = 0;
            loop {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
        }
        if let Some(f) = s.flood.as_ref().filter(|f| f.key == key) {
            for i in 0..f.count {
                let name = format!("flood-{i}-");
                queue::enqueue(
                    &format!("{name}{}", "x".repeat(f.key_bytes.saturating_sub(name.len()))),
                    std::time::Duration::ZERO,
                );
            }
            info!("flooded {key}");
        }
        if s.fail.get(key).is_some_and(|&max| n <= max) {
            return Err(format!("told to fail {key} ({n})"));
        }
        if let Some(ns) = &s.write_to {
            let name = key.rsplit('/').next().unwrap_or(key);
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns, "name": name}});
            return match kube::create(cm) {
                Ok(_) => Ok(Action::Done),
                Err(e) if e.is_already_exists() => Ok(Action::Done),
                Err(e) => {
                    info!("create in {ns} failed: {e}");
                    Err(format!("create in {ns}: {e}"))
                }
            };
        }
        if s.label {
            let Some(obj) = stores::get(&s.informer, key)? else { return Ok(Action::Done) };
            if obj.label("reconciled").as_deref() == Some("yes") {
                return Ok(Action::Done);
            }
            let written = if s.replace {
                let mut value: serde_json::Value = serde_json::from_str(&obj.json()).map_err(|e| e.to_string())?;
                value["metadata"]["labels"]["reconciled"] = json!("yes");
                kube::replace(value)
            } else {
                kube::patch(&Target::of(&obj), Patch::merge(json!({"metadata": {"labels": {"reconciled": "yes"}}})))
            };
            match written {
                Ok(_) => info!("wrote {key}"),
                Err(e) => {
                    info!("write {key} failed: {e}");
                    return Err(e.to_string());
                }
            }
        }
        if let Some(ms) = s.requeue_after_ms.get(key) {
            return Ok(Action::RequeueAfter(std::time::Duration::from_millis(*ms)));
        }
        Ok(Action::Done)
    }
}

informer_guest::export_controller!(TestController);
