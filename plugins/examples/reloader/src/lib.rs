//! Reloader: rolls a Deployment when a ConfigMap or Secret it uses changes.
//!
//! Informers (names from the config, defaults shown):
//! - `deployments` (apps/v1 Deployments): the primary; reconciled by key.
//! - `configmaps`, `secrets` (v1): secondaries, mapped by [`Reconciler::map`]
//!   to the Deployments of their namespace that use them.
//!
//! `map` finds those Deployments with one index lookup when the deployments
//! informer has a field index of the names each pod template uses (its
//! values are then the used objects' keys) and the config names it
//! (`configmap_index`, `secret_index`; `examples/host.toml` shows the
//! JSONPath queries); without one it reads every Deployment of the
//! namespace.
//!
//! A reconcile hashes (SHA-256) the data of every ConfigMap and Secret the
//! pod template uses (`env[].valueFrom`, `envFrom[]`, `volumes[]`, projected
//! volumes; in containers and init containers) and compares the hash with
//! the Deployment's `annotation` (default `informer-host.dev/config-hash`):
//!
//! - same hash: nothing to do (resyncs, unrelated changes);
//! - no annotation yet (a Deployment seen for the first time): one merge
//!   patch records the hash on the Deployment's own metadata, which does not
//!   roll its pods;
//! - another hash: one merge patch sets it on the Deployment and on its pod
//!   template, which rolls the pods, and a `ConfigChanged` Event says why.
//!
//! Each patch carries the cached `metadata.resourceVersion`, so the server
//! refuses it (`409 Conflict`) when the cache is behind: a decision is only
//! written if it was made on the current Deployment. The newer version's
//! arrival reconciles the key again.
//!
//! A ConfigMap or Secret the pods cannot start without (a use that is not
//! `optional`) and that does not exist holds the rollout until it exists:
//! new pods would not start.

use std::collections::BTreeMap;

use informer_guest::controller::kube::{self, EventType, Patch, Target};
use informer_guest::controller::{Action, Reconciler, stores};
use informer_guest::{Config, Object, debug, info, warn};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Settings {
    /// Informer names.
    deployments: String,
    configmaps: String,
    secrets: String,
    /// The annotation that holds the hash.
    annotation: String,
    /// Field indexes of the deployments informer by the ConfigMaps and
    /// Secrets their pod templates use (values: `namespace/name`).
    configmap_index: Option<String>,
    secret_index: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            deployments: "deployments".into(),
            configmaps: "configmaps".into(),
            secrets: "secrets".into(),
            annotation: "informer-host.dev/config-hash".into(),
            configmap_index: None,
            secret_index: None,
        }
    }
}

#[derive(Default)]
struct Reloader {
    settings: Settings,
    /// The last patch of each Deployment: the version it was made against,
    /// and the hash it wrote. Until the informer delivers the patched
    /// version, the cache still shows the old hash; this keeps a reconcile in
    /// that window from patching again. (Per instance, so only an
    /// optimisation: a second patch with the same hash changes nothing. A
    /// BTreeMap: a HashMap would import a random seed for its hasher.)
    patched: BTreeMap<String, (Option<String>, String)>,
}

impl Reconciler for Reloader {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        self.settings = config.parse()?;
        Ok(())
    }

    fn reconcile(&mut self, key: &str) -> Result<Action, String> {
        let Some(deployment) = stores::get(&self.settings.deployments, key)? else {
            self.patched.remove(key); // deleted
            return Ok(Action::Done);
        };
        let namespace = deployment.namespace().unwrap_or_default();
        let uses = uses(&deployment)?;
        let pointer = format!("/metadata/annotations/{}", escape(&self.settings.annotation));
        let seen = deployment.parse_at::<String>(&pointer)?;
        if uses.is_empty() && seen.is_none() {
            return Ok(Action::Done); // uses no configuration: nothing to track
        }
        let Some(hash) = self.hash(&namespace, &uses)? else {
            debug!("{key}: a ConfigMap or Secret it needs is missing; rolling waits for it");
            return Ok(Action::Done); // its creation maps back to this key
        };
        if seen.as_deref() == Some(hash.as_str()) {
            return Ok(Action::Done);
        }
        let version = deployment.resource_version();
        if self.patched.get(key) == Some(&(version.clone(), hash.clone())) {
            return Ok(Action::Done); // already patched; the cache has not caught up
        }

        let annotations = json!({ &self.settings.annotation: &hash });
        // The version the decision was made on is the patch's precondition
        // (optimistic locking): a cache behind the server, e.g. one that
        // does not show the first-sight patch yet, would take a change for
        // a first sight and never roll.
        let mut patch = json!({ "metadata": { "annotations": annotations } });
        if let Some(version) = &version {
            patch["metadata"]["resourceVersion"] = json!(version);
        }
        let roll = seen.is_some();
        if roll {
            patch["spec"] = json!({ "template": { "metadata": { "annotations": annotations } } });
        }
        let target = Target::of(&deployment);
        match kube::patch(&target, Patch::merge(&patch)) {
            Ok(_) => {}
            Err(e) if e.is_conflict() => {
                // The informer has yet to deliver the newer version, and its
                // update reconciles this key again.
                debug!("{key}: the cache is behind the server ({e}); waiting for the newer version");
                return Ok(Action::Done);
            }
            Err(e) => return Err(e.into()),
        }
        self.patched.insert(key.to_owned(), (version, hash.clone()));

        if roll {
            info!("{key}: configuration changed, rolling (hash {})", &hash[..12]);
            let message = format!("the ConfigMaps or Secrets it uses changed (hash {}); rolling its pods", &hash[..12]);
            // The patch is what matters: a lost Event is not worth a retry.
            if let Err(e) = kube::record_event(&target, EventType::Normal, "ConfigChanged", &message) {
                warn!("{key}: cannot record the ConfigChanged event: {e}");
            }
        }
        Ok(Action::Done)
    }

    fn map(&mut self, informer: &str, obj: &Object) -> Vec<String> {
        let (kind, index) = match informer {
            i if i == self.settings.configmaps => (Kind::ConfigMap, &self.settings.configmap_index),
            i if i == self.settings.secrets => (Kind::Secret, &self.settings.secret_index),
            _ => return Vec::new(),
        };
        if let Some(index) = index {
            return match stores::by_index(&self.settings.deployments, index, &obj.key()) {
                Ok(deployments) => deployments.iter().map(Object::key).collect(),
                Err(e) => {
                    warn!("cannot look {} up in index {index}: {e}", obj.key());
                    Vec::new()
                }
            };
        }
        let Some(namespace) = obj.namespace() else { return Vec::new() };
        let used = (kind, obj.name());
        let deployments = match stores::list(&self.settings.deployments, Some(&namespace)) {
            Ok(deployments) => deployments,
            Err(e) => {
                warn!("cannot list deployments in {namespace}: {e}");
                return Vec::new();
            }
        };
        deployments.iter().filter(|d| uses(d).is_ok_and(|uses| uses.contains_key(&used))).map(Object::key).collect()
    }
}

impl Reloader {
    /// The hash of the data of everything in `uses`, or `None` when one the
    /// pods need is missing.
    fn hash(&self, namespace: &str, uses: &Uses) -> Result<Option<String>, String> {
        let mut sha = Sha256::new();
        // Every field is length-prefixed, so no two inputs hash alike.
        let mut field = |text: &str| {
            sha.update((text.len() as u64).to_le_bytes());
            sha.update(text);
        };
        for ((kind, name), optional) in uses {
            let informer = match kind {
                Kind::ConfigMap => &self.settings.configmaps,
                Kind::Secret => &self.settings.secrets,
            };
            field(kind.as_str());
            field(name);
            let Some(obj) = stores::get(informer, &format!("{namespace}/{name}"))? else {
                if !optional {
                    return Ok(None);
                }
                field("<absent>");
                continue;
            };
            for section in ["/data", "/binaryData"] {
                let data: BTreeMap<String, String> = obj.parse_at(section)?.unwrap_or_default();
                field(section);
                for (k, v) in &data {
                    field(k);
                    field(v);
                }
            }
        }
        Ok(Some(sha.finalize().iter().map(|b| format!("{b:02x}")).collect()))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }
}

/// The ConfigMaps and Secrets a pod template uses, by kind and name, each
/// with whether the pods can start without it (every use is `optional`).
type Uses = BTreeMap<(Kind, String), bool>;

/// What the Deployment's pod template uses. Only the pod spec crosses from
/// the host, and only the fields that name a ConfigMap or Secret are parsed.
fn uses(deployment: &Object) -> Result<Uses, String> {
    Ok(uses_of(&deployment.parse_at("/spec/template/spec")?.unwrap_or_default()))
}

fn uses_of(spec: &PodSpec) -> Uses {
    let mut uses = Uses::new();
    let mut add = |kind, r: &Ref| {
        if !r.name.is_empty() {
            let optional = uses.entry((kind, r.name.clone())).or_insert(true);
            *optional &= r.optional;
        }
    };
    for container in spec.containers.iter().chain(&spec.init_containers) {
        for from in &container.env_from {
            from.config_map_ref.iter().for_each(|r| add(Kind::ConfigMap, r));
            from.secret_ref.iter().for_each(|r| add(Kind::Secret, r));
        }
        for source in container.env.iter().filter_map(|env| env.value_from.as_ref()) {
            source.config_map_key_ref.iter().for_each(|r| add(Kind::ConfigMap, r));
            source.secret_key_ref.iter().for_each(|r| add(Kind::Secret, r));
        }
    }
    for volume in &spec.volumes {
        volume.config_map.iter().for_each(|r| add(Kind::ConfigMap, r));
        if let Some(secret) = &volume.secret {
            add(Kind::Secret, &Ref { name: secret.secret_name.clone(), optional: secret.optional });
        }
        for source in volume.projected.iter().flat_map(|p| &p.sources) {
            source.config_map.iter().for_each(|r| add(Kind::ConfigMap, r));
            source.secret.iter().for_each(|r| add(Kind::Secret, r));
        }
    }
    uses
}

/// A JSON pointer token (RFC 6901): annotation keys contain `/`.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

// The parts of core/v1 PodSpec that name ConfigMaps and Secrets (the rest
// of the object is skipped by serde, and k8s-openapi would triple the
// component's size).

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PodSpec {
    containers: Vec<Container>,
    init_containers: Vec<Container>,
    volumes: Vec<Volume>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Container {
    env: Vec<EnvVar>,
    env_from: Vec<EnvFromSource>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct EnvVar {
    value_from: Option<EnvVarSource>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct EnvVarSource {
    config_map_key_ref: Option<Ref>,
    secret_key_ref: Option<Ref>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct EnvFromSource {
    config_map_ref: Option<Ref>,
    secret_ref: Option<Ref>,
}

/// A reference by `name` (ConfigMap and Secret refs, key refs, projections,
/// ConfigMap volumes).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Ref {
    name: String,
    optional: bool,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Volume {
    config_map: Option<Ref>,
    secret: Option<SecretVolume>,
    projected: Option<Projected>,
}

/// A Secret volume names its Secret `secretName`.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct SecretVolume {
    secret_name: String,
    optional: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Projected {
    sources: Vec<Projection>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Projection {
    config_map: Option<Ref>,
    secret: Option<Ref>,
}

informer_guest::export_controller!(Reloader);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_use_and_whether_pods_need_it() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [{
                "name": "app",
                "envFrom": [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "tokens", "optional": true}}],
                "env": [
                    {"name": "A", "value": "plain"},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                    {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
            }],
            "initContainers": [{"name": "init", "env": [
                {"name": "D", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "x", "optional": true}}},
            ]}],
            "volumes": [
                {"name": "v1", "secret": {"secretName": "tls", "optional": true}},
                {"name": "v2", "configMap": {"name": "files"}},
                {"name": "v3", "projected": {"sources": [{"configMap": {"name": "bundle"}}, {"serviceAccountToken": {"path": "t"}}]}},
                {"name": "v4", "emptyDir": {}},
            ],
        }))
        .unwrap();
        let uses: Vec<_> =
            uses_of(&spec).into_iter().map(|((kind, name), optional)| (kind.as_str(), name, optional)).collect();
        let expected = [
            ("ConfigMap", "bundle", false),
            ("ConfigMap", "files", false),
            // Optional in one use, required in another: required.
            ("ConfigMap", "settings", false),
            ("Secret", "db", false),
            ("Secret", "tls", true),
            ("Secret", "tokens", true),
        ];
        assert_eq!(uses, expected.map(|(k, n, o)| (k, n.to_owned(), o)));
    }

    #[test]
    fn annotation_keys_are_escaped_for_pointers() {
        assert_eq!(escape("informer-host.dev/config-hash"), "informer-host.dev~1config-hash");
        assert_eq!(escape("a~b"), "a~0b");
    }
}
