use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::collector::{LabelValue, call_histogram, gauges};
use super::*;
use crate::informer::{FnHandler, InformerOptions, SharedIndexInformer};
use crate::plugin::{PluginInfo, PluginStats};
use crate::source::MemorySource;

#[tokio::test]
async fn metrics_and_readiness_follow_the_engine() {
    let src = MemorySource::new();
    src.apply_config_map("default", "a", "1").unwrap();
    src.apply_config_map("default", "b", "2").unwrap();
    let informer = SharedIndexInformer::new(src.clone(), InformerOptions { name: "cms".into(), ..Default::default() });
    let reg = informer
        .add_named_event_handler(
            "recorder",
            Box::new(FnHandler(|n: &crate::informer::Notification| {
                if n.key() == "default/b" { Err(crate::informer::HandlerError::Failed("no".into())) } else { Ok(()) }
            })),
            Duration::ZERO,
        )
        .unwrap();
    let observed = Observed::new();
    observed.add_informer(InformerEntry { name: "cms".into(), source: "memory".into(), informer: informer.clone() });
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
            info: Box::new(info("recorder")),
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
        .add_named_event_handler("p", Box::new(FnHandler(|_: &crate::informer::Notification| Ok(()))), Duration::ZERO)
        .unwrap();
    observed.set_plugin(PluginEntry {
        name: "p".into(),
        informer: "i".into(),
        state: PluginState::Running { registration, stats: Arc::new(s), info: Box::new(info("p")) },
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
    assert!(m.contains("informer_host_plugin_call_duration_seconds_count{plugin=\"p\",informer=\"i\"} 1000"), "{m}");
}

/// What loading plugin `name` (from `{name}.wasm`) reported.
fn info(name: &str) -> PluginInfo {
    PluginInfo {
        name: name.into(),
        file: format!("{name}.wasm").into(),
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
