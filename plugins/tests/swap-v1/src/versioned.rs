// The body shared by `swap-v1` and `swap-v2`: logs like `recorder`, each
// line prefixed with `VERSION`, which the including crate defines.

use informer_guest::{Deleted, Object, ResourceEventHandler, describe, info};

#[derive(Default)]
struct Versioned;

impl ResourceEventHandler for Versioned {
    fn on_add(&mut self, obj: &Object, is_in_initial_list: bool) -> Result<(), String> {
        info!("{VERSION} {}", describe::add(obj, is_in_initial_list));
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<(), String> {
        info!("{VERSION} {}", describe::update(old, new));
        Ok(())
    }

    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        info!("{VERSION} {}", describe::delete(obj));
        Ok(())
    }
}

informer_guest::export_plugin!(Versioned);
