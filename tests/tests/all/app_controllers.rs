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

/// Where the reloader writes its hash.
#[derive(Clone, Copy)]
enum On {
    /// The Deployment's own annotations (every patch).
    Metadata,
    /// The pod template's annotations (a roll).
    Template,
}

/// The hash stored on the server's Deployment `namespace/name`.
fn stored_hash(server: &ApiServer, namespace: &str, name: &str, on: On) -> Option<String> {
    let annotations = match on {
        On::Metadata => "/metadata/annotations",
        On::Template => "/spec/template/metadata/annotations",
    };
    let deployment = server.get("apps/v1", "Deployment", Some(namespace), name)?;
    deployment.pointer(annotations)?.get(HASH)?.as_str().map(str::to_string)
}

/// Starts the program with the reloader of tenant `shop` on Deployments,
/// ConfigMaps and Secrets of `server`; `deployments` is added to the
/// Deployments' `[[informer]]` table, `controller` to the reloader's.
async fn start_reloader(server: &ApiServer, dir: &std::path::Path, deployments: &str, controller: &str) -> App {
    let kubeconfig = dir.join("kubeconfig");
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
{deployments}

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
{controller}
"#
    );
    let config = Config::parse(&text, "host.toml", dir).unwrap_or_else(|e| panic!("{e}"));
    let opts = RunOptions {
        kube: KubeOptions { kubeconfig: Some(kubeconfig), context: None },
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..RunOptions::default()
    };
    App::start(&config, &opts).await.unwrap()
}

/// `informer_host_controller_writes_total` of the reloader with `outcome`.
async fn writes(app: &App, outcome: &str) -> u64 {
    let (_, text) = e2e::http_get(app.admin_addr.expect("metrics served"), "/metrics").await;
    let series = format!(
        "informer_host_controller_writes_total{{controller=\"reloader\",informer=\"deployments\",outcome=\"{outcome}\"}} "
    );
    text.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// The PATCH requests the server has answered: the URIs of those that took
/// effect, and the others with their status codes. (A patch is stored
/// before it is answered: waiting for a change on the server is not
/// waiting for its answer.)
fn patches(server: &ApiServer) -> (Vec<String>, Vec<(String, u16)>) {
    let mut done = Vec::new();
    let mut refused = Vec::new();
    for r in server.writes().into_iter().filter(|r| r.method == "PATCH") {
        match r.status() {
            Some(200..300) => done.push(r.uri),
            Some(status) => refused.push((r.uri, status)),
            None => {}
        }
    }
    (done, refused)
}

/// Waits until the server has answered every write it received.
async fn answered(server: &ApiServer) {
    eventually("every write answered", || server.writes().iter().all(|r| r.status().is_some())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reloader_writes_to_the_api_server_only_in_its_tenants_namespaces() {
    let server = ApiServer::start().await;
    server.create(config_map("shop", "web-config", &[], &[("A", "1")])).unwrap();
    server.create(deployment("shop", "web", "web-config")).unwrap();
    // Another tenant's Deployment: not seen, never written.
    server.create(config_map("other", "cfg", &[], &[("A", "1")])).unwrap();
    server.create(deployment("other", "app", "cfg")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let app = start_reloader(&server, dir.path(), "", "").await;
    let annotation = |ns: &str, name: &str, on: On| stored_hash(&server, ns, name, on);
    eventually("the first-sight patch on the server", || annotation("shop", "web", On::Metadata).is_some()).await;
    eventually("ready", || app.readiness().ready).await;
    assert!(app.readiness().render().contains("[+]controller reloader: synced"), "{}", app.readiness().render());
    assert_eq!(annotation("shop", "web", On::Template), None, "first sight does not roll");

    // A real change: the pod template gets the new hash (a roll).
    server.update(config_map("shop", "web-config", &[], &[("A", "2")])).unwrap();
    eventually("the roll", || annotation("shop", "web", On::Template).is_some()).await;
    assert_eq!(annotation("shop", "web", On::Template), annotation("shop", "web", On::Metadata));

    // Two patches took effect. One made on a cache that did not show the
    // first-sight patch yet would have been refused as stale (see the next
    // test); none other is.
    answered(&server).await;
    let (done, refused) = patches(&server);
    assert_eq!(done.len(), 2, "{done:#?}");
    assert!(refused.iter().all(|(_, status)| *status == 409), "{refused:#?}");
    assert!(done.iter().all(|p| p.contains("/namespaces/shop/deployments/web")), "{done:#?}");
    assert!(done.iter().all(|p| p.contains("fieldManager=reloader")), "{done:#?}");
    assert_eq!(annotation("other", "app", On::Metadata), None, "another tenant's Deployment is never written");
    app.shutdown().await;
}

/// A controller's write answered `504` is not sent again by the client
/// (kube's default retry policy resends any method on 503 and 504, though
/// the server may have carried the write out): the controller sees the
/// failure and its workqueue retries, with the backoff it reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_answered_504_is_not_resent_by_the_client() {
    let server = ApiServer::start().await;
    server.create(config_map("shop", "web-config", &[], &[("A", "1")])).unwrap();
    server.create(deployment("shop", "web", "web-config")).unwrap();
    server.fail_next_where(|r| r.method == "PATCH", 504);
    let dir = tempfile::tempdir().unwrap();
    let app = start_reloader(&server, dir.path(), "", "").await;
    eventually("the first-sight patch on the server", || stored_hash(&server, "shop", "web", On::Metadata).is_some())
        .await;
    answered(&server).await;
    let (done, refused) = patches(&server);
    assert_eq!((done.len(), refused.len()), (1, 1), "{done:#?} {refused:#?}");
    assert_eq!(refused[0].1, 504);
    // The controller saw the 504 (the client did not hide it by resending).
    let (failed, succeeded) = (writes(&app, "failed").await, writes(&app, "succeeded").await);
    assert_eq!((failed, succeeded), (1, 1));
    app.shutdown().await;
}

/// With a field index of the Deployments by the ConfigMaps their pod
/// templates use (as `examples/host.toml` configures it), the reloader maps
/// a changed ConfigMap with one index lookup: the Deployment that uses it
/// rolls, the one beside it that uses another does not. (Without the index
/// the same is done by listing the namespace, the tests above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reloader_maps_a_change_through_a_field_index_of_the_deployments() {
    let server = ApiServer::start().await;
    server.create(config_map("shop", "web-config", &[], &[("A", "1")])).unwrap();
    server.create(config_map("shop", "api-config", &[], &[("B", "1")])).unwrap();
    server.create(deployment("shop", "web", "web-config")).unwrap();
    server.create(deployment("shop", "api", "api-config")).unwrap();
    let index = r#"
[informer.field_indexers]
configmaps = ["$.spec.template.spec['containers','initContainers'][*].envFrom[*].configMapRef.name"]
"#;
    let dir = tempfile::tempdir().unwrap();
    let app = start_reloader(&server, dir.path(), index, r#"config = { configmap_index = "configmaps" }"#).await;
    let annotation = |name: &str, on: On| stored_hash(&server, "shop", name, on);
    eventually("the first-sight patches", || {
        annotation("web", On::Metadata).is_some() && annotation("api", On::Metadata).is_some()
    })
    .await;
    eventually("ready", || app.readiness().ready).await;

    server.update(config_map("shop", "web-config", &[], &[("A", "2")])).unwrap();
    eventually("web rolls", || annotation("web", On::Template).is_some()).await;
    answered(&server).await;
    let (done, refused) = patches(&server);
    assert_eq!(done.len(), 3, "two first sights and one roll: {done:#?}");
    assert!(refused.iter().all(|r| r.1 == 409), "{refused:#?}");
    assert_eq!(annotation("api", On::Template), None, "api uses another ConfigMap: not rolled");

    server.update(config_map("shop", "api-config", &[], &[("B", "2")])).unwrap();
    eventually("api rolls", || annotation("api", On::Template).is_some()).await;
    app.shutdown().await;
}

/// The Deployments' cache lags the server: the reloader's first-sight patch
/// is stored, but the informer has not delivered it when the ConfigMap
/// changes. The reconcile that change causes sees no hash and decides
/// "first sight"; written, that metadata-only patch would take the new
/// hash, and the pod template would never get it (no roll). Made on the
/// cached resourceVersion, it is refused (409) instead, and once the cache
/// catches up the roll is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reloader_rolls_when_a_change_arrives_before_its_own_patch_is_in_the_cache() {
    let server = ApiServer::start().await;
    server.create(config_map("shop", "web-config", &[], &[("A", "1")])).unwrap();
    server.create(deployment("shop", "web", "web-config")).unwrap();
    // The Deployments are listed (paged lists: a watch-list is a watch) but
    // their watch waits: the cache stays at the listed version.
    server.hold_watches_of(&["deployments"]);
    let dir = tempfile::tempdir().unwrap();
    let app = start_reloader(&server, dir.path(), "watch_list = false", "").await;
    let annotation = |on: On| stored_hash(&server, "shop", "web", on);
    eventually("the first-sight patch on the server", || annotation(On::Metadata).is_some()).await;
    eventually("ready", || app.readiness().ready).await;
    let first = annotation(On::Metadata).unwrap();

    // The change reaches the ConfigMaps' cache; the Deployments' does not
    // show the first-sight patch.
    server.update(config_map("shop", "web-config", &[], &[("A", "2")])).unwrap();
    let sent = || {
        let (done, refused) = patches(&server);
        done.len() + refused.len()
    };
    eventually("the patch the change causes", || sent() >= 2).await;
    answered(&server).await;
    let (done, refused) = patches(&server);
    assert_eq!(done.len(), 1, "only the first-sight patch took effect: {done:#?}");
    // (The change may be reconciled more than once: its old and new
    // ConfigMap both map to web.)
    assert!(refused.iter().all(|r| r.1 == 409), "made on the stale version: {refused:#?}");
    assert_eq!(annotation(On::Metadata), Some(first.clone()), "nothing written from the stale cache");

    // The cache catches up: the update reconciles web again, which rolls.
    server.release_watches();
    eventually("the roll", || annotation(On::Template).is_some()).await;
    let rolled = annotation(On::Template).unwrap();
    assert_ne!(rolled, first);
    assert_eq!(annotation(On::Metadata), Some(rolled));
    answered(&server).await;
    let (done, refused) = patches(&server);
    assert_eq!(done.len(), 2, "the first sight and the roll: {done:#?}");
    assert!(refused.iter().all(|r| r.1 == 409), "{refused:#?}");
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
