//! A plugin's runtime counters (fuel, calls, restarts, traps) summed across
//! its versions, so that what metrics report never goes backwards at a
//! swap or a reload.

use std::sync::Arc;

use crate::plugin::PluginStats;

/// A plugin's runtime counters summed over its versions: each version has
/// its own [`PluginStats`], and a counter must not go back at a swap.
pub(super) struct Totals {
    current: Arc<PluginStats>,
    retired: Vec<u64>,
}

impl Totals {
    pub(super) fn new(current: Arc<PluginStats>) -> Self {
        Totals { current, retired: Vec::new() }
    }

    /// The sums, with `now` as the current version.
    pub(super) fn observe(&mut self, now: &Arc<PluginStats>) -> Arc<PluginStats> {
        if !Arc::ptr_eq(&self.current, now) {
            let old = self.current.values();
            self.retired.resize(old.len(), 0);
            for (r, v) in self.retired.iter_mut().zip(old) {
                *r += v;
            }
            self.current = now.clone();
        }
        let mut v = now.values();
        for (v, r) in v.iter_mut().zip(&self.retired) {
            *v += r;
        }
        Arc::new(PluginStats::from_values(&v))
    }
}
