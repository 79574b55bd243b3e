//! Keeps a map key -> resource version of what it saw and logs `count <n>`
//! after every notification (for cache-replay tests). A `BTreeMap`, not a
//! `HashMap`, so the component needs no `wasi:random` seed.

use std::collections::BTreeMap;

use informer_guest::{Deleted, Object, ResourceEventHandler, info};

#[derive(Default)]
struct Counter {
    seen: BTreeMap<String, Option<String>>,
}

impl Counter {
    fn report(&self) {
        info!("count {}", self.seen.len());
    }
}

impl ResourceEventHandler for Counter {
    fn on_add(&mut self, obj: &Object, _is_in_initial_list: bool) -> Result<(), String> {
        self.seen.insert(obj.key(), obj.resource_version());
        self.report();
        Ok(())
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<(), String> {
        self.seen.insert(new.key(), new.resource_version());
        self.report();
        Ok(())
    }

    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        self.seen.remove(&obj.key());
        self.report();
        Ok(())
    }
}

informer_guest::export_plugin!(Counter);
