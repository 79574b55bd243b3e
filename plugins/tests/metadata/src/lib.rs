//! Reads key, name, namespace, resource version and labels of every object and
//! discards them: the benchmark for metadata-only handlers.

use std::hint::black_box;

use informer_guest::{Deleted, Object, ResourceEventHandler};

fn read(obj: &Object) {
    black_box(obj.key());
    black_box(obj.name());
    black_box(obj.namespace());
    black_box(obj.resource_version());
    black_box(obj.labels());
}

#[derive(Default)]
struct Metadata;

impl ResourceEventHandler for Metadata {
    fn on_add(&mut self, obj: &Object, _is_in_initial_list: bool) -> Result<(), String> {
        read(obj);
        Ok(())
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<(), String> {
        read(new);
        Ok(())
    }

    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        black_box(obj.key());
        if let Some(obj) = obj.last_known() {
            read(obj);
        }
        Ok(())
    }
}

informer_guest::export_plugin!(Metadata);
