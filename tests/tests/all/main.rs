//! The end-to-end suites, one module each, in one test binary: linking
//! the host, wasmtime and kube once instead of once per suite is minutes of
//! CI time. Run one suite with `cargo test -p e2e --test all <module>::`.
//!
//! Every module is self-contained (its own fixtures and helpers); the
//! only process-wide state is `hostile`'s log capture, a global `tracing`
//! subscriber that every module's log lines go through.

mod admin_api;
mod apiserver_writes;
mod app_controllers;
mod cache_footprint;
mod controllers;
mod coordination;
mod deploy_manifests;
mod example_controllers;
mod go_plugins;
mod hostile;
mod hot_swap;
mod idle_reclaim;
mod kube_source;
mod kube_writer;
mod metrics_exposition;
mod oci;
mod other_languages;
mod plugin_resources;
mod tenants;
mod wasm_plugins;
