//! [`ManifestFilter`]: which manifests a source serves, by `apiVersion`,
//! `kind`, namespace and label selector.

use std::fmt;

use serde_json::Value;

use crate::source::selector::{Selector, SelectorError};

/// Which manifests a [`ManifestsSource`](super::ManifestsSource) serves. `None` selects everything.
///
/// ```
/// use informer_host::source::manifests::ManifestFilter;
/// let f = ManifestFilter::default().kind("ConfigMap").namespace("team-a").labels("app=web").unwrap();
/// assert_eq!(f.to_string(), "kind=ConfigMap namespace=team-a labels=app=web");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestFilter {
    /// Exact `apiVersion`, e.g. `apps/v1`.
    pub api_version: Option<String>,
    /// Exact `kind`, e.g. `ConfigMap`.
    pub kind: Option<String>,
    /// Exact `metadata.namespace`; objects without one never match.
    pub namespace: Option<String>,
    /// Matched against `metadata.labels`.
    pub label_selector: Option<Selector>,
}

impl ManifestFilter {
    pub fn api_version(mut self, api_version: impl Into<String>) -> Self {
        self.api_version = Some(api_version.into());
        self
    }
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }
    /// Parses and sets the label selector.
    pub fn labels(mut self, selector: &str) -> Result<Self, SelectorError> {
        self.label_selector = Some(Selector::parse(selector)?);
        Ok(self)
    }

    /// Whether a (validated) manifest is selected.
    pub fn matches(&self, manifest: &Value) -> bool {
        let meta = &manifest["metadata"];
        let eq = |want: &Option<String>, got: &Value| want.as_deref().is_none_or(|w| got.as_str() == Some(w));
        eq(&self.api_version, &manifest["apiVersion"])
            && eq(&self.kind, &manifest["kind"])
            && eq(&self.namespace, &meta["namespace"])
            && self.label_selector.as_ref().is_none_or(|s| s.matches_with(|k| meta["labels"][k].as_str()))
    }
}

impl fmt::Display for ManifestFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(v) = &self.api_version {
            parts.push(format!("apiVersion={v}"));
        }
        if let Some(v) = &self.kind {
            parts.push(format!("kind={v}"));
        }
        if let Some(v) = &self.namespace {
            parts.push(format!("namespace={v}"));
        }
        if let Some(s) = self.label_selector.as_ref().filter(|s| !s.is_everything()) {
            parts.push(format!("labels={s}"));
        }
        if parts.is_empty() { f.write_str("everything") } else { f.write_str(&parts.join(" ")) }
    }
}
