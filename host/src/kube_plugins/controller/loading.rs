//! Loading what a `Plugin` says: a handler into the registry, a controller
//! as a runner over its informers; swapping a controller's component with
//! the runner's zero-loss hand-over.

use std::path::PathBuf;
use std::sync::Arc;

use kube::ResourceExt;

use super::{Loaded, PluginResources, registry_name};
use crate::controller::ControllerRunner;
use crate::informer::{NAMESPACE_INDEX, ObjectRef};
use crate::kube_plugins::component::Fetched;
use crate::kube_plugins::crd::{Plugin, WatchSpec};
use crate::kube_plugins::policy::{ControllerSettings, Effective, Refusal};
use crate::kube_plugins::reconcilers::{self, Assembly};
use crate::plugin::{OnTrap, PluginSpec as RuntimeSpec};
use crate::registry::{PluginDef, TenantPolicy as RegistryTenant};
use crate::workqueue::TokenBucket;

impl PluginResources {
    /// The write bucket the controllers of `namespace` share, at `qps`
    /// (burst twice that, as client-go's 5/10): the same bucket for every
    /// controller of the namespace while the rate stays the same.
    fn tenant_bucket(&self, namespace: &str, qps: u32) -> Arc<TokenBucket> {
        let mut buckets = self.tenant_buckets.lock();
        match buckets.get(namespace) {
            Some((rate, bucket)) if *rate == qps => bucket.clone(),
            _ => {
                let bucket = Arc::new(TokenBucket::new(f64::from(qps), 2 * qps as usize));
                buckets.insert(namespace.to_string(), (qps, bucket.clone()));
                bucket
            }
        }
    }

    /// The refusal of a Plugin past its tenant's `maxPlugins`, counted
    /// across the cluster: every replica ranks a namespace's Plugins the
    /// same way (oldest `creationTimestamp` first, then name; those being
    /// deleted do not count) and runs only the first `maxPlugins`, so N
    /// replicas cannot run N times the cap, and a cap lowered unloads the
    /// newest.
    pub(super) fn beyond_max_plugins(&self, key: &str, namespace: &str, effective: &Effective) -> Option<Refusal> {
        let max = effective.max_plugins?;
        let plugins = self.plugins.store().by_index(NAMESPACE_INDEX, namespace).ok()?;
        // Only the two timestamps are read; the rest of each object is
        // skipped, not built.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            creation_timestamp: Option<String>,
            deletion_timestamp: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Ranked {
            metadata: Meta,
        }
        let rank = |o: &ObjectRef| {
            let meta = o.parse::<Ranked>().ok()?.metadata;
            meta.deletion_timestamp.is_none().then(|| (meta.creation_timestamp, o.name().to_owned()))
        };
        let mine = rank(plugins.iter().find(|o| o.key() == key)?)?;
        let ahead = plugins.iter().filter(|o| o.key() != key).filter_map(rank).filter(|r| *r < mine).count();
        (ahead >= max).then(|| Refusal {
            reason: "TenantFull",
            message: format!(
                "TenantPolicy {:?} runs the {max} oldest Plugins of namespace {namespace:?} (maxPlugins), \
                 and {ahead} are older than this one",
                effective.policy
            ),
        })
    }

    /// The refusal of a plugin not running yet whose tenant already runs
    /// as many plugins as its policy allows. Checked before the component
    /// is fetched (a full tenant's plugins cost no pulls, no compiles) and
    /// again when it loads.
    pub(super) fn tenant_full(&self, key: &str, namespace: &str, effective: &Effective) -> Option<Refusal> {
        let max = effective.max_plugins?;
        let loaded = self.loaded.lock();
        if loaded.contains_key(key) {
            return None;
        }
        let running = loaded.keys().filter(|k| k.split_once('/').is_some_and(|(ns, _)| ns == namespace)).count();
        (running >= max).then(|| Refusal {
            reason: "TenantFull",
            message: format!(
                "tenant {namespace:?} already runs {running} plugin(s), the most TenantPolicy {:?} allows",
                effective.policy
            ),
        })
    }

    pub(super) async fn load(
        &self,
        key: &str,
        plugin: &Plugin,
        effective: &Effective,
        settings: String,
        fetched: Fetched,
    ) -> Result<String, (Refusal, bool)> {
        let namespace = plugin.namespace().unwrap_or_default();
        let name = registry_name(&namespace, &plugin.name_any());
        if let Some(refusal) = self.tenant_full(key, &namespace, effective) {
            // A deletion in the namespace requeues it.
            return Err((refusal, true));
        }
        if let Some(c) = &effective.controller {
            return self.load_controller(key, plugin, effective, c, settings, fetched).await;
        }
        let watch = self.acquire_watch(&namespace, &plugin.spec.watch);
        let ns = namespace.clone();
        self.registry.set_tenant(
            namespace.clone(),
            RegistryTenant {
                visibility: Arc::new(move |o: &crate::informer::Object| o.namespace() == Some(ns.as_str())),
                max_plugins: effective.max_plugins,
                fuel_per_call: None,
                deadline_per_call: None,
                memory_bytes: None,
                max_pending: None,
            },
        );
        let mut spec = RuntimeSpec::new(name.clone(), PathBuf::from(&fetched.origin));
        spec.tenant = Some(namespace.clone());
        spec.config_json = effective.config_json.clone();
        spec.limits = effective.limits.clone();
        spec.grants = effective.grants.clone();
        spec.on_trap = OnTrap::Continue;
        spec.log_sink = self.options.log_sink.clone();
        let def = PluginDef {
            spec,
            informer: watch.clone(),
            resync: effective.resync,
            on_swap: effective.on_swap,
            visibility: None,
            max_pending: effective.max_pending,
        };
        let registry = self.registry.clone();
        let bytes = fetched.bytes;
        let loaded = tokio::task::spawn_blocking(move || registry.load_bytes(def, &bytes)).await;
        match loaded {
            Ok(Ok(_)) => {
                tracing::info!(plugin = %name, digest = %fetched.digest, "loaded");
                let l = Loaded {
                    registry_name: name.clone(),
                    settings,
                    digest: fetched.digest,
                    watches: vec![watch],
                    runner: None,
                };
                self.loaded.lock().insert(key.to_string(), l);
                Ok(name)
            }
            Ok(Err(e)) => {
                self.release_watch(&watch);
                let full = matches!(e, crate::registry::RegistryError::TenantFull { .. });
                let reason = if full { "TenantFull" } else { "LoadFailed" };
                // A full tenant may have room later (a deletion requeues
                // the namespace); a component that fails to load does not
                // change until its spec does.
                Err((Refusal { reason, message: e.to_string() }, full))
            }
            Err(e) => {
                self.release_watch(&watch);
                Err((Refusal { reason: "LoadFailed", message: e.to_string() }, true))
            }
        }
    }

    /// Starts a controller: the informers of its watch and watches (shared
    /// with the namespace's other plugins), then its runner.
    async fn load_controller(
        &self,
        key: &str,
        plugin: &Plugin,
        effective: &Effective,
        controller: &ControllerSettings,
        settings: String,
        fetched: Fetched,
    ) -> Result<String, (Refusal, bool)> {
        let namespace = plugin.namespace().unwrap_or_default();
        let name = registry_name(&namespace, &plugin.name_any());
        let mut watches = vec![self.acquire_watch(&namespace, &plugin.spec.watch)];
        for w in &controller.watches {
            let spec = WatchSpec {
                api_version: w.api_version.clone(),
                kind: w.kind.clone(),
                label_selector: w.label_selector.clone(),
                field_selector: None,
                field_indexers: w.field_indexers.clone(),
            };
            watches.push(self.acquire_watch(&namespace, &spec));
        }
        let digest = fetched.digest.clone();
        let prepared = self.prepare_controller(&name, plugin, effective, controller, &watches, fetched).await;
        match prepared {
            // Ownership may have moved to another replica while the
            // component compiled: the key is not in `loaded` yet, so
            // `follow_ownership` could not stop it; it must not start here.
            Ok(runner) if !self.owns(key) => {
                runner.stop().await;
                watches.iter().for_each(|w| self.release_watch(w));
                Err((Refusal { reason: "NotOwned", message: "another replica owns it now".into() }, false))
            }
            Ok(mut runner) => {
                runner.run();
                tracing::info!(plugin = %name, %digest, workers = controller.max_concurrent_reconciles, "controller loaded");
                let l = Loaded { registry_name: name.clone(), settings, digest, watches, runner: Some(runner) };
                self.loaded.lock().insert(key.to_string(), l);
                Ok(name)
            }
            Err(refusal) => {
                watches.iter().for_each(|w| self.release_watch(w));
                Err((refusal, false))
            }
        }
    }

    /// Loads a controller's new component and lets it take over from the
    /// running one (the runner's zero-loss hand-over).
    pub(super) async fn swap_controller(
        &self,
        key: &str,
        plugin: &Plugin,
        effective: &Effective,
        fetched: Fetched,
    ) -> Result<(), (Refusal, bool)> {
        let controller = effective.controller.as_ref().expect("swap_controller is for controllers");
        let Some((name, watches)) = self.loaded.lock().get(key).map(|l| (l.registry_name.clone(), l.watches.clone()))
        else {
            return Err((Refusal { reason: "SwapFailed", message: "not running".into() }, true));
        };
        let digest = fetched.digest.clone();
        let mut next = self
            .prepare_controller(&name, plugin, effective, controller, &watches, fetched)
            .await
            .map_err(|r| (Refusal { reason: "SwapFailed", message: r.message }, false))?;
        // Unloaded while the new version compiled (the Plugin deleted, or
        // this replica's lease lost): the new version must not run at all.
        let old = self.loaded.lock().get_mut(key).and_then(|l| l.runner.take());
        let Some(old) = old.filter(|_| self.owns(key)) else {
            next.stop().await;
            return Err((
                Refusal { reason: "SwapFailed", message: "unloaded while the new version loaded".into() },
                false,
            ));
        };
        next.take_over(old).await;
        tracing::info!(plugin = %name, %digest, "swapped to a new version");
        let unloaded = match self.loaded.lock().get_mut(key) {
            Some(l) => {
                l.digest = digest;
                l.runner = Some(next);
                None
            }
            None => Some(next),
        };
        // Unloaded during the take-over: nothing may keep running.
        if let Some(next) = unloaded {
            next.stop().await;
        }
        Ok(())
    }

    async fn prepare_controller(
        &self,
        name: &str,
        plugin: &Plugin,
        effective: &Effective,
        controller: &ControllerSettings,
        watches: &[String],
        fetched: Fetched,
    ) -> Result<ControllerRunner, Refusal> {
        let not_loaded = |message: String| Refusal { reason: "LoadFailed", message };
        let informers = watches
            .iter()
            .map(|w| self.registry.informer(w).ok_or_else(|| not_loaded(format!("informer {w} is gone"))))
            .collect::<Result<Vec<_>, _>>()?;
        let (runtime, writer) = (self.registry.runtime().clone(), self.writer.clone());
        let (name, namespace) = (name.to_string(), plugin.namespace().unwrap_or_default());
        let (kind, effective, controller) = (plugin.spec.watch.kind.clone(), effective.clone(), controller.clone());
        let Fetched { bytes, origin, .. } = fetched;
        let log_sink = self.options.log_sink.clone();
        let tenant_bucket = controller.tenant_qps.map(|qps| self.tenant_bucket(&namespace, qps));
        let handle = tokio::runtime::Handle::current();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = handle.enter();
            let _span = span.enter();
            let assembly = Assembly {
                name: &name,
                namespace: &namespace,
                primary_kind: &kind,
                effective: &effective,
                settings: &controller,
                informers,
                log_sink,
                origin: &origin,
                tenant_bucket,
            };
            reconcilers::prepare(&runtime, writer, assembly, &bytes)
        })
        .await
        .map_err(|e| not_loaded(e.to_string()))?
        .map_err(|e| not_loaded(e.to_string()))
    }
}
