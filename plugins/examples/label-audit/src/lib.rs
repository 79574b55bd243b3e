//! Warns about added or updated objects that lack any of the labels named in
//! its config (`{"required": ["app", "team"]}`). Reads metadata only.

use informer_guest::{Config, Object, ResourceEventHandler, warn};

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct LabelAudit {
    required: Vec<String>,
}

impl LabelAudit {
    fn audit(&self, obj: &Object) {
        let missing: Vec<&str> =
            self.required.iter().filter(|label| obj.label(label).is_none()).map(String::as_str).collect();
        if !missing.is_empty() {
            warn!("{} {} is missing required labels: {}", obj.kind(), obj.key(), missing.join(", "));
        }
    }
}

impl ResourceEventHandler for LabelAudit {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        *self = config.parse()?;
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, _is_in_initial_list: bool) -> Result<(), String> {
        self.audit(obj);
        Ok(())
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<(), String> {
        self.audit(new);
        Ok(())
    }
}

informer_guest::export_plugin!(LabelAudit);
