//! Resource types the server serves: group, version, kind, plural, scope.

/// A resource type the server serves: `group/version`, `kind`, `plural`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The path segment, e.g. `configmaps`.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ResourceType {
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }
    /// `v1` `ConfigMap` (`configmaps`), namespaced. Registered by default.
    pub fn config_maps() -> Self {
        Self::new("", "v1", "ConfigMap", "configmaps", true)
    }
    /// `v1` `Secret` (`secrets`), namespaced. Registered by default.
    pub fn secrets() -> Self {
        Self::new("", "v1", "Secret", "secrets", true)
    }
    /// `v1` `Namespace` (`namespaces`), cluster-scoped. Registered by default.
    pub fn namespaces() -> Self {
        Self::new("", "v1", "Namespace", "namespaces", false)
    }
    /// `apps/v1` `Deployment` (`deployments`), namespaced. Registered by default.
    pub fn deployments() -> Self {
        Self::new("apps", "v1", "Deployment", "deployments", true)
    }
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
    /// The collection path, e.g. `/api/v1/namespaces/ns/configmaps`.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let root = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) => format!("{root}/namespaces/{ns}/{}", self.plural),
            None => format!("{root}/{}", self.plural),
        }
    }
}
