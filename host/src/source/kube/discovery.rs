//! Discovery: the plural, scope and (when none is configured) version the
//! server gives the wanted kind, asked once before the first list, and the
//! error naming what the server serves instead when it does not serve it.

use ::kube::api::ApiResource;
use ::kube::core::GroupVersionKind;

use super::errors::chain;
use super::{KubeSource, Resolved};
use crate::informer::SourceError;

impl KubeSource {
    /// The resource as the server names it, asking discovery once.
    pub(super) async fn resolve(&self) -> Result<&Resolved, SourceError> {
        self.resolved.get_or_try_init(|| self.discover()).await
    }

    async fn discover(&self) -> Result<Resolved, SourceError> {
        let w = &self.wanted;
        let found = if w.version.is_empty() {
            self.preferred_kind().await
        } else {
            let gvk = GroupVersionKind::gvk(&w.group, &w.version, &w.kind);
            ::kube::discovery::pinned_kind(&self.client, &gvk).await
        };
        match found {
            Ok((mut ar, caps)) => {
                if let Some(plural) = &w.plural {
                    ar.plural = plural.clone();
                }
                if caps.scope == ::kube::discovery::Scope::Cluster && self.options.namespace.is_some() {
                    return Err(SourceError::Other(format!(
                        "{}: {} is cluster-scoped; an informer of it cannot have a namespace",
                        self.meta.describe, w.kind
                    )));
                }
                tracing::debug!(source = %self.meta.describe, version = %ar.version, plural = %ar.plural, "resolved by discovery");
                Ok(Resolved::new(&self.client, ar, &self.options))
            }
            Err(::kube::Error::Discovery(_)) => Err(self.not_served().await),
            Err(::kube::Error::Api(s)) if s.code == 404 => Err(self.not_served().await),
            Err(e) => Err(self.meta.error("discovery", "", e)),
        }
    }

    /// The kind in the wanted group at the preferred version, else at the
    /// first other version serving it.
    async fn preferred_kind(&self) -> ::kube::Result<(ApiResource, ::kube::discovery::ApiCapabilities)> {
        let w = &self.wanted;
        let group = ::kube::discovery::group(&self.client, &w.group).await?;
        let preferred = group.preferred_version_or_latest();
        std::iter::once(preferred)
            .chain(group.versions().filter(|v| *v != preferred))
            .find_map(|v| group.versioned_resources(v).into_iter().find(|(ar, _)| ar.kind == w.kind))
            .ok_or_else(|| {
                ::kube::Error::Discovery(::kube::error::DiscoveryError::MissingKind(format!("{}/{}", w.group, w.kind)))
            })
    }

    /// The error for a kind the server does not serve: what it serves
    /// instead, in that group and version (the preferred one when none was
    /// given), or which groups it has.
    async fn not_served(&self) -> SourceError {
        let w = &self.wanted;
        let mut api_version = w.api_version();
        let offered = if w.version.is_empty() {
            match ::kube::discovery::group(&self.client, &w.group).await {
                Ok(group) => {
                    let version = group.preferred_version_or_latest().to_string();
                    api_version = if w.group.is_empty() { version.clone() } else { format!("{}/{version}", w.group) };
                    Ok(group.versioned_resources(&version).into_iter().map(|(ar, _)| ar.kind).collect())
                }
                Err(e) => Err(e),
            }
        } else if w.group.is_empty() {
            self.client.list_core_api_resources(&w.version).await.map(|l| resource_kinds(l.resources))
        } else {
            self.client.list_api_group_resources(&api_version).await.map(|l| resource_kinds(l.resources))
        };
        let offered = match offered {
            Ok(mut kinds) => {
                kinds.sort();
                kinds.dedup();
                format!("{api_version} serves {}", if kinds.is_empty() { "no kinds".into() } else { kinds.join(", ") })
            }
            Err(_) => match self.client.list_api_groups().await {
                Ok(groups) => {
                    let mut names: Vec<String> = groups.groups.into_iter().map(|g| g.name).collect();
                    names.sort();
                    format!("the server has no {api_version}; its API groups: core (v1), {}", names.join(", "))
                }
                Err(e) => format!("the server has no {api_version} ({})", chain(&e)),
            },
        };
        SourceError::Other(format!(
            "{}: the server does not serve kind {} in {api_version} ({offered}); retrying, in case its \
             CustomResourceDefinition is installed later",
            self.meta.describe, w.kind
        ))
    }
}

/// The kinds of a discovery resource list (subresources left out).
fn resource_kinds(resources: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource>) -> Vec<String> {
    resources.into_iter().filter(|r| !r.name.contains('/')).map(|r| r.kind).collect()
}
