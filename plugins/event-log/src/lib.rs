//! Logs every notification at info level.

use informer_guest::{Deleted, Object, ResourceEventHandler, info};

fn rv(obj: &Object) -> String {
    obj.resource_version().unwrap_or_else(|| "-".to_owned())
}

#[derive(Default)]
struct EventLog;

impl ResourceEventHandler for EventLog {
    fn on_add(&mut self, obj: &Object, is_in_initial_list: bool) -> Result<(), String> {
        let origin = if is_in_initial_list { " (initial list)" } else { "" };
        info!("added {} {} at rv {}{origin}", obj.kind(), obj.key(), rv(obj));
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<(), String> {
        info!("updated {} {} rv {} -> {}", new.kind(), new.key(), rv(old), rv(new));
        Ok(())
    }

    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        match obj {
            Deleted::Object(obj) => info!("deleted {} {} at rv {}", obj.kind(), obj.key(), rv(obj)),
            Deleted::UnknownFinalState(t) => info!("deleted {} while disconnected (final state unknown)", t.key),
        }
        Ok(())
    }
}

informer_guest::export_plugin!(EventLog);
