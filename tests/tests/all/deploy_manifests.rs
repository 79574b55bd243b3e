//! The deploy files (`deploy/`): every YAML document is a valid object of
//! its kind (it deserializes into its `k8s-openapi` type, or the host's own
//! `Plugin` / `TenantPolicy`, and loses no field doing so: an unknown or
//! misspelled field fails), `deploy/crds/crds.yaml` is what
//! `informer-host crds` prints, the CRDs' `openAPIV3Schema` accepts the
//! examples and rejects broken ones, the kustomizations list files that
//! exist, and the Deployment, ConfigMap, Service and RBAC fit what the host
//! serves and reads.
//!
//! Nothing here talks to a cluster; `kubectl kustomize deploy/base` renders
//! the same files where kubectl is installed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use informer_host::kube_plugins::{Plugin, TenantPolicy, crds, crds_yaml, policy};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod kustomize;
mod rbac;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// One YAML document of a file under `deploy/`.
struct Doc {
    at: String,
    value: Value,
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            yaml_files(&p, out);
        } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            out.push(p);
        }
    }
}

fn is_kustomization(p: &Path) -> bool {
    matches!(p.file_name().and_then(|n| n.to_str()), Some("kustomization.yaml" | "kustomization.yml"))
}

/// The non-empty documents of a multi-document YAML text, as JSON.
fn parse_docs(text: &str, name: &str) -> Vec<Doc> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let y = serde_yaml::Value::deserialize(de).unwrap_or_else(|e| panic!("{name} document {i}: not YAML: {e}"));
        if y.is_null() {
            continue;
        }
        let value = serde_json::to_value(y).unwrap_or_else(|e| panic!("{name} document {i}: not JSON-like: {e}"));
        docs.push(Doc { at: format!("{name} document {i}"), value });
    }
    docs
}

/// Every object under `deploy/` (kustomization files aside).
fn objects() -> Vec<Doc> {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    let mut docs = Vec::new();
    for f in files.iter().filter(|f| !is_kustomization(f)) {
        let name = f.strip_prefix(deploy_dir()).unwrap().display().to_string();
        docs.extend(parse_docs(&std::fs::read_to_string(f).unwrap(), &name));
    }
    docs
}

fn objects_of<T: DeserializeOwned>(docs: &[Doc], kind: &str) -> Vec<T> {
    docs.iter().filter(|d| d.value["kind"] == kind).map(|d| serde_json::from_value(d.value.clone()).unwrap()).collect()
}

/// The fields of `original` that did not survive `original` → typed →
/// JSON: fields the type does not have (k8s-openapi's types ignore unknown
/// fields when deserializing, so this is how they are found). A field whose
/// value is `null` may disappear (absent and null are the same to the API).
fn lost_fields(original: &Value, back: &Value, path: &str, out: &mut Vec<String>) {
    match (original, back) {
        (Value::Object(o), Value::Object(b)) => {
            for (k, v) in o {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(bv) => lost_fields(v, bv, &p, out),
                    None if v.is_null() => {}
                    None => out.push(p),
                }
            }
        }
        (Value::Array(o), Value::Array(b)) => {
            if o.len() != b.len() {
                out.push(format!("{path} (length {} became {})", o.len(), b.len()));
            }
            for (i, (ov, bv)) in o.iter().zip(b).enumerate() {
                lost_fields(ov, bv, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(o), Value::Number(b)) if o.as_f64() == b.as_f64() => {}
        (o, b) if o == b => {}
        (o, b) => out.push(format!("{path} ({o} became {b})")),
    }
}

fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| format!("does not deserialize: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("does not serialize: {e}"))?;
    let mut lost = Vec::new();
    lost_fields(doc, &back, "", &mut lost);
    if lost.is_empty() { Ok(()) } else { Err(format!("fields its type does not have: {}", lost.join(", "))) }
}

/// Checks `doc` as the type its `apiVersion` and `kind` name.
fn check_object(doc: &Value) -> Result<(), String> {
    let api_version = doc["apiVersion"].as_str().ok_or("no apiVersion")?;
    let kind = doc["kind"].as_str().ok_or("no kind")?;
    macro_rules! typed {
        ($($av:literal $k:literal => $t:ty,)*) => {
            match (api_version, kind) {
                $(($av, $k) => round_trip::<$t>(doc),)*
                (av, k) => Err(format!("{av} {k}: not a kind these manifests should hold")),
            }
        };
    }
    typed! {
        "v1" "Namespace" => Namespace,
        "v1" "ServiceAccount" => ServiceAccount,
        "v1" "ConfigMap" => ConfigMap,
        "v1" "Secret" => Secret,
        "v1" "Service" => Service,
        "v1" "ResourceQuota" => ResourceQuota,
        "apps/v1" "Deployment" => Deployment,
        "policy/v1" "PodDisruptionBudget" => PodDisruptionBudget,
        "rbac.authorization.k8s.io/v1" "Role" => Role,
        "rbac.authorization.k8s.io/v1" "RoleBinding" => RoleBinding,
        "rbac.authorization.k8s.io/v1" "ClusterRole" => ClusterRole,
        "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" => ClusterRoleBinding,
        "apiextensions.k8s.io/v1" "CustomResourceDefinition" => CustomResourceDefinition,
        "informer-host.dev/v1alpha1" "Plugin" => Plugin,
        "informer-host.dev/v1alpha1" "TenantPolicy" => TenantPolicy,
    }
}

#[test]
fn every_document_is_a_valid_object_of_its_kind() {
    let docs = objects();
    let problems: Vec<String> =
        docs.iter().filter_map(|d| check_object(&d.value).err().map(|e| format!("{}: {e}", d.at))).collect();
    assert!(problems.is_empty(), "invalid objects:\n{}", problems.join("\n"));
    // Not vacuous: the files hold what the base and examples must.
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d.value["kind"].as_str()).collect();
    for k in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "Plugin",
        "TenantPolicy",
    ] {
        assert!(kinds.contains(k), "no {k} under deploy/ (found {kinds:?})");
    }
}

#[test]
fn a_misspelled_or_unknown_field_is_caught() {
    let docs = objects();
    let find = |kind: &str| docs.iter().find(|d| d.value["kind"] == kind).unwrap().value.clone();
    let deployment = find("Deployment");
    let plugin = find("Plugin");
    check_object(&deployment).unwrap();
    check_object(&plugin).unwrap();

    let broken = |mut v: Value, at: &str, key: &str| {
        v.pointer_mut(at).unwrap().as_object_mut().unwrap().insert(key.into(), json!("x"));
        v
    };
    for (doc, at, key, field) in [
        (&deployment, "/spec/template/spec/containers/0/livenessProbe/httpGet", "paht", ".paht"),
        (
            &deployment,
            "/spec/template/spec/containers/0/securityContext",
            "readOnlyRootFileSystem",
            ".readOnlyRootFileSystem",
        ),
        (&deployment, "/spec", "replica", ".spec.replica"),
        (&deployment, "/metadata", "lables", ".metadata.lables"),
        (&plugin, "/metadata", "namepsace", ".metadata.namepsace"),
        (&plugin, "/spec", "grant", "grant"),
        (&plugin, "", "sepc", ".sepc"),
    ] {
        let err = check_object(&broken(doc.clone(), at, key)).unwrap_err();
        assert!(err.contains(field), "{at}/{key}: the error does not name {field}: {err}");
    }
    // A value of the wrong shape is caught too.
    let mut wrong = deployment.clone();
    *wrong.pointer_mut("/spec/replicas").unwrap() = json!("two");
    assert!(check_object(&wrong).unwrap_err().contains("does not deserialize"));
    // An unknown kind is not waved through.
    assert!(check_object(&json!({"apiVersion": "v1", "kind": "Pdo", "metadata": {"name": "x"}})).is_err());
}

#[test]
fn the_crds_file_is_what_informer_host_crds_prints() {
    let on_disk = std::fs::read_to_string(deploy_dir().join("crds/crds.yaml")).unwrap();
    assert!(
        on_disk == crds_yaml(),
        "deploy/crds/crds.yaml is stale: regenerate it with \
         `cargo run -p informer-host -- crds > deploy/crds/crds.yaml`"
    );
}

/// A CRD's structural schema as a JSON Schema (draft 2020-12): `nullable`
/// becomes a `null` type, `x-kubernetes-*` extensions go (the CEL rules
/// cannot be evaluated here), and an object with `properties` refuses
/// other keys unless it preserves unknown fields, as the API server's
/// strict field validation (kubectl's default) does.
fn json_schema(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    let preserve = m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    m.retain(|k, _| !k.starts_with("x-kubernetes-"));
    if m.remove("nullable") == Some(json!(true))
        && let Some(Value::String(t)) = m.get("type").cloned()
    {
        m.insert("type".into(), json!([t, "null"]));
    }
    if m.contains_key("properties") && !preserve && !m.contains_key("additionalProperties") {
        m.insert("additionalProperties".into(), json!(false));
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(json_schema);
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(s) = m.get_mut(key) {
            json_schema(s);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = m.get_mut(key) {
            list.iter_mut().for_each(json_schema);
        }
    }
}

/// The validator of `kind`'s CRD (its only version).
fn validator(kind: &str) -> jsonschema::Validator {
    let crd = crds().into_iter().find(|c| c.spec.names.kind == kind).unwrap();
    let schema = crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
    let mut schema = serde_json::to_value(schema).unwrap();
    json_schema(&mut schema);
    // The API server validates the root's apiVersion, kind and metadata itself.
    let props = schema["properties"].as_object_mut().unwrap();
    props.insert("apiVersion".into(), json!({"type": "string"}));
    props.insert("kind".into(), json!({"type": "string"}));
    props.insert("metadata".into(), json!({"type": "object"}));
    jsonschema::validator_for(&schema).unwrap()
}

fn schema_errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

#[test]
fn the_crd_schemas_accept_every_example() {
    let docs = objects();
    let mut seen = 0;
    for kind in ["Plugin", "TenantPolicy"] {
        let v = validator(kind);
        for d in docs.iter().filter(|d| d.value["kind"] == kind) {
            let errors = schema_errors(&v, &d.value);
            assert!(errors.is_empty(), "{} is refused by the {kind} CRD: {errors:?}", d.at);
            seen += 1;
        }
    }
    assert!(seen >= 3, "expected two Plugins and a TenantPolicy, checked {seen}");
    // The one CEL rule (not evaluated by a JSON Schema validator): exactly one
    // component source. The CRD carries it and every example keeps it.
    let crd = serde_json::to_value(crds().into_iter().find(|c| c.spec.names.kind == "Plugin").unwrap()).unwrap();
    let component =
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["component"];
    assert!(component["x-kubernetes-validations"][0]["rule"].as_str().unwrap().contains("has(self.oci)"));
    for d in docs.iter().filter(|d| d.value["kind"] == "Plugin") {
        let sources = d.value["spec"]["component"].as_object().unwrap();
        assert_eq!(
            sources.keys().filter(|k| ["oci", "configMap", "secret"].contains(&k.as_str())).count(),
            1,
            "{}",
            d.at
        );
    }
}

#[test]
fn the_crd_schemas_reject_broken_objects() {
    let docs = objects();
    let plugin = docs.iter().find(|d| d.value["kind"] == "Plugin").unwrap().value.clone();
    let policy = docs.iter().find(|d| d.value["kind"] == "TenantPolicy").unwrap().value.clone();
    let (vp, vt) = (validator("Plugin"), validator("TenantPolicy"));
    assert!(schema_errors(&vp, &plugin).is_empty());
    assert!(schema_errors(&vt, &policy).is_empty());

    let edit = |doc: &Value, f: &dyn Fn(&mut Value)| {
        let mut d = doc.clone();
        f(&mut d);
        d
    };
    let broken_plugins = [
        ("an unknown spec field", edit(&plugin, &|d| d["spec"]["wacth"] = json!({}))),
        ("an unknown nested field", edit(&plugin, &|d| d["spec"]["limits"]["memroy"] = json!("1Gi"))),
        ("a grant that does not exist", edit(&plugin, &|d| d["spec"]["grants"] = json!(["root"]))),
        ("a number as a string", edit(&plugin, &|d| d["spec"]["maxPending"] = json!("many"))),
        ("maxPending below 1", edit(&plugin, &|d| d["spec"]["maxPending"] = json!(0))),
        ("an unknown onSwap", edit(&plugin, &|d| d["spec"]["onSwap"] = json!("Restart"))),
        ("no spec.watch", edit(&plugin, &|d| _ = d["spec"].as_object_mut().unwrap().remove("watch"))),
        ("no watch.kind", edit(&plugin, &|d| _ = d["spec"]["watch"].as_object_mut().unwrap().remove("kind"))),
        ("an empty OCI reference", edit(&plugin, &|d| d["spec"]["component"]["oci"]["reference"] = json!(""))),
        ("no spec", edit(&plugin, &|d| _ = d.as_object_mut().unwrap().remove("spec"))),
    ];
    for (what, doc) in &broken_plugins {
        assert!(!schema_errors(&vp, doc).is_empty(), "the Plugin CRD accepts {what}");
    }
    let broken_policies = [
        ("a grant that does not exist", edit(&policy, &|d| d["spec"]["allowedGrants"] = json!(["network"]))),
        ("an unknown field", edit(&policy, &|d| d["spec"]["maxPlugin"] = json!(3))),
        ("a negative cap", edit(&policy, &|d| d["spec"]["maxPlugins"] = json!(-1))),
    ];
    for (what, doc) in &broken_policies {
        assert!(!schema_errors(&vt, doc).is_empty(), "the TenantPolicy CRD accepts {what}");
    }
}

#[test]
fn the_example_plugins_are_admitted_by_the_example_policy() {
    let docs = objects();
    let policies: Vec<TenantPolicy> = objects_of(&docs, "TenantPolicy");
    let namespaces: Vec<Namespace> = objects_of(&docs, "Namespace");
    let plugins: Vec<Plugin> = objects_of(&docs, "Plugin");
    assert!(plugins.len() >= 2);
    let mut oci_by_digest = false;
    for p in &plugins {
        let ns = p.metadata.namespace.as_deref().expect("an example Plugin names its namespace");
        let labels =
            namespaces.iter().find(|n| n.metadata.name.as_deref() == Some(ns)).and_then(|n| n.metadata.labels.as_ref());
        let policy =
            policy::policy_for(ns, labels, &policies).unwrap_or_else(|r| panic!("{}: {}", r.reason, r.message));
        policy::admit(&p.spec, ns, policy, &informer_host::plugin::Limits::default())
            .unwrap_or_else(|r| panic!("{:?} is refused: {}: {}", p.metadata.name, r.reason, r.message));
        if let Some(oci) = &p.spec.component.oci {
            let digest = oci.reference.split_once("@sha256:").map(|(_, d)| d).unwrap_or("");
            oci_by_digest |= digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
        }
    }
    assert!(oci_by_digest, "an example Plugin pulls an OCI artifact pinned by digest");
    assert!(plugins.iter().any(|p| p.spec.component.config_map.is_some()), "an example Plugin reads a ConfigMap key");
    assert!(
        plugins.iter().any(|p| p.spec.controller.as_ref().is_some_and(|c| !c.write_rules.is_empty())),
        "an example Plugin is a controller that writes"
    );
}

fn the<T: DeserializeOwned>(docs: &[Doc], kind: &str, name: &str) -> T {
    let d = docs
        .iter()
        .find(|d| d.value["kind"] == kind && d.value["metadata"]["name"] == name && d.at.starts_with("base"));
    serde_json::from_value(d.unwrap_or_else(|| panic!("no {kind} {name} in deploy/base")).value.clone()).unwrap()
}

#[test]
fn the_deployment_fits_what_the_host_serves() {
    let docs = objects();
    let deployment: Deployment = the(&docs, "Deployment", "informer-host");
    let config_map: ConfigMap = the(&docs, "ConfigMap", "informer-host-config");
    let service: Service = the(&docs, "Service", "informer-host-metrics");
    let pdb: PodDisruptionBudget = the(&docs, "PodDisruptionBudget", "informer-host");

    let toml = &config_map.data.as_ref().unwrap()["host.toml"];
    let config = informer_host::config::Config::parse(toml, "host.toml", "/etc/informer-host")
        .unwrap_or_else(|e| panic!("the ConfigMap's host.toml: {e}"));
    let port = config.host.metrics_addr.expect("metrics_addr").port();
    let resources = config.plugin_resources.as_ref().expect("host.toml loads Plugin resources");
    assert!(resources.leases, "replicas must share the plugins through Leases, not each run all");

    let spec = &deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().unwrap();
    let c = &pod.containers[0];
    let named_port =
        c.ports.as_ref().unwrap().iter().find(|p| p.container_port == i32::from(port)).expect("the metrics port");
    let port_name = named_port.name.as_deref().unwrap();
    for (probe, path) in [(&c.liveness_probe, "/healthz"), (&c.readiness_probe, "/readyz")] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert!(
            matches!(&get.port, k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(n) if n == port_name)
        );
    }
    let svc_port = &service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!(svc_port.port, i32::from(port));
    assert!(
        matches!(&svc_port.target_port, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(n)) if n == port_name)
    );
    let pod_labels = spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
    for selector in [
        service.spec.as_ref().unwrap().selector.clone().unwrap(),
        pdb.spec.unwrap().selector.unwrap().match_labels.unwrap(),
    ] {
        assert!(
            selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
            "a selector that misses the pods: {selector:?}"
        );
    }

    // The config file, the identity and the cache.
    let env: BTreeMap<&str, &k8s_openapi::api::core::v1::EnvVar> =
        c.env.as_ref().unwrap().iter().map(|e| (e.name.as_str(), e)).collect();
    let pod_name = env["POD_NAME"].value_from.as_ref().and_then(|v| v.field_ref.as_ref()).unwrap();
    assert_eq!(pod_name.field_path, "metadata.name");
    let config_path = Path::new(env["INFORMER_HOST_CONFIG"].value.as_deref().unwrap());
    let volumes = pod.volumes.as_ref().unwrap();
    let mounts = c.volume_mounts.as_ref().unwrap();
    let mount_of = |path: &Path| {
        mounts
            .iter()
            .find(|m| path.starts_with(&m.mount_path))
            .unwrap_or_else(|| panic!("nothing mounted at {}", path.display()))
    };
    let volume = |name: &str| volumes.iter().find(|v| v.name == name).unwrap();
    let config_mount = mount_of(config_path);
    assert_eq!(config_path, Path::new(&config_mount.mount_path).join("host.toml"));
    assert_eq!(volume(&config_mount.name).config_map.as_ref().unwrap().name, "informer-host-config");
    let cache_mount = mount_of(config.host.cache_dir.as_deref().expect("cache_dir on a volume"));
    assert!(volume(&cache_mount.name).empty_dir.is_some() && cache_mount.read_only != Some(true));

    // Hardened: non-root, read-only root, no privilege escalation, no capabilities.
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.capabilities.as_ref().unwrap().drop.as_deref(), Some(&["ALL".to_string()][..]));
    let res = c.resources.as_ref().unwrap();
    assert!(res.requests.as_ref().is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")));
    assert!(res.limits.as_ref().is_some_and(|r| r.contains_key("memory")));
    // The grace period covers the host's.
    let grace = config.host.shutdown_grace.unwrap_or(std::time::Duration::from_secs(10)).as_secs() as i64;
    assert!(pod.termination_grace_period_seconds.unwrap() > grace);
}

/// The status of `GET path` from the host's own metrics server.
async fn status_of(addr: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    reply.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("not HTTP: {reply:?}"))
}

#[tokio::test]
async fn the_probe_paths_are_served_by_the_host() {
    let docs = objects();
    let deployment: Deployment = the(&docs, "Deployment", "informer-host");
    let c = &deployment.spec.template.spec.unwrap().containers[0];
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref().unwrap().http_get.as_ref().unwrap().path.clone().unwrap()
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let observed = informer_host::metrics::Observed::new();
    let server =
        informer_host::admin::AdminServer::start("127.0.0.1:0".parse().unwrap(), observed, stop.clone()).await.unwrap();
    assert_eq!(status_of(server.local_addr, &path(&c.liveness_probe)).await, 200);
    assert_eq!(status_of(server.local_addr, &path(&c.startup_probe)).await, 200);
    // Nothing to sync: ready. (Not ready would be 503; a wrong path 404.)
    assert_eq!(status_of(server.local_addr, &path(&c.readiness_probe)).await, 200);
    assert_eq!(status_of(server.local_addr, "/no-such-probe").await, 404, "the check can fail");
    stop.cancel();
}
