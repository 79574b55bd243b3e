//! The host's HTTP servers: `/metrics`, `/healthz` and `/readyz`, and the
//! listener the admin API ([`crate::admin_api`]) is served on.
//!
//! This module owns the listeners and the health routes; what they report
//! comes from [`crate::metrics`]. `/healthz` answers 200 while the process
//! runs; `/readyz` answers 200 only when every informer has synced and
//! every plugin's registration has synced, and its body lists each check
//! Kubernetes-style (`[+]` / `[-]`). A [`Refresh`] hook, when given, runs
//! before `/metrics` and `/readyz` answer, so what they report follows
//! plugins loaded, swapped or unloaded at runtime.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, Observed};

/// Brings [`Observed`] up to date; called before `/metrics` and `/readyz` answer.
pub type Refresh = Arc<dyn Fn() + Send + Sync>;

#[derive(Clone)]
struct AppState {
    observed: Observed,
    metrics: Arc<Metrics>,
    refresh: Option<Refresh>,
}

impl AppState {
    fn refresh(&self) {
        if let Some(f) = &self.refresh {
            f();
        }
    }
}

/// The routes, for embedding or testing without a socket.
pub fn router(observed: Observed) -> Router {
    router_with(observed, None)
}

/// The routes, with a hook run before `/metrics` and `/readyz` answer.
pub fn router_with(observed: Observed, refresh: Option<Refresh>) -> Router {
    let metrics = Arc::new(Metrics::new(observed.clone()));
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { observed, metrics, refresh })
}

async fn metrics_handler(State(s): State<AppState>) -> impl IntoResponse {
    s.refresh();
    ([(header::CONTENT_TYPE, Metrics::CONTENT_TYPE)], s.metrics.encode())
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    s.refresh();
    let r = s.observed.readiness();
    let status = if r.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], r.render())
}

/// A bound, running HTTP server.
pub struct AdminServer {
    /// The address actually bound (useful with port 0).
    pub local_addr: SocketAddr,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl AdminServer {
    /// Binds `addr` and serves `/metrics`, `/healthz` and `/readyz` until `stop` fires.
    pub async fn start(addr: SocketAddr, observed: Observed, stop: CancellationToken) -> std::io::Result<AdminServer> {
        Self::serve(addr, router(observed), stop).await
    }

    /// Binds `addr` and serves `app` (e.g. [`crate::admin_api::router`]) until `stop` fires.
    pub async fn serve(addr: SocketAddr, app: Router, stop: CancellationToken) -> std::io::Result<AdminServer> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await
        });
        Ok(AdminServer { local_addr, task })
    }

    /// Waits for the server to stop (after its token fired).
    pub async fn join(self) {
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("HTTP server on {} failed: {e}", self.local_addr),
            Err(e) => tracing::warn!("HTTP server task on {} failed: {e}", self.local_addr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::{InformerOptions, SharedIndexInformer};
    use crate::metrics::InformerEntry;
    use crate::source::MemorySource;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.unwrap();
        let status = buf.split(' ').nth(1).unwrap().parse().unwrap();
        let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics() {
        let src = MemorySource::new();
        src.apply_config_map("default", "a", "1").unwrap();
        let informer = SharedIndexInformer::new(src, InformerOptions { name: "cms".into(), ..Default::default() });
        let observed = Observed::new();
        observed.add_informer(InformerEntry {
            name: "cms".into(),
            source: "memory".into(),
            informer: informer.clone(),
        });
        let stop = CancellationToken::new();
        let server = AdminServer::start("127.0.0.1:0".parse().unwrap(), observed, stop.clone()).await.unwrap();
        let addr = server.local_addr;

        assert_eq!(get(addr, "/healthz").await, (200, "ok\n".into()));
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(status, 503);
        assert!(body.contains("[-]informer cms: not synced"), "{body}");

        let run = tokio::spawn({
            let i = informer.clone();
            let s = stop.clone();
            async move { i.run(s).await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let (status, body) = get(addr, "/readyz").await;
            if status == 200 {
                assert!(body.contains("[+]informer cms: synced, 1 objects"), "{body}");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never ready: {body}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("informer_host_informer_synced{informer=\"cms\"} 1"), "{body}");
        assert_eq!(get(addr, "/nope").await.0, 404);

        stop.cancel();
        server.join().await;
        run.await.unwrap();
    }
}
