//! The program: turns a [`Config`] into running informers and plugins.
//!
//! This module owns the wiring of the host proper, one concern per file:
//!
//! - `lifecycle`: [`App`], start-up in order (sources, then metrics and
//!   health and the admin API, then the informers, then the plugins, which
//!   load in the background), the run until SIGINT/SIGTERM, and the
//!   shutdown in order (informers stop, in-flight calls get a grace period,
//!   the process exits 0).
//! - `plugins`: the config's plugins through the
//!   [`PluginRegistry`](crate::registry::PluginRegistry), with their
//!   tenant's visibility and limits: concurrent, bounded loads; a plugin
//!   that fails to load (or whose `init` overruns its deadline) is reported
//!   and marked failed while the rest keep running; what metrics and
//!   `/readyz` see ([`Observed`](crate::metrics::Observed)) kept in step
//!   with the registry after every change and before every scrape, so
//!   plugins swapped, loaded or unloaded through the admin API are
//!   reported too.
//! - `health`: the `/metrics`, `/healthz` and `/readyz` server (readiness
//!   counts plugins still loading as not ready) and the start-up lines.
//! - `controllers`: the config's controllers, started once the informers
//!   run, each writing to its primary informer's source (the embedded
//!   cluster of a manifests directory, or the API server), counted by
//!   `/readyz` until their informers synced, and stopped at shutdown after
//!   their in-flight reconciles.
//! - `reload`: SIGHUP re-reads the config and applies the difference to
//!   the plugins.
//! - `watch`: a plugin with `watch = true` is swapped when its wasm file
//!   changes.
//! - `totals`: a plugin's runtime counters (fuel, calls, restarts, traps)
//!   summed across its versions, so they never go backwards.
//! - `sources`: opening each informer's source.
//! - `check`: `informer-host check`, which loads every plugin without
//!   starting anything.
//! - `logging` and `format`: log set-up, and how durations, sizes and
//!   loads are written for people.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::Config;
use crate::plugin::PluginError;

mod check;
mod controllers;
mod format;
mod health;
mod lifecycle;
mod logging;
mod plugins;
mod reload;
mod sources;
mod totals;
mod watch;

pub use check::{CheckReport, CheckedController, CheckedPlugin, check};
pub use format::{describe_load, fmt_duration, fmt_size};
pub use lifecycle::{App, shutdown_signal};
pub use logging::init_logging;
pub use sources::Sources;
pub use watch::WATCH_DEBOUNCE;

/// Settings from the command line that override or complete the config.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Overrides `[host] metrics_addr`.
    pub metrics_addr: Option<SocketAddr>,
    pub kube: KubeOptions,
    /// Overrides `[host] shutdown_grace`.
    pub shutdown_grace: Option<Duration>,
}

/// How `kube` sources reach the API server.
#[derive(Debug, Clone, Default)]
pub struct KubeOptions {
    /// A kubeconfig file (default: `KUBECONFIG`, `~/.kube/config`, or in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// A context of the kubeconfig (default: its current context).
    pub context: Option<String>,
}

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{at}: informer {name:?}: cannot open its {source_kind} source: {message}")]
    Source { at: String, name: String, source_kind: &'static str, message: String },
    #[error("{at}: informer {name:?}: {message}")]
    Informer { at: String, name: String, message: String },
    #[error("cannot start the wasm runtime: {0}")]
    Runtime(PluginError),
    #[error("cannot serve metrics on {addr}: {message}")]
    Bind { addr: SocketAddr, message: String },
    #[error("cannot serve the admin API on {addr} ([admin] addr): {message}")]
    BindAdmin { addr: SocketAddr, message: String },
}

/// Starts the host from a config and runs it until SIGINT/SIGTERM. Health
/// is served and the informers run while the plugins still load.
pub async fn run(config: &Config, opts: &RunOptions) -> Result<(), AppError> {
    let app = App::launch(config, opts).await?;
    app.run_until_signal().await;
    tracing::info!("bye");
    Ok(())
}
