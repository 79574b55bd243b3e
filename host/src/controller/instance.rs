//! Loading a controller component and running its instances.
//!
//! This module owns a controller's instance life cycle: type-check the
//! component against the `controller` world and its grants, instantiate
//! from the `InstancePre` and `init`, arm fuel, the deadline and the log
//! budget before every `reconcile` or `map`, and turn a trap into
//! [`ReconcileError::Trapped`] with its cause. A trapped instance is never
//! called again: the worker that owned it makes a fresh one. It may not
//! touch the workqueue: what a reconcile's outcome means is the runner's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::{Engine, Store};

use super::ControllerCtx;
use super::bindings::{Controller, ControllerPre, KUBE, Outcome, QUEUE, RECONCILER_EXPORT, STORES};
use crate::informer::ObjectRef;
use crate::plugin::bindings::MAX_ERROR_BYTES;
use crate::plugin::handler::{call_budget, describe_trap};
use crate::plugin::log_budget::{LogBudget, sanitize};
use crate::plugin::runtime::{CACHE, LOG, TYPES, Ticker, check_imports, check_preamble};
use crate::plugin::sandbox::arm_call;
use crate::plugin::sandbox::{PluginShared, Sandbox, new_store};
use crate::plugin::{PluginError, PluginInfo, PluginRuntime, PluginSpec, PluginStats};

/// The world every controller targets.
pub const CONTROLLER_WORLD: &str = "informer-host:plugin/controller@0.1.0";

/// `init` gets this many times a call's fuel and deadline.
const INIT_FACTOR: u32 = 10;

/// Why a reconcile (or a `map`) did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// The guest returned an error.
    #[error("{0}")]
    Failed(String),
    /// The instance trapped (panic, fuel, deadline, memory); it is gone.
    #[error("trapped: {0}")]
    Trapped(String),
}

/// A compiled, type-checked controller whose `init` ran once successfully.
pub struct LoadedController {
    pub info: PluginInfo,
    pub spec: PluginSpec,
    pub stats: Arc<PluginStats>,
    pre: ControllerPre<Sandbox>,
    engine: Engine,
    ticker: Arc<Ticker>,
    /// The per-second log budget every instance shares: instances are made
    /// per worker, for the mapper, and afresh after every trap.
    log: LogBudget,
}

impl PluginRuntime {
    /// Reads, compiles (or takes from the cache) and type-checks a
    /// controller, then instantiates it once with `ctx` and calls `init` to
    /// prove it works.
    pub fn load_controller(&self, spec: PluginSpec, ctx: Arc<ControllerCtx>) -> Result<LoadedController, PluginError> {
        let bytes = std::fs::read(&spec.wasm).map_err(|e| PluginError::Io {
            plugin: spec.name.clone(),
            file: spec.wasm.clone(),
            message: e.to_string(),
        })?;
        self.load_controller_bytes(spec, &bytes, ctx)
    }

    /// Like [`PluginRuntime::load_controller`] for bytes in memory.
    pub fn load_controller_bytes(
        &self,
        spec: PluginSpec,
        bytes: &[u8],
        ctx: Arc<ControllerCtx>,
    ) -> Result<LoadedController, PluginError> {
        check_preamble(&spec, bytes)?;
        let hash = hex::encode(Sha256::digest(bytes));
        let started = Instant::now();
        let (component, from_cache) = self.compile(&spec, bytes, &hash)?;
        let compile_time = started.elapsed();
        let engine = self.engine();
        let wrong =
            |message: String| PluginError::WrongWorld { plugin: spec.name.clone(), file: spec.wasm.clone(), message };
        let ty = component.component_type();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        if !exports.iter().any(|e| e.starts_with(RECONCILER_EXPORT)) {
            return Err(wrong(format!(
                "missing export {RECONCILER_EXPORT}@0.1.0 (world controller); it exports [{}]",
                exports.join(", ")
            )));
        }
        check_imports(&spec, &imports, " to controllers", |import| {
            if import.starts_with("wasi:") || import.starts_with(TYPES) || import.starts_with(QUEUE) {
                Some(true)
            } else if import.starts_with(LOG) {
                Some(spec.grants.log)
            } else if import.starts_with(CACHE) || import.starts_with(STORES) {
                Some(spec.grants.cache)
            } else if import.starts_with(KUBE) {
                Some(spec.grants.kube)
            } else {
                None
            }
        })?;
        let linker = self.linker(&spec.grants)?;
        let instance_pre = linker.instantiate_pre(&component).map_err(|e| wrong(format!("{e:#}")))?;
        let pre = ControllerPre::new(instance_pre).map_err(|e| wrong(format!("{e:#}")))?;
        let info = PluginInfo {
            name: spec.name.clone(),
            file: spec.wasm.clone(),
            size_bytes: bytes.len() as u64,
            hash,
            world: CONTROLLER_WORLD.to_string(),
            imports,
            compile_time,
            from_cache,
            instantiate_time: Duration::ZERO,
        };
        let spec_log = spec.limits.log.clone();
        let mut loaded = LoadedController {
            info,
            spec,
            stats: Arc::new(PluginStats::default()),
            pre,
            engine: engine.clone(),
            ticker: self.ticker(),
            log: LogBudget::new(spec_log),
        };
        let t = Instant::now();
        drop(loaded.instance(ctx)?);
        loaded.info.instantiate_time = t.elapsed();
        Ok(loaded)
    }
}

impl LoadedController {
    /// A fresh instance, `init`ed, whose imports serve `ctx`.
    pub fn instance(&self, ctx: Arc<ControllerCtx>) -> Result<ControllerInstance, PluginError> {
        let shared = Arc::new(PluginShared {
            name: self.spec.name.as_str().into(),
            tenant: self.spec.tenant.clone(),
            stats: self.stats.clone(),
            log_sink: self.spec.log_sink.clone(),
            cache: ctx.primary.clone(),
            clocks: self.spec.grants.clocks,
            memory_bytes: self.spec.limits.memory_bytes,
            log_granted: self.spec.grants.log,
            log: self.log.another_instance(),
            controller: Some(ctx),
        });
        // As for handlers: wasmtime-wasi's synchronous host calls block on
        // tokio, which panics on a thread driving async tasks.
        std::thread::scope(|s| {
            s.spawn(|| self.start(shared))
                .join()
                .unwrap_or_else(|_| Err(PluginError::Engine("instantiation thread panicked".into())))
        })
    }

    fn start(&self, shared: Arc<PluginShared>) -> Result<ControllerInstance, PluginError> {
        let mut store = new_store(&self.engine, shared);
        arm(&mut store, &self.spec, INIT_FACTOR);
        let trap = |e: wasmtime::Error, store: &Store<Sandbox>| PluginError::InitTrap {
            plugin: self.spec.name.clone(),
            file: self.spec.wasm.clone(),
            message: describe_trap(&e, store, &self.spec.limits, INIT_FACTOR, true),
        };
        let instance = match self.pre.instance_pre().instantiate(&mut store) {
            Ok(i) => i,
            Err(e) => return Err(trap(e, &store)),
        };
        let bindings = Controller::new(&mut store, &instance).map_err(|e| PluginError::WrongWorld {
            plugin: self.spec.name.clone(),
            file: self.spec.wasm.clone(),
            message: format!("{e:#}"),
        })?;
        match bindings.informer_host_plugin_reconciler().call_init(&mut store, &self.spec.config_json) {
            Ok(Ok(())) => {}
            Ok(Err(message)) => {
                return Err(PluginError::Init {
                    plugin: self.spec.name.clone(),
                    file: self.spec.wasm.clone(),
                    message: sanitize(&message, MAX_ERROR_BYTES).into_owned(),
                });
            }
            Err(e) => return Err(trap(e, &store)),
        }
        Ok(ControllerInstance {
            store,
            bindings,
            spec: self.spec.clone(),
            stats: self.stats.clone(),
            _ticker: self.ticker.clone(),
        })
    }
}

/// Arms fuel, the deadline and the log budget for a call; returns the fuel.
fn arm(store: &mut Store<Sandbox>, spec: &PluginSpec, factor: u32) -> u64 {
    let (fuel, ticks) = call_budget(&spec.limits, factor);
    arm_call(&mut *store, fuel, ticks);
    store.data_mut().enqueues = 0;
    fuel
}

/// One live instance of a controller. Not shared: a worker owns it.
pub struct ControllerInstance {
    store: Store<Sandbox>,
    bindings: Controller,
    spec: PluginSpec,
    stats: Arc<PluginStats>,
    _ticker: Arc<Ticker>,
}

impl ControllerInstance {
    /// Calls into the instance with a call's limits.
    fn call<T>(
        &mut self,
        f: impl FnOnce(&mut Store<Sandbox>, &Controller) -> wasmtime::Result<T>,
    ) -> Result<T, ReconcileError> {
        let fuel = arm(&mut self.store, &self.spec, 1);
        let started = Instant::now();
        let r = f(&mut self.store, &self.bindings);
        self.stats.observe_call(started.elapsed().as_secs_f64());
        let left = self.store.get_fuel().unwrap_or(0);
        self.stats.fuel_consumed.fetch_add(fuel.saturating_sub(left), Ordering::Relaxed);
        r.map_err(|e| {
            self.stats.restarts.fetch_add(1, Ordering::Relaxed);
            ReconcileError::Trapped(describe_trap(&e, &self.store, &self.spec.limits, 1, true))
        })
    }

    /// `reconcile(key)`. After `Err(Trapped)` the instance must be dropped.
    pub fn reconcile(&mut self, key: &str) -> Result<Outcome, ReconcileError> {
        match self.call(|store, c| c.informer_host_plugin_reconciler().call_reconcile(store, key))? {
            Ok(action) => Ok(action.into()),
            Err(message) => Err(ReconcileError::Failed(sanitize(&message, MAX_ERROR_BYTES).into_owned())),
        }
    }

    /// `map(informer, obj)`: the primary keys `obj` of a secondary
    /// informer maps to. After `Err(Trapped)` the instance must be dropped.
    pub fn map(&mut self, informer: &str, obj: &ObjectRef) -> Result<Vec<String>, ReconcileError> {
        self.call(|store, c| {
            let r = store.data_mut().push_object(obj.clone())?;
            c.informer_host_plugin_reconciler().call_map(store, informer, r)
        })
    }
}
