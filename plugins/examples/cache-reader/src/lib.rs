//! Uses the `cache` import: on every add and update, logs how many objects
//! the cache holds in the object's namespace and whether it holds the object;
//! with config `{"probe": ["ns/name", ...]}` it also tries to read those keys
//! and counts every object it can list (for tenant-isolation tests).

use informer_guest::{Config, Object, ResourceEventHandler, cache, info};

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct CacheReader {
    /// Keys to look up on every notification.
    probe: Vec<String>,
}

impl CacheReader {
    fn report(&self, obj: &Object) {
        let namespace = obj.namespace();
        let count = cache::list(namespace.as_deref()).len();
        let cached = cache::get(&obj.key()).is_some();
        let scope = namespace.as_deref().unwrap_or("<cluster>");
        info!("cache {scope} holds {count} objects; {} cached={cached}", obj.key());
        if !self.probe.is_empty() {
            info!("cache lists {} objects in all", cache::list(None).len());
            for key in &self.probe {
                info!("probe {key} found={}", cache::get(key).is_some());
            }
        }
    }
}

impl ResourceEventHandler for CacheReader {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        *self = config.parse()?;
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, _is_in_initial_list: bool) -> Result<(), String> {
        self.report(obj);
        Ok(())
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<(), String> {
        self.report(new);
        Ok(())
    }
}

informer_guest::export_plugin!(CacheReader);
