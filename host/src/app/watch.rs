//! `watch = true`: a plugin is swapped when its wasm file changes.
//!
//! This module owns the file watches: the directory of the file is watched
//! (editors and `cargo build` write and rename in several steps), and once
//! it has been quiet for [`WATCH_DEBOUNCE`] the plugin is swapped to the
//! new content, or loaded if it did not run. On failure the old version
//! keeps serving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use notify::Watcher as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::config::PluginConfig;
use crate::registry::WasmSource;

use super::format::tidy_path;
use super::plugins::{Plugins, blocking, file_hash, short};
use super::reload::on_swap_name;

/// How long a watched wasm file must stay unchanged before it is swapped
/// in (editors and `cargo build` write and rename in several steps).
pub const WATCH_DEBOUNCE: Duration = Duration::from_millis(200);

/// A running watch on a wasm file; dropping it stops it.
pub(super) struct FileWatch {
    _watcher: notify::RecommendedWatcher,
    stop: CancellationToken,
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Plugins {
    /// Starts watching `p`'s wasm file; logs and returns `None` if it cannot.
    pub(super) fn watch(self: &Arc<Self>, p: &PluginConfig) -> Option<FileWatch> {
        let span = info_span!("plugin", name = %p.name);
        let dir = match p.wasm.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = notify::RecommendedWatcher::new(
            move |ev: notify::Result<notify::Event>| {
                let _ = tx.send(ev);
            },
            notify::Config::default(),
        )
        .and_then(|mut w| w.watch(&dir, notify::RecursiveMode::NonRecursive).map(|()| w));
        let watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                span.in_scope(|| {
                    tracing::error!(
                        "{}: cannot watch {} for changes: {e}; it is not swapped when the file changes",
                        self.at(p),
                        p.wasm.display()
                    )
                });
                return None;
            }
        };
        let stop = CancellationToken::new();
        let task = watch_loop(Arc::downgrade(self), p.name.clone(), p.wasm.clone(), rx, stop.clone());
        tokio::spawn(task.instrument(span.clone()));
        span.in_scope(|| tracing::info!("watching {} for changes", tidy_path(&p.wasm).display()));
        Some(FileWatch { _watcher: watcher, stop })
    }

    /// A watched wasm file changed (and then stayed unchanged for
    /// [`WATCH_DEBOUNCE`]): swap the plugin to it, or load it if it did not
    /// run. On failure the old version keeps serving.
    pub(super) async fn file_changed(self: &Arc<Self>, name: &str, path: &Path) {
        let mut managed = self.managed.lock().await;
        let Some(m) = managed.get_mut(name) else { return };
        if !m.cfg.watch || m.cfg.wasm != path {
            return;
        }
        let bytes = match tokio::fs::read(path).await {
            Ok(b) => b,
            // Removed, or being replaced: the next event tells.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                tracing::warn!("{} changed but cannot be read: {e}", path.display());
                return;
            }
        };
        let hash = file_hash(&bytes);
        if m.tried_hash.as_deref() == Some(hash.as_str()) {
            return;
        }
        m.tried_hash = Some(hash.clone());
        let file = tidy_path(path).display().to_string();
        let registry = self.registry_if_made();
        let Some(registry) = registry.filter(|r| r.get(name).is_some()) else {
            // It did not run (it failed to load, or was unloaded): try again.
            tracing::info!("{file} changed; loading the plugin");
            let (cfg, tenant) = (m.cfg.clone(), m.tenant.clone());
            self.start_plugin(&cfg, tenant.as_ref(), &mut managed).await;
            return;
        };
        let from = registry.loaded(name).map(|l| short(&l.info.hash).to_string()).unwrap_or_default();
        let (reg, n, p) = (registry.clone(), name.to_string(), path.to_path_buf());
        match blocking(move || reg.swap(&n, WasmSource::File(p))).await {
            Ok(Ok(_)) => {
                m.file_hash = Some(hash.clone());
                tracing::info!(
                    "swapped to version {} ({file} changed; on_swap = {}; version {from} served until now)",
                    short(&hash),
                    on_swap_name(m.cfg.on_swap)
                );
            }
            Ok(Err(e)) => tracing::error!(
                "{file} changed, but the new version cannot be swapped in; version {from} keeps serving: {e}"
            ),
            Err(e) => tracing::error!("{file} changed, but swapping failed; version {from} keeps serving: {e}"),
        }
        drop(managed);
        self.sync_observed_one(name);
    }
}

/// Waits for changes of `path` (its directory is watched: editors and
/// `cargo build` replace files), lets them settle, then swaps.
async fn watch_loop(
    plugins: Weak<Plugins>,
    name: String,
    path: PathBuf,
    mut rx: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    stop: CancellationToken,
) {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    let file_name = path.file_name().map(|f| f.to_os_string());
    let touches = |ev: &notify::Event| {
        let kind = matches!(
            ev.kind,
            EventKind::Create(_) | EventKind::Modify(_) | EventKind::Access(AccessKind::Close(AccessMode::Write))
        );
        kind && ev.paths.iter().any(|p| p.file_name() == file_name.as_deref())
    };
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => return,
            ev = rx.recv() => ev,
        };
        match ev {
            None => return,
            Some(Err(e)) => {
                tracing::warn!("watching {}: {e}", path.display());
                continue;
            }
            Some(Ok(ev)) if touches(&ev) => {}
            Some(Ok(_)) => continue,
        }
        // Debounce: wait until the directory is quiet.
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(WATCH_DEBOUNCE) => break,
                ev = rx.recv() => if ev.is_none() { return },
            }
        }
        let Some(p) = plugins.upgrade() else { return };
        if stop.is_cancelled() {
            return;
        }
        p.file_changed(&name, &path).await;
    }
}
