//! A plugin's runtime counters (fuel, calls, restarts, traps) summed across
//! its versions, so that what metrics report never goes backwards at a
//! swap or a reload.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::plugin::PluginStats;

/// A plugin's runtime counters summed over its versions: each version has
/// its own [`PluginStats`], and a counter must not go back at a swap.
pub(super) struct Totals {
    current: Arc<PluginStats>,
    retired: Vec<u64>,
}

fn stat_values(s: &PluginStats) -> Vec<u64> {
    // Every field, without `..`: a new counter must be added here too.
    let PluginStats {
        restarts,
        fuel_consumed,
        call_nanos,
        calls,
        call_buckets,
        json_calls,
        traps_fuel,
        traps_deadline,
        traps_memory,
        traps_other,
    } = s;
    [restarts, fuel_consumed, call_nanos, calls, json_calls, traps_fuel, traps_deadline, traps_memory, traps_other]
        .into_iter()
        .chain(call_buckets)
        .map(|a| a.load(Ordering::Relaxed))
        .collect()
}

impl Totals {
    pub(super) fn new(current: Arc<PluginStats>) -> Self {
        Totals { current, retired: Vec::new() }
    }

    /// The sums, with `now` as the current version.
    pub(super) fn observe(&mut self, now: &Arc<PluginStats>) -> Arc<PluginStats> {
        if !Arc::ptr_eq(&self.current, now) {
            let old = stat_values(&self.current);
            self.retired.resize(old.len(), 0);
            for (r, v) in self.retired.iter_mut().zip(old) {
                *r += v;
            }
            self.current = now.clone();
        }
        let mut v = stat_values(now);
        for (v, r) in v.iter_mut().zip(&self.retired) {
            *v += r;
        }
        let mut v = v.into_iter().map(AtomicU64::new);
        let mut next = || v.next().expect("stat_values yields every field");
        let (restarts, fuel_consumed, call_nanos, calls, json_calls) = (next(), next(), next(), next(), next());
        let (traps_fuel, traps_deadline, traps_memory, traps_other) = (next(), next(), next(), next());
        let call_buckets = std::array::from_fn(|_| next());
        Arc::new(PluginStats {
            restarts,
            fuel_consumed,
            call_nanos,
            calls,
            call_buckets,
            json_calls,
            traps_fuel,
            traps_deadline,
            traps_memory,
            traps_other,
        })
    }
}
