//! When an object named by its config (`{"name": "x"}`) arrives, allocates
//! and touches memory in 1 MiB steps until an allocation is refused, then
//! traps; otherwise logs like `recorder`.

use informer_guest::{Config, Deleted, Object, ResourceEventHandler, describe, info};

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct MemoryHog {
    /// The object name that triggers the misbehaviour (`*`: every object).
    name: String,
}

impl MemoryHog {
    fn check(&self, name: &str) {
        if !self.name.is_empty() && (name == self.name || self.name == "*") {
            hog(name);
        }
    }
}

impl ResourceEventHandler for MemoryHog {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        *self = config.parse()?;
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

informer_guest::export_plugin!(MemoryHog);

const MIB: usize = 1 << 20;
const PAGE: usize = 4096;

fn hog(name: &str) -> ! {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = Vec::new();
        if chunk.try_reserve_exact(MIB).is_err() || held.try_reserve(1).is_err() {
            panic!("memory-hog: allocation refused after {} MiB (on {name})", held.len());
        }
        // Touch every page so the memory is really committed.
        chunk.resize(MIB, 0);
        chunk.iter_mut().step_by(PAGE).for_each(|byte| *byte = 1);
        held.push(std::hint::black_box(chunk));
    }
}
