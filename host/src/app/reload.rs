//! SIGHUP: re-reading the config file and applying the difference to the
//! plugins while everything runs.
//!
//! Added plugins are loaded, removed ones unloaded, one whose wasm file
//! changed is swapped, one whose settings changed is unloaded and loaded
//! again (after the new settings were tried). Controllers are started,
//! stopped or replaced ([`super::controllers`]). An invalid file changes
//! nothing. Informers, `[host]` and `[admin]` need a restart: their changes
//! are reported, not applied.

use std::sync::Arc;

use tracing::info_span;

use crate::config::{Config, PluginConfig};
use crate::registry::{OnSwap, WasmSource};

use super::format::tidy_path;
use super::plugins::{Plugins, blocking, file_hash, short};

/// What one reload did.
#[derive(Default)]
struct ReloadSummary {
    added: usize,
    removed: usize,
    swapped: usize,
    reloaded: usize,
    unchanged: usize,
    failed: usize,
}

impl Plugins {
    /// Re-reads the config file and applies the difference to the plugins:
    /// added ones are loaded, removed ones unloaded, one whose wasm file
    /// changed is swapped, one whose settings (limits, grants, config,
    /// tenant, ...) changed is unloaded and loaded again. An invalid file
    /// changes nothing. Informers, `[host]` and `[admin]` need a restart.
    pub(super) async fn reload(self: &Arc<Self>) {
        let file = self.started.file.clone();
        let config = {
            let path = file.clone();
            match blocking(move || Config::load(path)).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!("cannot re-read {}: {e}", file.display());
                    return;
                }
            }
        };
        let new = match config {
            Ok(c) => c,
            Err(e) => {
                for line in e.short_lines() {
                    tracing::error!("{line}");
                }
                let n = e.problems.len();
                tracing::error!(
                    "{} has {n} problem{}; nothing was changed, the host keeps running as it was",
                    file.display(),
                    if n == 1 { "" } else { "s" }
                );
                return;
            }
        };
        let old = &self.started;
        let mut informer_changes = Vec::new();
        for i in &new.informers {
            match old.informer(&i.name) {
                None => informer_changes.push(format!("{:?} added", i.name)),
                Some(o) if !o.same_definition(i) => informer_changes.push(format!("{:?} changed", i.name)),
                Some(_) => {}
            }
        }
        for o in &old.informers {
            if new.informer(&o.name).is_none() {
                informer_changes.push(format!("{:?} removed", o.name));
            }
        }
        if !informer_changes.is_empty() {
            tracing::warn!(
                "informer changes need a restart (informer {}); the informers keep running as they are",
                informer_changes.join(", informer ")
            );
        }
        // `old` is the config the host started with; what runs now may differ.
        if !new.controllers.is_empty() || self.controllers.configured() > 0 {
            match self.registry() {
                Ok(registry) => {
                    let informers = self.informers_by_name();
                    self.controllers.reload(&new, registry.runtime(), &informers, &self.observed).await;
                }
                Err(e) => tracing::error!("cannot reload the controllers: {e}"),
            }
        }
        if old.host != new.host {
            tracing::warn!("[host] changes need a restart; they are not applied");
        }
        if old.admin != new.admin {
            tracing::warn!("[admin] changes need a restart; the admin API keeps its settings");
        }

        if let Some(registry) = self.registry_if_made() {
            for t in &new.tenants {
                registry.set_tenant(t.name.clone(), t.policy());
            }
        }
        let mut summary = ReloadSummary::default();
        let mut managed = self.managed.lock().await;
        let kept: std::collections::HashSet<&str> = new.plugins.iter().map(|p| p.name.as_str()).collect();
        let removed: Vec<String> = managed.keys().filter(|n| !kept.contains(n.as_str())).cloned().collect();
        for name in removed {
            managed.remove(&name);
            self.stop_plugin(&name);
            info_span!("plugin", name = %name).in_scope(|| tracing::info!("removed from the config: unloaded"));
            summary.removed += 1;
        }
        for p in &new.plugins {
            let tenant = new.tenant_of(p);
            let span = info_span!("plugin", name = %p.name);
            let Some(m) = managed.get_mut(&p.name) else {
                span.in_scope(|| tracing::info!("added to the config: loading it"));
                if self.start_plugin(p, tenant, &mut managed).await {
                    summary.added += 1;
                } else {
                    summary.failed += 1;
                }
                continue;
            };
            let running = self.is_running(&p.name);
            let mut changed = m.cfg.changed_keys(p);
            let same_tenant = match (&m.tenant, tenant) {
                (None, None) => true,
                (Some(a), Some(b)) => a.same_visibility(b),
                _ => false,
            };
            if !same_tenant && !changed.contains(&"tenant") {
                changed.push("tenant's namespaces");
            }
            if !changed.is_empty() && running {
                span.in_scope(|| {
                    tracing::info!("{} changed: reloading it (unload + load)", changed.join(", "));
                });
                // Try the new settings first: if they do not load, the
                // running version keeps serving.
                if let Err(e) = self.probe(p).await {
                    span.in_scope(|| {
                        tracing::error!(
                            "{}: the new settings do not load; the running version keeps serving: {e}",
                            self.at(p)
                        );
                    });
                    summary.failed += 1;
                    continue;
                }
                self.stop_plugin(&p.name);
                if self.start_plugin(p, tenant, &mut managed).await {
                    summary.reloaded += 1;
                } else {
                    summary.failed += 1;
                }
                continue;
            }
            if !running {
                span.in_scope(|| tracing::info!("not running (it failed to load, or was unloaded): loading it"));
                if self.start_plugin(p, tenant, &mut managed).await {
                    summary.added += 1;
                } else {
                    summary.failed += 1;
                }
                continue;
            }
            // Same settings: swap if the file (or which file) changed.
            let moved = m.cfg.wasm != p.wasm;
            let content = {
                let path = p.wasm.clone();
                tokio::fs::read(&path).await.map(|b| file_hash(&b))
            };
            match content {
                Err(e) => {
                    span.in_scope(|| {
                        tracing::error!(
                            "{}: cannot read {}: {e}; the running version keeps serving",
                            self.at(p),
                            p.wasm.display()
                        )
                    });
                    summary.failed += 1;
                }
                Ok(hash) if moved || m.file_hash.as_deref() != Some(hash.as_str()) => {
                    let registry = self.registry_if_made();
                    let Some(registry) = registry else { continue };
                    let (reg, n, path) = (registry.clone(), p.name.clone(), p.wasm.clone());
                    let file = tidy_path(&p.wasm).display().to_string();
                    match blocking(move || reg.swap(&n, WasmSource::File(path)))
                        .await
                        .and_then(|r| r.map_err(|e| e.to_string()))
                    {
                        Ok(_) => {
                            span.in_scope(|| {
                                tracing::info!(
                                    "swapped to version {} ({file} changed; on_swap = {})",
                                    short(&hash),
                                    on_swap_name(p.on_swap)
                                )
                            });
                            m.file_hash = Some(hash.clone());
                            m.tried_hash = Some(hash);
                            summary.swapped += 1;
                        }
                        Err(e) => {
                            span.in_scope(|| {
                                tracing::error!(
                                    "{}: {file} changed, but the new version cannot be swapped in; \
                                     the running version keeps serving: {e}",
                                    self.at(p)
                                )
                            });
                            summary.failed += 1;
                            // Keep the old path so the next reload tries again.
                            continue;
                        }
                    }
                }
                Ok(_) => summary.unchanged += 1,
            }
            // Only `wasm`, `watch` or the location can differ now.
            let watch_on = p.watch && (m.watch.is_none() || moved);
            m.cfg = p.clone();
            m.tenant = tenant.cloned();
            if !p.watch {
                m.watch = None;
            } else if watch_on {
                m.watch = None;
                m.watch = self.watch(p);
            }
        }
        drop(managed);
        self.sync_observed();
        let ReloadSummary { added, removed, swapped, reloaded, unchanged, failed } = summary;
        tracing::info!(
            "reloaded {}: {added} plugin(s) added, {removed} removed, {swapped} swapped, {reloaded} reloaded, \
             {unchanged} unchanged, {failed} failed",
            file.display()
        );
    }

    /// Loads `p` without registering it, to see that it would start.
    async fn probe(&self, p: &PluginConfig) -> Result<(), String> {
        let runtime = self.registry().map_err(|e| e.to_string())?.runtime().clone();
        self.def(p, None)?;
        let spec = p.spec();
        blocking(move || runtime.load(spec).map(drop)).await?.map_err(|e| e.to_string())
    }
}

pub(super) fn on_swap_name(o: OnSwap) -> &'static str {
    match o {
        OnSwap::Continue => "continue",
        OnSwap::Replay => "replay",
    }
}
