//! The `kube` source: a [`ListerWatcher`] over a real Kubernetes API server,
//! through `kube::Client`.
//!
//! It owns the translation between the API server's list/watch protocol and
//! the engine's contract, for any group/version/kind as
//! `DynamicObject`/[`ApiResource`], in one namespace or all, with label and
//! field selectors:
//!
//! - **discovery**: [`KubeSource::discovered`] asks the server's discovery
//!   document for the kind's group and version (kube's `pinned_kind`)
//!   before the first list, for the plural and the scope (without a
//!   version, [`KubeResource::preferred`], the group's preferred version
//!   serving the kind, else the first other one, as client-go's
//!   `DiscoveryRESTMapper` picks); a kind the server
//!   does not serve fails the list with what it serves instead, and the
//!   reflector's list backoff asks again (a CRD installed later is found).
//!   A configured plural, or [`KubeSource::new`] (plural guessed from the
//!   kind), skips it.
//! - **watch-list** (the default, as client-go ≥ 1.35): the initial list
//!   and relists are a watch with `sendInitialEvents=true`; the reflector
//!   falls back to a paged list when the server refuses it.
//! - **list**: `ListParams` with kube-runtime's defaults (pages of 500,
//!   [`ListSemantic::MostRecent`]), following `continue` tokens; when a token
//!   expires (`410`) it restarts with one unpaged list, as client-go's pager
//!   does. Items are kept as the JSON text received (`Client::request_text` +
//!   [`RawValue`]), never re-serialised; list items that lack `kind` and
//!   `apiVersion` (real servers omit them for built-in types) get them
//!   spliced in from the resource.
//! - **watch**: `WatchParams` with bookmarks, sent with `Client::send` and
//!   read here line by line (each object kept as [`RawValue`]), rather than
//!   through `Client::request_events`, so that the response's `Retry-After`
//!   header is seen and a dropped connection is not logged as a warning by
//!   the client. What a failure becomes decides what the reflector does:
//!   - `410 Gone` as an HTTP status or as an `ERROR` event with `code: 410`
//!     is [`SourceError::Gone`]: the reflector relists;
//!   - a refused connection (the server is down or restarting), and `429 Too
//!     Many Requests` as an HTTP status (a Status body with
//!     `details.retryAfterSeconds`, or the flow-control filters' plain text)
//!     or as an `ERROR` event, are [`SourceError::Retriable`], carrying the
//!     `Retry-After` header (else `retryAfterSeconds`): the reflector backs
//!     off at least that long and watches again from the same
//!     resourceVersion, without a relist (client-go's
//!     `isWatchErrorRetriable`);
//!   - anything else is [`SourceError::Other`] with the verb, resource and
//!     server message: the reflector backs off and relists;
//!   - a connection that drops mid-stream (unexpected EOF, reset) or whose
//!     read times out ends the stream normally, logged at `debug`, like
//!     client-go's `StreamWatcher`, so the reflector re-watches from the
//!     last resourceVersion.
//!
//!   Lists map errors the same way (a retriable list failure is still a
//!   list failure: the reflector backs off and lists again).
//! - **backoff**: kube-runtime's [`DefaultBackoff`] (client-go's 800 ms → 30 s,
//!   ×2, jitter, reset after 2 min), adapted by [`RuntimeBackoff`].
//!
//! kube-runtime's `watcher()` is deliberately not used: it runs its own
//! list → watch → relist state machine and would hide the list boundary and
//! `410` from the engine's reflector, which owns relists, `Replace` and
//! tombstones. This module reuses what fits underneath it instead: kube's
//! request builders, event types and client, and kube-runtime's backoff
//! and defaults.
//!
//! It may not touch the informer's state (it only answers `list` and
//! `watch`), and knows nothing of wasm or plugins.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, ApiResource, DynamicObject, ListParams, VersionMatch, WatchEvent as KubeEvent, WatchParams};
use ::kube::client::Body;
use ::kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use ::kube::core::{GroupVersionKind, Request, Status};
use ::kube::{Client, Config};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::future::BoxFuture;
use http::HeaderValue;
use http::header::{ACCEPT_ENCODING, RETRY_AFTER};
use http_body_util::BodyExt;
use kube_runtime::watcher::DefaultBackoff;
pub use kube_runtime::watcher::ListSemantic;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::informer::{Backoff, ListResult, ListerWatcher, Object, ObjectRef, SourceError, WatchEvent, WatchStream};

/// The longest delay [`RuntimeBackoff`] reports if its backoff runs dry.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The annotation of the bookmark that ends a watch-list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A resource type to list and watch: group, version, kind, and optionally
/// the plural used in URLs (guessed from the kind when absent, as
/// [`ApiResource::from_gvk`] does). An empty version asks discovery for the
/// group's preferred version serving the kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeResource {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group, e.g. `v1`; empty: the version the
    /// server prefers among those serving the kind (needs discovery).
    pub version: String,
    /// The kind, e.g. `ConfigMap`.
    pub kind: String,
    /// The plural used in URLs, e.g. `configmaps`; guessed when `None`.
    pub plural: Option<String>,
}

impl KubeResource {
    /// From an `apiVersion` (`v1`, `apps/v1`) and a kind.
    ///
    /// ```
    /// use informer_host::source::kube::KubeResource;
    /// let r = KubeResource::new("apps/v1", "Deployment");
    /// assert_eq!((r.group.as_str(), r.version.as_str()), ("apps", "v1"));
    /// assert_eq!(r.api_resource().plural, "deployments");
    /// ```
    pub fn new(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        KubeResource { group: group.into(), version: version.into(), kind: kind.into(), plural: None }
    }

    /// Sets the plural used in URLs (needed when it is not the kind's
    /// regular English plural).
    pub fn with_plural(mut self, plural: impl Into<String>) -> Self {
        self.plural = Some(plural.into());
        self
    }

    /// The kind in a group at the version the server prefers (kubectl's
    /// and client-go's RESTMapper choice): found by discovery.
    pub fn preferred(group: &str, kind: &str) -> Self {
        KubeResource { group: group.into(), version: String::new(), kind: kind.into(), plural: None }
    }

    /// `v1` or `group/version`; the group alone (`core` for the core group)
    /// when the version is left to discovery.
    pub fn api_version(&self) -> String {
        match (self.group.is_empty(), self.version.is_empty()) {
            (true, true) => "core".into(),
            (false, true) => self.group.clone(),
            (true, false) => self.version.clone(),
            (false, false) => format!("{}/{}", self.group, self.version),
        }
    }

    /// The `ApiResource` that `Api<DynamicObject>` needs.
    pub fn api_resource(&self) -> ApiResource {
        let gvk = GroupVersionKind::gvk(&self.group, &self.version, &self.kind);
        match &self.plural {
            Some(plural) => ApiResource::from_gvk_with_plural(&gvk, plural),
            None => ApiResource::from_gvk(&gvk),
        }
    }
}

/// What a [`KubeSource`] selects and how it talks to the server.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeSourceOptions {
    /// One namespace, or `None` for all namespaces (and for cluster-scoped
    /// resources).
    pub namespace: Option<String>,
    /// A label selector, e.g. `app=web,tier!=db`.
    pub label_selector: Option<String>,
    /// A field selector, e.g. `metadata.name=x`.
    pub field_selector: Option<String>,
    /// Objects per list page; `None` lists in one response. Default 500
    /// (client-go's and kube-runtime's).
    pub page_size: Option<u32>,
    /// Consistency of lists. Default [`ListSemantic::MostRecent`] (a quorum
    /// read); `Any` allows a cached, possibly older, state. The engine does
    /// not tell a source why it lists, so with `Any` a relist after `410
    /// Gone` may also be served from a cache older than what the informer
    /// already saw (client-go switches to a consistent read in that case).
    pub list_semantic: ListSemantic,
    /// Server-side watch timeout in seconds; `None` uses kube's 290 s. The
    /// reflector re-watches after it.
    pub watch_timeout: Option<u32>,
    /// Ask for `BOOKMARK` events. Default true.
    pub bookmarks: bool,
    /// List by watch-list (`sendInitialEvents=true`: the state streamed as
    /// `ADDED` events up to a bookmark annotated `k8s.io/initial-events-end`)
    /// rather than by paged lists; the reflector falls back to paged lists
    /// if the server refuses it. Default true, as client-go ≥ 1.35; false:
    /// paged lists of `page_size`.
    pub watch_list: bool,
}

impl Default for KubeSourceOptions {
    fn default() -> Self {
        KubeSourceOptions {
            namespace: None,
            label_selector: None,
            field_selector: None,
            page_size: Some(500),
            list_semantic: ListSemantic::MostRecent,
            watch_timeout: None,
            bookmarks: true,
            watch_list: true,
        }
    }
}

impl KubeSourceOptions {
    /// Restricts to one namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }
    /// Sets the label selector.
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }
    /// Sets the field selector.
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }
    /// Sets the list page size (`None`: unpaged).
    pub fn page_size(mut self, page_size: Option<u32>) -> Self {
        self.page_size = page_size;
        self
    }
    /// Sets the server-side watch timeout in seconds.
    pub fn watch_timeout(mut self, seconds: u32) -> Self {
        self.watch_timeout = Some(seconds);
        self
    }
    /// Lists by watch-list (`true`, the default) or by paged lists.
    pub fn watch_list(mut self, watch_list: bool) -> Self {
        self.watch_list = watch_list;
        self
    }
}

/// Why a [`KubeSource`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum KubeSourceError {
    /// The given kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file given.
        path: PathBuf,
        /// What went wrong with it.
        #[source]
        source: KubeconfigError,
    },
    /// The default kubeconfig could not be used with the given context.
    #[error("kubeconfig context {context:?}: {source}")]
    Context {
        /// The context given.
        context: String,
        /// What went wrong with it.
        #[source]
        source: KubeconfigError,
    },
    /// Neither a kubeconfig nor an in-cluster configuration was found.
    #[error("no Kubernetes configuration: {0}")]
    Infer(#[from] InferConfigError),
    /// The client could not be built from the configuration.
    #[error("Kubernetes client: {0}")]
    Client(#[from] ::kube::Error),
}

/// Adapts a kube-runtime backoff (an iterator of delays that can be reset)
/// to the engine's [`Backoff`].
pub struct RuntimeBackoff<B>(pub B);

impl<B: kube_runtime::utils::Backoff> Backoff for RuntimeBackoff<B> {
    fn next_delay(&mut self) -> Duration {
        self.0.next().unwrap_or(MAX_BACKOFF)
    }
    fn reset(&mut self) {
        self.0.reset();
    }
}

/// What the watch stream needs after `watch` returned.
struct Meta {
    describe: String,
    api_version: String,
    kind: String,
}

/// A [`ListerWatcher`] over a Kubernetes API server.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use informer_host::informer::{InformerOptions, SharedIndexInformer};
/// use informer_host::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
/// let source = KubeSource::infer(
///     &KubeResource::new("v1", "ConfigMap"),
///     KubeSourceOptions::default().namespace("default").labels("app=web"),
///     None,
///     None,
/// )
/// .await?;
/// let informer = SharedIndexInformer::new(source, InformerOptions::default());
/// # Ok(()) }
/// ```
pub struct KubeSource {
    client: Client,
    /// The resource as configured.
    wanted: KubeResource,
    /// The resource as the server names it: set at once when the plural
    /// is given (or guessed, for [`KubeSource::new`]), else by discovery
    /// before the first list (and retried with every list until it works).
    resolved: tokio::sync::OnceCell<Resolved>,
    options: KubeSourceOptions,
    meta: Arc<Meta>,
}

/// A resource's URL and naming, once known.
struct Resolved {
    resource: ApiResource,
    request: Request,
    /// The resolved `apiVersion` (spliced into list items lacking it).
    meta: Arc<Meta>,
}

impl Resolved {
    fn new(client: &Client, ar: ApiResource, options: &KubeSourceOptions) -> Resolved {
        let api: Api<DynamicObject> = match &options.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let meta = Meta {
            describe: describe(&format!("{}/{}", ar.api_version, ar.kind), options),
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
        };
        Resolved { request: Request::new(api.resource_url()), resource: ar, meta: Arc::new(meta) }
    }
}

/// The kinds of a discovery resource list (subresources left out).
fn resource_kinds(resources: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource>) -> Vec<String> {
    resources.into_iter().filter(|r| !r.name.contains('/')).map(|r| r.kind).collect()
}

/// `apps/v1/Deployment in namespace shop, labels "app=web"`: how logs and
/// errors name a source.
fn describe(resource: &str, options: &KubeSourceOptions) -> String {
    let mut describe = resource.to_string();
    match &options.namespace {
        Some(ns) => describe.push_str(&format!(" in namespace {ns}")),
        None => describe.push_str(" in all namespaces"),
    }
    if let Some(l) = &options.label_selector {
        describe.push_str(&format!(", labels {l:?}"));
    }
    if let Some(f) = &options.field_selector {
        describe.push_str(&format!(", fields {f:?}"));
    }
    describe
}

impl KubeSource {
    /// A source for `resource` over an existing client, its plural given
    /// or guessed from the kind as [`ApiResource::from_gvk`] does (no
    /// discovery request).
    /// A resource without a version is still found by discovery.
    pub fn new(client: Client, resource: &KubeResource, options: KubeSourceOptions) -> Self {
        let source = Self::discovered(client, resource, options);
        if !resource.version.is_empty() {
            let resolved = Resolved::new(&source.client, resource.api_resource(), &source.options);
            let _ = source.resolved.set(resolved);
        }
        source
    }

    /// A source for `resource` whose plural and scope come from the
    /// server's discovery document for its group and version (kube's
    /// `pinned_kind`), asked before the first list; a configured plural
    /// skips discovery. A kind the server does not serve fails the list
    /// with an error naming what the server offers, and the reflector
    /// retries with backoff: an informer whose CustomResourceDefinition is
    /// installed later starts when it appears. Without a version, the
    /// group's preferred version serving the kind is used, else the first
    /// other version that does (client-go's `DiscoveryRESTMapper` order),
    /// and a configured plural still needs that discovery.
    pub fn discovered(client: Client, resource: &KubeResource, options: KubeSourceOptions) -> Self {
        let describe = describe(&format!("{}/{}", resource.api_version(), resource.kind), &options);
        let meta = Arc::new(Meta { describe, api_version: resource.api_version(), kind: resource.kind.clone() });
        let source =
            KubeSource { client, wanted: resource.clone(), resolved: tokio::sync::OnceCell::new(), options, meta };
        if resource.plural.is_some() && !resource.version.is_empty() {
            let resolved = Resolved::new(&source.client, resource.api_resource(), &source.options);
            let _ = source.resolved.set(resolved);
        }
        source
    }

    /// The resource as the server names it, asking discovery once.
    async fn resolve(&self) -> Result<&Resolved, SourceError> {
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

    /// A source whose client comes from a kubeconfig or the in-cluster
    /// service account: `kubeconfig` names a file (else `$KUBECONFIG` or
    /// `~/.kube/config`), `context` a context in it (else the current one).
    /// With neither, [`Config::infer`] also falls back to in-cluster.
    pub async fn infer(
        resource: &KubeResource,
        options: KubeSourceOptions,
        kubeconfig: Option<&Path>,
        context: Option<&str>,
    ) -> Result<KubeSource, KubeSourceError> {
        let config = Self::infer_config(kubeconfig, context).await?;
        Ok(KubeSource::new(Client::try_from(config)?, resource, options))
    }

    /// The client configuration [`KubeSource::infer`] uses.
    pub async fn infer_config(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Config, KubeSourceError> {
        let options = KubeConfigOptions { context: context.map(Into::into), ..Default::default() };
        match (kubeconfig, context) {
            (Some(path), _) => {
                let err = |source| KubeSourceError::Kubeconfig { path: path.to_path_buf(), source };
                let kc = Kubeconfig::read_from(path).map_err(err)?;
                Config::from_custom_kubeconfig(kc, &options).await.map_err(err)
            }
            (None, Some(ctx)) => Config::from_kubeconfig(&options)
                .await
                .map_err(|source| KubeSourceError::Context { context: ctx.into(), source }),
            (None, None) => Ok(Config::infer().await?),
        }
    }

    /// The client this source uses.
    pub fn client(&self) -> &Client {
        &self.client
    }
    /// The resource this source lists and watches, once resolved.
    pub fn api_resource(&self) -> Option<&ApiResource> {
        self.resolved.get().map(|r| &r.resource)
    }
    /// The collection URL path, e.g. `/api/v1/namespaces/ns/configmaps`,
    /// once resolved.
    pub fn url_path(&self) -> Option<&str> {
        self.resolved.get().map(|r| r.request.url_path.as_str())
    }
    /// The options this source was built with.
    pub fn options(&self) -> &KubeSourceOptions {
        &self.options
    }

    fn list_params(&self) -> ListParams {
        let (resource_version, version_match) = match self.options.list_semantic {
            ListSemantic::Any => (Some("0".into()), Some(VersionMatch::NotOlderThan)),
            ListSemantic::MostRecent => (None, None),
        };
        ListParams {
            label_selector: self.options.label_selector.clone(),
            field_selector: self.options.field_selector.clone(),
            limit: self.options.page_size,
            resource_version,
            version_match,
            ..Default::default()
        }
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.options.label_selector.clone(),
            field_selector: self.options.field_selector.clone(),
            timeout: self.options.watch_timeout,
            bookmarks: self.options.bookmarks,
            send_initial_events: false,
        }
    }

    async fn list_all(&self) -> Result<ListResult, SourceError> {
        let resolved = self.resolve().await?;
        let (request, meta) = (&resolved.request, &resolved.meta);
        let mut lp = self.list_params();
        let mut items = Vec::new();
        loop {
            let req = request.list(&lp).map_err(|e| meta.other("list", e))?;
            let text = match self.client.request_text(req).await {
                Ok(text) => text,
                Err(::kube::Error::Api(s)) if s.code == 410 && lp.continue_token.is_some() => {
                    tracing::info!(source = %meta.describe, "list continue token expired ({}); listing again without paging", s.message);
                    items.clear();
                    lp.continue_token = None;
                    lp.limit = None;
                    continue;
                }
                Err(e) => return Err(meta.error("list", "", e)),
            };
            let page: RawList = serde_json::from_str(&text).map_err(|e| meta.other("list: undecodable response", e))?;
            let page_items = page.items.unwrap_or_default();
            items.reserve(page_items.len());
            for raw in page_items {
                items.push(meta.object(raw)?);
            }
            match page.metadata.continue_token.filter(|c| !c.is_empty()) {
                Some(token) => lp.continue_token = Some(token),
                None => {
                    let resource_version =
                        page.metadata.resource_version.filter(|rv| !rv.is_empty()).ok_or_else(|| {
                            SourceError::Other(format!("list {}: response has no resourceVersion", meta.describe))
                        })?;
                    return Ok(ListResult { items, resource_version });
                }
            }
        }
    }

    async fn watch_from(&self, resource_version: String) -> Result<WatchStream, SourceError> {
        self.open_watch(self.watch_params(), resource_version).await
    }

    /// The watch-list: every current object as `ADDED`, then the bookmark
    /// annotated `k8s.io/initial-events-end`, then changes (kube's
    /// `WatchParams::streaming_lists`: `resourceVersionMatch=NotOlderThan`
    /// from the most recent state, bookmarks on).
    async fn watch_list_stream(&self) -> Result<WatchStream, SourceError> {
        let wp = WatchParams {
            label_selector: self.options.label_selector.clone(),
            field_selector: self.options.field_selector.clone(),
            timeout: self.options.watch_timeout,
            ..WatchParams::streaming_lists()
        };
        self.open_watch(wp, String::new()).await
    }

    async fn open_watch(&self, wp: WatchParams, resource_version: String) -> Result<WatchStream, SourceError> {
        let resolved = self.resolve().await?;
        let (request, meta) = (&resolved.request, &resolved.meta);
        let mut req = request.watch(&wp, &resource_version).map_err(|e| meta.other("watch", e))?;
        // As kube's `request_events`: a watch stream is never compressed.
        req.headers_mut().entry(ACCEPT_ENCODING).or_insert(HeaderValue::from_static("identity"));
        let res = self.client.send(req.map(Body::from)).await.map_err(|e| meta.error("watch", &resource_version, e))?;
        if !res.status().is_success() {
            return Err(meta.response_error("watch", &resource_version, res).await);
        }
        let state = WatchState {
            body: Box::pin(res.into_body().into_data_stream()),
            buf: BytesMut::new(),
            scanned: 0,
            ended: false,
            meta: meta.clone(),
            resource_version,
        };
        Ok(futures::stream::unfold(state, WatchState::next).boxed())
    }
}

/// A watch response being read: newline-delimited JSON events, as kube's
/// `request_events` decodes them, read here so that the reflector, not the
/// client, decides what a dropped connection means and how it is logged.
struct WatchState {
    body: Pin<Box<dyn futures::Stream<Item = Result<Bytes, ::kube::Error>> + Send>>,
    buf: BytesMut,
    /// Bytes of `buf` known to hold no newline.
    scanned: usize,
    /// The stream has ended (cleanly, dropped, or after an error).
    ended: bool,
    meta: Arc<Meta>,
    resource_version: String,
}

impl WatchState {
    async fn next(mut self) -> Option<(Result<WatchEvent, SourceError>, Self)> {
        loop {
            if let Some(i) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(self.scanned + i + 1);
                self.scanned = 0;
                match self.decode(&line[..line.len() - 1]) {
                    Some(item) => return self.emit(item),
                    None => continue,
                }
            }
            self.scanned = self.buf.len();
            if self.ended {
                // A last line without a newline, then the end.
                let rest = std::mem::take(&mut self.buf);
                self.scanned = 0;
                let item = self.decode(&rest)?;
                return self.emit(item);
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                None => self.ended = true,
                Some(Err(e)) if is_probable_eof(&e) || is_timeout(&e) => {
                    // client-go's StreamWatcher ends the watch on these
                    // (`IsProbableEOF || IsTimeout`); the reflector resumes
                    // from the last resourceVersion.
                    tracing::debug!(source = %self.meta.describe, "watch connection ended: {}", chain(&e));
                    self.ended = true;
                    self.buf.clear();
                }
                Some(Err(e)) => {
                    self.ended = true;
                    self.buf.clear();
                    let e = self.meta.other("watch", e);
                    return self.emit(Err(e));
                }
            }
        }
    }

    /// An error ends the stream after it is delivered.
    fn emit(mut self, item: Result<WatchEvent, SourceError>) -> Option<(Result<WatchEvent, SourceError>, Self)> {
        if item.is_err() {
            self.ended = true;
            self.buf.clear();
        }
        Some((item, self))
    }

    /// One line: an event, an error, or `None` for a blank line.
    fn decode(&self, line: &[u8]) -> Option<Result<WatchEvent, SourceError>> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let (meta, rv) = (&self.meta, self.resource_version.as_str());
        Some(match serde_json::from_slice::<KubeEvent<Box<RawValue>>>(line) {
            Ok(KubeEvent::Added(raw)) => meta.object(raw).map(WatchEvent::Added),
            Ok(KubeEvent::Modified(raw)) => meta.object(raw).map(WatchEvent::Modified),
            Ok(KubeEvent::Deleted(raw)) => meta.object(raw).map(WatchEvent::Deleted),
            Ok(KubeEvent::Bookmark(b)) => Ok(WatchEvent::Bookmark {
                initial_events_end: b.metadata.annotations.get(INITIAL_EVENTS_END).is_some_and(|v| v == "true"),
                resource_version: b.metadata.resource_version,
            }),
            Ok(KubeEvent::Error(status)) => Err(meta.status("watch", rv, &status, None)),
            Err(e) => match serde_json::from_slice::<Status>(line) {
                // A bare Status line: the server's error, as kube reads it.
                Ok(status) => Err(meta.status("watch", rv, &status, None)),
                Err(_) => Err(meta.other("watch: undecodable event", e)),
            },
        })
    }
}

impl Meta {
    /// Keeps the JSON as received; adds `kind`/`apiVersion` when missing.
    fn object(&self, raw: Box<RawValue>) -> Result<ObjectRef, SourceError> {
        let undecodable =
            |e: crate::informer::ObjectError| SourceError::Other(format!("{}: undecodable object: {e}", self.describe));
        let obj = Object::from_raw(raw).map_err(undecodable)?;
        if !obj.kind().is_empty() && !obj.api_version().is_empty() {
            return Ok(Arc::new(obj));
        }
        let json = with_type_meta(
            obj.json(),
            obj.api_version().is_empty().then_some(self.api_version.as_str()),
            obj.kind().is_empty().then_some(self.kind.as_str()),
        );
        Ok(Arc::new(Object::from_json(json).map_err(undecodable)?))
    }

    /// A failure the server answered with: `410` is [`SourceError::Gone`];
    /// `429` is [`SourceError::Retriable`] after `Retry-After` (the header,
    /// else `details.retryAfterSeconds`); anything else is
    /// [`SourceError::Other`].
    fn status(&self, verb: &str, resource_version: &str, s: &Status, retry_after: Option<Duration>) -> SourceError {
        if s.code == 410 {
            return SourceError::Gone { resource_version: resource_version.into(), message: s.message.clone() };
        }
        let message = format!(
            "{verb} {} failed: {} ({}code {})",
            self.describe,
            if s.message.is_empty() { "no message" } else { &s.message },
            if s.reason.is_empty() { String::new() } else { format!("reason {:?}, ", s.reason) },
            s.code
        );
        if s.code == 429 || s.reason == "TooManyRequests" {
            let details = s.details.as_ref().map(|d| d.retry_after_seconds).filter(|s| *s > 0);
            let retry_after = retry_after.or(details.map(|s| Duration::from_secs(s.into())));
            return SourceError::Retriable { message, retry_after };
        }
        SourceError::Other(message)
    }

    /// A non-2xx answer read off the response: its Status body (or, as kube
    /// does for a body that is not one, a Status made of its text) and its
    /// `Retry-After` header.
    async fn response_error(&self, verb: &str, resource_version: &str, res: http::Response<Body>) -> SourceError {
        let code = res.status().as_u16();
        let retry_after = res
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = match res.into_body().collect_bytes().await {
            Ok(body) => body,
            Err(e) => return self.other(verb, e),
        };
        let status = serde_json::from_slice::<Status>(&body).unwrap_or_else(|_| {
            let text = String::from_utf8_lossy(&body);
            Status::failure(text.trim(), "").with_code(code)
        });
        self.status(verb, resource_version, &status, retry_after)
    }

    fn error(&self, verb: &str, resource_version: &str, e: ::kube::Error) -> SourceError {
        match e {
            ::kube::Error::Api(s) => self.status(verb, resource_version, &s, None),
            e if is_connection_refused(&e) => match self.other(verb, e) {
                SourceError::Other(message) => SourceError::Retriable { message, retry_after: None },
                other => other,
            },
            e => self.other(verb, e),
        }
    }

    fn other(&self, verb: &str, e: impl std::error::Error) -> SourceError {
        SourceError::Other(format!("{verb} {} failed: {}", self.describe, chain(&e)))
    }
}

/// An error and its sources, each once: `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !msg.contains(&s_text) {
            msg.push_str(": ");
            msg.push_str(&s_text);
        }
        source = s.source();
    }
    msg
}

/// Whether an `io::Error` of one of `kinds` is in `e`'s source chain.
fn chain_has_io(e: &(dyn std::error::Error + 'static), kinds: &[std::io::ErrorKind]) -> bool {
    let mut source = Some(e);
    // HTTP and TLS stacks nest a handful of errors; stop on a cycle.
    for _ in 0..16 {
        let Some(s) = source else { return false };
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if kinds.contains(&io.kind()) {
                return true;
            }
            // An io::Error's own source is its inner error.
            if let Some(inner) = io.get_ref()
                && chain_has_io(inner, kinds)
            {
                return true;
            }
        }
        source = s.source();
    }
    false
}

/// client-go's `net.IsConnectionRefused`: the server was not reached.
fn is_connection_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    chain_has_io(e, &[std::io::ErrorKind::ConnectionRefused])
        || chain(e).to_ascii_lowercase().contains("connection refused")
}

/// client-go's `net.IsTimeout`: the client's read timeout fired.
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    chain_has_io(e, &[std::io::ErrorKind::TimedOut])
}

/// client-go's `net.IsProbableEOF`: the connection ended, not the protocol.
fn is_probable_eof(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::*;
    if chain_has_io(e, &[UnexpectedEof, ConnectionReset, ConnectionAborted, BrokenPipe]) {
        return true;
    }
    let text = chain(e);
    ["unexpected EOF", "connection reset", "broken pipe", "use of closed network connection", "connection closed"]
        .iter()
        .any(|needle| text.contains(needle))
}

/// Splices `apiVersion` and/or `kind` into the JSON object text `json`.
fn with_type_meta(json: &str, api_version: Option<&str>, kind: Option<&str>) -> String {
    let Some(rest) = json.trim_start().strip_prefix('{') else { return json.to_string() };
    let mut out = String::with_capacity(json.len() + 48);
    out.push('{');
    let fields = [("apiVersion", api_version), ("kind", kind)];
    let mut first = true;
    for (name, value) in fields.iter().filter_map(|(n, v)| v.map(|v| (n, v))) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&format!("\"{name}\":"));
        out.push_str(&serde_json::Value::from(value).to_string());
    }
    if !first && !rest.trim_start().starts_with('}') {
        out.push(',');
    }
    out.push_str(rest);
    out
}

#[derive(Deserialize)]
struct RawList {
    #[serde(default)]
    metadata: RawListMeta,
    #[serde(default)]
    items: Option<Vec<Box<RawValue>>>,
}

#[derive(Deserialize, Default)]
struct RawListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

impl ListerWatcher for KubeSource {
    fn list(&self) -> BoxFuture<'_, Result<ListResult, SourceError>> {
        Box::pin(self.list_all())
    }
    fn watch(&self, resource_version: &str) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        Box::pin(self.watch_from(resource_version.to_string()))
    }
    fn watch_list(&self) -> Option<BoxFuture<'_, Result<WatchStream, SourceError>>> {
        self.options.watch_list.then(|| Box::pin(self.watch_list_stream()) as BoxFuture<'_, _>)
    }
    fn describe(&self) -> String {
        self.meta.describe.clone()
    }
    /// kube-runtime's default watcher backoff (client-go's parameters).
    fn backoff(&self) -> Box<dyn Backoff> {
        Box::new(RuntimeBackoff(DefaultBackoff::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_events_keep_the_json_as_received() {
        let line = r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"z":"1","a":"2"}}}"#;
        let KubeEvent::Added(raw) = serde_json::from_str::<KubeEvent<Box<RawValue>>>(line).unwrap() else {
            panic!("not an ADDED event")
        };
        assert_eq!(
            raw.get(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"z":"1","a":"2"}}"#
        );
        let bm = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","creationTimestamp":null}}}"#;
        let KubeEvent::Bookmark(b) = serde_json::from_str::<KubeEvent<Box<RawValue>>>(bm).unwrap() else {
            panic!("not a BOOKMARK")
        };
        assert_eq!(b.metadata.resource_version, "9");
        let err = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        let KubeEvent::Error(s) = serde_json::from_str::<KubeEvent<Box<RawValue>>>(err).unwrap() else {
            panic!("not an ERROR")
        };
        let meta = Meta { describe: "v1/ConfigMap".into(), api_version: "v1".into(), kind: "ConfigMap".into() };
        assert!(meta.status("watch", "1", &s, None).is_gone());
    }

    #[test]
    fn list_items_get_kind_and_api_version() {
        let meta =
            Meta { describe: "apps/v1/Deployment".into(), api_version: "apps/v1".into(), kind: "Deployment".into() };
        let raw = RawValue::from_string(r#"{"metadata":{"name":"d","namespace":"ns"},"spec":{}}"#.into()).unwrap();
        let obj = meta.object(raw).unwrap();
        assert_eq!((obj.api_version(), obj.kind(), obj.key()), ("apps/v1", "Deployment", "ns/d"));
        assert_eq!(
            obj.json(),
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"ns"},"spec":{}}"#
        );
        let raw = RawValue::from_string(r#"{"kind":"Deployment","metadata":{"name":"d"}}"#.into()).unwrap();
        assert_eq!(
            meta.object(raw).unwrap().json(),
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}"#
        );
        assert_eq!(with_type_meta("{}", None, Some("X")), r#"{"kind":"X"}"#);
        let complete = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#;
        let obj = meta.object(RawValue::from_string(complete.into()).unwrap()).unwrap();
        assert_eq!(obj.json(), complete);
    }

    #[test]
    fn errors_name_the_resource_and_the_server_message() {
        let meta = Meta {
            describe: "v1/ConfigMap in namespace ns".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let s = Status::failure("configmaps is forbidden", "Forbidden").with_code(403);
        let e = meta.error("list", "", ::kube::Error::Api(s.boxed()));
        assert_eq!(
            e.to_string(),
            r#"list v1/ConfigMap in namespace ns failed: configmaps is forbidden (reason "Forbidden", code 403)"#
        );
        let s = Status::failure("gone", "Expired").with_code(410);
        assert!(meta.error("watch", "5", ::kube::Error::Api(s.boxed())).is_gone());
        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "eof");
        assert!(is_probable_eof(&eof));
        assert!(!is_probable_eof(&std::io::Error::other("bad frame")));
        let timed_out = ::kube::Error::Service(Box::new(std::io::Error::new(std::io::ErrorKind::TimedOut, "read")));
        assert!(is_timeout(&timed_out) && !is_probable_eof(&timed_out));
    }

    #[test]
    fn too_many_requests_and_refused_connections_are_retriable() {
        let meta = Meta { describe: "v1/ConfigMap".into(), api_version: "v1".into(), kind: "ConfigMap".into() };
        // The watch cache's 429: a Status with details.retryAfterSeconds.
        let s: Status = serde_json::from_str(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests: storage is (re)initializing","reason":"TooManyRequests","details":{"retryAfterSeconds":3},"code":429}"#,
        )
        .unwrap();
        let e = meta.status("watch", "5", &s, None);
        assert!(e.is_retriable() && !e.is_gone(), "{e:?}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        // The Retry-After header, when there is one, is what counts.
        assert_eq!(
            meta.status("watch", "5", &s, Some(Duration::from_secs(7))).retry_after(),
            Some(Duration::from_secs(7))
        );
        // The flow-control filters' plain-text 429: no reason, no details.
        let plain = Status::failure("Too many requests, please try again later.", "").with_code(429);
        let e = meta.status("watch", "5", &plain, Some(Duration::from_secs(2)));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(e.to_string(), "watch v1/ConfigMap failed: Too many requests, please try again later. (code 429)");
        assert!(
            !meta.status("watch", "5", &Status::failure("boom", "InternalError").with_code(500), None).is_retriable()
        );

        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
        let e = meta.error("watch", "5", ::kube::Error::Service(Box::new(refused)));
        assert!(e.is_retriable() && e.retry_after().is_none(), "{e:?}");
        assert!(e.to_string().starts_with("watch v1/ConfigMap failed: "), "{e}");
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(!meta.error("watch", "5", ::kube::Error::Service(Box::new(reset))).is_retriable());
    }

    #[test]
    fn resources_and_urls() {
        let cm = KubeResource::new("v1", "ConfigMap");
        assert_eq!(cm.api_resource().plural, "configmaps");
        assert_eq!(cm.api_version(), "v1");
        let w = KubeResource::new("example.com/v1", "Widget").with_plural("widgetz");
        assert_eq!(w.api_resource().plural, "widgetz");
        assert_eq!(w.api_resource().api_version, "example.com/v1");
    }

    #[tokio::test]
    async fn backoff_is_kube_runtimes_default() {
        let mut b = RuntimeBackoff(DefaultBackoff::default());
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(800) && first <= Duration::from_millis(1600), "{first:?}");
        let second = b.next_delay();
        assert!(second >= Duration::from_millis(1600), "{second:?}");
        for _ in 0..20 {
            assert!(b.next_delay() <= Duration::from_secs(60));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(1600));
    }
}
