//! Discovery documents for the registered types, in the unaggregated
//! (legacy) format every client understands: `/api` (`APIVersions`), `/apis`
//! (`APIGroupList`), `/apis/{group}` (`APIGroup`), `/api/v1` and
//! `/apis/{group}/{version}` (`APIResourceList`, with a `{plural}/status`
//! entry for a status subresource), and `/version`. A client asking for the
//! aggregated format (`Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`)
//! gets these with `Content-Type: application/json`, which clients read as
//! "not supported" and fall back from, as against a server before 1.26.
//! Types registered at runtime — with [`ApiServer::register`] or by creating
//! a `CustomResourceDefinition` — appear at once.

use super::*;

/// The verbs the fixture serves on a resource (no `deletecollection`).
const VERBS: [&str; 7] = ["create", "delete", "get", "list", "patch", "update", "watch"];

pub(super) fn is_discovery_path(path: &str) -> bool {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    matches!(segs.as_slice(), ["api"] | ["apis"] | ["version"] | ["api", _] | ["apis", _] | ["apis", _, _])
}

/// A group's versions, highest priority first (GA before beta before
/// alpha, higher numbers first), as the API server orders a custom
/// resource's versions; the first is the group's `preferredVersion`.
fn group_versions(types: &[ResourceType], group: &str) -> Vec<String> {
    let mut versions: Vec<String> = Vec::new();
    for t in types.iter().filter(|t| t.group == group) {
        if !versions.contains(&t.version) {
            versions.push(t.version.clone());
        }
    }
    versions.sort_by_key(|v| std::cmp::Reverse(kube::core::Version::parse(v).priority()));
    versions
}

fn api_group(types: &[ResourceType], group: &str) -> Value {
    let versions: Vec<Value> = group_versions(types, group)
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
}

fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in types.iter().filter(|t| t.group == group && t.version == version) {
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        resources.push(r);
        if t.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

pub(super) fn serve_discovery(shared: &Shared, path: &str) -> Response<Body> {
    let st = shared.state.lock();
    let types = &st.types;
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let doc = match segs.as_slice() {
        ["version"] => Some(json!({
            "major": "1", "minor": "34", "gitVersion": "v1.34.0", "gitCommit": "e2e-fixture",
            "gitTreeState": "clean", "buildDate": "2025-08-27T00:00:00Z", "goVersion": "go1.24.6",
            "compiler": "gc", "platform": "linux/amd64",
        })),
        ["api"] => Some(json!({
            "kind": "APIVersions",
            "versions": group_versions(types, ""),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}],
        })),
        ["apis"] => {
            let mut groups: Vec<&str> = Vec::new();
            for t in types.iter().filter(|t| !t.group.is_empty()) {
                if !groups.contains(&t.group.as_str()) {
                    groups.push(&t.group);
                }
            }
            let groups: Vec<Value> = groups.iter().map(|g| api_group(types, g)).collect();
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
        }
        ["apis", g] if types.iter().any(|t| t.group == *g) => {
            let mut doc = api_group(types, g);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            Some(doc)
        }
        ["api", v] => resource_list(types, "", v),
        ["apis", g, v] => resource_list(types, g, v),
        _ => None,
    };
    match doc {
        Some(doc) => json_response(StatusCode::OK, doc.to_string()),
        None => status_response(404, "NotFound", "the server could not find the requested resource".into()),
    }
}

/// The resource types a `CustomResourceDefinition` serves: one per served
/// version, with its scope and status subresource.
pub(super) fn crd_types(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let (Some(group), Some(kind), Some(plural)) =
        (spec["group"].as_str(), spec["names"]["kind"].as_str(), spec["names"]["plural"].as_str())
    else {
        return Vec::new();
    };
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let singular = spec["names"]["singular"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .filter_map(|v| {
            let mut t = ResourceType::new(group, v["name"].as_str()?, kind, plural, namespaced);
            if let Some(s) = &singular {
                t.singular = s.clone();
            }
            if let Some(short) = spec["names"]["shortNames"].as_array() {
                t.short_names = short.iter().filter_map(|s| s.as_str().map(str::to_string)).collect();
            }
            t.status_subresource = !v["subresources"]["status"].is_null();
            Some(t)
        })
        .collect()
}
