//! Plugins as Kubernetes resources: a namespaced `Plugin` (its namespace is
//! its tenant) names a component and what it watches; a cluster-scoped
//! `TenantPolicy` says what the plugins of the namespaces it matches may
//! have. Who may create either is decided by Kubernetes RBAC on the
//! resources, not by a secret the host hands out.
//!
//! Modules: `crd` (the resources' wire shape and CRDs), `policy` (a spec
//! checked against its tenant's policy), `component` (reading the component
//! a spec names), `status` (conditions and writing them), `controller` (the
//! loop that makes the registry run what the resources say), `reconcilers`
//! (a `Plugin` that is a controller, put together).

pub mod component;
pub mod controller;
pub mod crd;
pub mod policy;
mod reconcilers;
pub mod status;

pub use controller::{PluginResources, PluginResourcesOptions};
pub use crd::{Plugin, TenantPolicy, crds, crds_yaml};
