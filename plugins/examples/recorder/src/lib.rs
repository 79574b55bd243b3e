//! The test plugin: logs exactly one info line per notification, in the
//! format of [`informer_guest::describe`], and `init <config>` on init.

use informer_guest::{Config, Deleted, Object, ResourceEventHandler, describe, info};

#[derive(Default)]
struct Recorder;

impl ResourceEventHandler for Recorder {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        info!("init {}", config.as_str());
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, is_in_initial_list: bool) -> Result<(), String> {
        info!("{}", describe::add(obj, is_in_initial_list));
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<(), String> {
        info!("{}", describe::update(old, new));
        Ok(())
    }

    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        info!("{}", describe::delete(obj));
        Ok(())
    }
}

informer_guest::export_plugin!(Recorder);
