//! Health as the program reports it: the `/metrics`, `/healthz` and
//! `/readyz` server, and the start-up lines a person reads (each informer
//! synced, then the host ready).
//!
//! The routes are [`crate::admin`]'s, with what they report brought in step
//! with the registry before every scrape; `/readyz` is answered from
//! [`Plugins::readiness`], which also holds readiness back for plugins
//! still loading and names them.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

use crate::admin::AdminServer;
use crate::informer::SharedIndexInformer;
use crate::metrics::PluginState;

use super::AppError;
use super::format::fmt_duration;
use super::plugins::Plugins;

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until `stop`.
pub(super) async fn serve(
    addr: SocketAddr,
    plugins: &Arc<Plugins>,
    stop: CancellationToken,
) -> Result<AdminServer, AppError> {
    let refresh: crate::admin::Refresh = {
        let plugins = Arc::downgrade(plugins);
        Arc::new(move || {
            if let Some(p) = plugins.upgrade() {
                p.sync_observed();
            }
        })
    };
    // `/readyz` from `Plugins::readiness`; every other route as it is.
    let weak = Arc::downgrade(plugins);
    let with_loads = move |req: Request, next: Next| {
        let plugins = weak.upgrade();
        async move {
            match plugins {
                Some(p) if req.uri().path() == "/readyz" && matches!(*req.method(), Method::GET | Method::HEAD) => {
                    readyz(&p)
                }
                _ => next.run(req).await,
            }
        }
    };
    let router =
        crate::admin::router_with(plugins.observed.clone(), Some(refresh)).layer(axum::middleware::from_fn(with_loads));
    let server =
        AdminServer::serve(addr, router, stop).await.map_err(|e| AppError::Bind { addr, message: e.to_string() })?;
    let a = server.local_addr;
    tracing::info!("serving http://{a}/metrics, http://{a}/healthz and http://{a}/readyz");
    Ok(server)
}

/// `/readyz`, counting plugins still loading as not ready.
fn readyz(plugins: &Plugins) -> Response {
    let r = plugins.readiness();
    let status = if r.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], r.render()).into_response()
}

/// Logs once `informer` has synced.
pub(super) async fn report_synced(informer: SharedIndexInformer, started: Instant, stop: CancellationToken) {
    loop {
        if informer.has_synced() {
            tracing::info!(
                "listed {} objects, synced in {}",
                informer.indexer().len(),
                fmt_duration(started.elapsed())
            );
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
}

/// Logs once the host is ready (every informer synced, every plugin loaded
/// or failed, every running plugin done with its initial list); warns
/// after 30 s with what it still waits for.
pub(super) async fn report_ready(plugins: Arc<Plugins>, started: Instant, stop: CancellationToken) {
    let observed = plugins.observed.clone();
    let plugins_handle = plugins.clone();
    let mut warned = false;
    loop {
        // While plugins still load the host is not ready: wait for the
        // loads instead of computing readiness (a walk over every plugin)
        // every few milliseconds, unless the warning is due.
        if !plugins.config_loaded_now() && (warned || started.elapsed() < Duration::from_secs(30)) {
            let warn_in = Duration::from_secs(30).saturating_sub(started.elapsed());
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = plugins.config_loaded() => {}
                _ = tokio::time::sleep(warn_in), if !warned => {}
            }
            continue;
        }
        let r = plugins.readiness();
        if r.ready {
            let plugins = observed.plugins();
            let failed = plugins.iter().filter(|p| matches!(p.state, PluginState::Failed { .. })).count();
            let running = plugins.len() - failed;
            let mut line = format!(
                "ready in {}: {} informer(s) synced, {running} plugin(s) handled their initial list",
                fmt_duration(started.elapsed()),
                observed.informers().len()
            );
            if failed > 0 {
                let _ = write!(line, ", {failed} plugin(s) failed to load");
            }
            let controllers = plugins_handle.controllers.running();
            if controllers > 0 {
                let _ = write!(line, ", {controllers} controller(s) synced");
            }
            tracing::info!("{line}");
            return;
        }
        if !warned && started.elapsed() > Duration::from_secs(30) {
            warned = true;
            let waiting: Vec<String> =
                r.checks.iter().filter(|c| !c.ok).map(|c| format!("{} ({})", c.what, c.detail)).collect();
            tracing::warn!("not ready after 30s; waiting for {}", waiting.join(", "));
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
}
