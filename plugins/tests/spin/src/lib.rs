//! Loops forever when an object named by its config (`{"name": "x"}`)
//! arrives, or in `init` with `"in_init": true`, until the host stops it by
//! fuel or deadline; otherwise logs like `recorder`.

use informer_guest::{Config, Deleted, Object, ResourceEventHandler, describe, info};

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Spin {
    /// The object name that triggers the misbehaviour (`*`: every object).
    name: String,
    /// Spin in `init` itself (a load that takes its whole init budget).
    in_init: bool,
}

impl Spin {
    fn check(&self, name: &str) {
        if !self.name.is_empty() && (name == self.name || self.name == "*") {
            spin();
        }
    }
}

fn spin() -> ! {
    let mut spins: u64 = 0;
    loop {
        spins = std::hint::black_box(spins.wrapping_add(1));
    }
}

impl ResourceEventHandler for Spin {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        *self = config.parse()?;
        info!("init {}", config.as_str());
        if self.in_init {
            spin();
        }
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

informer_guest::export_plugin!(Spin);
