//! `/metrics` checked with a real OpenMetrics parser: the whole exposition of
//! a running host parses, every histogram is cumulative with `+Inf` equal to
//! `_count`, and names carrying quotes, backslashes and newlines come out as
//! label values, never as series of their own.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use e2e::http_get;
use informer_host::app::{App, RunOptions};
use informer_host::config::Config;
use informer_host::informer::{FnHandler, InformerOptions, Notification, SharedIndexInformer};
use informer_host::metrics::{InformerEntry, Metrics, Observed, PluginEntry, PluginState};
use informer_host::plugin::{CALL_BUCKETS, PluginInfo, PluginStats};
use informer_host::source::MemorySource;
use openmetrics_parser::openmetrics::parse_openmetrics;
use openmetrics_parser::{MetricsExposition, OpenMetricsType, OpenMetricsValue};

type Exposition = MetricsExposition<OpenMetricsType, OpenMetricsValue>;

/// Parses `text` and checks every histogram: buckets non-decreasing and
/// `+Inf` equal to `_count`. Returns the parsed exposition.
fn parse_and_check(text: &str) -> Exposition {
    let exposition = parse_openmetrics(text).unwrap_or_else(|e| panic!("/metrics does not parse: {e:?}\n{text}"));
    let mut histograms = 0;
    for family in exposition.families.values() {
        for sample in family.iter_samples() {
            let OpenMetricsValue::Histogram(h) = &sample.value else { continue };
            histograms += 1;
            let labels: Vec<_> = sample.get_labelset().unwrap().iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            let what = format!("{}{{{}}}", family.family_name, labels.join(","));
            let counts: Vec<f64> = h.buckets.iter().map(|b| b.count.as_f64()).collect();
            assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{what}: buckets decrease: {counts:?}");
            let inf = h.buckets.iter().find(|b| b.upper_bound == f64::INFINITY);
            let inf = inf.unwrap_or_else(|| panic!("{what}: no +Inf bucket")).count.as_f64();
            let count = h.count.unwrap_or_else(|| panic!("{what}: no _count")) as f64;
            assert_eq!(inf, count, "{what}: +Inf bucket {inf} but _count {count}\n{text}");
        }
    }
    assert!(histograms > 0, "no histogram to check in\n{text}");
    exposition
}

/// Every `(family, label, value)` of the exposition.
fn label_values(e: &Exposition) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for f in e.families.values() {
        for s in f.iter_samples() {
            for (k, v) in s.get_labelset().unwrap().iter() {
                out.insert((f.family_name.clone(), k.clone(), v.clone()));
            }
        }
    }
    out
}

const HOSTILE: &str = "evil\"} 1\ninformer_host_forged_total{x=\"y\\\"} 1\n# EOF\n";

#[tokio::test]
async fn hostile_names_stay_label_values_and_histograms_are_cumulative() {
    let src = MemorySource::new();
    src.apply_config_map("default", "a", "1").unwrap();
    let informer =
        SharedIndexInformer::new(src.clone(), InformerOptions { name: HOSTILE.into(), ..Default::default() });
    let registration = informer
        .add_named_event_handler(HOSTILE, Box::new(FnHandler(|_: &Notification| Ok(()))), Duration::ZERO)
        .unwrap();
    let stats = PluginStats::default();
    // 5 000 calls spread over every bucket and past the last one.
    for i in 0..5_000u32 {
        let bucket = (i as usize) % (CALL_BUCKETS.len() + 1);
        let secs = CALL_BUCKETS.get(bucket).map_or(2.0, |b| b * 0.9);
        stats.observe_call(secs);
    }
    let observed = Observed::new();
    observed.add_informer(InformerEntry { name: HOSTILE.into(), source: "memory".into(), informer });
    observed.set_plugin(PluginEntry {
        name: HOSTILE.into(),
        informer: HOSTILE.into(),
        state: PluginState::Running {
            registration,
            stats: Arc::new(stats),
            info: Box::new(PluginInfo {
                name: HOSTILE.into(),
                file: format!("/plugins/{HOSTILE}.wasm").into(),
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
        name: format!("{HOSTILE}-failed"),
        informer: HOSTILE.into(),
        state: PluginState::Failed { error: "x".into() },
    });
    let text = Metrics::new(observed).encode();
    let exposition = parse_and_check(&text);

    let families: BTreeSet<&str> = exposition.families.keys().map(String::as_str).collect();
    assert!(!families.iter().any(|f| f.contains("forged")), "a name added a series: {families:?}\n{text}");
    assert!(families.iter().all(|f| f.starts_with("informer_host_")), "{families:?}");
    let values = label_values(&exposition);
    for (family, label) in [
        ("informer_host_informer_objects", "informer"),
        ("informer_host_plugin_up", "plugin"),
        ("informer_host_plugin_up", "informer"),
        ("informer_host_plugin_call_duration_seconds", "plugin"),
    ] {
        assert!(
            values.contains(&(family.to_string(), label.to_string(), HOSTILE.to_string())),
            "{family} {label} does not carry the name as its value\n{text}"
        );
    }
    let file = format!("/plugins/{HOSTILE}.wasm");
    assert!(values.contains(&("informer_host_plugin".into(), "file".into(), file)), "{text}");
    let calls = &exposition.families["informer_host_plugin_call_duration_seconds"];
    let OpenMetricsValue::Histogram(h) = &calls.iter_samples().next().unwrap().value else { panic!() };
    assert_eq!(h.count, Some(5_000));
    // Each finite bucket got 5 000 / 11 calls (rounded): cumulative counts.
    let counts: Vec<f64> = h.buckets.iter().map(|b| b.count.as_f64()).collect();
    let want: Vec<f64> =
        (1..=CALL_BUCKETS.len() + 1).map(|k| (0..5_000).filter(|i| i % 11 < k).count() as f64).collect();
    assert_eq!(counts, want);
}

/// A TOML basic string holding `s`.
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_exposition_of_a_running_host_parses() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let mut yaml = String::new();
    for i in 0..300 {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: ns-{}\ndata:\n  k: \"{i}\"\n",
            i % 3
        ));
    }
    std::fs::write(manifests.join("cms.yaml"), yaml).unwrap();
    // A component file whose name carries a forged series: it becomes the
    // `file` label of `plugin_info`.
    let wasm_dir = dir.path().join("wasm");
    std::fs::create_dir(&wasm_dir).unwrap();
    let hostile_file = wasm_dir.join(format!("{HOSTILE}.wasm"));
    std::fs::copy(e2e::plugins::wasm("event-log"), &hostile_file).unwrap();
    let config = format!(
        "[host]\nmetrics_addr = \"127.0.0.1:0\"\n\
         \n[[informer]]\nname = \"cms\"\nsource = \"manifests\"\ndir = \"manifests\"\napi_version = \"v1\"\nkind = \"ConfigMap\"\n\
         \n[[tenant]]\nname = \"ops\"\nnamespaces = [\"ns-1\"]\n\
         \n[[plugin]]\nname = \"event-log\"\nwasm = {}\ninformer = \"cms\"\ngrants = [\"log\"]\n\
         \n[[plugin]]\nname = \"ops-log\"\nwasm = {}\ninformer = \"cms\"\ntenant = \"ops\"\ngrants = [\"log\"]\n\
         \n[[plugin]]\nname = \"broken\"\nwasm = {}\ninformer = \"cms\"\n\
         \n[[controller]]\nname = \"labeller\"\nwasm = {}\ninformer = \"cms\"\ngrants = [\"log\", \"cache\", \"kube\"]\n\
         config = {{ label = true }}\nqps = 10000\nburst = 10000\nrules = [{{ api_groups = [\"\"], kinds = [\"ConfigMap\"], verbs = [\"patch\"] }}]\n",
        toml_str(&hostile_file.display().to_string()),
        toml_str(&e2e::plugins::wasm("event-log").display().to_string()),
        toml_str(&manifests.join("cms.yaml").display().to_string()),
        toml_str(&e2e::plugins::wasm("test-controller").display().to_string()),
    );
    let config = Config::parse(&config, dir.path().join("host.toml"), dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let app = App::start(&config, &RunOptions::default()).await.unwrap();
    let metrics = app.admin_addr.unwrap();
    e2e::eventually("ready", || app.observed.readiness().ready).await;

    let (status, text) = http_get(metrics, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    let exposition = parse_and_check(&text);
    let families: BTreeSet<&str> = exposition.families.keys().map(String::as_str).collect();
    assert!(!families.iter().any(|f| f.contains("forged")), "a file name added a series: {families:?}\n{text}");
    let values = label_values(&exposition);
    let file = hostile_file.display().to_string();
    assert!(
        values.iter().any(|(f, k, v)| f == "informer_host_plugin" && k == "file" && v.ends_with(&file)),
        "the file label does not round-trip\n{text}"
    );
    let calls = &exposition.families["informer_host_plugin_call_duration_seconds"];
    let counts: Vec<u64> = calls
        .iter_samples()
        .map(|s| match &s.value {
            OpenMetricsValue::Histogram(h) => h.count.unwrap(),
            _ => unreachable!(),
        })
        .collect();
    assert!(counts.iter().any(|c| *c >= 300), "event-log handled the initial list: {counts:?}\n{text}");
    // The controller's workqueue: every ConfigMap's key was added and
    // reconciled (each reconcile observed in the work-duration histogram).
    e2e::eventually("300 ConfigMaps labelled", || {
        app.observed
            .controllers()
            .iter()
            .any(|c| c.reconciles.succeeded.load(std::sync::atomic::Ordering::Relaxed) >= 600)
    })
    .await;
    let (_, text) = http_get(metrics, "/metrics").await;
    let exposition = parse_and_check(&text);
    for family in [
        "informer_host_workqueue_depth",
        "informer_host_workqueue_adds",
        "informer_host_workqueue_retries",
        "informer_host_workqueue_queue_duration_seconds",
        "informer_host_workqueue_work_duration_seconds",
        "informer_host_workqueue_unfinished_work_seconds",
        "informer_host_workqueue_longest_running_processor_seconds",
    ] {
        assert!(exposition.families.contains_key(family), "no {family} in\n{text}");
    }
    let work = exposition.families["informer_host_workqueue_work_duration_seconds"].iter_samples().next().unwrap();
    let OpenMetricsValue::Histogram(h) = &work.value else { panic!("work duration is not a histogram") };
    assert!(h.count.unwrap() >= 600, "one observation per reconcile: {:?}", h.count);
    assert_eq!(http_get(metrics, "/readyz").await.0, 200);

    app.shutdown().await;
}
