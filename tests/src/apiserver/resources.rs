//! Resource types the server serves: group, version, kind, plural, scope.

/// A resource type the server serves: `group/version`, `kind`, `plural`,
/// and the few strategy choices of the real registry that a client can see.
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
    /// Discovery's `singularName`, e.g. `configmap`.
    pub singular: String,
    /// Whether `{plural}/status` is a subresource: writes to the main resource
    /// then keep the stored `status`, writes to `/status` keep everything but
    /// `status`, and `status` changes never bump `metadata.generation`.
    pub status_subresource: bool,
    /// Whether the server maintains `metadata.generation` (custom resources
    /// and most workload types; not ConfigMaps, Secrets, Namespaces, Events).
    pub generation: bool,
    /// Whether a `DELETE` answers with the deleted object (the generic
    /// store's `ReturnDeletedObject`: custom resources, Pods) rather than a
    /// `Success` Status (ConfigMaps, Secrets, Deployments).
    pub returns_deleted_object: bool,
    /// Whether a `PUT` without `metadata.resourceVersion` is accepted
    /// (`AllowUnconditionalUpdate`: most built-in types; not custom resources,
    /// whose updates need a resourceVersion).
    pub unconditional_update: bool,
    /// Whether `application/strategic-merge-patch+json` is accepted (built-in
    /// types only; custom resources answer `415`).
    pub strategic_merge: bool,
    /// Discovery's `shortNames` (`cm`, `deploy`): what `kubectl get cm` resolves.
    pub short_names: Vec<String>,
}

impl ResourceType {
    /// A custom resource as the apiextensions server serves it: generation
    /// maintained, the deleted object returned from `DELETE`, updates need a
    /// resourceVersion, no strategic merge patch, no status subresource
    /// (see [`ResourceType::with_status_subresource`]).
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
            singular: kind.to_ascii_lowercase(),
            status_subresource: false,
            generation: true,
            returns_deleted_object: true,
            unconditional_update: false,
            strategic_merge: false,
            short_names: Vec::new(),
        }
    }
    /// A built-in type with the generic registry's defaults: no generation,
    /// a `Success` Status from `DELETE`, unconditional updates allowed,
    /// strategic merge patch accepted.
    pub fn builtin(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceType {
            generation: false,
            returns_deleted_object: false,
            unconditional_update: true,
            strategic_merge: true,
            ..Self::new(group, version, kind, plural, namespaced)
        }
    }
    /// Adds discovery short names.
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|n| n.to_string()).collect();
        self
    }
    /// Serves `{plural}/status` as a subresource.
    pub fn with_status_subresource(mut self) -> Self {
        self.status_subresource = true;
        self
    }
    /// `v1` `ConfigMap` (`configmaps`), namespaced. Registered by default.
    pub fn config_maps() -> Self {
        Self::builtin("", "v1", "ConfigMap", "configmaps", true).with_short_names(&["cm"])
    }
    /// `v1` `Secret` (`secrets`), namespaced. Registered by default.
    pub fn secrets() -> Self {
        Self::builtin("", "v1", "Secret", "secrets", true)
    }
    /// `v1` `Namespace` (`namespaces`), cluster-scoped, with `namespaces/status`.
    /// Registered by default.
    pub fn namespaces() -> Self {
        Self::builtin("", "v1", "Namespace", "namespaces", false).with_status_subresource().with_short_names(&["ns"])
    }
    /// `apps/v1` `Deployment` (`deployments`), namespaced, with
    /// `deployments/status` and generation. Registered by default.
    pub fn deployments() -> Self {
        ResourceType { generation: true, ..Self::builtin("apps", "v1", "Deployment", "deployments", true) }
            .with_status_subresource()
            .with_short_names(&["deploy"])
    }
    /// `v1` `Pod` (`pods`), namespaced, with `pods/status`. Not registered
    /// by default: [`ApiServer::register`] it.
    ///
    /// [`ApiServer::register`]: super::ApiServer::register
    pub fn pods() -> Self {
        Self::builtin("", "v1", "Pod", "pods", true).with_status_subresource().with_short_names(&["po"])
    }
    /// `v1` `Event` (`events`), namespaced. Registered by default.
    pub fn core_events() -> Self {
        Self::builtin("", "v1", "Event", "events", true).with_short_names(&["ev"])
    }
    /// `events.k8s.io/v1` `Event` (`events`), namespaced. Registered by default.
    pub fn events() -> Self {
        Self::builtin("events.k8s.io", "v1", "Event", "events", true).with_short_names(&["ev"])
    }
    /// `apiextensions.k8s.io/v1` `CustomResourceDefinition`, cluster-scoped,
    /// with status. Registered by default: creating one serves its resource.
    pub fn custom_resource_definitions() -> Self {
        ResourceType {
            generation: true,
            ..Self::builtin(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                false,
            )
        }
        .with_status_subresource()
        .with_short_names(&["crd", "crds"])
    }
    /// `coordination.k8s.io/v1` `Lease` (`leases`), namespaced: a built-in
    /// type without status subresource or generation; updates carrying a
    /// stale `resourceVersion` get `409 Conflict`. Registered by default, as
    /// every real API server serves it.
    pub fn leases() -> Self {
        Self::builtin("coordination.k8s.io", "v1", "Lease", "leases", true)
    }
    /// The resource as errors name it: `configmaps`, `deployments.apps`.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }
    /// The kind as `Invalid` errors name it: `ConfigMap`, `Deployment.apps`.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() { self.kind.clone() } else { format!("{}.{}", self.kind, self.group) }
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
