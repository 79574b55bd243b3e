//! Copies the whole JSON of every object into the guest and discards it: the
//! benchmark for handlers that read the body.

use std::hint::black_box;

use informer_guest::{Deleted, Object, ResourceEventHandler};

fn read(obj: &Object) {
    black_box(obj.json().len());
}

#[derive(Default)]
struct JsonReader;

impl ResourceEventHandler for JsonReader {
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

informer_guest::export_plugin!(JsonReader);
