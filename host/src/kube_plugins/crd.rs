//! The host's custom resources: `Plugin` (namespaced; its namespace is its
//! tenant) and `TenantPolicy` (cluster-scoped; what the plugins of the
//! namespaces it matches may have).
//!
//! This module owns the wire shape of both kinds and the CRDs derived from
//! it ([`crds`]); `deploy/crds/` holds the same CRDs as YAML, and a test
//! keeps them equal. It does not interpret a spec: [`super::policy`] does.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use kube::core::crd::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the host's resources.
pub const GROUP: &str = "informer-host.dev";
/// Their version.
pub const VERSION: &str = "v1alpha1";

/// A WebAssembly handler or controller the host loads for the namespace it
/// lives in.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "informer-host.dev",
    version = "v1alpha1",
    kind = "Plugin",
    namespaced,
    status = "PluginStatus",
    shortname = "ihp",
    category = "informer-host",
    doc = "A sandboxed WebAssembly handler of one watched resource; its namespace is its tenant",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Synced","type":"string","jsonPath":".status.conditions[?(@.type==\"Synced\")].status"}"#,
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.watch.kind"}"#,
    printcolumn = r#"{"name":"Digest","type":"string","jsonPath":".status.digest","priority":1}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSpec {
    /// Where the component comes from.
    pub component: ComponentSource,
    /// The resource whose notifications it handles, in the plugin's own
    /// namespace.
    pub watch: WatchSpec,
    /// How often it gets every cached object again as an update (`30s`,
    /// `5m`); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<String>,
    /// Per-call limits; each is capped by the tenant's policy.
    #[serde(default, skip_serializing_if = "LimitsSpec::is_empty")]
    pub limits: LimitsSpec,
    /// Imports beyond `types`: `log`, `cache`, `clocks`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<Grant>,
    /// Passed to the plugin's `init` as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub config: Option<serde_json::Value>,
    /// How a new version takes over: `Continue` (where the old one stopped)
    /// or `Replay` (the whole cache again as initial-list adds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_swap: Option<OnSwapPolicy>,
    /// Pending notifications beyond this are coalesced by key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_pending: Option<u32>,
    /// Present: the component is a controller (world `controller`). It
    /// reconciles the keys of `watch`'s objects, reads the caches of its
    /// watches and writes through the host, within its write rules and its
    /// own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<ControllerSpec>,
}

/// A controller's settings (controller-runtime's words where they exist).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerSpec {
    /// The name the plugin reads `watch`'s cache by (`stores.get`).
    #[schemars(length(min = 1, max = 63))]
    pub store: String,
    /// Other resources whose changes enqueue keys of `watch`'s objects
    /// (controller-runtime's `Owns`/`Watches`). Each is an informer of the
    /// plugin's namespace, so their number is capped by the TenantPolicy's
    /// `maxWatches`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub watches: Vec<SecondaryWatch>,
    /// What it may write, each within one of its TenantPolicy's
    /// `allowedWriteRules`; none: it writes nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_rules: Vec<WriteRuleSpec>,
    /// Workers, each with its own instance (default 1), capped by the
    /// TenantPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrent_reconciles: Option<u32>,
    /// Writes per second (default 5, client-go's), capped by the
    /// TenantPolicy; the burst is twice this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub writes_per_second: Option<u32>,
    /// Every write is sent with `dryRun=All`: checked, never persisted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// A secondary resource of a controller.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.mappedBy != 'Label' || has(self.label)",
    "message": "mappedBy Label needs label"
}]))]
pub struct SecondaryWatch {
    /// The name the plugin reads its cache by, and `map` is called with.
    #[schemars(length(min = 1, max = 63))]
    pub store: String,
    #[schemars(length(min = 1, max = 316))]
    pub api_version: String,
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Named indexes of its cache, read with `by_index`: each object under
    /// every string the RFC 9535 JSONPath queries select in it, prefixed
    /// with its namespace (controller-runtime's `IndexField`), e.g.
    /// `configmaps: ["$.spec.template.spec.volumes[*].configMap.name"]`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 8))]
    pub field_indexers: BTreeMap<String, Vec<String>>,
    /// How its objects become keys of the primary's: `Owner` (their
    /// controller owner reference), `Label` (the value of `label` names the
    /// primary object), `Map` (the plugin's `map` export).
    #[serde(default)]
    pub mapped_by: MappedBy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// How a secondary's objects become primary keys.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default, JsonSchema)]
pub enum MappedBy {
    #[default]
    Owner,
    Label,
    Map,
}

/// What a controller may write: API groups (`""` is the core group),
/// kinds (`Deployment`, `Deployment/status` for the status subresource),
/// verbs (`create`, `update`, `patch`, `delete`) and, when not empty, only
/// these names. `*` matches anything. Unlike an RBAC rule it names kinds,
/// not resources, so it is checked without discovery.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteRuleSpec {
    pub api_groups: Vec<String>,
    #[schemars(length(min = 1))]
    pub kinds: Vec<String>,
    #[schemars(length(min = 1))]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// Exactly one of `oci`, `configMap`, `secret`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.oci) ? 1 : 0) + (has(self.configMap) ? 1 : 0) + (has(self.secret) ? 1 : 0) == 1",
    "message": "set exactly one of oci, configMap, secret"
}]))]
pub struct ComponentSource {
    /// An OCI artifact: `registry/repository@sha256:…` or `…:tag`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
    /// A key of a ConfigMap in the plugin's namespace whose `binaryData`
    /// holds the component (small, air-gapped plugins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<KeySelector>,
    /// A key of a Secret in the plugin's namespace holding the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<KeySelector>,
}

/// A component in an OCI registry.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OciSource {
    #[schemars(length(min = 1, max = 1024))]
    pub reference: String,
    /// A `kubernetes.io/dockerconfigjson` Secret in the plugin's namespace
    /// with the registry's credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
}

/// One key of a ConfigMap or Secret.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeySelector {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// The watched resource.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchSpec {
    /// `v1`, `apps/v1`, …
    #[schemars(length(min = 1, max = 316))]
    pub api_version: String,
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<String>,
    /// Named indexes of its cache, read with `by_index`: each object under
    /// every string the RFC 9535 JSONPath queries select in it, prefixed
    /// with its namespace (controller-runtime's `IndexField`), e.g.
    /// `configmaps: ["$.spec.template.spec.volumes[*].configMap.name"]`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 8))]
    pub field_indexers: BTreeMap<String, Vec<String>>,
}

/// Per-call limits. Absent: the host's default, capped by the tenant.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitsSpec {
    /// Fuel (wasm instructions, roughly) per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub fuel_per_call: Option<u64>,
    /// Wall-clock deadline per call (`100ms`, `2s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// Memory per instance (its linear memory and the objects it holds
    /// handles to), as a Kubernetes quantity (`64Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

impl LimitsSpec {
    fn is_empty(&self) -> bool {
        *self == LimitsSpec::default()
    }
}

/// A capability a plugin asks for.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Grant {
    Log,
    Cache,
    Clocks,
    /// Writes (controllers only), within the write rules.
    Kube,
}

impl Grant {
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::Log => "log",
            Grant::Cache => "cache",
            Grant::Clocks => "clocks",
            Grant::Kube => "kube",
        }
    }
}

/// `on_swap` of the TOML config.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum OnSwapPolicy {
    Continue,
    Replay,
}

/// What the host observed of a plugin.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// `Ready`, `Synced`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `sha256:…` of the component now handling notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Which replica runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// Counters of the running plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<PluginCounters>,
}

/// A summary of the running plugin's counters.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginCounters {
    pub delivered: u64,
    pub failed: u64,
    pub crashed: u64,
    pub pending: u64,
    pub swaps: u64,
    /// A controller's writes the server accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<u64>,
    /// A controller's writes the host refused (rules, namespace, rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_writes: Option<u64>,
}

/// What the plugins of the namespaces it matches may have. A plugin asking
/// for more is not loaded (`Ready=False`, naming the limit); one in a
/// namespace no policy matches is not loaded either.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "informer-host.dev",
    version = "v1alpha1",
    kind = "TenantPolicy",
    shortname = "ihtp",
    category = "informer-host",
    doc = "The caps and grants of the plugins of the namespaces it matches",
    printcolumn = r#"{"name":"Max plugins","type":"integer","jsonPath":".spec.maxPlugins"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantPolicySpec {
    /// Namespaces matched by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces matched by their labels (all must match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// Plugins per namespace, at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_plugins: Option<u32>,
    /// Caps on each plugin's limits; a plugin that leaves a limit unset gets
    /// the cap.
    #[serde(default, skip_serializing_if = "LimitsSpec::is_empty")]
    pub limits: LimitsSpec,
    /// Cap on `maxPending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<u32>,
    /// The grants its plugins may ask for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_grants: Vec<Grant>,
    /// What its controllers may be allowed to write: each write rule of a
    /// plugin must lie within one of these. Writes are always confined to
    /// the plugin's own namespace. None: its plugins write nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_write_rules: Vec<WriteRuleSpec>,
    /// Cap on `maxConcurrentReconciles` (default 1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrent_reconciles: Option<u32>,
    /// Cap on the number of a controller's `watches` (default 4): each
    /// starts an informer, a list and a watch on the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 32))]
    pub max_watches: Option<u32>,
    /// Cap on `writesPerSecond` (client-go's 5 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_writes_per_second: Option<u32>,
    /// Writes per second all the controllers of one of its namespaces
    /// share, in front of each one's own `writesPerSecond`: a tenant
    /// running ten controllers gets this, not ten times theirs. Absent: no
    /// shared limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tenant_writes_per_second: Option<u32>,
    /// Writes of its controllers impersonate this ServiceAccount of the
    /// plugin's namespace, so the cluster's RBAC judges them too (the
    /// host's own account needs `impersonate` on serviceaccounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonate_service_account: Option<String>,
}

/// The CRDs of [`Plugin`] and [`TenantPolicy`], as `deploy/crds/` holds them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![Plugin::crd(), TenantPolicy::crd()]
}

/// The CRDs as one multi-document YAML stream (`informer-host crds`).
pub fn crds_yaml() -> String {
    let mut out = String::from("# Generated by `informer-host crds`; do not edit.\n");
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd).expect("a CRD serializes"));
    }
    out
}

fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// `metav1.Condition` list, merged by `type` as Kubernetes lists of
/// conditions are.
fn conditions(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string", "maxLength": 316},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "reason": {"type": "string", "maxLength": 1024},
                "message": {"type": "string", "maxLength": 32768},
            },
        },
    })
}
