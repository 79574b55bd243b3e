//! Logs every notification at info level, reading metadata through
//! borrowed views ([`Object::meta`]): nothing is copied but the log line.

use informer_guest::{Deleted, Object, ResourceEventHandler, info};

fn rv(obj: &Object) -> &str {
    obj.meta().resource_version().unwrap_or("-")
}

#[derive(Default)]
struct EventLog;

impl ResourceEventHandler for EventLog {
    fn on_add(&mut self, obj: &Object, is_in_initial_list: bool) -> Result<(), String> {
        let origin = if is_in_initial_list { " (initial list)" } else { "" };
        let meta = obj.meta();
        info!("added {} {} at rv {}{origin}", meta.kind(), meta.key(), rv(obj));
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<(), String> {
        let meta = new.meta();
        info!("updated {} {} rv {} -> {}", meta.kind(), meta.key(), rv(old), rv(new));
        Ok(())
    }

    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        match obj {
            Deleted::Object(obj) => info!("deleted {} {} at rv {}", obj.meta().kind(), obj.meta().key(), rv(obj)),
            Deleted::UnknownFinalState(t) => info!("deleted {} while disconnected (final state unknown)", t.key),
        }
        Ok(())
    }
}

informer_guest::export_plugin!(EventLog);
