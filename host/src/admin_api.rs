//! The admin HTTP API: list, load, swap and unload plugins at runtime.
//!
//! This module owns the HTTP surface over [`PluginRegistry`]: bearer-token
//! authentication on every request, a size cap on uploads, the rules for a
//! component named by a path, and JSON errors a person can act on. It binds
//! where it is told (the program defaults to 127.0.0.1) and may not reach
//! past the registry.
//!
//! | method | path | body | does |
//! |---|---|---|---|
//! | GET | `/v1/plugins` | | every plugin's status |
//! | GET | `/v1/plugins/{name}` | | one plugin's status |
//! | POST | `/v1/plugins` | JSON [`LoadRequest`] (the component by path) | loads a plugin |
//! | POST | `/v1/plugins?name=…&informer=…` | the component (`application/wasm`), the rest of the request in the query ([`UploadParams`]) | loads a plugin |
//! | PUT | `/v1/plugins/{name}/wasm` | the component (`application/wasm`) or JSON `{"path": …}` | hot-swaps it |
//! | DELETE | `/v1/plugins/{name}` | | unloads it |
//!
//! Names (`name`, `informer`, `tenant`) must be DNS labels
//! ([`crate::names`]); any other is refused with 400 before anything is read.
//!
//! A path (`wasm` of a load, `path` of a swap) is read here, never by the
//! plugin runtime, through [`WasmDirs`]: only a regular file inside the
//! directories given to [`router_with_wasm_dirs`], of at most `max_upload`
//! bytes (enforced while reading), within [`PATH_READ_TIMEOUT`], at most
//! [`MAX_PATH_READS`] at a time. A FIFO or a device is never opened. [`router`]
//! gives no directories: every path is refused and components are uploaded.
//! A path that does not exist, lies outside the directories or is not a
//! regular file gets one answer (403, same message), so the API does not
//! reveal what exists on the host.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::names::{self, InvalidName};
use crate::plugin::{Grants, Limits, PluginError, PluginSpec};
use crate::registry::{OnSwap, PluginDef, PluginRegistry, RegistryError, WasmSource};
use crate::wasm_file::{WasmDirs, WasmFileError};

/// Uploads larger than this are refused with 413 unless configured.
pub const DEFAULT_MAX_UPLOAD: usize = 32 << 20;

/// Reading a component from a path that takes longer is answered with 503.
pub const PATH_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Components read from paths at the same time, at most; more requests wait
/// (within [`PATH_READ_TIMEOUT`]). Bounds the blocking threads a stuck
/// filesystem can hold.
pub const MAX_PATH_READS: usize = 4;

/// What the status of an uploaded component names as its file.
const UPLOADED: &str = "(uploaded component)";

/// Settings of the admin API.
#[derive(Clone)]
pub struct AdminConfig {
    /// Every request must carry `Authorization: Bearer <token>`.
    pub token: String,
    /// Largest accepted request body, and largest component read from a
    /// path, in bytes.
    pub max_upload: usize,
}

#[derive(Clone)]
struct AppState {
    registry: PluginRegistry,
    token: Arc<str>,
    wasm_dirs: Arc<WasmDirs>,
    path_reads: Arc<Semaphore>,
}

/// A plugin to load, as `POST /v1/plugins` takes it in JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadRequest {
    pub name: String,
    /// Absolute path of the component on the host's filesystem, inside one
    /// of the admin API's wasm directories.
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

/// A plugin to load from the uploaded component: the query of
/// `POST /v1/plugins?name=…&informer=…` (`Content-Type: application/wasm`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadParams {
    pub name: String,
    pub informer: String,
    /// The plugin's configuration, as JSON text.
    #[serde(default)]
    pub config: Option<String>,
    /// Comma-separated, any of `log`, `cache`, `clocks`.
    #[serde(default)]
    pub grants: Option<String>,
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
            RegistryError::AlreadyLoaded(_) | RegistryError::TenantFull { .. } | RegistryError::Superseded(_) => {
                StatusCode::CONFLICT
            }
            RegistryError::Plugin(PluginError::Engine(_)) | RegistryError::Informer(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            RegistryError::InvalidName(_) | RegistryError::Plugin(PluginError::Io { .. }) => StatusCode::BAD_REQUEST,
            RegistryError::Plugin(_) => StatusCode::UNPROCESSABLE_ENTITY,
        };
        ApiError(status, e.to_string())
    }
}

impl From<InvalidName> for ApiError {
    fn from(e: InvalidName) -> Self {
        ApiError(StatusCode::BAD_REQUEST, e.to_string())
    }
}

impl From<WasmFileError> for ApiError {
    fn from(e: WasmFileError) -> Self {
        let status = match &e {
            WasmFileError::Disabled | WasmFileError::Refused { .. } => StatusCode::FORBIDDEN,
            WasmFileError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            WasmFileError::Read { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match &e {
            WasmFileError::TooLarge { .. } => format!("{e} (the admin API's max_upload)"),
            _ => e.to_string(),
        };
        ApiError(status, message)
    }
}

/// The admin router over `registry`, with no wasm directories: components
/// are uploaded, and loads or swaps naming a path are refused.
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
    router_with_wasm_dirs(registry, config, Vec::new())
}

/// The admin router over `registry`; loads and swaps may also name a
/// component by its path, inside one of `wasm_dirs` (or their
/// subdirectories).
pub fn router_with_wasm_dirs(registry: PluginRegistry, config: AdminConfig, wasm_dirs: Vec<PathBuf>) -> Router {
    let state = AppState {
        registry,
        token: config.token.into(),
        wasm_dirs: Arc::new(WasmDirs::new(wasm_dirs, config.max_upload as u64)),
        path_reads: Arc::new(Semaphore::new(MAX_PATH_READS)),
    };
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

fn parse_grants<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Grants, ApiError> {
    let mut g = Grants::default();
    for n in names {
        match n {
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

fn content_type(headers: &HeaderMap) -> &str {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Reads the component at `path` off the async runtime, within the limits
/// of [`WasmDirs`], [`PATH_READ_TIMEOUT`] and [`MAX_PATH_READS`].
async fn read_path(s: &AppState, path: PathBuf) -> Result<(PathBuf, Vec<u8>), ApiError> {
    let (dirs, reads, asked) = (s.wasm_dirs.clone(), s.path_reads.clone(), path.clone());
    let read = async move {
        let permit = reads.acquire_owned().await;
        tokio::task::spawn_blocking(move || {
            // Held until the read ends, even after its request gave up.
            let _permit = permit;
            dirs.read(&path)
        })
        .await
    };
    match tokio::time::timeout(PATH_READ_TIMEOUT, read).await {
        Ok(Ok(read)) => Ok(read?),
        Ok(Err(e)) => Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        Err(_) => Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("reading {asked:?} did not finish within {PATH_READ_TIMEOUT:?}; upload the component instead"),
        )),
    }
}

/// `POST /v1/plugins`: JSON naming a path, or an upload with the request in
/// the query.
async fn load(
    State(s): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let ctype = content_type(&headers);
    let (def, bytes) = if ctype.starts_with("application/json") {
        let Json(req) = Json::<LoadRequest>::from_bytes(&body).map_err(|r| ApiError(r.status(), r.body_text()))?;
        let def = plugin_def(
            req.name,
            req.informer,
            req.tenant,
            parse_grants(req.grants.iter().map(String::as_str))?,
            if req.config.is_null() { "{}".into() } else { req.config.to_string() },
            req.on_swap,
        )?;
        let (file, bytes) = read_path(&s, req.wasm).await?;
        (PluginDef { spec: PluginSpec { wasm: file, ..def.spec }, ..def }, bytes)
    } else if ctype.starts_with("application/wasm") {
        let Query(q) = Query::<UploadParams>::try_from_uri(&uri)
            .map_err(|r| ApiError(StatusCode::BAD_REQUEST, format!("the query of an upload: {}", r.body_text())))?;
        let config = match q.config.as_deref() {
            None => "{}".to_string(),
            Some(text) => serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("`config` is not JSON: {e}")))?
                .to_string(),
        };
        let grants =
            parse_grants(q.grants.as_deref().unwrap_or("").split(',').map(str::trim).filter(|g| !g.is_empty()))?;
        (plugin_def(q.name, q.informer, q.tenant, grants, config, q.on_swap)?, body.to_vec())
    } else {
        return Err(ApiError(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected Content-Type: application/json (a load request naming the component's path) or \
             application/wasm (the component, with name, informer ... in the query)"
                .into(),
        ));
    };
    let registry = s.registry.clone();
    let status = tokio::task::spawn_blocking(move || registry.load_bytes(def, &bytes))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok((StatusCode::CREATED, Json(status)))
}

/// What the registry runs for a load request, its names checked first; the
/// spec names an uploaded component until a path replaces it.
fn plugin_def(
    name: String,
    informer: String,
    tenant: Option<String>,
    grants: Grants,
    config_json: String,
    on_swap: OnSwap,
) -> Result<PluginDef, ApiError> {
    names::check("plugin", &name)?;
    names::check("informer", &informer)?;
    if let Some(t) = &tenant {
        names::check("tenant", t)?;
    }
    let spec = PluginSpec { grants, tenant, config_json, limits: Limits::default(), ..PluginSpec::new(name, UPLOADED) };
    Ok(PluginDef { spec, informer, resync: Duration::ZERO, on_swap, visibility: None, max_pending: None })
}

async fn swap(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let source = if content_type(&headers).starts_with("application/json") {
        let req: SwapFromPath = serde_json::from_slice(&body)
            .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("expected {{\"path\": \"…\"}}: {e}")))?;
        if s.registry.get(&name).is_none() {
            return Err(RegistryError::UnknownPlugin(name).into());
        }
        let (file, bytes) = read_path(&s, req.path).await?;
        WasmSource::Read { file, bytes }
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
