//! Informer Host: Kubernetes shared informers whose handlers are sandboxed
//! WebAssembly components.
//!
//! - [`informer`]: the engine (client-go's SharedIndexInformer), no wasm.
//! - [`source`]: where objects come from (memory, manifests, kube).
//! - [`plugin`]: the wasm runtime that runs each handler in a sandbox.
//! - [`cluster`]: writes to the cluster (the API server or the embedded
//!   store), as controllers ask for them.
//! - [`config`], [`app`], [`metrics`], [`admin`]: the `informer-host` program.
//! - [`names`]: the one check of plugin, informer and tenant names.
//! - [`wasm_file`]: reading a component from a path an admin API caller chose.
//! - [`lru_dir`]: cache directories bounded by size (OCI blobs, compiled code).

pub mod admin;
pub mod admin_api;
pub mod app;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod coordination;
pub mod deadline;
pub mod informer;
pub mod kube_plugins;
pub mod lru_dir;
pub mod metrics;
pub mod names;
pub mod oci;
pub mod plugin;
pub mod registry;
pub mod source;
pub mod wasm_file;
pub mod workqueue;
