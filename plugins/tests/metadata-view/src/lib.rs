//! Reads key, name, namespace, resource version and labels of every object
//! through borrowed views ([`Object::meta`]) and discards them: the
//! benchmark for metadata-only handlers that allocate nothing (`metadata`
//! is the same through the owned accessors).

use std::hint::black_box;

use informer_guest::{Deleted, Object, ResourceEventHandler};

fn read(obj: &Object) {
    let meta = obj.meta();
    black_box(meta.key());
    black_box(meta.name());
    black_box(meta.namespace());
    black_box(meta.resource_version());
    for label in meta.labels() {
        black_box(label);
    }
}

#[derive(Default)]
struct MetadataView;

impl ResourceEventHandler for MetadataView {
    fn on_add(&mut self, obj: &Object, _is_in_initial_list: bool) -> Result<(), String> {
        read(obj);
        Ok(())
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<(), String> {
        read(new);
        Ok(())
    }

    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        if let Some(obj) = obj.last_known() {
            read(obj);
        }
        Ok(())
    }
}

informer_guest::export_plugin!(MetadataView);
