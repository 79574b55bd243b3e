//! What feeds a controller's workqueue: the informer handlers that turn
//! objects into primary keys.
//!
//! The primary informer queues each object's own key; a secondary one
//! queues the primary named by the object's controller owner reference or
//! by a label ([`Enqueuer`]), or whatever the plugin's `map` returns
//! ([`PluginMapper`], which runs the plugin in an instance of its own and
//! bounds what it may queue). This module only queues keys: reconciling
//! them is the runner's.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::instance::{ControllerInstance, LoadedController, ReconcileError};
use super::keys::MAX_QUEUED_BY_IMPORT;
use super::runner::{MAX_MAPPED_KEYS, ReconcileStats};
use super::{ControllerCtx, KeyQueue, check_key};
use crate::informer::{DeletedObject, Delivery, HandlerError, Object, ObjectRef, ResourceEventHandler};
use crate::plugin::CacheView;

/// How an [`Enqueuer`] turns an object into primary keys.
pub(super) enum KeyMap {
    /// The object's own key (the primary informer).
    Own,
    /// Its controller owner reference of `kind`.
    Owner { kind: String, primary: CacheView },
    /// The value of `label`.
    Label { label: String, primary: CacheView },
}

/// The key of the primary object named `name`, seen from a dependent in
/// `namespace`: `namespace/name` when the primary is namespaced, `name`
/// when it is cluster-scoped (a Namespace owning its ResourceQuota). The
/// primary's cache tells which; if it holds neither (the owner is gone),
/// the dependent's namespace decides.
fn primary_key(primary: &CacheView, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => {
            let namespaced = format!("{ns}/{name}");
            if primary.get(&namespaced).is_none() && primary.get(name).is_some() {
                name.to_string()
            } else {
                namespaced
            }
        }
        None => name.to_string(),
    }
}

impl KeyMap {
    fn keys(&self, obj: &Object) -> Vec<String> {
        match self {
            KeyMap::Own => vec![obj.key().to_string()],
            KeyMap::Owner { kind, primary } => {
                let Some(refs) = obj.pointer_value("/metadata/ownerReferences") else { return Vec::new() };
                let Some(refs) = refs.as_array() else { return Vec::new() };
                refs.iter()
                    .filter(|r| r.get("controller").and_then(|c| c.as_bool()) == Some(true))
                    .filter(|r| r.get("kind").and_then(|k| k.as_str()) == Some(kind.as_str()))
                    .filter_map(|r| r.get("name").and_then(|n| n.as_str()))
                    .map(|name| primary_key(primary, obj.namespace(), name))
                    .collect()
            }
            KeyMap::Label { label, primary } => {
                obj.label(label).map(|name| vec![primary_key(primary, obj.namespace(), name)]).unwrap_or_default()
            }
        }
    }
}

/// Enqueues the keys an informer's objects map to, old and new states both
/// (a changed owner reference or label reconciles the old primary too).
pub(super) struct Enqueuer {
    pub(super) map: KeyMap,
    pub(super) keys: KeyQueue,
}

impl Enqueuer {
    fn add(&self, obj: &Object) {
        for key in self.map.keys(obj) {
            self.keys.add(key, std::time::Duration::ZERO);
        }
    }
}

impl ResourceEventHandler for Enqueuer {
    fn on_add(&mut self, obj: &ObjectRef, _initial: bool) -> Result<(), HandlerError> {
        self.add(obj);
        Ok(())
    }
    fn on_update(&mut self, old: &ObjectRef, new: &ObjectRef) -> Result<(), HandlerError> {
        if !matches!(self.map, KeyMap::Own) {
            self.add(old);
        }
        self.add(new);
        Ok(())
    }
    fn on_delete(&mut self, obj: &DeletedObject) -> Result<(), HandlerError> {
        match &self.map {
            KeyMap::Own => self.keys.add(obj.key().to_string(), std::time::Duration::ZERO),
            _ => self.add(obj.object()),
        }
        Ok(())
    }
}

/// Maps a secondary informer's objects through the plugin's `map`, in an
/// instance of its own, on the blocking pool.
pub(super) struct PluginMapper {
    pub(super) informer: String,
    pub(super) loaded: Arc<LoadedController>,
    pub(super) ctx: Arc<ControllerCtx>,
    pub(super) instance: Option<ControllerInstance>,
    pub(super) stats: Arc<ReconcileStats>,
}

impl PluginMapper {
    fn map(&mut self, obj: &ObjectRef) -> Result<(), HandlerError> {
        let inst = match &mut self.instance {
            Some(i) => i,
            None => {
                let i = self
                    .loaded
                    .instance(self.ctx.clone())
                    .map_err(|e| HandlerError::Crashed(format!("cannot start an instance: {e}")))?;
                self.instance.insert(i)
            }
        };
        match inst.map(&self.informer, obj) {
            Ok(mut keys) => {
                if keys.len() > MAX_MAPPED_KEYS {
                    tracing::warn!(plugin = %self.loaded.spec.name, informer = %self.informer, "map returned {} keys for {}; only the first {MAX_MAPPED_KEYS} are queued", keys.len(), obj.key());
                    keys.truncate(MAX_MAPPED_KEYS);
                }
                let (mut refused, mut dropped) = (0, 0);
                for key in keys {
                    match check_key(&key) {
                        // The guest chose these keys: they count against the
                        // queue's bound like its enqueues.
                        Ok(()) => dropped += usize::from(!self.ctx.keys.add_from_guest(key, std::time::Duration::ZERO)),
                        Err(why) => {
                            refused += 1;
                            if refused == 1 {
                                tracing::warn!(plugin = %self.loaded.spec.name, informer = %self.informer, "map for {} returned {why}; such keys are not queued", obj.key());
                            }
                        }
                    }
                }
                if dropped > 0 {
                    tracing::warn!(plugin = %self.loaded.spec.name, informer = %self.informer, "the queue is full ({MAX_QUEUED_BY_IMPORT} keys): {dropped} keys map returned for {} were dropped", obj.key());
                }
                Ok(())
            }
            Err(e) => {
                self.stats.map_failures.fetch_add(1, Ordering::Relaxed);
                if matches!(e, ReconcileError::Trapped(_)) {
                    self.instance = None;
                    return Err(HandlerError::Crashed(e.to_string()));
                }
                Err(HandlerError::Failed(e.to_string()))
            }
        }
    }
}

impl ResourceEventHandler for PluginMapper {
    fn on_add(&mut self, obj: &ObjectRef, _initial: bool) -> Result<(), HandlerError> {
        self.map(obj)
    }
    fn on_update(&mut self, old: &ObjectRef, new: &ObjectRef) -> Result<(), HandlerError> {
        self.map(old)?;
        self.map(new)
    }
    fn on_delete(&mut self, obj: &DeletedObject) -> Result<(), HandlerError> {
        self.map(obj.object())
    }
    fn delivery(&self) -> Delivery {
        Delivery::Blocking
    }
}
