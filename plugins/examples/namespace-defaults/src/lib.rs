//! Namespace defaults: every Namespace labelled for a tenant gets a default
//! ResourceQuota, LimitRange and RoleBinding, owned by the Namespace.
//!
//! Informers (names from the config, defaults shown):
//! - `namespaces` (v1 Namespaces): the primary; reconciled by name.
//! - `resourcequotas`, `limitranges` (v1), `rolebindings`
//!   (rbac.authorization.k8s.io/v1): secondaries, which the host maps to
//!   their owner through the ownerReference this controller sets (so
//!   deleting or editing one reconciles its Namespace, and
//!   [`Reconciler::map`] is not needed).
//!
//! A reconcile compares each default with the cached object and writes
//! only when one is missing or differs in a field the config sets (fields
//! others add, and status, do not count). It writes with server-side apply,
//! forced: one request creates, restores or repairs an object, no
//! resourceVersion is needed (the quota controller updates ResourceQuotas'
//! status all the time), the fields this controller sets are owned by its
//! field manager and win over other managers', and fields others add to the
//! objects survive. Nothing is deleted: the Namespace's deletion removes
//! them, and a Namespace whose label is removed keeps them.
//!
//! Write quantities in their canonical form (`500m`, not `0.5`): the API
//! server stores that form, and a config that differs from it would be
//! applied again on every resync.

use std::collections::BTreeMap;

use informer_guest::controller::kube::{self, DeleteOptions, Patch, Target};
use informer_guest::controller::{Action, Reconciler, stores};
use informer_guest::{Config, info};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Settings {
    /// The label that marks a tenant's Namespace; its value is the tenant.
    tenant_label: String,
    /// Informer names.
    namespaces: String,
    resourcequotas: String,
    limitranges: String,
    rolebindings: String,
    /// The defaults; `null` leaves that kind alone.
    resource_quota: Option<QuotaSettings>,
    limit_range: Option<LimitSettings>,
    role_binding: Option<BindingSettings>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaSettings {
    #[serde(default = "tenant_default")]
    name: String,
    /// `spec.hard`: resource name to quantity.
    hard: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitSettings {
    #[serde(default = "tenant_default")]
    name: String,
    /// `spec.limits`, as in a LimitRange.
    limits: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BindingSettings {
    #[serde(default = "tenant_admins")]
    name: String,
    /// The ClusterRole granted in the Namespace.
    cluster_role: String,
    /// RBAC subjects (`kind`: User, Group or ServiceAccount; `name`;
    /// `namespace` for a ServiceAccount). `{tenant}` in a name becomes the
    /// tenant label's value.
    subjects: Vec<Subject>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Subject {
    kind: String,
    name: String,
    namespace: Option<String>,
}

fn tenant_default() -> String {
    "tenant-default".into()
}

fn tenant_admins() -> String {
    "tenant-admins".into()
}

impl Default for Settings {
    fn default() -> Self {
        let quantities = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings {
            tenant_label: "informer-host.dev/tenant".into(),
            namespaces: "namespaces".into(),
            resourcequotas: "resourcequotas".into(),
            limitranges: "limitranges".into(),
            rolebindings: "rolebindings".into(),
            resource_quota: Some(QuotaSettings {
                name: tenant_default(),
                hard: quantities(&[("pods", "50"), ("requests.cpu", "8"), ("requests.memory", "16Gi")]),
            }),
            limit_range: Some(LimitSettings {
                name: tenant_default(),
                limits: vec![json!({
                    "type": "Container",
                    "default": { "cpu": "500m", "memory": "512Mi" },
                    "defaultRequest": { "cpu": "100m", "memory": "128Mi" },
                })],
            }),
            role_binding: Some(BindingSettings {
                name: tenant_admins(),
                cluster_role: "admin".into(),
                subjects: vec![Subject { kind: "Group".into(), name: "tenant:{tenant}".into(), namespace: None }],
            }),
        }
    }
}

/// How many reconciles in a row may pass over a default this controller
/// wrote and the cache does not show yet, before writing it again.
const MAX_WAITS: u32 = 5;

#[derive(Default)]
struct NamespaceDefaults {
    settings: Settings,
    /// Defaults written whose write the cache has not shown yet: the
    /// resourceVersion the write answered, and how many reconciles waited
    /// for it. The informers of the other kinds can run ahead: a reconcile
    /// caused by the new ResourceQuota must not apply the RoleBinding again
    /// because its own informer has not delivered it yet (client-go's
    /// controllers keep such "expectations" too).
    written: std::collections::HashMap<String, (String, u32)>,
}

impl Reconciler for NamespaceDefaults {
    fn init(&mut self, config: &Config) -> Result<(), String> {
        self.settings = config.parse()?;
        Ok(())
    }

    fn reconcile(&mut self, name: &str) -> Result<Action, String> {
        let Some(namespace) = stores::get(&self.settings.namespaces, name)? else {
            return Ok(Action::Done); // deleted: what it owned goes with it
        };
        if namespace.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(Action::Done); // terminating: the server refuses new objects in it
        }
        let Some(tenant) = namespace.label(&self.settings.tenant_label) else {
            return Ok(Action::Done); // not a tenant's
        };
        let uid = namespace.uid().ok_or("a Namespace without a uid")?;
        let mut waiting = false;
        let defaults: Vec<(String, Value)> =
            self.desired(name, &uid, &tenant).into_iter().map(|(i, d)| (i.to_string(), d)).collect();
        for (informer, desired) in defaults {
            let target = Target::of_json(&desired).ok_or("a default without a name")?;
            let current = stores::get(&informer, &format!("{name}/{}", target.name))?;
            let current: Option<Value> = current.map(|c| c.parse()).transpose()?;
            let key = target.to_string();
            if current.as_ref().is_some_and(|current| contains(current, &desired)) {
                self.written.remove(&key);
                continue; // already as configured: no write
            }
            if let Some((rv, waits)) = self.written.get_mut(&key) {
                let cached = current.as_ref().and_then(|c| c.pointer("/metadata/resourceVersion")?.as_str());
                if cached != Some(rv.as_str()) && *waits < MAX_WAITS {
                    // Written, not in the cache yet: look again soon.
                    *waits += 1;
                    waiting = true;
                    continue;
                }
            }
            // A RoleBinding's roleRef cannot change: replace the binding.
            if let Some(current) = &current
                && target.kind == "RoleBinding"
                && current.get("roleRef") != desired.get("roleRef")
            {
                let exactly = DeleteOptions { uid: uid_of(current), ..DeleteOptions::default() };
                kube::delete(&target, &exactly)?;
            }
            let stored = kube::patch(&target, Patch::apply(&desired).force())?;
            let rv = serde_json::from_str::<Value>(&stored)
                .ok()
                .and_then(|v| v.pointer("/metadata/resourceVersion")?.as_str().map(str::to_string));
            if let Some(rv) = rv {
                self.written.insert(key, (rv, 0));
            }
            let verb = if current.is_some() { "updated" } else { "created" };
            info!("{verb} {target} for tenant {tenant}");
        }
        Ok(if waiting { Action::RequeueAfter(std::time::Duration::from_secs(1)) } else { Action::Done })
    }
}

impl NamespaceDefaults {
    /// Each configured default for the Namespace `namespace` (with `uid`)
    /// of `tenant`, with the informer that caches its kind.
    fn desired(&self, namespace: &str, uid: &str, tenant: &str) -> Vec<(&str, Value)> {
        let s = &self.settings;
        let metadata = |name: &str| {
            json!({
                "name": name,
                "namespace": namespace,
                "labels": { "app.kubernetes.io/managed-by": "namespace-defaults", &s.tenant_label: tenant },
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": uid, "controller": true,
                }],
            })
        };
        let mut desired = Vec::new();
        if let Some(quota) = &s.resource_quota {
            desired.push((
                s.resourcequotas.as_str(),
                json!({
                    "apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata(&quota.name),
                    "spec": { "hard": quota.hard },
                }),
            ));
        }
        if let Some(limits) = &s.limit_range {
            desired.push((
                s.limitranges.as_str(),
                json!({
                    "apiVersion": "v1", "kind": "LimitRange", "metadata": metadata(&limits.name),
                    "spec": { "limits": limits.limits },
                }),
            ));
        }
        if let Some(binding) = &s.role_binding {
            let subjects: Vec<Value> = binding
                .subjects
                .iter()
                .map(|subject| {
                    // The server defaults apiGroup, and stores a ServiceAccount's
                    // empty one as absent (`omitempty`): written the way it is
                    // stored, the comparison with the cache stays exact.
                    let mut value = json!({ "kind": subject.kind, "name": subject.name.replace("{tenant}", tenant) });
                    if subject.kind != "ServiceAccount" {
                        value["apiGroup"] = json!("rbac.authorization.k8s.io");
                    }
                    if let Some(ns) = &subject.namespace {
                        value["namespace"] = json!(ns.replace("{tenant}", tenant));
                    }
                    value
                })
                .collect();
            desired.push((s.rolebindings.as_str(), json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata(&binding.name),
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": binding.cluster_role },
                "subjects": subjects,
            })));
        }
        desired
    }
}

/// Whether `actual` has every field of `desired` with the same value.
/// Fields only `actual` has (status, server defaults, others' labels) do
/// not count; lists must match item by item.
fn contains(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (Value::Object(actual), Value::Object(desired)) => {
            desired.iter().all(|(k, d)| actual.get(k).is_some_and(|a| contains(a, d)))
        }
        (Value::Array(actual), Value::Array(desired)) => {
            actual.len() == desired.len() && actual.iter().zip(desired).all(|(a, d)| contains(a, d))
        }
        _ => actual == desired,
    }
}

fn uid_of(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned)
}

informer_guest::export_controller!(NamespaceDefaults);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_overrides_defaults_and_null_leaves_a_kind_alone() {
        let settings: Settings = Config::new(
            r#"{"resource_quota": {"hard": {"pods": "5"}}, "limit_range": null,
                "role_binding": {"cluster_role": "edit", "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": "{tenant}-ci"}]}}"#,
        )
        .parse()
        .unwrap();
        let controller = NamespaceDefaults { settings };
        let desired = controller.desired("team-a", "uid-1", "a");
        let kinds: Vec<_> = desired.iter().map(|(informer, d)| (*informer, d["kind"].as_str().unwrap())).collect();
        assert_eq!(kinds, [("resourcequotas", "ResourceQuota"), ("rolebindings", "RoleBinding")]);

        let quota = &desired[0].1;
        assert_eq!(quota["metadata"]["name"], "tenant-default");
        assert_eq!(quota["spec"], json!({"hard": {"pods": "5"}}));
        assert_eq!(
            quota["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Namespace", "name": "team-a", "uid": "uid-1", "controller": true}])
        );
        assert_eq!(quota["metadata"]["labels"]["informer-host.dev/tenant"], "a");

        let binding = &desired[1].1;
        assert_eq!(binding["roleRef"]["name"], "edit");
        assert_eq!(binding["subjects"], json!([{"kind": "ServiceAccount", "name": "ci", "namespace": "a-ci"}]));
        assert_eq!(
            Target::of_json(binding),
            Some(Target::namespaced("rbac.authorization.k8s.io/v1", "RoleBinding", "team-a", "tenant-admins"))
        );
    }

    #[test]
    fn extra_fields_do_not_count_but_differences_do() {
        let desired = json!({"spec": {"hard": {"pods": "50"}}, "subjects": [{"kind": "Group", "name": "a"}]});
        let actual = json!({
            "spec": {"hard": {"pods": "50", "services": "5"}},
            "status": {"used": {"pods": "3"}},
            "subjects": [{"kind": "Group", "name": "a", "apiGroup": "rbac.authorization.k8s.io"}],
        });
        assert!(contains(&actual, &desired));
        assert!(!contains(&json!({"spec": {"hard": {"pods": "40"}}, "subjects": []}), &desired));
        let extra_subject = json!({"spec": {"hard": {"pods": "50"}}, "subjects": [{"kind": "Group", "name": "a"}, {"kind": "User", "name": "b"}]});
        assert!(!contains(&extra_subject, &desired));
    }
}
