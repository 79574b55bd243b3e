//! The process-wide wasm engine: compile, cache, type-check, pre-instantiate.
//!
//! This module owns the one `wasmtime::Engine` (component model, fuel,
//! epoch interruption driven by one ticker thread), the compile cache
//! (in memory by content hash, and on disk so a restart does not
//! recompile), one `Linker` per set of grants, and the checks that turn a
//! bad file into a [`PluginError`] naming the plugin and the file.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ComponentExportIndex, HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::bindings::{BATCH_EXPORT, DELIVERY, ON_BATCH, PluginPre, add_delivery_to_linker, informer_host};
use super::handler::WasmHandler;
use super::log_budget::LogBudget;
use super::sandbox::{PluginShared, Sandbox};
use super::{CacheView, Grants, PluginError, PluginInfo, PluginSpec, PluginStats};

/// The WIT world every plugin implements.
pub const WORLD: &str = "informer-host:plugin/plugin@0.1.0";
/// `plugin` with the `on-batch` fast path (what the Rust SDK builds).
pub const BATCHED_WORLD: &str = "informer-host:plugin/batched-plugin@0.1.0";
const EXPORT: &str = "informer-host:plugin/resource-event-handler";
pub(crate) const TYPES: &str = "informer-host:plugin/types";
pub(crate) const LOG: &str = "informer-host:plugin/log";
pub(crate) const CACHE: &str = "informer-host:plugin/cache";

/// How often the epoch advances; deadlines are rounded up to it.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Compiled components kept in memory by content hash, beyond those loaded
/// plugins hold themselves: a tenant that churns digests must not grow the
/// host with every version it ever loaded (or failed to). The oldest goes
/// first; a loaded plugin keeps its own, and the disk cache has them all.
const MAX_COMPILED_IN_MEMORY: usize = 256;

/// The compiled components by content hash, oldest first.
#[derive(Default)]
struct Compiled {
    by_hash: HashMap<String, Component>,
    order: std::collections::VecDeque<String>,
}

impl Compiled {
    fn get(&self, hash: &str) -> Option<&Component> {
        self.by_hash.get(hash)
    }

    fn insert(&mut self, hash: String, component: Component) {
        if self.by_hash.insert(hash.clone(), component).is_none() {
            self.order.push_back(hash);
        }
        while self.order.len() > MAX_COMPILED_IN_MEMORY {
            if let Some(oldest) = self.order.pop_front() {
                self.by_hash.remove(&oldest);
            }
        }
    }
}

struct Inner {
    engine: Engine,
    cache_dir: Option<PathBuf>,
    cache_max_bytes: u64,
    compiled: Mutex<Compiled>,
    linkers: Mutex<HashMap<Grants, Arc<Linker<Sandbox>>>>,
    ticker: Arc<Ticker>,
}

/// Keeps the epoch ticker running; every runtime, loaded plugin and
/// handler holds one, so deadlines are enforced as long as anything can
/// still call into wasm.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    /// Reclaims the instances of idle handlers (the runtime's one reaper:
    /// whatever holds the ticker may register with it).
    pub(crate) reaper: Arc<super::idle::Reaper>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The process-wide engine. Cheap to clone.
///
/// ```no_run
/// use informer_host::plugin::{PluginRuntime, PluginSpec, RuntimeConfig};
/// let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
/// let plugin = rt.load(PluginSpec::new("event-log", "event_log.wasm")).unwrap();
/// println!("{} compiled in {:?}", plugin.info.name, plugin.info.compile_time);
/// ```
#[derive(Clone)]
pub struct PluginRuntime {
    inner: Arc<Inner>,
}

/// A compiled, type-checked plugin whose `init` ran once successfully.
pub struct LoadedPlugin {
    pub info: PluginInfo,
    pub spec: PluginSpec,
    pub stats: Arc<PluginStats>,
    pre: PluginPre<Sandbox>,
    /// `batch-handler.on-batch`, when the component exports it.
    on_batch: Option<ComponentExportIndex>,
    engine: Engine,
    ticker: Arc<Ticker>,
}

impl PluginRuntime {
    pub fn new(config: crate::plugin::RuntimeConfig) -> Result<Self, PluginError> {
        let mut c = Config::new();
        c.wasm_component_model(true).consume_fuel(true).epoch_interruption(true);
        // `perf record` can name plugin functions when asked: the host writes
        // /tmp/perf-<pid>.map as it compiles.
        if std::env::var_os("INFORMER_WASM_PERFMAP").is_some() {
            c.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&c).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.weak();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("wasm-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        match engine.upgrade() {
                            Some(e) => e.increment_epoch(),
                            None => return,
                        }
                    }
                })
                .map_err(|e| PluginError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        }
        if let Some(dir) = &config.cache_dir {
            std::fs::create_dir_all(dir)
                .map_err(|e| PluginError::Engine(format!("cannot create cache dir {}: {e}", dir.display())))?;
        }
        Ok(PluginRuntime {
            inner: Arc::new(Inner {
                engine,
                cache_dir: config.cache_dir,
                cache_max_bytes: config.cache_max_bytes,
                compiled: Mutex::default(),
                linkers: Mutex::new(HashMap::new()),
                ticker: Arc::new(Ticker { stop, reaper: Arc::default() }),
            }),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The handlers' instances: resident, idle, reclaimed so far.
    pub fn instances(&self) -> super::idle::InstanceCounts {
        self.inner.ticker.reaper.counts()
    }

    /// Keeps the epoch ticker running while an instance of this runtime
    /// lives.
    pub(crate) fn ticker(&self) -> Arc<Ticker> {
        self.inner.ticker.clone()
    }

    /// The linker for plugins with `grants` (handlers and controllers: an
    /// import a component does not have is never used).
    pub(crate) fn linker(&self, grants: &Grants) -> Result<Arc<Linker<Sandbox>>, PluginError> {
        let mut linkers = self.inner.linkers.lock();
        if let Some(l) = linkers.get(grants) {
            return Ok(l.clone());
        }
        let engine_err = |e: wasmtime::Error| PluginError::Engine(format!("{e:#}"));
        let mut l = Linker::new(&self.inner.engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut l).map_err(engine_err)?;
        super::waits::shadow_monotonic_clock(&mut l).map_err(engine_err)?;
        informer_host::plugin::types::add_to_linker::<_, HasSelf<_>>(&mut l, |s| s).map_err(engine_err)?;
        add_delivery_to_linker(&mut l).map_err(engine_err)?;
        if grants.log {
            informer_host::plugin::log::add_to_linker::<_, HasSelf<_>>(&mut l, |s| s).map_err(engine_err)?;
        }
        if grants.cache {
            informer_host::plugin::cache::add_to_linker::<_, HasSelf<_>>(&mut l, |s| s).map_err(engine_err)?;
        }
        crate::controller::bindings::add_controller_imports(&mut l, grants).map_err(engine_err)?;
        let l = Arc::new(l);
        linkers.insert(grants.clone(), l.clone());
        Ok(l)
    }

    /// Compiles `bytes`, or takes the compiled form from memory or disk.
    pub(crate) fn compile(
        &self,
        spec: &PluginSpec,
        bytes: &[u8],
        hash: &str,
    ) -> Result<(Component, bool), PluginError> {
        if let Some(c) = self.inner.compiled.lock().get(hash) {
            return Ok((c.clone(), true));
        }
        let engine = &self.inner.engine;
        let cached_file = self.inner.cache_dir.as_ref().map(|d| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut h);
            d.join(format!("{hash}-{:016x}.cwasm", h.finish()))
        });
        if let Some(path) = cached_file.as_ref().filter(|p| p.exists()) {
            // SAFETY: the file was written by `Component::serialize` of an
            // engine with the same compatibility hash (it is in the name),
            // into a cache directory this process owns.
            match unsafe { Component::deserialize_file(engine, path) } {
                Ok(c) => {
                    crate::lru_dir::touch(path);
                    self.inner.compiled.lock().insert(hash.to_string(), c.clone());
                    return Ok((c, true));
                }
                Err(e) => {
                    tracing::warn!(plugin = %spec.name, "ignoring unusable compile cache {}: {e:#}", path.display())
                }
            }
        }
        let c = Component::new(engine, bytes).map_err(|e| PluginError::NotAComponent {
            plugin: spec.name.clone(),
            file: spec.wasm.clone(),
            message: format!("{e:#}"),
        })?;
        if let Some(path) = &cached_file {
            match c.serialize() {
                Ok(b) => match write_atomically(path, &b) {
                    Ok(()) => self.evict_compiled(path),
                    Err(e) => {
                        tracing::warn!(plugin = %spec.name, "cannot write compile cache {}: {e}", path.display())
                    }
                },
                Err(e) => tracing::warn!(plugin = %spec.name, "cannot serialize component: {e:#}"),
            }
        }
        self.inner.compiled.lock().insert(hash.to_string(), c.clone());
        Ok((c, false))
    }

    /// Keeps the compile cache under its bound, never removing `written`.
    /// Files of other engine versions are never read, so they go first.
    fn evict_compiled(&self, written: &Path) {
        if let Some(dir) = written.parent() {
            crate::lru_dir::evict(dir, self.inner.cache_max_bytes, written, |name| name.ends_with(".cwasm"));
        }
    }

    /// Reads, compiles (or loads from cache) and type-checks a plugin, then
    /// instantiates it once and calls `init` to prove it works.
    pub fn load(&self, spec: PluginSpec) -> Result<LoadedPlugin, PluginError> {
        let bytes = std::fs::read(&spec.wasm).map_err(|e| PluginError::Io {
            plugin: spec.name.clone(),
            file: spec.wasm.clone(),
            message: e.to_string(),
        })?;
        self.load_bytes(spec, &bytes)
    }

    /// Like [`PluginRuntime::load`] for bytes already in memory (uploads).
    pub fn load_bytes(&self, spec: PluginSpec, bytes: &[u8]) -> Result<LoadedPlugin, PluginError> {
        check_preamble(&spec, bytes)?;
        let hash = hex::encode(Sha256::digest(bytes));
        let started = Instant::now();
        let (component, from_cache) = self.compile(&spec, bytes, &hash)?;
        let compile_time = started.elapsed();
        let engine = &self.inner.engine;
        let wrong =
            |message: String| PluginError::WrongWorld { plugin: spec.name.clone(), file: spec.wasm.clone(), message };
        let ty = component.component_type();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        if !exports.iter().any(|e| e.starts_with(EXPORT)) {
            return Err(wrong(format!("missing export {EXPORT}@0.1.0; it exports [{}]", exports.join(", "))));
        }
        check_imports(&spec, &imports, "", |import| {
            if import.starts_with("wasi:") || import.starts_with(TYPES) || import == DELIVERY {
                Some(true)
            } else if import.starts_with(LOG) {
                Some(spec.grants.log)
            } else if import.starts_with(CACHE) {
                Some(spec.grants.cache)
            } else {
                None
            }
        })?;
        let linker = self.linker(&spec.grants)?;
        let instance_pre = linker.instantiate_pre(&component).map_err(|e| wrong(format!("{e:#}")))?;
        let pre = PluginPre::new(instance_pre).map_err(|e| wrong(format!("{e:#}")))?;
        let on_batch = component
            .get_export_index(None, BATCH_EXPORT)
            .and_then(|iface| component.get_export_index(Some(&iface), ON_BATCH));
        let size_bytes = bytes.len() as u64;
        let info = PluginInfo {
            name: spec.name.clone(),
            file: spec.wasm.clone(),
            size_bytes,
            hash,
            world: if on_batch.is_some() { BATCHED_WORLD } else { WORLD }.to_string(),
            imports,
            compile_time,
            from_cache,
            instantiate_time: Duration::ZERO,
        };
        let mut loaded = LoadedPlugin {
            info,
            spec,
            stats: Arc::new(PluginStats::default()),
            pre,
            on_batch,
            engine: engine.clone(),
            ticker: self.inner.ticker.clone(),
        };
        // Prove the plugin starts: instantiate and init once, then drop it.
        let probe = loaded.handler(None)?;
        loaded.info.instantiate_time = probe.instantiate_time();
        Ok(loaded)
    }
}

/// Writes `bytes` to `path` through a temporary file of its own in the same
/// directory and an atomic rename, so concurrent writers of the same entry
/// (two swaps to one version) never see or clobber each other's halves.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Checks that every import of a component is one the host provides
/// (`granted` answers `None` for an unknown one) and that the plugin was
/// granted it. `to` completes "which no host provides" (e.g. " to
/// controllers").
pub(crate) fn check_imports(
    spec: &PluginSpec,
    imports: &[String],
    to: &str,
    granted: impl Fn(&str) -> Option<bool>,
) -> Result<(), PluginError> {
    for import in imports {
        match granted(import) {
            Some(true) => {}
            Some(false) => {
                return Err(PluginError::NotGranted {
                    plugin: spec.name.clone(),
                    file: spec.wasm.clone(),
                    import: import.clone(),
                });
            }
            None => {
                return Err(PluginError::WrongWorld {
                    plugin: spec.name.clone(),
                    file: spec.wasm.clone(),
                    message: format!("imports {import}, which no host provides{to}"),
                });
            }
        }
    }
    Ok(())
}

pub(crate) fn check_preamble(spec: &PluginSpec, bytes: &[u8]) -> Result<(), PluginError> {
    let err = |message: &str| PluginError::NotAComponent {
        plugin: spec.name.clone(),
        file: spec.wasm.clone(),
        message: message.to_string(),
    };
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(err("the file does not start with the wasm magic number \\0asm"));
    }
    match bytes[4..8] {
        [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        [0x01, 0x00, 0x00, 0x00] => {
            Err(err("it is a core wasm module; build for wasm32-wasip2 or wrap it with `wasm-tools component new`"))
        }
        _ => Err(err("unknown wasm binary version or layer")),
    }
}

impl LoadedPlugin {
    /// A handler for the engine with its own instance. `cache` is what the
    /// `cache` import reads (`None`: an empty cache).
    pub fn handler(&self, cache: Option<CacheView>) -> Result<WasmHandler, PluginError> {
        let shared = Arc::new(PluginShared {
            name: self.spec.name.as_str().into(),
            tenant: self.spec.tenant.clone(),
            stats: self.stats.clone(),
            log_sink: self.spec.log_sink.clone(),
            cache,
            clocks: self.spec.grants.clocks,
            memory_bytes: self.spec.limits.memory_bytes,
            log_granted: self.spec.grants.log,
            log: LogBudget::new(self.spec.limits.log.clone()),
            controller: None,
        });
        // wasmtime-wasi's synchronous host calls (a guest writing stderr in
        // `init`) block on tokio, which panics on a thread that is driving
        // async tasks: instantiate on a plain thread instead.
        std::thread::scope(|s| {
            s.spawn(|| {
                WasmHandler::new(
                    (self.engine.clone(), self.ticker.clone()),
                    (self.pre.clone(), self.on_batch),
                    shared,
                    self.spec.clone(),
                    self.info.hash.clone(),
                )
            })
            .join()
            .unwrap_or_else(|_| Err(PluginError::Engine("instantiation thread panicked".into())))
        })
        .inspect(WasmHandler::register_idle)
    }

    /// The component file.
    pub fn file(&self) -> &Path {
        &self.spec.wasm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The empty component, in binary (the `wat` feature is not built).
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

    #[test]
    fn compiled_components_in_memory_are_bounded_oldest_first() {
        let mut config = Config::new();
        config.wasm_component_model(true);
        let engine = Engine::new(&config).unwrap();
        let component = Component::new(&engine, EMPTY_COMPONENT).unwrap();
        let mut compiled = Compiled::default();
        for i in 0..MAX_COMPILED_IN_MEMORY + 10 {
            compiled.insert(format!("h{i}"), component.clone());
        }
        // Inserting a hash again does not count twice.
        compiled.insert(format!("h{}", MAX_COMPILED_IN_MEMORY + 9), component.clone());
        assert_eq!((compiled.by_hash.len(), compiled.order.len()), (MAX_COMPILED_IN_MEMORY, MAX_COMPILED_IN_MEMORY));
        assert!(compiled.get("h9").is_none(), "the oldest went first");
        assert!(compiled.get("h10").is_some() && compiled.get(&format!("h{}", MAX_COMPILED_IN_MEMORY + 9)).is_some());
    }
}

#[cfg(test)]
mod compile_cache_tests {
    use super::*;
    use crate::plugin::{PluginSpec, RuntimeConfig};

    /// The empty component with a custom section holding `tag`: a distinct
    /// component (and hash) per tag.
    fn component(tag: u8) -> Vec<u8> {
        let mut bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
        bytes.extend_from_slice(&[0x00, 3, 1, b't', tag]);
        bytes
    }

    fn cached_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".cwasm"))
            .collect();
        names.sort();
        names
    }

    /// A tenant loading new components again and again cannot fill the
    /// host's disk with compiled code: past the bound, the files used
    /// least recently go, and a reused one stays.
    #[test]
    fn the_compile_cache_on_disk_keeps_the_most_recently_used_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let compile = |runtime: &PluginRuntime, tag: u8| {
            let bytes = component(tag);
            let hash = hex::encode(Sha256::digest(&bytes));
            runtime.compile(&PluginSpec::new(format!("p{tag}"), "p.wasm"), &bytes, &hash).unwrap();
            hash
        };
        let unbounded =
            PluginRuntime::new(RuntimeConfig { cache_dir: Some(dir.path().into()), ..Default::default() }).unwrap();
        let first = compile(&unbounded, 0);
        let one_file = std::fs::metadata(dir.path().join(&cached_files(dir.path())[0])).unwrap().len();

        // Room for three compiled files.
        let bounded = PluginRuntime::new(RuntimeConfig {
            cache_dir: Some(dir.path().into()),
            cache_max_bytes: 3 * one_file + 10,
        })
        .unwrap();
        let hashes: Vec<String> = (1..=2).map(|tag| compile(&bounded, tag)).collect();
        // A restart reading the first one again marks it used.
        std::thread::sleep(Duration::from_millis(20));
        let restarted = PluginRuntime::new(RuntimeConfig {
            cache_dir: Some(dir.path().into()),
            cache_max_bytes: 3 * one_file + 10,
        })
        .unwrap();
        let (_, from_cache) = restarted.compile(&PluginSpec::new("p0", "p.wasm"), &component(0), &first).unwrap();
        assert!(from_cache);
        let mut newer = Vec::new();
        for tag in 3..=4 {
            std::thread::sleep(Duration::from_millis(20));
            newer.push(compile(&restarted, tag));
        }
        let left = cached_files(dir.path());
        let kept = |hash: &str| left.iter().any(|n| n.starts_with(hash));
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(kept(&first) && kept(&newer[0]) && kept(&newer[1]), "{left:?}");
        assert!(!kept(&hashes[0]) && !kept(&hashes[1]), "{left:?}");
    }
}
