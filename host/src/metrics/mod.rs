//! Prometheus metrics, read on each scrape from what the host runs.
//!
//! This module owns [`Observed`], the live list of informers and plugins
//! that metrics and readiness look at, and a `prometheus-client` collector
//! that turns the engine's `Registration` counters and the plugin runtime's
//! `PluginStats` into metrics when `/metrics` is scraped. Nothing on the
//! delivery path is touched: every value is an atomic the engine or the
//! runtime already keeps.
//!
//! The output is the OpenMetrics text format. Every label value is escaped
//! as the format requires (`\\`, `\"` and `\n` for backslash, double quote
//! and line feed): `prometheus-client` writes label values as given, so a
//! name or a file path holding a quote or a newline would otherwise end the
//! value early and add series of its own. Histogram buckets are cumulative
//! and the `+Inf` bucket equals `_count`.
//!
//! Metrics (all prefixed `informer_host_`):
//!
//! | name | type | labels |
//! | --- | --- | --- |
//! | `informer_synced` | gauge 0/1 | informer |
//! | `informer_objects` | gauge | informer |
//! | `informer_resource_version` | gauge (when numeric) | informer |
//! | `plugin_up` | gauge 0/1 (0: failed to load) | plugin, informer |
//! | `plugin_synced` | gauge 0/1 | plugin, informer |
//! | `notifications_delivered_total` | counter | plugin, informer |
//! | `notifications_by_kind_total` | counter | plugin, informer, kind, outcome |
//! | `notifications_failed_total` | counter (handler returned `Err`) | plugin, informer |
//! | `notifications_skipped_total` | counter (skipped after a crash) | plugin, informer |
//! | `plugin_pending` | gauge (queue depth) | plugin, informer |
//! | `plugin_call_duration_seconds` | histogram | plugin, informer |
//! | `plugin_fuel_consumed_total` | counter | plugin, informer |
//! | `plugin_restarts_total` | counter (fresh instances after a trap) | plugin, informer |
//! | `plugin_wakes_total` | counter (fresh instances after an idle reclaim) | plugin, informer |
//! | `plugin_instances` | gauge (state: resident, idle) | state |
//! | `plugin_instances_reclaimed_total` | counter | |
//! | `plugin_traps_total` | counter (cause: fuel, deadline, memory, other, protocol) | plugin, informer, cause |
//! | `plugin_log_dropped_lines_total` | counter (over the log budget) | plugin, informer |
//! | `plugin_log_dropped_bytes_total` | counter | plugin, informer |
//! | `plugin_json_calls_total` | counter | plugin, informer |
//! | `plugin_info` | info | plugin, informer, file, hash, world |
//! | `reflector_lists_total`, `reflector_list_failures_total`, `reflector_watches_total`, `reflector_watch_retries_total`, `reflector_events_total` | counter | informer |
//! | `reflector_relists_total` | counter (cause: gone, watch_failed) | informer |
//! | `reflector_last_list_items` | gauge | informer |
//! | `reflector_list_seconds_total` | counter | informer |
//! | `reflector_seconds_since_last_event` | gauge | informer |
//! | `controller_reconciles_total` | counter | controller, informer, outcome |
//! | `controller_requeued_after_total` | counter | controller, informer |
//! | `controller_writes_total` | counter | controller, informer, outcome |
//! | `workqueue_depth` | gauge | controller, informer |
//! | `workqueue_adds_total` | counter | controller, informer |
//! | `workqueue_retries_total` | counter | controller, informer |
//! | `workqueue_queue_duration_seconds` | histogram | controller, informer |
//! | `workqueue_work_duration_seconds` | histogram | controller, informer |
//! | `workqueue_unfinished_work_seconds` | gauge | controller, informer |
//! | `workqueue_longest_running_processor_seconds` | gauge | controller, informer |
//!
//! Split by concept: `observed` (what the host runs, and readiness),
//! `collector` (the metrics written on each scrape, and the encoding
//! helpers they share).

mod collector;
mod observed;
#[cfg(test)]
mod tests;

use prometheus_client::registry::Registry;

pub use observed::{
    Check, ControllerEntry, InformerEntry, InstancesProbe, Observed, PluginEntry, PluginResourcesProbe,
    PluginResourcesSnapshot, PluginState, Readiness, TenantPluginsProbe,
};

/// The registry served on `/metrics`.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    pub fn new(observed: Observed) -> Self {
        let mut registry = Registry::with_prefix("informer_host");
        registry.register_collector(Box::new(collector::HostCollector::new(observed)));
        Metrics { registry }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }

    /// The content type of [`Metrics::encode`]'s output.
    pub const CONTENT_TYPE: &'static str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
}
