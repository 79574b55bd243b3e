//! Panics (traps the instance) when an object named by its config
//! (`{"name": "x"}`) arrives, or in `init` with `"panic_in_init": true`;
//! otherwise logs like `recorder`.

use informer_guest::{Config, Deleted, Object, ResourceEventHandler, describe, info};

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PanicOn {
    /// The object name that triggers the misbehaviour (`*`: every object).
    name: String,
    /// Panic in `init` itself (to test how the host reports it).
    panic_in_init: bool,
}

impl PanicOn {
    fn check(&self, name: &str) {
        if !self.name.is_empty() && (name == self.name || self.name == "*") {
            panic!("panic-on: got {name}");
        }
    }
}

impl ResourceEventHandler for PanicOn {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        *self = config.parse()?;
        if self.panic_in_init {
            panic!("panic-on: asked to panic in init");
        }
        info!("init {}", config.as_str());
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, is_in_initial_list: bool) -> Result<(), String> {
        self.check(&obj.name());
        info!("{}", describe::add(obj, is_in_initial_list));
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<(), String> {
        self.check(&new.name());
        info!("{}", describe::update(old, new));
        Ok(())
    }

    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        self.check(&obj.name());
        info!("{}", describe::delete(obj));
        Ok(())
    }
}

informer_guest::export_plugin!(PanicOn);
