//! `[plugin_resources]`: the host loads the `Plugin` custom resources of the
//! cluster (see [`crate::kube_plugins`]) beside the plugins of the file.
//!
//! ```toml
//! [plugin_resources]
//! namespace = "team-a"          # only this namespace's Plugins (default: all)
//! identity = "host-0"           # this replica's name in statuses (default: $POD_NAME, else the hostname)
//! max_component_size = "32MiB"  # larger components are refused
//! oci_cache_dir = "oci"         # pulled components, by digest (default: `[host] cache_dir`/oci, else a temp dir)
//! plain_http_registries = ["registry.internal:5000"]  # registries without TLS (default: none)
//! internal_registries = ["harbor.tools.svc"]  # may resolve to internal addresses (default: none)
//! leases = true                 # replicas share the plugins through Leases (default: false, this replica runs all)
//! lease_namespace = "informer-host"  # where the Leases live (default: the client's namespace, in a pod its own)
//! ```

use std::path::PathBuf;

use super::{Cx, Fields, S, parse_size};

/// The settings of `[plugin_resources]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginResourcesConfig {
    pub namespace: Option<String>,
    pub identity: Option<String>,
    pub max_component_size: usize,
    pub oci_cache_dir: Option<PathBuf>,
    pub plain_http_registries: Vec<String>,
    /// Registries a pull may reach at private, loopback or link-local
    /// addresses (see [`crate::oci::egress`]).
    pub internal_registries: Vec<String>,
    pub leases: bool,
    pub lease_namespace: Option<String>,
}

pub(super) struct RawPluginResources {
    namespace: Option<S<String>>,
    identity: Option<S<String>>,
    max_component_size: Option<S<String>>,
    oci_cache_dir: Option<S<String>>,
    plain_http_registries: Option<S<Vec<String>>>,
    internal_registries: Option<S<Vec<String>>>,
    leases: Option<S<bool>>,
    lease_namespace: Option<S<String>>,
}

impl RawPluginResources {
    pub(super) fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(
            f,
            RawPluginResources,
            [],
            [
                namespace,
                identity,
                max_component_size,
                oci_cache_dir,
                plain_http_registries,
                internal_registries,
                leases,
                lease_namespace
            ]
        )
    }
}

impl Cx<'_> {
    pub(super) fn plugin_resources(&mut self, r: RawPluginResources) -> PluginResourcesConfig {
        let mut c = PluginResourcesConfig {
            namespace: None,
            identity: None,
            max_component_size: 32 << 20,
            oci_cache_dir: r.oci_cache_dir.as_ref().map(|v| self.path(v.get_ref())),
            plain_http_registries: r.plain_http_registries.map(|v| v.into_inner()).unwrap_or_default(),
            internal_registries: r.internal_registries.map(|v| v.into_inner()).unwrap_or_default(),
            leases: r.leases.is_some_and(|v| v.into_inner()),
            lease_namespace: None,
        };
        if let Some(ns) = r.lease_namespace {
            match crate::names::check("namespace", ns.get_ref()) {
                Ok(()) => c.lease_namespace = Some(ns.into_inner()),
                Err(e) => self.error(ns.span(), e.to_string()),
            }
        }
        if let Some(ns) = r.namespace {
            match crate::names::check("namespace", ns.get_ref()) {
                Ok(()) => c.namespace = Some(ns.get_ref().clone()),
                Err(e) => self.error(ns.span(), e.to_string()),
            }
        }
        c.identity = r.identity.map(|i| i.into_inner());
        if let Some(v) = r.max_component_size {
            match parse_size(v.get_ref()) {
                Ok(n) => c.max_component_size = n,
                Err(e) => self.error(v.span(), format!("`max_component_size`: {e}")),
            }
        }
        c
    }
}
