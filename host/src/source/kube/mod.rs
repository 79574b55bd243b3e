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
//!   falls back to a paged list for the attempt when it fails, and for good
//!   when the server refuses it.
//! - **list**: `ListParams` with kube-runtime's defaults (pages of 500,
//!   [`ListSemantic::MostRecent`]), following `continue` tokens; when a token
//!   expires (`410`) it restarts with one unpaged list, as client-go's pager
//!   does. Items are kept as the JSON text received (`Client::request_text` +
//!   [`RawValue`](serde_json::value::RawValue)), never re-serialised; list items that lack `kind` and
//!   `apiVersion` (real servers omit them for built-in types) get them
//!   spliced in from the resource.
//! - **watch**: `WatchParams` with bookmarks, sent with `Client::send` and
//!   read here line by line (each object kept as [`RawValue`](serde_json::value::RawValue)), rather than
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
//!   - another client error (`4xx`) is [`SourceError::Refused`], anything
//!     else [`SourceError::Other`], both with the verb, resource and server
//!     message (and the response's code when its JSON body has none): the
//!     reflector backs off and relists, and stops asking for a watch-list
//!     only when one was refused;
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
//!
//! Files: `discovery` (what the server calls the resource), `list` (paged
//! lists and the items' type meta), `watch` (the watch stream, read line by
//! line), `errors` (what a failure becomes for the reflector).

mod discovery;
mod errors;
mod list;
#[cfg(test)]
mod tests;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ::kube::api::{Api, ApiResource, DynamicObject};
use ::kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use ::kube::core::{GroupVersionKind, Request};
use ::kube::{Client, Config};
use futures::future::BoxFuture;
use kube_runtime::watcher::DefaultBackoff;
pub use kube_runtime::watcher::ListSemantic;

use crate::informer::{Backoff, ListResult, ListerWatcher, SourceError, WatchStream};

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
    /// read); `Any` allows a cached, possibly older, state, but only
    /// without paging (`page_size: None`): with a `limit`, kube leaves out
    /// `resourceVersion=0` (the API server's cache would ignore the limit),
    /// so a paged `Any` list is a quorum read as well. The engine does not
    /// tell a source why it lists, so with `Any` a relist after `410 Gone`
    /// may also be served from a cache older than what the informer already
    /// saw (client-go switches to a consistent read in that case).
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
