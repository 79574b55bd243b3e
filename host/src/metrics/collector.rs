//! The collector `/metrics` runs on each scrape: it reads the engine's and
//! the runtime's counters through [`Observed`] and writes every metric
//! family, with label values escaped as the text formats require.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::observed::{ControllerEntry, InformerEntry, Observed, PluginEntry, PluginResourcesSnapshot, PluginState};
use crate::informer::{ListenerStats, Registration};
use crate::plugin::{PluginInfo, PluginStats};

/// The one collector of the registry: every metric, from [`Observed`].
#[derive(Debug)]
pub(super) struct HostCollector {
    observed: Observed,
}

impl HostCollector {
    pub(super) fn new(observed: Observed) -> Self {
        HostCollector { observed }
    }
}

type Labels = Vec<(&'static str, LabelValue)>;

/// A label value, escaped when encoded as the text formats require: a
/// backslash, a double quote and a line feed become `\\`, `\"` and `\n`
/// (OpenMetrics, "Escaping"; Prometheus text format, "label_value").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LabelValue(String);

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
pub(super) fn call_histogram(s: &PluginStats) -> Histogram {
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

pub(super) fn gauges(
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
    counters(encoder, "leases_conflicts", "Lease writes refused with 409 Conflict", &[(l(), c.conflicts)])?;
    counters(encoder, "leases_collected", "Abandoned Leases deleted", &[(l(), c.collected)])
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
        let probe = self.observed.plugin_resources_probe();
        if let Some(probe) = probe {
            plugin_resources_metrics(&mut encoder, &probe())?;
        }
        let probe = self.observed.instances_probe();
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
