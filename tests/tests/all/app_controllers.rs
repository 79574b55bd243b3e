//! A `[[controller]]` run by the program ([`App`]) against the test API
//! server: kube informers, the reloader, and its writes going to the API
//! server through a `KubeWriter` over the sources' client, inside its
//! tenant's namespaces.

use e2e::apiserver::{ApiServer, config_map};
use e2e::eventually;
use informer_host::app::{App, KubeOptions, RunOptions};
use informer_host::config::Config;
use serde_json::{Value, json};

fn deployment(namespace: &str, name: &str, config_map: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": "nginx",
                    "envFrom": [{"configMapRef": {"name": config_map}}],
                }]},
            },
        },
    })
}

const HASH: &str = "informer-host.dev/config-hash";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reloader_writes_to_the_api_server_only_in_its_tenants_namespaces() {
    let server = ApiServer::start().await;
    server.create(config_map("shop", "web-config", &[], &[("A", "1")])).unwrap();
    server.create(deployment("shop", "web", "web-config")).unwrap();
    // Another tenant's Deployment: not seen, never written.
    server.create(config_map("other", "cfg", &[], &[("A", "1")])).unwrap();
    server.create(deployment("other", "app", "cfg")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig, None);
    let wasm = plugin_build::plugin_path("reloader");
    let text = format!(
        r#"
[[tenant]]
name = "shop"
namespaces = ["shop"]

[[informer]]
name = "deployments"
source = "kube"
api_version = "apps/v1"
kind = "Deployment"

[[informer]]
name = "configmaps"
source = "kube"
api_version = "v1"
kind = "ConfigMap"

[[informer]]
name = "secrets"
source = "kube"
api_version = "v1"
kind = "Secret"

[[controller]]
name = "reloader"
wasm = {wasm:?}
informer = "deployments"
watches = [{{ informer = "configmaps", map = "plugin" }}, {{ informer = "secrets", map = "plugin" }}]
grants = ["log", "cache", "kube"]
rules = [
  {{ api_groups = ["apps"], kinds = ["Deployment"], verbs = ["patch"] }},
  {{ api_groups = [""], kinds = ["Event"], verbs = ["create"] }},
]
tenant = "shop"
"#
    );
    let config = Config::parse(&text, "host.toml", dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let opts =
        RunOptions { kube: KubeOptions { kubeconfig: Some(kubeconfig), context: None }, ..RunOptions::default() };
    let app = App::start(&config, &opts).await.unwrap();
    let annotation = |ns: &str, name: &str, pointer: &str| {
        server
            .get("apps/v1", "Deployment", Some(ns), name)
            .and_then(|d| d.pointer(pointer).and_then(Value::as_str).map(str::to_string))
    };
    let on_metadata = format!("/metadata/annotations/{}", HASH.replace('/', "~1"));
    let on_template = format!("/spec/template/metadata/annotations/{}", HASH.replace('/', "~1"));
    eventually("the first-sight patch on the server", || annotation("shop", "web", &on_metadata).is_some()).await;
    eventually("ready", || app.readiness().ready).await;
    assert!(app.readiness().render().contains("[+]controller reloader: synced"), "{}", app.readiness().render());
    assert_eq!(annotation("shop", "web", &on_template), None, "first sight does not roll");

    // A real change: the pod template gets the new hash (a roll).
    server.update(config_map("shop", "web-config", &[], &[("A", "2")])).unwrap();
    eventually("the roll", || annotation("shop", "web", &on_template).is_some()).await;
    assert_eq!(annotation("shop", "web", &on_template), annotation("shop", "web", &on_metadata));

    let patches: Vec<_> = server.writes().into_iter().filter(|r| r.method == "PATCH").map(|r| r.uri.clone()).collect();
    assert_eq!(patches.len(), 2, "{patches:#?}");
    assert!(patches.iter().all(|p| p.contains("/namespaces/shop/deployments/web")), "{patches:#?}");
    assert!(patches.iter().all(|p| p.contains("fieldManager=reloader")), "{patches:#?}");
    assert_eq!(annotation("other", "app", &on_metadata), None, "another tenant's Deployment is never written");
    app.shutdown().await;
}

/// The `[[controller]]` table of the reload test: `test-controller` on the
/// ConfigMaps, with `settings` as its config.
fn labeller(wasm: &std::path::Path, settings: &str) -> String {
    format!(
        "\n[[controller]]\nname = \"labeller\"\nwasm = {:?}\ninformer = \"cms\"\ngrants = [\"log\", \"cache\", \"kube\"]\n\
         config = {settings}\nqps = 1000\nburst = 1000\n\
         rules = [{{ api_groups = [\"\"], kinds = [\"ConfigMap\"], verbs = [\"create\", \"patch\"] }}]\n",
        wasm.display().to_string()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_starts_replaces_and_stops_controllers_and_a_version_that_does_not_load_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let mut yaml = String::new();
    for name in ["x", "y", "z"] {
        yaml.push_str(&format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: a\n"));
    }
    std::fs::write(manifests.join("cms.yaml"), yaml).unwrap();
    let base = "[[informer]]\nname = \"cms\"\nsource = \"manifests\"\ndir = \"manifests\"\napi_version = \"v1\"\nkind = \"ConfigMap\"\n";
    let file = dir.path().join("host.toml");
    std::fs::write(&file, base).unwrap();
    let app = App::start(&Config::load(&file).unwrap(), &RunOptions::default()).await.unwrap();
    eventually("ready", || app.readiness().ready).await;
    let cms = app.observed.informers().into_iter().find(|i| i.name == "cms").unwrap().informer;
    let label = |key: &str| cms.indexer().get(key).and_then(|o| o.label("reconciled").map(str::to_string));
    let wasm = plugin_build::plugin_path("test-controller");

    // Added: it starts and reconciles every key.
    std::fs::write(&file, format!("{base}{}", labeller(&wasm, "{ label = true }"))).unwrap();
    app.reload().await;
    eventually("all labelled", || ["a/x", "a/y", "a/z"].iter().all(|k| label(k).as_deref() == Some("yes"))).await;
    eventually("ready with the controller", || app.readiness().render().contains("[+]controller labeller: synced"))
        .await;

    // A version that does not load: the running one keeps running.
    std::fs::write(&file, format!("{base}{}", labeller(&dir.path().join("missing.wasm"), "{ label = true }"))).unwrap();
    app.reload().await;
    assert!(app.readiness().render().contains("[+]controller labeller: synced"), "{}", app.readiness().render());
    assert_eq!(app.observed.controllers().len(), 1);

    // Changed settings: the new version takes over and reconciles every
    // key (it writes a ConfigMap per key into namespace b).
    std::fs::write(&file, format!("{base}{}", labeller(&wasm, "{ write_to = \"b\" }"))).unwrap();
    app.reload().await;
    eventually("the new version reconciled every key", || {
        ["b/x", "b/y", "b/z"].iter().all(|k| cms.indexer().get(k).is_some())
    })
    .await;
    assert_eq!(app.observed.controllers().len(), 1, "one version runs");

    // Removed: stopped, no longer reported.
    std::fs::write(&file, base).unwrap();
    app.reload().await;
    assert!(app.observed.controllers().is_empty());
    assert!(!app.readiness().render().contains("labeller"), "{}", app.readiness().render());
    app.shutdown().await;
}
