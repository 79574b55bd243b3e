//! The admin HTTP API: list, load, swap and unload plugins at runtime.
//!
//! This module owns the HTTP surface over [`PluginRegistry`]: bearer-token
//! authentication on every request, a size cap on uploads, and JSON errors
//! a person can act on. It binds where it is told (the program defaults to
//! 127.0.0.1) and may not reach past the registry.
//!
//! | method | path | body | does |
//! |---|---|---|---|
//! | GET | `/v1/plugins` | | every plugin's status |
//! | GET | `/v1/plugins/{name}` | | one plugin's status |
//! | POST | `/v1/plugins` | JSON [`LoadRequest`] | loads a plugin |
//! | PUT | `/v1/plugins/{name}/wasm` | the component (`application/wasm`) or JSON `{"path": …}` | hot-swaps it |
//! | DELETE | `/v1/plugins/{name}` | | unloads it |

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::plugin::{Grants, Limits, PluginError, PluginSpec};
use crate::registry::{OnSwap, PluginDef, PluginRegistry, RegistryError, WasmSource};

/// Uploads larger than this are refused with 413 unless configured.
pub const DEFAULT_MAX_UPLOAD: usize = 32 << 20;

/// Settings of the admin API.
#[derive(Clone)]
pub struct AdminConfig {
    /// Every request must carry `Authorization: Bearer <token>`.
    pub token: String,
    /// Largest accepted request body, in bytes.
    pub max_upload: usize,
}

#[derive(Clone)]
struct AppState {
    registry: PluginRegistry,
    token: Arc<str>,
}

/// A plugin to load, as `POST /v1/plugins` takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadRequest {
    pub name: String,
    /// Path of the component on the host's filesystem.
    pub wasm: PathBuf,
    pub informer: String,
    #[serde(default)]
    pub config: serde_json::Value,
    /// Any of `log`, `cache`, `clocks`.
    #[serde(default)]
    pub grants: Vec<String>,
    #[serde(default)]
    pub on_swap: OnSwap,
    #[serde(default)]
    pub tenant: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SwapFromPath {
    path: PathBuf,
}

/// An error as the API answers it: a status and `{"error": message}`.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        let status = match &e {
            RegistryError::UnknownPlugin(_) | RegistryError::UnknownInformer(_) | RegistryError::UnknownTenant(_) => {
                StatusCode::NOT_FOUND
            }
            RegistryError::AlreadyLoaded(_) | RegistryError::TenantFull { .. } => StatusCode::CONFLICT,
            RegistryError::Plugin(PluginError::Engine(_)) | RegistryError::Informer(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            RegistryError::Plugin(PluginError::Io { .. }) => StatusCode::BAD_REQUEST,
            RegistryError::Plugin(_) => StatusCode::UNPROCESSABLE_ENTITY,
        };
        ApiError(status, e.to_string())
    }
}

/// The admin router over `registry`.
///
/// ```no_run
/// # async fn demo(registry: informer_host::registry::PluginRegistry) {
/// use informer_host::admin_api::{router, AdminConfig, DEFAULT_MAX_UPLOAD};
/// let app = router(registry, AdminConfig { token: "secret".into(), max_upload: DEFAULT_MAX_UPLOAD });
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await.unwrap();
/// axum::serve(listener, app).await.unwrap();
/// # }
/// ```
pub fn router(registry: PluginRegistry, config: AdminConfig) -> Router {
    let state = AppState { registry, token: config.token.into() };
    Router::new()
        .route("/v1/plugins", get(list).post(load))
        .route("/v1/plugins/{name}", get(show).delete(unload))
        .route("/v1/plugins/{name}/wasm", put(swap))
        .layer(DefaultBodyLimit::max(config.max_upload))
        .layer(middleware::map_response(errors_as_json))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

async fn authenticate(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !constant_time_eq(presented.as_bytes(), state.token.as_bytes()) {
        return ApiError(StatusCode::UNAUTHORIZED, "missing or wrong bearer token".into()).into_response();
    }
    next.run(req).await
}

/// Rejections made by axum's extractors (413 for an oversize body, 415, 422
/// for malformed JSON) come as plain text: answer them as `{"error": …}` too.
async fn errors_as_json(resp: Response) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let status = resp.status();
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let text = match axum::body::to_bytes(resp.into_body(), 64 * 1024).await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(_) => status.canonical_reason().unwrap_or("error").to_string(),
    };
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        format!("the upload is larger than the admin API accepts (max_upload): {text}")
    } else {
        text
    };
    ApiError(status, message).into_response()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn list(State(s): State<AppState>) -> impl IntoResponse {
    Json(s.registry.list())
}

async fn show(State(s): State<AppState>, Path(name): Path<String>) -> Result<impl IntoResponse, ApiError> {
    s.registry.get(&name).map(Json).ok_or_else(|| RegistryError::UnknownPlugin(name).into())
}

fn parse_grants(names: &[String]) -> Result<Grants, ApiError> {
    let mut g = Grants::default();
    for n in names {
        match n.as_str() {
            "log" => g.log = true,
            "cache" => g.cache = true,
            "clocks" => g.clocks = true,
            other => {
                return Err(ApiError(
                    StatusCode::BAD_REQUEST,
                    format!("unknown grant {other:?}; expected any of \"log\", \"cache\", \"clocks\""),
                ));
            }
        }
    }
    Ok(g)
}

async fn load(State(s): State<AppState>, Json(req): Json<LoadRequest>) -> Result<impl IntoResponse, ApiError> {
    let spec = PluginSpec {
        grants: parse_grants(&req.grants)?,
        tenant: req.tenant,
        config_json: if req.config.is_null() { "{}".into() } else { req.config.to_string() },
        limits: Limits::default(),
        ..PluginSpec::new(req.name, req.wasm)
    };
    let def = PluginDef {
        spec,
        informer: req.informer,
        resync: Duration::ZERO,
        on_swap: req.on_swap,
        visibility: None,
        max_pending: None,
    };
    let registry = s.registry.clone();
    let status = tokio::task::spawn_blocking(move || registry.load(def))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok((StatusCode::CREATED, Json(status)))
}

async fn swap(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let source = if is_json {
        let req: SwapFromPath = serde_json::from_slice(&body)
            .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("expected {{\"path\": \"…\"}}: {e}")))?;
        WasmSource::File(req.path)
    } else {
        WasmSource::Bytes(body.to_vec())
    };
    let registry = s.registry.clone();
    let status = tokio::task::spawn_blocking(move || registry.swap(&name, source))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(status))
}

async fn unload(State(s): State<AppState>, Path(name): Path<String>) -> Result<impl IntoResponse, ApiError> {
    s.registry.unload(&name)?;
    Ok(StatusCode::NO_CONTENT)
}
