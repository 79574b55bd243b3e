//! The informers of watched resources: one per namespace and watch,
//! shared by the plugins that use it and stopped with the last of them.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tracing::{Instrument, info_span};

use super::{PluginResources, Watch};
use crate::informer::{InformerOptions, SharedIndexInformer, field_indexers};
use crate::kube_plugins::crd::WatchSpec;
use crate::kube_plugins::policy::Effective;
use crate::source::kube::{KubeResource, KubeSource, KubeSourceOptions};

impl PluginResources {
    /// The informer of `watch` in `namespace`, started when first needed.
    pub(super) fn acquire_watch(&self, namespace: &str, watch: &WatchSpec) -> String {
        let name = watch_name(namespace, watch);
        let mut watches = self.watches.lock();
        if let Some(w) = watches.get_mut(&name) {
            w.users += 1;
            return name;
        }
        let mut opts = KubeSourceOptions::default().namespace(namespace);
        opts.label_selector = watch.label_selector.clone();
        opts.field_selector = watch.field_selector.clone();
        let source =
            KubeSource::discovered(self.client.clone(), &KubeResource::new(&watch.api_version, &watch.kind), opts);
        let informer = SharedIndexInformer::new(
            source,
            InformerOptions { name: name.clone(), default_resync_period: Duration::from_secs(1), ..Default::default() },
        );
        if !watch.field_indexers.is_empty() {
            // Checked when the Plugin was admitted; added before the start.
            let added = field_indexers(&watch.field_indexers)
                .and_then(|indexers| informer.add_indexers(indexers).map_err(|e| e.to_string()));
            if let Err(e) = added {
                tracing::warn!(informer = %name, "field indexers not added: {e}");
            }
        }
        self.registry.add_informer(name.clone(), informer.clone());
        let stop = self.stop.child_token();
        let span = info_span!("informer", name = %name);
        tracing::info!(informer = %name, "watching {} {} in {namespace}", watch.api_version, watch.kind);
        tokio::spawn({
            let stop = stop.clone();
            async move { informer.run(stop).await }.instrument(span)
        });
        watches.insert(name.clone(), Watch { users: 1, stop });
        name
    }

    pub(super) fn release_watch(&self, name: &str) {
        let mut watches = self.watches.lock();
        let Some(w) = watches.get_mut(name) else { return };
        w.users -= 1;
        if w.users == 0 {
            if let Err(e) = self.registry.remove_informer(name) {
                tracing::warn!(informer = %name, "not stopped: {e}");
                return;
            }
            w.stop.cancel();
            watches.remove(name);
        }
    }
}

/// The informer name of one watch in one namespace.
fn watch_name(namespace: &str, w: &WatchSpec) -> String {
    let mut text = format!(
        "{namespace}\0{}\0{}\0{}\0{}",
        w.api_version,
        w.kind,
        w.label_selector.as_deref().unwrap_or(""),
        w.field_selector.as_deref().unwrap_or("")
    );
    // Watches that differ in their indexers get informers of their own:
    // indexers are added before an informer starts.
    if !w.field_indexers.is_empty() {
        text.push_str(&format!("\0{:?}", w.field_indexers));
    }
    format!("w-{}", &hex::encode(Sha256::digest(text))[..12])
}

/// Everything but the component that a running plugin was loaded with: a
/// change of any of it loads the plugin again. A controller's settings are
/// in it (its write rules, rate, impersonation, secondary watches,
/// workers, dry run), so a policy tightened under a running controller
/// reaches it, not only its next version.
pub(super) fn settings_key(namespace: &str, watch: &WatchSpec, e: &Effective) -> String {
    format!(
        "{}|{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}",
        watch_name(namespace, watch),
        e.limits,
        e.grants,
        e.resync,
        e.on_swap,
        e.max_pending,
        e.config_json,
        e.controller
    )
}
