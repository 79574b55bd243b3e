//! What a `Plugin`'s status says (loaded, synced, degraded, counters),
//! from what this replica runs, and writing it when it changed.

use kube::{Api, ResourceExt};

use super::PluginResources;
use crate::controller::ControllerRunner;
use crate::kube_plugins::crd::{Plugin, PluginCounters};
use crate::kube_plugins::policy::Refusal;
use crate::kube_plugins::status::{self, Observed, Report};

impl PluginResources {
    fn loaded_name(&self, key: &str) -> Option<String> {
        self.loaded.lock().get(key).map(|l| l.registry_name.clone())
    }

    /// A failure to fetch, load or swap: a version already running keeps
    /// serving (the plugin is degraded); otherwise it is not ready.
    pub(super) fn failed(&self, key: &str, plugin: &Plugin, refusal: &Refusal) -> Report {
        match self.loaded_name(key) {
            Some(name) => {
                let mut r = self.running(plugin, &name);
                r.degraded = Observed::yes(refusal.reason, refusal.message.clone());
                r
            }
            None => self.refused(plugin, refusal),
        }
    }

    pub(super) fn refused(&self, plugin: &Plugin, refusal: &Refusal) -> Report {
        Report {
            generation: plugin.metadata.generation,
            ready: Observed::no(refusal.reason, refusal.message.clone()),
            synced: Observed::no("NotLoaded", "the plugin is not loaded"),
            degraded: Observed::no("NotLoaded", ""),
            digest: None,
            replica: Some(self.options.identity.clone()),
            counters: None,
        }
    }

    pub(super) fn running(&self, plugin: &Plugin, name: &str) -> Report {
        let digest = {
            let loaded = self.loaded.lock();
            let l = loaded.values().find(|l| l.registry_name == name);
            if let Some(runner) = l.and_then(|l| l.runner.as_ref()) {
                return self.running_controller(plugin, runner, l.map(|l| l.digest.as_str()));
            }
            l.map(|l| l.digest.clone())
        };
        let st = self.registry.get(name);
        let (synced, degraded, counters) = match &st {
            Some(s) => (
                if s.synced {
                    Observed::yes("Synced", "every cached object was delivered")
                } else {
                    Observed::no("Syncing", format!("{} notifications pending", s.pending))
                },
                match (&s.last_error, s.crashed) {
                    (Some(e), n) if n > 0 => Observed::yes("HandlerCrashed", format!("{n} crashes; last: {e}")),
                    _ => Observed::no("Healthy", ""),
                },
                Some(PluginCounters {
                    delivered: s.delivered,
                    failed: s.failed,
                    crashed: s.crashed,
                    pending: s.pending as u64,
                    swaps: s.swaps,
                    writes: None,
                    refused_writes: None,
                }),
            ),
            None => (Observed::unknown("NotLoaded", ""), Observed::no("NotLoaded", ""), None),
        };
        Report {
            generation: plugin.metadata.generation,
            ready: Observed::yes("Loaded", format!("running {}", digest.as_deref().unwrap_or("?"))),
            synced,
            degraded,
            digest,
            replica: Some(self.options.identity.clone()),
            counters,
        }
    }

    /// The report of a running controller: synced once its handlers
    /// delivered their informers' caches; its reconciles and writes as
    /// counters.
    fn running_controller(&self, plugin: &Plugin, runner: &ControllerRunner, digest: Option<&str>) -> Report {
        let (stats, writes) = (runner.stats(), &runner.guard().stats);
        let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let (failed, trapped) = (n(&stats.failed), n(&stats.trapped));
        Report {
            generation: plugin.metadata.generation,
            ready: Observed::yes("Loaded", format!("running {}", digest.unwrap_or("?"))),
            synced: if runner.has_synced() {
                Observed::yes("Synced", "every cached object was queued for a reconcile")
            } else {
                Observed::no("Syncing", "the informers' caches are still being queued")
            },
            degraded: if trapped > 0 {
                Observed::yes("ReconcileTrapped", format!("{trapped} reconciles trapped; {failed} failed"))
            } else {
                Observed::no("Healthy", "")
            },
            digest: digest.map(String::from),
            replica: Some(self.options.identity.clone()),
            counters: Some(PluginCounters {
                delivered: n(&stats.succeeded),
                failed,
                crashed: trapped,
                pending: runner.queue().len() as u64,
                swaps: 0,
                writes: Some(n(&writes.succeeded)),
                refused_writes: Some(n(&writes.refused)),
            }),
        }
    }

    pub(super) async fn write_status(&self, plugin: &Plugin, report: Report) {
        // A replica stopping (its plugins going to others) writes no more:
        // a load that failed because its informers stopped is not news, and
        // would overwrite the status of the replica that runs it now.
        if self.stop.is_cancelled() {
            return;
        }
        let new = status::build(plugin.status.as_ref(), &report);
        if !status::changed(plugin.status.as_ref(), &new) {
            return;
        }
        let namespace = plugin.namespace().unwrap_or_default();
        let api: Api<Plugin> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(e) = status::write(&api, &plugin.name_any(), &new).await {
            // The next reconcile (resync, or a change) writes it again.
            tracing::warn!("cannot write the status of Plugin {namespace}/{}: {e}", plugin.name_any());
        }
    }
}
