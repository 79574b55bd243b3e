//! Uses the `cache` import: on every add and update, logs how many objects
//! the cache holds in the object's namespace and whether it holds the object.

use informer_guest::{Object, ResourceEventHandler, cache, info};

#[derive(Default)]
struct CacheReader;

impl CacheReader {
    fn report(&self, obj: &Object) {
        let namespace = obj.namespace();
        let count = cache::list(namespace.as_deref()).len();
        let cached = cache::get(&obj.key()).is_some();
        let scope = namespace.as_deref().unwrap_or("<cluster>");
        info!("cache {scope} holds {count} objects; {} cached={cached}", obj.key());
    }
}

impl ResourceEventHandler for CacheReader {
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
