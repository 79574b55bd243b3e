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

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::informer::{ListenerStats, Registration, SharedIndexInformer};
use crate::plugin::{PluginInfo, PluginStats};

/// One informer the host runs.
#[derive(Clone)]
pub struct InformerEntry {
    pub name: String,
    /// The source's description, e.g. `manifests examples/manifests`.
    pub source: String,
    pub informer: SharedIndexInformer,
}

/// The state of one configured plugin.
#[derive(Clone)]
pub enum PluginState {
    /// Loaded and registered with its informer.
    Running { registration: Registration, stats: Arc<PluginStats>, info: Box<PluginInfo> },
    /// Could not be loaded or registered; the rest of the host runs on.
    Failed { error: String },
}

/// One configured plugin.
#[derive(Clone)]
pub struct PluginEntry {
    pub name: String,
    pub informer: String,
    pub state: PluginState,
}

/// One running controller (`[[controller]]`).
#[derive(Clone)]
pub struct ControllerEntry {
    pub name: String,
    /// Its primary informer.
    pub informer: String,
    pub reconciles: Arc<crate::controller::runner::ReconcileStats>,
    /// Its write guard, whose counters are its writes'.
    pub guard: Arc<crate::controller::WriteGuard>,
    /// Reads its workqueue's metrics.
    pub queue: Arc<dyn Fn() -> crate::workqueue::QueueMetricsSnapshot + Send + Sync>,
}

/// What the controller of `Plugin` resources reports of this replica.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginResourcesSnapshot {
    pub identity: String,
    /// Its informers (Plugins, TenantPolicies, Namespaces) synced.
    pub synced: bool,
    /// `Plugin`s in the cluster (or its namespace).
    pub plugins: usize,
    /// Those this replica runs.
    pub loaded: usize,
    /// Lease counters, when replicas share the plugins.
    pub leases: Option<crate::coordination::CoordinatorStats>,
}

/// Reads a [`PluginResourcesSnapshot`].
pub type PluginResourcesProbe = Arc<dyn Fn() -> PluginResourcesSnapshot + Send + Sync>;

/// Reads the wasm runtime's instance counts (resident, idle, reclaimed).
pub type InstancesProbe = Arc<dyn Fn() -> crate::plugin::InstanceCounts + Send + Sync>;

#[derive(Default)]
struct Inner {
    plugin_resources: Option<PluginResourcesProbe>,
    instances: Option<InstancesProbe>,
    controllers: Vec<ControllerEntry>,
    informers: Vec<InformerEntry>,
    plugins: PluginList,
}

/// The plugins in the order they were first set, indexed by name: setting,
/// replacing or removing one costs the same with 10 plugins as with 10 000.
#[derive(Default)]
struct PluginList {
    /// By the sequence number of their first `set`.
    entries: BTreeMap<u64, PluginEntry>,
    by_name: HashMap<String, u64>,
    next: u64,
}

impl PluginList {
    fn set(&mut self, entry: PluginEntry) {
        match self.by_name.get(&entry.name) {
            Some(seq) => {
                self.entries.insert(*seq, entry);
            }
            None => {
                let seq = self.next;
                self.next += 1;
                self.by_name.insert(entry.name.clone(), seq);
                self.entries.insert(seq, entry);
            }
        }
    }
    fn remove(&mut self, name: &str) {
        if let Some(seq) = self.by_name.remove(name) {
            self.entries.remove(&seq);
        }
    }
    fn retain(&mut self, mut keep: impl FnMut(&PluginEntry) -> bool) {
        let by_name = &mut self.by_name;
        self.entries.retain(|_, e| {
            let k = keep(e);
            if !k {
                by_name.remove(&e.name);
            }
            k
        });
    }
    fn iter(&self) -> impl Iterator<Item = &PluginEntry> {
        self.entries.values()
    }
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// What metrics and readiness look at. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Observed {
    inner: Arc<RwLock<Inner>>,
}

impl Observed {
    pub fn new() -> Self {
        Self::default()
    }
    /// Reports the controller of `Plugin` resources on `/readyz` and
    /// `/metrics`.
    pub fn set_plugin_resources(&self, probe: PluginResourcesProbe) {
        self.inner.write().plugin_resources = Some(probe);
    }
    /// Reports the handlers' instances (idle reclaim) on `/metrics`.
    pub fn set_instances(&self, probe: InstancesProbe) {
        self.inner.write().instances = Some(probe);
    }
    pub fn add_informer(&self, entry: InformerEntry) {
        self.inner.write().informers.push(entry);
    }
    /// Adds a plugin, replacing one of the same name.
    pub fn set_plugin(&self, entry: PluginEntry) {
        self.inner.write().plugins.set(entry);
    }
    pub fn remove_plugin(&self, name: &str) {
        self.inner.write().plugins.remove(name);
    }
    /// Adds a running controller, replacing one of the same name.
    pub fn set_controller(&self, entry: ControllerEntry) {
        let mut inner = self.inner.write();
        inner.controllers.retain(|c| c.name != entry.name);
        inner.controllers.push(entry);
    }
    pub fn remove_controller(&self, name: &str) {
        self.inner.write().controllers.retain(|c| c.name != name);
    }
    pub fn controllers(&self) -> Vec<ControllerEntry> {
        self.inner.read().controllers.clone()
    }
    pub fn informers(&self) -> Vec<InformerEntry> {
        self.inner.read().informers.clone()
    }
    pub fn plugins(&self) -> Vec<PluginEntry> {
        self.inner.read().plugins.iter().cloned().collect()
    }
    /// The plugin named `name`, if listed.
    pub fn plugin(&self, name: &str) -> Option<PluginEntry> {
        let inner = self.inner.read();
        inner.plugins.by_name.get(name).and_then(|seq| inner.plugins.entries.get(seq)).cloned()
    }
    /// Keeps the plugins for which `keep` is true.
    pub fn retain_plugins(&self, keep: impl FnMut(&PluginEntry) -> bool) {
        self.inner.write().plugins.retain(keep);
    }
    /// How many plugins are listed (running or failed).
    pub fn plugin_count(&self) -> usize {
        self.inner.read().plugins.len()
    }

    /// Readiness: every informer synced and every registration synced.
    /// Plugins that failed to load do not hold readiness back (they are
    /// listed, and `plugin_up` is 0 for them).
    pub fn readiness(&self) -> Readiness {
        let inner = self.inner.read();
        let mut r = Readiness { ready: true, checks: Vec::new() };
        for i in &inner.informers {
            let synced = i.informer.has_synced();
            r.ready &= synced;
            let detail = if synced {
                format!("synced, {} objects", i.informer.indexer().len())
            } else if i.informer.is_stopped() {
                "stopped".to_string()
            } else {
                match i.informer.reflector_stats().last_error() {
                    Some(e) => format!("not synced: {e}"),
                    None => "not synced".to_string(),
                }
            };
            r.checks.push(Check { ok: synced, what: format!("informer {}", i.name), detail });
        }
        if let Some(probe) = &inner.plugin_resources {
            let s = probe();
            r.ready &= s.synced;
            let owns = match &s.leases {
                Some(l) => format!(" (owns {} through Leases; {} live replicas)", l.owned, l.replicas),
                None => String::new(),
            };
            let state = if s.synced { "synced" } else { "not synced" };
            r.checks.push(Check {
                ok: s.synced,
                what: "plugin resources".into(),
                detail: format!("{state}, replica {} runs {} of {} Plugins{owns}", s.identity, s.loaded, s.plugins),
            });
        }
        for p in inner.plugins.iter() {
            match &p.state {
                PluginState::Running { registration, .. } => {
                    let synced = registration.has_synced();
                    r.ready &= synced;
                    let detail = if synced {
                        "synced".to_string()
                    } else {
                        format!("not synced, {} pending", registration.pending())
                    };
                    r.checks.push(Check { ok: synced, what: format!("plugin {}", p.name), detail });
                }
                PluginState::Failed { error } => {
                    r.checks.push(Check {
                        ok: true,
                        what: format!("plugin {}", p.name),
                        detail: format!("failed to load (not counted for readiness): {error}"),
                    });
                }
            }
        }
        r
    }
}

/// One line of a readiness report.
#[derive(Debug, Clone)]
pub struct Check {
    pub ok: bool,
    pub what: String,
    pub detail: String,
}

/// The answer of `/readyz`.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Vec<Check>,
}

impl Readiness {
    /// Kubernetes-style text: `[+]informer x synced` / `[-]plugin y not synced`,
    /// one line per check (line breaks in a name or an error are written `\n`).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for c in &self.checks {
            let sign = if c.ok { '+' } else { '-' };
            let _ = writeln!(s, "[{sign}]{}: {}", one_line(&c.what), one_line(&c.detail));
        }
        s.push_str(if self.ready { "readyz check passed\n" } else { "readyz check failed\n" });
        s
    }
}

/// `s` with line breaks escaped, so that it cannot start a line of its own.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\n', '\r']) { s.replace('\n', "\\n").replace('\r', "\\r").into() } else { s.into() }
}

/// The registry served on `/metrics`.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    pub fn new(observed: Observed) -> Self {
        let mut registry = Registry::with_prefix("informer_host");
        registry.register_collector(Box::new(HostCollector { observed }));
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

#[derive(Debug)]
struct HostCollector {
    observed: Observed,
}

impl std::fmt::Debug for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.read();
        f.debug_struct("Observed")
            .field("informers", &inner.informers.iter().map(|i| &i.name).collect::<Vec<_>>())
            .field("plugins", &inner.plugins.iter().map(|p| &p.name).collect::<Vec<_>>())
            .finish()
    }
}

type Labels = Vec<(&'static str, LabelValue)>;

/// A label value, escaped when encoded as the text formats require: a
/// backslash, a double quote and a line feed become `\\`, `\"` and `\n`
/// (OpenMetrics, "Escaping"; Prometheus text format, "label_value").
#[derive(Debug, Clone, PartialEq, Eq)]
struct LabelValue(String);

impl From<&str> for LabelValue {
    fn from(s: &str) -> Self {
        LabelValue(s.to_string())
    }
}

impl From<String> for LabelValue {
    fn from(s: String) -> Self {
        LabelValue(s)
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let mut rest = self.0.as_str();
        while let Some(i) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..i])?;
            encoder.write_str(match rest.as_bytes()[i] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[i + 1..];
        }
        encoder.write_str(rest)
    }
}

/// A histogram sample: sum, count and `(upper bound, count)` buckets, each
/// bucket counting only its own observations (the encoder cumulates them).
type Histogram = (f64, u64, Vec<(f64, u64)>);

/// The call-latency histogram of `s`, for [`MetricEncoder::encode_histogram`].
///
/// The runtime counts each call in one bucket (not cumulatively), and
/// `encode_histogram` writes running sums of the counts it is given, so the
/// buckets are passed as they are, followed by an overflow bucket (`+Inf`,
/// `f64::MAX` for the encoder) of the calls slower than the last bound. The
/// counters are read one by one while calls go on: the count is at least
/// the buckets' sum, so `+Inf` always equals `_count`.
fn call_histogram(s: &PluginStats) -> Histogram {
    // `calls` is incremented after the bucket, so read it first.
    let calls = load(&s.calls);
    let sum = load(&s.call_nanos) as f64 / 1e9;
    let mut buckets: Vec<(f64, u64)> =
        crate::plugin::CALL_BUCKETS.iter().zip(&s.call_buckets).map(|(b, c)| (*b, load(c))).collect();
    let finite: u64 = buckets.iter().map(|(_, c)| c).sum();
    let count = calls.max(finite);
    buckets.push((f64::MAX, count - finite));
    (sum, count, buckets)
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Writes one metric family: a descriptor, then one sample per label set.
fn family<T>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    ty: MetricType,
    rows: &[(Labels, T)],
    mut write: impl FnMut(MetricEncoder, &T) -> Result<(), std::fmt::Error>,
) -> Result<(), std::fmt::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut m = encoder.encode_descriptor(name, help, unit, ty)?;
    for (labels, v) in rows {
        write(m.encode_family(labels)?, v)?;
    }
    Ok(())
}

fn counters(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    family(encoder, name, help, None, MetricType::Counter, rows, |m, v| ConstCounter::new(*v).encode(m))
}

fn gauges(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, i64)],
) -> Result<(), std::fmt::Error> {
    family(encoder, name, help, None, MetricType::Gauge, rows, |m, v| ConstGauge::new(*v).encode(m))
}

/// The `Plugin` resources this replica runs and its Leases.
fn plugin_resources_metrics(
    encoder: &mut DescriptorEncoder,
    s: &PluginResourcesSnapshot,
) -> Result<(), std::fmt::Error> {
    let l = || -> Labels { vec![("replica", s.identity.as_str().into())] };
    gauges(encoder, "plugin_resources", "Plugin resources in the cluster", &[(l(), s.plugins as i64)])?;
    gauges(encoder, "plugin_resources_running", "Plugin resources this replica runs", &[(l(), s.loaded as i64)])?;
    let Some(c) = &s.leases else { return Ok(()) };
    gauges(encoder, "leases_owned", "Plugin Leases this replica holds", &[(l(), c.owned as i64)])?;
    gauges(encoder, "leases_replicas", "Live replicas this replica sees", &[(l(), c.replicas as i64)])?;
    counters(encoder, "leases_acquisitions", "Plugin Leases taken", &[(l(), c.acquisitions)])?;
    counters(encoder, "leases_losses", "Plugin Leases lost (renew deadline passed, or taken)", &[(l(), c.losses)])?;
    counters(encoder, "leases_releases", "Plugin Leases handed over", &[(l(), c.releases)])?;
    counters(encoder, "leases_conflicts", "Lease writes refused with 409 Conflict", &[(l(), c.conflicts)])
}

/// client-go's workqueue metrics, one series per controller.
fn workqueue_metrics(
    encoder: &mut DescriptorEncoder,
    queues: &[(Labels, crate::workqueue::QueueMetricsSnapshot)],
) -> Result<(), std::fmt::Error> {
    let each = |f: &dyn Fn(&crate::workqueue::QueueMetricsSnapshot) -> u64| -> Vec<(Labels, u64)> {
        queues.iter().map(|(l, q)| (l.clone(), f(q))).collect()
    };
    let depth: Vec<_> = queues.iter().map(|(l, q)| (l.clone(), q.depth as i64)).collect();
    gauges(
        encoder,
        "workqueue_depth",
        "Keys waiting in the controller's workqueue (not those waiting for a delay)",
        &depth,
    )?;
    counters(
        encoder,
        "workqueue_adds",
        "Keys added to the workqueue (not counting de-duplicated adds)",
        &each(&|q| q.adds),
    )?;
    counters(encoder, "workqueue_retries", "Delayed and rate-limited re-adds", &each(&|q| q.retries))?;
    for (name, help, pick) in [
        (
            "workqueue_queue_duration_seconds",
            "Seconds a key waits in the workqueue before a worker takes it",
            (|q| &q.queue_latency)
                as fn(&crate::workqueue::QueueMetricsSnapshot) -> &crate::workqueue::HistogramSnapshot,
        ),
        ("workqueue_work_duration_seconds", "Seconds a reconcile takes, from taking a key to done", |q| {
            &q.work_duration
        }),
    ] {
        let rows: Vec<(Labels, Histogram)> = queues.iter().map(|(l, q)| (l.clone(), own_buckets(pick(q)))).collect();
        family(encoder, name, help, None, MetricType::Histogram, &rows, |mut m, (sum, count, buckets)| {
            m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(*sum, *count, buckets, None)
        })?;
    }
    let seconds = |f: &dyn Fn(&crate::workqueue::QueueMetricsSnapshot) -> f64| -> Vec<(Labels, f64)> {
        queues.iter().map(|(l, q)| (l.clone(), f(q))).collect()
    };
    family(
        encoder,
        "workqueue_unfinished_work_seconds",
        "Sum of the ages of the reconciles in flight (updated every 500 ms)",
        None,
        MetricType::Gauge,
        &seconds(&|q| q.unfinished_work_seconds),
        |m, v| ConstGauge::new(*v).encode(m),
    )?;
    family(
        encoder,
        "workqueue_longest_running_processor_seconds",
        "Age of the oldest reconcile in flight (updated every 500 ms)",
        None,
        MetricType::Gauge,
        &seconds(&|q| q.longest_running_processor_seconds),
        |m, v| ConstGauge::new(*v).encode(m),
    )
}

/// A workqueue histogram (cumulative buckets) as the encoder wants it: each
/// bucket's own count, then the overflow bucket.
fn own_buckets(h: &crate::workqueue::HistogramSnapshot) -> Histogram {
    let mut below = 0;
    let mut buckets: Vec<(f64, u64)> = h
        .buckets
        .iter()
        .map(|(le, cumulative)| {
            let own = cumulative.saturating_sub(below);
            below = below.max(*cumulative);
            (*le, own)
        })
        .collect();
    buckets.push((f64::MAX, h.count.saturating_sub(below)));
    (h.sum, h.count.max(below), buckets)
}

/// What each informer's reflector did (client-go's reflector metrics).
fn reflector_metrics(encoder: &mut DescriptorEncoder, informers: &[InformerEntry]) -> Result<(), std::fmt::Error> {
    let il = |i: &InformerEntry| -> Labels { vec![("informer", i.name.as_str().into())] };
    let each = |f: &dyn Fn(&crate::informer::ReflectorStats) -> u64| -> Vec<(Labels, u64)> {
        informers.iter().map(|i| (il(i), f(i.informer.reflector_stats()))).collect()
    };
    counters(encoder, "reflector_lists", "Lists (the first one and every relist)", &each(&|s| load(&s.lists)))?;
    counters(encoder, "reflector_list_failures", "Lists that failed", &each(&|s| load(&s.list_failures)))?;
    counters(encoder, "reflector_watches", "Watches opened", &each(&|s| load(&s.watches)))?;
    counters(
        encoder,
        "reflector_watch_retries",
        "Watches opened again from the last resourceVersion after a refused connection or a 429, without a list",
        &each(&|s| load(&s.watch_retries)),
    )?;
    let relists: Vec<(Labels, u64)> = informers
        .iter()
        .flat_map(|i| {
            let s = i.informer.reflector_stats();
            let with = |cause: &'static str| {
                let mut l = il(i);
                l.push(("cause", cause.into()));
                l
            };
            [(with("gone"), load(&s.relists_gone)), (with("watch_failed"), load(&s.relists_watch_failed))]
        })
        .collect();
    counters(encoder, "reflector_relists", "Relists by cause: 410 Gone/Expired, or another watch failure", &relists)?;
    counters(encoder, "reflector_events", "Watch events received", &each(&|s| load(&s.events)))?;
    let items: Vec<_> = each(&|s| load(&s.last_list_items)).into_iter().map(|(l, v)| (l, v as i64)).collect();
    gauges(encoder, "reflector_last_list_items", "Items in the last successful list", &items)?;
    let f64s = |f: &dyn Fn(&crate::informer::ReflectorStats) -> Option<f64>| -> Vec<(Labels, f64)> {
        informers.iter().filter_map(|i| f(i.informer.reflector_stats()).map(|v| (il(i), v))).collect()
    };
    family(
        encoder,
        "reflector_list_seconds",
        "Time spent in successful lists",
        None,
        MetricType::Counter,
        &f64s(&|s| Some(load(&s.list_micros) as f64 / 1e6)),
        |m, v| ConstCounter::new(*v).encode(m),
    )?;
    family(
        encoder,
        "reflector_seconds_since_last_event",
        "Seconds since the last list or watch event",
        None,
        MetricType::Gauge,
        &f64s(&|s| s.seconds_since_last_event()),
        |m, v| ConstGauge::new(*v).encode(m),
    )
}

impl Collector for HostCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let informers = self.observed.informers();
        let plugins = self.observed.plugins();

        let il = |i: &InformerEntry| -> Labels { vec![("informer", i.name.as_str().into())] };
        let synced: Vec<_> = informers.iter().map(|i| (il(i), i64::from(i.informer.has_synced()))).collect();
        gauges(&mut encoder, "informer_synced", "1 once the informer's first list was processed", &synced)?;
        let objects: Vec<_> = informers.iter().map(|i| (il(i), i.informer.indexer().len() as i64)).collect();
        gauges(&mut encoder, "informer_objects", "Objects in the informer's cache", &objects)?;
        let rv: Vec<_> = informers
            .iter()
            .filter_map(|i| i.informer.last_sync_resource_version().parse::<i64>().ok().map(|v| (il(i), v)))
            .collect();
        gauges(
            &mut encoder,
            "informer_resource_version",
            "The last resourceVersion the informer saw (when it is a number)",
            &rv,
        )?;
        reflector_metrics(&mut encoder, &informers)?;
        let probe = self.observed.inner.read().plugin_resources.clone();
        if let Some(probe) = probe {
            plugin_resources_metrics(&mut encoder, &probe())?;
        }
        let probe = self.observed.inner.read().instances.clone();
        if let Some(probe) = probe {
            let c = probe();
            let state = |s: &'static str| -> Labels { vec![("state", s.into())] };
            let rows = [(state("resident"), c.resident as i64), (state("idle"), c.idle as i64)];
            gauges(
                &mut encoder,
                "plugin_instances",
                "Handler instances in memory, and handlers idle without one",
                &rows,
            )?;
            family(
                &mut encoder,
                "plugin_instances_reclaimed",
                "Handler instances dropped after their idle timeout",
                None,
                MetricType::Counter,
                &[(Labels::new(), c.reclaimed_total)],
                |m, v| ConstCounter::new(*v).encode(m),
            )?;
        }

        let controllers = self.observed.controllers();
        let cl = |c: &ControllerEntry| -> Labels {
            vec![("controller", c.name.as_str().into()), ("informer", c.informer.as_str().into())]
        };
        let with = |c: &ControllerEntry, key: &'static str, value: &'static str| -> Labels {
            let mut l = cl(c);
            l.push((key, value.into()));
            l
        };
        let reconciles: Vec<_> = controllers
            .iter()
            .flat_map(|c| {
                let s = &c.reconciles;
                [
                    (with(c, "outcome", "succeeded"), load(&s.succeeded)),
                    (with(c, "outcome", "failed"), load(&s.failed)),
                    (with(c, "outcome", "trapped"), load(&s.trapped)),
                ]
            })
            .collect();
        counters(
            &mut encoder,
            "controller_reconciles",
            "Reconciles of the controller by outcome (failed and trapped ones are requeued with backoff)",
            &reconciles,
        )?;
        let requeued: Vec<_> = controllers.iter().map(|c| (cl(c), load(&c.reconciles.requeued_after))).collect();
        counters(
            &mut encoder,
            "controller_requeued_after",
            "Successful reconciles that asked to be called again after a delay",
            &requeued,
        )?;
        let writes: Vec<_> = controllers
            .iter()
            .flat_map(|c| {
                let s = &c.guard.stats;
                [
                    (with(c, "outcome", "succeeded"), load(&s.succeeded)),
                    (with(c, "outcome", "refused"), load(&s.refused)),
                    (with(c, "outcome", "failed"), load(&s.failed)),
                    (with(c, "outcome", "dry_run"), load(&s.dry_run)),
                ]
            })
            .collect();
        counters(
            &mut encoder,
            "controller_writes",
            "Writes of the controller by outcome (refused: by the host's checks, nothing was sent)",
            &writes,
        )?;
        workqueue_metrics(&mut encoder, &controllers.iter().map(|c| (cl(c), (c.queue)())).collect::<Vec<_>>())?;

        let pl = |p: &PluginEntry| -> Labels {
            vec![("plugin", p.name.as_str().into()), ("informer", p.informer.as_str().into())]
        };
        let up: Vec<_> =
            plugins.iter().map(|p| (pl(p), i64::from(matches!(p.state, PluginState::Running { .. })))).collect();
        gauges(&mut encoder, "plugin_up", "1 when the plugin is loaded and registered, 0 when it failed", &up)?;

        let running: Vec<(Labels, &Registration, &PluginStats, &PluginInfo)> = plugins
            .iter()
            .filter_map(|p| match &p.state {
                PluginState::Running { registration, stats, info } => Some((pl(p), registration, &**stats, &**info)),
                PluginState::Failed { .. } => None,
            })
            .collect();
        let rows = |f: &dyn Fn(&Registration, &PluginStats) -> u64| -> Vec<(Labels, u64)> {
            running.iter().map(|(l, r, s, _)| (l.clone(), f(r, s))).collect()
        };
        let grows = |f: &dyn Fn(&Registration) -> i64| -> Vec<(Labels, i64)> {
            running.iter().map(|(l, r, _, _)| (l.clone(), f(r))).collect()
        };

        gauges(
            &mut encoder,
            "plugin_synced",
            "1 once the informer synced and the plugin handled its initial list",
            &grows(&|r| i64::from(r.has_synced())),
        )?;
        gauges(&mut encoder, "plugin_pending", "Notifications queued for the plugin", &grows(&|r| r.pending() as i64))?;
        counters(
            &mut encoder,
            "notifications_delivered",
            "Notifications the plugin handled",
            &rows(&|r, _| load(&r.stats().delivered)),
        )?;
        counters(
            &mut encoder,
            "notifications_failed",
            "Notifications for which the plugin returned an error",
            &rows(&|r, _| load(&r.stats().failed)),
        )?;
        counters(
            &mut encoder,
            "notifications_skipped",
            "Notifications skipped because the plugin crashed (trap, fuel, deadline, memory)",
            &rows(&|r, _| load(&r.stats().crashed)),
        )?;

        let by_kind: Vec<(Labels, u64)> = running
            .iter()
            .flat_map(|(l, r, _, _)| {
                let st = r.stats();
                ListenerStats::OUTCOMES.iter().enumerate().flat_map(move |(o, outcome)| {
                    ListenerStats::KINDS.iter().enumerate().map(move |(k, kind)| {
                        let mut labels = l.clone();
                        labels.push(("kind", (*kind).into()));
                        labels.push(("outcome", (*outcome).into()));
                        (labels, load(&st.by_kind[o][k]))
                    })
                })
            })
            .collect();
        counters(
            &mut encoder,
            "notifications_by_kind",
            "Notifications by kind (add, update, delete) and outcome (delivered, failed, crashed = skipped)",
            &by_kind,
        )?;

        // Call latency from the runtime's fixed buckets.
        let latency: Vec<(Labels, Histogram)> =
            running.iter().map(|(l, _, s, _)| (l.clone(), call_histogram(s))).collect();
        // The unit is in the name only: no `# UNIT` line, which strict
        // OpenMetrics parsers accept on counters and gauges only.
        family(
            &mut encoder,
            "plugin_call_duration_seconds",
            "Time spent in plugin calls",
            None,
            MetricType::Histogram,
            &latency,
            |mut m, (sum, count, buckets)| {
                m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(*sum, *count, buckets, None)
            },
        )?;
        counters(
            &mut encoder,
            "plugin_fuel_consumed",
            "Fuel consumed by the plugin's calls",
            &rows(&|_, s| load(&s.fuel_consumed)),
        )?;
        counters(
            &mut encoder,
            "plugin_restarts",
            "Fresh instances made after a trap",
            &rows(&|_, s| load(&s.restarts)),
        )?;
        counters(
            &mut encoder,
            "plugin_wakes",
            "Fresh instances made after the last was reclaimed for idleness",
            &rows(&|_, s| load(&s.wakes)),
        )?;
        let mut traps = Vec::new();
        for (l, _, s, _) in &running {
            for (cause, v) in [
                ("fuel", &s.traps_fuel),
                ("deadline", &s.traps_deadline),
                ("memory", &s.traps_memory),
                ("other", &s.traps_other),
                ("protocol", &s.traps_protocol),
            ] {
                let mut l = l.clone();
                l.push(("cause", cause.into()));
                traps.push((l, load(v)));
            }
        }
        counters(&mut encoder, "plugin_traps", "Traps of the plugin's instances, by cause", &traps)?;
        counters(
            &mut encoder,
            "plugin_log_dropped_lines",
            "Log and stderr lines dropped by the plugin's log budget",
            &rows(&|_, s| load(&s.log_dropped_lines)),
        )?;
        counters(
            &mut encoder,
            "plugin_log_dropped_bytes",
            "Bytes of log and stderr lines dropped by the plugin's log budget",
            &rows(&|_, s| load(&s.log_dropped_bytes)),
        )?;
        counters(
            &mut encoder,
            "plugin_json_calls",
            "Calls of object.json() (0 for metadata-only plugins)",
            &rows(&|_, s| load(&s.json_calls)),
        )?;
        let info: Vec<(Labels, ())> = running
            .iter()
            .map(|(l, _, _, i)| {
                let mut l = l.clone();
                l.push(("file", i.file.display().to_string().into()));
                l.push(("hash", i.hash.as_str().into()));
                l.push(("world", i.world.as_str().into()));
                (l, ())
            })
            .collect();
        if !info.is_empty() {
            let mut m =
                encoder.encode_descriptor("plugin", "The loaded component of each plugin", None, MetricType::Info)?;
            for (labels, ()) in &info {
                m.encode_info(labels)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::{FnHandler, InformerOptions};
    use crate::source::MemorySource;
    use std::time::Duration;

    #[tokio::test]
    async fn metrics_and_readiness_follow_the_engine() {
        let src = MemorySource::new();
        src.apply_config_map("default", "a", "1").unwrap();
        src.apply_config_map("default", "b", "2").unwrap();
        let informer =
            SharedIndexInformer::new(src.clone(), InformerOptions { name: "cms".into(), ..Default::default() });
        let reg = informer
            .add_named_event_handler(
                "recorder",
                Box::new(FnHandler(|n: &crate::informer::Notification| {
                    if n.key() == "default/b" {
                        Err(crate::informer::HandlerError::Failed("no".into()))
                    } else {
                        Ok(())
                    }
                })),
                Duration::ZERO,
            )
            .unwrap();
        let observed = Observed::new();
        observed.add_informer(InformerEntry {
            name: "cms".into(),
            source: "memory".into(),
            informer: informer.clone(),
        });
        observed.set_plugin(PluginEntry {
            name: "recorder".into(),
            informer: "cms".into(),
            state: PluginState::Running {
                registration: reg.clone(),
                stats: {
                    let s = PluginStats::default();
                    s.observe_call(3e-6);
                    s.traps_protocol.store(2, Ordering::Relaxed);
                    s.log_dropped_lines.store(7, Ordering::Relaxed);
                    s.log_dropped_bytes.store(700, Ordering::Relaxed);
                    Arc::new(s)
                },
                info: Box::new(PluginInfo {
                    name: "recorder".into(),
                    file: "recorder.wasm".into(),
                    size_bytes: 1,
                    hash: "abc".into(),
                    world: "w".into(),
                    imports: vec![],
                    compile_time: Duration::ZERO,
                    from_cache: false,
                    instantiate_time: Duration::ZERO,
                }),
            },
        });
        observed.set_plugin(PluginEntry {
            name: "broken".into(),
            informer: "cms".into(),
            state: PluginState::Failed { error: "not a component".into() },
        });
        let metrics = Metrics::new(observed.clone());

        let r = observed.readiness();
        assert!(!r.ready);
        assert!(r.render().contains("[-]informer cms: not synced"), "{}", r.render());

        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn({
            let i = informer.clone();
            let s = stop.clone();
            async move { i.run(s).await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !observed.readiness().ready {
            assert!(tokio::time::Instant::now() < deadline, "{}", observed.readiness().render());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let text = observed.readiness().render();
        assert!(text.contains("[+]informer cms: synced, 2 objects"), "{text}");
        assert!(text.contains("[+]plugin recorder: synced"), "{text}");
        assert!(text.contains("[+]plugin broken: failed to load"), "{text}");
        assert!(text.ends_with("readyz check passed\n"), "{text}");

        let m = metrics.encode();
        for want in [
            "informer_host_informer_synced{informer=\"cms\"} 1",
            "informer_host_informer_objects{informer=\"cms\"} 2",
            "informer_host_informer_resource_version{informer=\"cms\"} 2",
            "informer_host_reflector_lists_total{informer=\"cms\"} 1",
            "informer_host_reflector_relists_total{informer=\"cms\",cause=\"gone\"} 0",
            "informer_host_reflector_last_list_items{informer=\"cms\"} 2",
            "informer_host_plugin_up{plugin=\"recorder\",informer=\"cms\"} 1",
            "informer_host_plugin_up{plugin=\"broken\",informer=\"cms\"} 0",
            "informer_host_notifications_delivered_total{plugin=\"recorder\",informer=\"cms\"} 1",
            "informer_host_notifications_failed_total{plugin=\"recorder\",informer=\"cms\"} 1",
            "informer_host_notifications_skipped_total{plugin=\"recorder\",informer=\"cms\"} 0",
            "informer_host_plugin_pending{plugin=\"recorder\",informer=\"cms\"} 0",
            "informer_host_plugin_call_duration_seconds_count{plugin=\"recorder\",informer=\"cms\"} 1",
            "informer_host_plugin_call_duration_seconds_bucket{le=\"0.000001\",plugin=\"recorder\",informer=\"cms\"} 0",
            "informer_host_plugin_call_duration_seconds_bucket{le=\"0.000005\",plugin=\"recorder\",informer=\"cms\"} 1",
            "informer_host_plugin_call_duration_seconds_bucket{le=\"+Inf\",plugin=\"recorder\",informer=\"cms\"} 1",
            "informer_host_notifications_by_kind_total{plugin=\"recorder\",informer=\"cms\",kind=\"add\",outcome=\"delivered\"} 1",
            "informer_host_notifications_by_kind_total{plugin=\"recorder\",informer=\"cms\",kind=\"add\",outcome=\"failed\"} 1",
            "informer_host_plugin_traps_total{plugin=\"recorder\",informer=\"cms\",cause=\"fuel\"} 0",
            "informer_host_plugin_traps_total{plugin=\"recorder\",informer=\"cms\",cause=\"protocol\"} 2",
            "informer_host_plugin_log_dropped_lines_total{plugin=\"recorder\",informer=\"cms\"} 7",
            "informer_host_plugin_log_dropped_bytes_total{plugin=\"recorder\",informer=\"cms\"} 700",
            "informer_host_plugin_info{plugin=\"recorder\",informer=\"cms\",file=\"recorder.wasm\",hash=\"abc\",world=\"w\"} 1",
            "# EOF",
        ] {
            assert!(m.contains(want), "missing {want:?} in\n{m}");
        }
        stop.cancel();
        task.await.unwrap();
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = String::new();
        {
            let mut registry = Registry::default();
            #[derive(Debug)]
            struct One;
            impl Collector for One {
                fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
                    let rows = [(vec![("plugin", LabelValue::from("a\\b\"c\nd} 1"))], 1)];
                    gauges(&mut encoder, "g", "h", &rows)
                }
            }
            registry.register_collector(Box::new(One));
            prometheus_client::encoding::text::encode(&mut s, &registry).unwrap();
        }
        assert!(s.contains("g{plugin=\"a\\\\b\\\"c\\nd} 1\"} 1\n"), "{s}");
        assert_eq!(s.lines().filter(|l| l.starts_with("g{")).count(), 1, "{s}");
    }

    #[test]
    fn call_buckets_cumulate_to_the_count() {
        let s = PluginStats::default();
        for secs in [5e-7, 3e-6, 3e-6, 0.5, 2.0, 30.0] {
            s.observe_call(secs);
        }
        s.observe_calls(1e-4, 994);
        let (_, count, buckets) = call_histogram(&s);
        assert_eq!(count, 1000);
        // Per bucket here; `encode_histogram` cumulates them.
        let own: Vec<u64> = buckets.iter().map(|(_, c)| *c).collect();
        assert_eq!(own, [1, 2, 0, 994, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(buckets.last().unwrap().0, f64::MAX);

        let observed = Observed::new();
        let informer = SharedIndexInformer::new(MemorySource::new(), InformerOptions::default());
        let registration = informer
            .add_named_event_handler(
                "p",
                Box::new(FnHandler(|_: &crate::informer::Notification| Ok(()))),
                Duration::ZERO,
            )
            .unwrap();
        observed.set_plugin(PluginEntry {
            name: "p".into(),
            informer: "i".into(),
            state: PluginState::Running { registration, stats: Arc::new(s), info: Box::new(info()) },
        });
        let m = Metrics::new(observed).encode();
        let bucket = |le: &str| {
            let prefix = format!("informer_host_plugin_call_duration_seconds_bucket{{le=\"{le}\",");
            let line = m.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {le} in\n{m}"));
            line.rsplit(' ').next().unwrap().parse::<u64>().unwrap()
        };
        assert_eq!(
            [bucket("0.000001"), bucket("0.000005"), bucket("0.0001"), bucket("0.25"), bucket("1.0"), bucket("+Inf")],
            [1, 3, 997, 997, 998, 1000],
            "{m}"
        );
        assert!(
            m.contains("informer_host_plugin_call_duration_seconds_count{plugin=\"p\",informer=\"i\"} 1000"),
            "{m}"
        );
    }

    fn info() -> PluginInfo {
        PluginInfo {
            name: "p".into(),
            file: "p.wasm".into(),
            size_bytes: 1,
            hash: "abc".into(),
            world: "w".into(),
            imports: vec![],
            compile_time: Duration::ZERO,
            from_cache: false,
            instantiate_time: Duration::ZERO,
        }
    }

    #[test]
    fn readiness_lines_cannot_be_forged() {
        let r = Readiness {
            ready: false,
            checks: vec![Check { ok: false, what: "plugin x".into(), detail: "bad\n[+]plugin y: synced".into() }],
        };
        assert_eq!(r.render(), "[-]plugin x: bad\\n[+]plugin y: synced\nreadyz check failed\n");
    }
}
