//! The RBAC of `deploy/`: the host's ClusterRoles cover what it reads and
//! writes (and no more than it needs of Secrets), the watched kinds are an
//! aggregated ClusterRole, Leases are a Role in its namespace, and the
//! example tenant and platform roles grant what docs/deployment.md says.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role};

use super::{objects, objects_of, the};

fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        let any = |list: &Option<Vec<String>>, want: &str| {
            list.as_ref().is_some_and(|l| l.iter().any(|x| x == want || x == "*"))
        };
        any(&r.api_groups, group) && any(&r.resources, resource) && r.verbs.iter().any(|v| v == verb || v == "*")
    })
}

#[test]
fn the_host_rbac_covers_what_the_host_reads_and_writes() {
    let docs = objects();
    let host: ClusterRole = the(&docs, "ClusterRole", "informer-host");
    let rules = host.rules.unwrap();
    for (group, resource, verbs) in [
        ("informer-host.dev", "plugins", &["get", "list", "watch"][..]),
        ("informer-host.dev", "plugins/status", &["patch"]),
        ("informer-host.dev", "tenantpolicies", &["list", "watch"]),
        ("", "namespaces", &["list", "watch"]),
        ("", "configmaps", &["get"]),
        ("", "secrets", &["get"]),
    ] {
        for v in verbs {
            assert!(allows(&rules, group, resource, v), "the host's ClusterRole misses {v} {resource}.{group}");
        }
    }
    assert!(!allows(&rules, "", "secrets", "list"), "the host lists no Secrets: it reads pull secrets by name");

    // Watched kinds: an aggregated ClusterRole, bound to the host, filled by
    // every ClusterRole with the label.
    let watched: ClusterRole = the(&docs, "ClusterRole", "informer-host-watched-kinds");
    let selectors = watched.aggregation_rule.unwrap().cluster_role_selectors.unwrap();
    let label = ("informer-host.dev/aggregate-to-host".to_string(), "true".to_string());
    assert!(selectors.iter().any(|s| s.match_labels.as_ref().is_some_and(|m| m.get(&label.0) == Some(&label.1))));
    let contributing: Vec<ClusterRole> = objects_of::<ClusterRole>(&docs, "ClusterRole")
        .into_iter()
        .filter(|r| r.metadata.labels.as_ref().is_some_and(|l| l.get(&label.0) == Some(&label.1)))
        .collect();
    assert!(contributing.len() >= 2, "the base's defaults and the example's extra kind");
    let aggregated: Vec<PolicyRule> = contributing.into_iter().flat_map(|r| r.rules.unwrap()).collect();
    for (group, resource) in [("apps", "deployments"), ("", "configmaps"), ("networking.k8s.io", "ingresses")] {
        assert!(allows(&aggregated, group, resource, "list") && allows(&aggregated, group, resource, "watch"));
    }
    let bindings: Vec<ClusterRoleBinding> = objects_of(&docs, "ClusterRoleBinding");
    for role in ["informer-host", "informer-host-watched-kinds"] {
        let b = bindings.iter().find(|b| b.role_ref.name == role).unwrap_or_else(|| panic!("{role} is not bound"));
        let s = &b.subjects.as_ref().unwrap()[0];
        assert_eq!(
            (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()),
            ("ServiceAccount", "informer-host", Some("informer-host"))
        );
    }

    // Leases in the host's own namespace.
    let leases: Role = the(&docs, "Role", "informer-host-leases");
    assert_eq!(leases.metadata.namespace.as_deref(), Some("informer-host"));
    for v in ["get", "list", "watch", "create", "update", "delete"] {
        assert!(allows(leases.rules.as_ref().unwrap(), "coordination.k8s.io", "leases", v));
    }

    // The examples: tenants manage Plugins where they are; the platform team
    // owns TenantPolicies.
    let author: Role = objects_of::<Role>(&docs, "Role")
        .into_iter()
        .find(|r| r.metadata.name.as_deref() == Some("plugin-author"))
        .unwrap();
    let a = author.rules.unwrap();
    for v in ["create", "update", "delete"] {
        assert!(allows(&a, "informer-host.dev", "plugins", v) && allows(&a, "", "configmaps", v));
    }
    assert!(allows(&a, "informer-host.dev", "plugins/status", "get"));
    assert!(!allows(&a, "informer-host.dev", "plugins/status", "patch"), "tenants must not forge status");
    let platform: ClusterRole = objects_of::<ClusterRole>(&docs, "ClusterRole")
        .into_iter()
        .find(|r| r.metadata.name.as_deref() == Some("plugin-platform"))
        .unwrap();
    let p = platform.rules.unwrap();
    for v in ["create", "update", "delete", "list"] {
        assert!(allows(&p, "informer-host.dev", "tenantpolicies", v) && allows(&p, "informer-host.dev", "plugins", v));
    }
}
