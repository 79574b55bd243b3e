//! The host's TOML configuration: `[[informer]]`, `[[plugin]]`,
//! `[[controller]]` (see [`controller`]), `[[tenant]]`, `[host]` and
//! `[admin]`.
//!
//! This module owns the file format, its defaults and its validation. Every
//! problem names the file, line and column of the offending key or value,
//! and all problems are collected before reporting, not just the first.
//! Paths (`dir`, `wasm`, `cache_dir`, `token_file`) are relative to the
//! config file.
//!
//! A plugin of a tenant gets the stricter of its own and its tenant's
//! limits: a limit it leaves out is the default lowered to the tenant's
//! cap, and a limit it sets above the tenant's cap is an error naming both
//! lines (never silently clamped). A `deadline` (a plugin's or a tenant's)
//! is at most [`MAX_DEADLINE`], one hour.
//!
//! ```toml
//! [host]
//! metrics_addr = "127.0.0.1:9464"
//!
//! [admin]
//! addr = "127.0.0.1:8081"
//! token_file = "admin.token"
//! wasm_dirs = ["plugins"]   # loads may name components here by path
//!
//! [[tenant]]
//! name = "shop"
//! namespaces = ["shop"]
//! max_plugins = 4
//! memory = "64MiB"
//!
//! [[informer]]
//! name = "configmaps"
//! source = "manifests"
//! dir = "manifests"
//! kind = "ConfigMap"
//! resync = "30s"
//! indexers = ["app"]
//! strip = ["managed-fields"]   # and "last-applied": dropped before the cache
//! fifo = "delta"               # or "real": client-go's RealFIFO
//!
//! [[plugin]]
//! name = "label-audit"
//! wasm = "plugins/label-audit.wasm"
//! informer = "configmaps"
//! deadline = "500ms"
//! memory = "64MiB"
//! grants = ["log"]
//! config = { required = ["app", "team"] }
//! tenant = "shop"
//! watch = true
//! on_swap = "replay"
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use crate::controller::WriteRule;
use crate::informer::Object;
use crate::plugin::{Grants, Limits, OnTrap, OnWake, PluginSpec, Visibility};

/// `idle_timeout` of a plugin that does not set it: its instance is dropped
/// after this long without a call, and made again on the next.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
use crate::registry::OnSwap;

/// Names of the capabilities a plugin can be granted.
pub const GRANT_NAMES: &[&str] = &["log", "cache", "clocks"];

/// The default grace period for in-flight calls at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The longest `deadline` a plugin or a tenant may set. A call that runs
/// longer is a hung plugin, not a slow one; and `init`, which gets ten
/// times a call's deadline, must stay within what a `Duration` and the
/// epoch tick count can hold.
pub const MAX_DEADLINE: Duration = Duration::from_secs(60 * 60);

/// Where the admin API listens unless `[admin] addr` says otherwise.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:8081";

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The config file, as given.
    pub file: PathBuf,
    /// The directory relative paths are resolved against.
    pub base_dir: PathBuf,
    pub host: HostSettings,
    /// `[admin]`; `None`: no admin API.
    pub admin: Option<AdminSettings>,
    pub informers: Vec<InformerConfig>,
    pub tenants: Vec<TenantConfig>,
    pub plugins: Vec<PluginConfig>,
    pub controllers: Vec<ControllerConfig>,
    /// `[plugin_resources]`: load the cluster's `Plugin` resources too.
    pub plugin_resources: Option<PluginResourcesConfig>,
}

/// `[host]`: process-wide settings (command-line flags override them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostSettings {
    pub metrics_addr: Option<SocketAddr>,
    /// Where compiled components are cached (resolved against the config file).
    pub cache_dir: Option<PathBuf>,
    pub log_format: Option<LogFormat>,
    /// How long in-flight calls may take to finish at shutdown.
    pub shutdown_grace: Option<Duration>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// `[admin]`: the authenticated admin API (see [`crate::admin_api`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AdminSettings {
    /// Where it listens (loopback unless `allow_remote = true`).
    pub addr: SocketAddr,
    pub allow_remote: bool,
    /// The bearer token every request must carry.
    pub token: Secret,
    /// Where the token came from, for messages: `token_file /etc/x` or
    /// `token_env NAME`.
    pub token_source: String,
    /// Largest accepted request body, in bytes.
    pub max_upload: usize,
    /// Directories whose components loads and swaps may name by path (each
    /// must exist; empty: components only by upload).
    pub wasm_dirs: Vec<PathBuf>,
    /// Where `[admin]` is.
    pub location: Location,
}

/// A secret string whose `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// One `[[tenant]]`: the namespaces its plugins may see and its limits.
/// Limits are caps on each of its plugins; `None`: no cap.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantConfig {
    pub name: String,
    /// The namespaces whose objects its plugins receive and read.
    pub namespaces: Vec<String>,
    /// Whether cluster-scoped objects (no namespace) are visible.
    pub cluster_scoped: bool,
    pub max_plugins: Option<usize>,
    pub fuel_per_call: Option<u64>,
    pub deadline: Option<Duration>,
    pub memory: Option<usize>,
    pub max_pending: Option<usize>,
    /// What its controllers may declare in their `rules` (`None`: no cap).
    pub rules: Option<Vec<WriteRule>>,
    /// The user its controllers' writes impersonate, unless a controller
    /// names its own.
    pub impersonate: Option<String>,
    /// Where the tenant is defined (its `name`).
    pub location: Location,
}

impl TenantConfig {
    /// Whether an object of `namespace` (`None`: cluster-scoped) is visible.
    pub fn sees(&self, namespace: Option<&str>) -> bool {
        match namespace {
            Some(ns) => self.namespaces.iter().any(|n| n == ns),
            None => self.cluster_scoped,
        }
    }

    /// The filter the host applies before delivery and in the `cache` import.
    /// What the plugin registry enforces for this tenant.
    pub fn policy(&self) -> crate::registry::TenantPolicy {
        crate::registry::TenantPolicy {
            visibility: self.visibility(),
            max_plugins: self.max_plugins,
            fuel_per_call: self.fuel_per_call,
            deadline_per_call: self.deadline,
            memory_bytes: self.memory,
            max_pending: self.max_pending,
        }
    }

    pub fn visibility(&self) -> Visibility {
        let namespaces: Vec<String> = self.namespaces.clone();
        let cluster_scoped = self.cluster_scoped;
        Arc::new(move |o: &Object| match o.namespace() {
            Some(ns) => namespaces.iter().any(|n| n == ns),
            None => cluster_scoped,
        })
    }

    /// True when `other` shows its plugins the same objects.
    pub fn same_visibility(&self, other: &TenantConfig) -> bool {
        self.namespaces == other.namespaces && self.cluster_scoped == other.cluster_scoped
    }
}

/// A 1-based line and column in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One `[[informer]]`.
#[derive(Debug, Clone)]
pub struct InformerConfig {
    pub name: String,
    pub source: SourceConfig,
    /// Default resync period of its handlers (zero: none).
    pub resync: Duration,
    /// Label keys to index by; each index is named after its key.
    pub indexers: Vec<String>,
    /// What is dropped from each object before the cache (`strip`).
    pub strip: crate::informer::Strip,
    /// The FIFO between its reflector and its cache (`fifo`).
    pub fifo: crate::informer::FifoKind,
    /// Where the informer is defined (its `name`).
    pub location: Location,
}

impl InformerConfig {
    /// True when both define the same informer (locations aside).
    pub fn same_definition(&self, other: &InformerConfig) -> bool {
        self.name == other.name
            && self.source == other.source
            && self.resync == other.resync
            && self.indexers == other.indexers
            && self.strip == other.strip
            && self.fifo == other.fifo
    }
}

/// Where an informer's objects come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceConfig {
    Manifests(ManifestsConfig),
    Kube(KubeConfig),
}

impl SourceConfig {
    /// `manifests` or `kube`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceConfig::Manifests(_) => "manifests",
            SourceConfig::Kube(_) => "kube",
        }
    }
}

/// `source = "manifests"`: a watched directory of YAML/JSON manifests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestsConfig {
    /// Resolved against the config file's directory.
    pub dir: PathBuf,
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
}

/// `source = "kube"`: a Kubernetes API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeConfig {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Plural resource name in URLs, e.g. `deployments` (guessed from the
    /// kind when absent).
    pub plural: Option<String>,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// List by watch-list (`sendInitialEvents`) rather than paged lists
    /// (default true, as client-go ≥ 1.35).
    pub watch_list: bool,
}

/// One `[[plugin]]`.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    pub name: String,
    /// The component file, resolved against the config file's directory.
    pub wasm: PathBuf,
    /// The name of the informer it handles.
    pub informer: String,
    /// Its resync period; `None`: the informer's.
    pub resync: Option<Duration>,
    pub limits: Limits,
    pub grants: Grants,
    /// Granted capability names, in config order (for display).
    pub grant_names: Vec<String>,
    /// The `config` table as JSON text, for `init`.
    pub config_json: String,
    /// What a fresh instance gets after a trap.
    pub on_trap: OnTrap,
    /// How long without a call before its instance is dropped (`None`:
    /// kept; `idle_timeout = "0s"`).
    pub idle_timeout: Option<Duration>,
    /// What an instance made again after idling gets first.
    pub on_wake: OnWake,
    /// The `[[tenant]]` it belongs to (`None`: it sees every object).
    pub tenant: Option<String>,
    /// Swap it when its wasm file changes.
    pub watch: bool,
    /// How a new version takes over.
    pub on_swap: OnSwap,
    /// Cap on its pending notifications (`None`: no cap); on overflow the
    /// host coalesces them by key.
    pub max_pending: Option<usize>,
    /// Where the plugin is defined (its `name`).
    pub location: Location,
}

impl PluginConfig {
    /// What the plugin runtime needs to load it.
    pub fn spec(&self) -> PluginSpec {
        let mut spec = PluginSpec::new(self.name.clone(), self.wasm.clone());
        spec.config_json = self.config_json.clone();
        spec.limits = self.limits.clone();
        spec.grants = self.grants.clone();
        spec.on_trap = self.on_trap;
        spec.idle_timeout = self.idle_timeout;
        spec.on_wake = self.on_wake;
        spec.tenant = self.tenant.clone();
        spec
    }

    /// The keys whose change needs an unload and a load (everything but
    /// `wasm`, `watch` and the location), by name; empty when none changed.
    pub fn changed_keys(&self, other: &PluginConfig) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut check = |key, same: bool| {
            if !same {
                keys.push(key);
            }
        };
        check("informer", self.informer == other.informer);
        check("resync", self.resync == other.resync);
        check("limits", self.limits == other.limits);
        check("grants", self.grants == other.grants);
        check("config", self.config_json == other.config_json);
        check("on_trap", self.on_trap == other.on_trap);
        check("idle_timeout", self.idle_timeout == other.idle_timeout);
        check("on_wake", self.on_wake == other.on_wake);
        check("tenant", self.tenant == other.tenant);
        check("on_swap", self.on_swap == other.on_swap);
        check("max_pending", self.max_pending == other.max_pending);
        keys
    }
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `None` when the problem is about the whole file (e.g. unreadable).
    pub location: Option<Location>,
    pub message: String,
    /// The offending source line and a caret line under the value.
    pub snippet: Option<String>,
    /// Byte offset, for ordering.
    offset: usize,
}

/// Every problem found in a config file.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub file: PathBuf,
    pub problems: Vec<Problem>,
}

impl ConfigError {
    /// `file:line:column: message` for each problem, without snippets.
    pub fn short_lines(&self) -> Vec<String> {
        self.problems.iter().map(|p| self.head(p)).collect()
    }

    fn head(&self, p: &Problem) -> String {
        match p.location {
            Some(loc) => format!("{}:{}: {}", self.file.display(), loc, p.message),
            None => format!("{}: {}", self.file.display(), p.message),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", self.head(p))?;
            if let Some(s) = &p.snippet {
                write!(f, "\n{s}")?;
            }
        }
        let n = self.problems.len();
        write!(f, "\n{} has {n} problem{}", self.file.display(), if n == 1 { "" } else { "s" })
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            problems: vec![Problem { location: None, message: format!("cannot read: {e}"), snippet: None, offset: 0 }],
        })?;
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self::parse(&text, path, &base)
    }

    /// Validates config text; `file` is used in messages, `base_dir` to
    /// resolve relative paths (and check that they exist).
    pub fn parse(text: &str, file: impl AsRef<Path>, base_dir: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let mut cx = Cx { text, base: base_dir.as_ref(), problems: Vec::new() };
        let config = cx.document(file.as_ref());
        if cx.problems.is_empty() {
            Ok(config)
        } else {
            let mut problems = cx.problems;
            problems.sort_by_key(|p| p.offset);
            problems.dedup_by(|a, b| a.offset == b.offset && a.message == b.message);
            Err(ConfigError { file: file.as_ref().to_path_buf(), problems })
        }
    }

    pub fn informer(&self, name: &str) -> Option<&InformerConfig> {
        self.informers.iter().find(|i| i.name == name)
    }

    pub fn tenant(&self, name: &str) -> Option<&TenantConfig> {
        self.tenants.iter().find(|t| t.name == name)
    }

    /// The tenant of a controller, if it has one.
    pub fn tenant_of_controller(&self, controller: &ControllerConfig) -> Option<&TenantConfig> {
        controller.tenant.as_deref().and_then(|t| self.tenant(t))
    }

    /// The tenant of a plugin, if it has one.
    pub fn tenant_of(&self, plugin: &PluginConfig) -> Option<&TenantConfig> {
        plugin.tenant.as_deref().and_then(|t| self.tenant(t))
    }

    /// The `file:line:column` of a location in this config, for messages.
    pub fn at(&self, loc: Location) -> String {
        format!("{}:{}", self.file.display(), loc)
    }
}

// ---------------------------------------------------------------------------
// Raw shapes, read from the TOML tables field by field (see [`Fields`]).
// Spans point messages at keys and values.

type S<T> = Spanned<T>;

/// Reads one TOML table key by key, so that a value of the wrong type or
/// an unknown key does not hide the table's other problems (serde's derive
/// stops at the first). Each value is deserialized on its own, keeping its
/// span; keys nobody asked for are reported by [`Fields::finish`].
struct Fields<'c, 'a> {
    cx: &'c mut Cx<'a>,
    /// The whole table, where a missing key is reported.
    span: Range<usize>,
    /// The keys not taken yet, in file order.
    rest: Vec<(S<Cow<'a, str>>, S<DeValue<'a>>)>,
    /// The keys asked for, for the unknown-key message.
    known: Vec<&'static str>,
}

impl<'a> Fields<'_, 'a> {
    fn take(&mut self, key: &'static str) -> Option<S<DeValue<'a>>> {
        self.known.push(key);
        let i = self.rest.iter().position(|(k, _)| k.get_ref() == key)?;
        Some(self.rest.remove(i).1)
    }

    /// Deserializes one value; a type error is reported at the value.
    fn value<T: Deserialize<'a>>(&mut self, v: S<DeValue<'a>>) -> Option<T> {
        let span = v.span();
        T::deserialize(ValueDeserializer::from(v)).map_err(|e| self.cx.toml_error(&e, span)).ok()
    }

    /// An optional key: `None` when absent or not of type `T` (reported).
    fn optional<T: Deserialize<'a>>(&mut self, key: &'static str) -> Option<T> {
        let v = self.take(key)?;
        self.value(v)
    }

    /// A required key: `None` when absent (reported at the table) or not
    /// of type `T` (reported at the value).
    fn required<T: Deserialize<'a>>(&mut self, key: &'static str) -> Option<T> {
        match self.take(key) {
            Some(v) => self.value(v),
            None => {
                self.cx.error(self.span.clone(), format!("missing field `{key}`"));
                None
            }
        }
    }

    /// Accepts `alias` as another spelling of `key`.
    fn alias(&mut self, alias: &str, key: &'static str) {
        let Some(i) = self.rest.iter().position(|(k, _)| k.get_ref() == alias) else { return };
        if self.rest.iter().any(|(k, _)| k.get_ref() == key) {
            let span = self.rest[i].0.span();
            self.cx.error(span, format!("`{alias}` is another name for `{key}`: give one of them"));
            self.rest.remove(i);
            return;
        }
        let (k, v) = self.rest.remove(i);
        self.rest.insert(i, (Spanned::new(k.span(), Cow::Borrowed(key)), v));
    }

    /// Reports every key that was not asked for.
    fn finish(self) {
        let expected = self.known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        for (k, _) in self.rest {
            self.cx.error(k.span(), format!("unknown field `{}`, expected one of {expected}", k.get_ref()));
        }
    }
}

/// `read_table!(fields, RawX, [required keys], [optional keys])` reads a
/// `Raw*` struct from [`Fields`]: every listed key (required ones first),
/// then the unknown ones, each problem reported; `Some` when every required
/// key is present and of the right type (it returns from the enclosing
/// function otherwise). A field of the struct missing from the lists does
/// not compile.
macro_rules! read_table {
    ($f:ident, $ty:ident, [$($req:ident),* $(,)?], [$($opt:ident),* $(,)?] $(,)?) => {{
        $(let $req = $f.required(stringify!($req));)*
        $(let $opt = $f.optional(stringify!($opt));)*
        $f.finish();
        Some($ty { $($req: $req?,)* $($opt,)* })
    }};
}

pub mod controller;

pub use controller::{CONTROLLER_GRANT_NAMES, ControllerConfig, RULE_VERBS};

pub mod plugin_resources;

use controller::{RawController, RawRule};
pub use plugin_resources::PluginResourcesConfig;
use plugin_resources::RawPluginResources;

struct RawInformer {
    name: S<String>,
    source: S<String>,
    // manifests
    dir: Option<S<String>>,
    // both
    api_version: Option<S<String>>,
    kind: Option<S<String>>,
    namespace: Option<S<String>>,
    label_selector: Option<S<String>>,
    // kube
    group: Option<S<String>>,
    version: Option<S<String>>,
    /// Also spelled `resource`.
    plural: Option<S<String>>,
    field_selector: Option<S<String>>,
    // informer
    resync: Option<S<String>>,
    indexers: Option<Vec<S<String>>>,
    strip: Option<Vec<S<String>>>,
    fifo: Option<S<String>>,
    watch_list: Option<S<bool>>,
}

impl RawInformer {
    fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        f.alias("resource", "plural");
        read_table!(
            f,
            RawInformer,
            [name, source],
            [
                dir,
                api_version,
                kind,
                namespace,
                label_selector,
                group,
                version,
                plural,
                field_selector,
                resync,
                indexers,
                strip,
                fifo,
                watch_list
            ]
        )
    }
}

struct RawPlugin {
    name: S<String>,
    wasm: S<String>,
    informer: S<String>,
    resync: Option<S<String>>,
    fuel_per_call: Option<S<toml::Value>>,
    deadline: Option<S<String>>,
    memory: Option<S<toml::Value>>,
    grants: Option<Vec<S<String>>>,
    on_trap: Option<S<String>>,
    idle_timeout: Option<S<String>>,
    on_wake: Option<S<String>>,
    config: Option<S<toml::Table>>,
    tenant: Option<S<String>>,
    watch: Option<S<bool>>,
    on_swap: Option<S<String>>,
    max_pending: Option<S<toml::Value>>,
}

impl RawPlugin {
    fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(
            f,
            RawPlugin,
            [name, wasm, informer],
            [
                resync,
                fuel_per_call,
                deadline,
                memory,
                grants,
                on_trap,
                idle_timeout,
                on_wake,
                config,
                tenant,
                watch,
                on_swap,
                max_pending
            ]
        )
    }
}

struct RawTenant {
    name: S<String>,
    namespaces: S<Vec<S<String>>>,
    cluster_scoped: Option<S<bool>>,
    max_plugins: Option<S<toml::Value>>,
    fuel_per_call: Option<S<toml::Value>>,
    deadline: Option<S<String>>,
    memory: Option<S<toml::Value>>,
    max_pending: Option<S<toml::Value>>,
    rules: Option<Vec<S<RawRule>>>,
    impersonate: Option<S<String>>,
}

impl RawTenant {
    fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(
            f,
            RawTenant,
            [name, namespaces],
            [cluster_scoped, max_plugins, fuel_per_call, deadline, memory, max_pending, rules, impersonate]
        )
    }
}

struct RawAdmin {
    addr: Option<S<String>>,
    allow_remote: Option<S<bool>>,
    token_file: Option<S<String>>,
    token_env: Option<S<String>>,
    max_upload: Option<S<toml::Value>>,
    wasm_dirs: Option<Vec<S<String>>>,
}

impl RawAdmin {
    fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(f, RawAdmin, [], [addr, allow_remote, token_file, token_env, max_upload, wasm_dirs])
    }
}

/// A tenant as plugins see it while the config is checked: its settings and
/// where each limit is written, for messages naming both lines.
struct TenantSeen {
    config: TenantConfig,
    /// Line of each limit key that is set.
    lines: HashMap<&'static str, usize>,
    /// The plugins that name it so far (name, line).
    plugins: Vec<(String, usize)>,
}

struct RawHost {
    metrics_addr: Option<S<String>>,
    cache_dir: Option<S<String>>,
    log_format: Option<S<String>>,
    shutdown_grace: Option<S<String>>,
}

impl RawHost {
    fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(f, RawHost, [], [metrics_addr, cache_dir, log_format, shutdown_grace])
    }
}

// ---------------------------------------------------------------------------

struct Cx<'a> {
    text: &'a str,
    base: &'a Path,
    problems: Vec<Problem>,
}

impl<'a> Cx<'a> {
    fn location(&self, offset: usize) -> Location {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Location { line, column: self.text[line_start..offset].chars().count() + 1 }
    }

    fn snippet(&self, span: &Range<usize>) -> String {
        let start = span.start.min(self.text.len());
        let loc = self.location(start);
        let line_start = self.text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = self.text[start..].find('\n').map_or(self.text.len(), |i| start + i);
        let line = self.text[line_start..line_end].trim_end_matches('\r');
        let end = span.end.clamp(start, line_end);
        let width = self.text[start..end].chars().count().max(1);
        let gutter = loc.line.to_string().len();
        format!(
            "{:gutter$} |\n{} | {}\n{:gutter$} | {}{}",
            "",
            loc.line,
            line,
            "",
            " ".repeat(loc.column - 1),
            "^".repeat(width),
        )
    }

    fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        let location = self.location(span.start);
        let snippet = Some(self.snippet(&span));
        self.problems.push(Problem { location: Some(location), message: message.into(), snippet, offset: span.start });
    }

    fn toml_error(&mut self, e: &toml::de::Error, fallback: Range<usize>) {
        let span = e.span().unwrap_or(fallback);
        let msg = e.message().trim_end().to_string();
        self.error(span, msg);
    }

    fn duration(&mut self, v: &S<String>, what: &str) -> Option<Duration> {
        match humantime::parse_duration(v.get_ref().trim()) {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(
                    v.span(),
                    format!("`{what}`: invalid duration {:?}: {e} (examples: \"500ms\", \"30s\", \"5m\")", v.get_ref()),
                );
                None
            }
        }
    }

    /// A reader of the table `v` (which must be a table).
    fn fields(&mut self, v: S<DeValue<'a>>) -> Fields<'_, 'a> {
        let span = v.span();
        let rest = match v.into_inner() {
            DeValue::Table(t) => t.into_iter().collect(),
            _ => Vec::new(),
        };
        Fields { cx: self, span, rest, known: Vec::new() }
    }

    fn path(&self, v: &str) -> PathBuf {
        let p = Path::new(v);
        if p.is_absolute() { p.to_path_buf() } else { self.base.join(p) }
    }

    fn document(&mut self, file: &Path) -> Config {
        let mut config = Config {
            file: file.to_path_buf(),
            base_dir: self.base.to_path_buf(),
            host: HostSettings::default(),
            admin: None,
            informers: Vec::new(),
            tenants: Vec::new(),
            plugins: Vec::new(),
            controllers: Vec::new(),
            plugin_resources: None,
        };
        let (root, errors) = DeTable::parse_recoverable(self.text);
        if !errors.is_empty() {
            for e in &errors {
                self.toml_error(e, 0..0);
            }
            return config;
        }
        let mut raw_informers = Vec::new();
        let mut raw_plugins = Vec::new();
        let mut raw_tenants = Vec::new();
        let mut raw_controllers = Vec::new();
        for (key, value) in root.into_inner() {
            let section = key.get_ref().to_string();
            match section.as_str() {
                "informer" => {
                    for v in self.array_of_tables(value, "informer") {
                        raw_informers.extend(RawInformer::read(self.fields(v)));
                    }
                }
                "plugin" => {
                    for v in self.array_of_tables(value, "plugin") {
                        raw_plugins.extend(RawPlugin::read(self.fields(v)));
                    }
                }
                "controller" => {
                    for v in self.array_of_tables(value, "controller") {
                        raw_controllers.extend(RawController::read(self.fields(v)));
                    }
                }
                "tenant" => {
                    for v in self.array_of_tables(value, "tenant") {
                        raw_tenants.extend(RawTenant::read(self.fields(v)));
                    }
                }
                "host" => {
                    let span = value.span();
                    if !value.get_ref().is_table() {
                        self.error(span, "`host` must be a table: write `[host]`");
                        continue;
                    }
                    if let Some(r) = RawHost::read(self.fields(value)) {
                        config.host = self.host(r);
                    }
                }
                "admin" => {
                    let span = value.span();
                    if !value.get_ref().is_table() {
                        self.error(span, "`admin` must be a table: write `[admin]`");
                        continue;
                    }
                    if let Some(r) = RawAdmin::read(self.fields(value)) {
                        config.admin = self.admin(r, key.span());
                    }
                }
                "plugin_resources" => {
                    let span = value.span();
                    if !value.get_ref().is_table() {
                        self.error(span, "`plugin_resources` must be a table: write `[plugin_resources]`");
                        continue;
                    }
                    if let Some(r) = RawPluginResources::read(self.fields(value)) {
                        config.plugin_resources = Some(self.plugin_resources(r));
                    }
                }
                other => self.error(
                    key.span(),
                    format!(
                        "unknown section `{other}`, expected one of `[[informer]]`, `[[plugin]]`, \
                         `[[controller]]`, `[[tenant]]`, `[host]`, `[admin]`, `[plugin_resources]`"
                    ),
                ),
            }
        }
        // Informers first: plugins refer to them.
        let mut informer_names: HashMap<String, Location> = HashMap::new();
        for r in raw_informers {
            if let Some(i) = self.informer(r, &mut informer_names) {
                config.informers.push(i);
            }
        }
        // Tenants next: plugins refer to them too.
        let mut tenant_names: HashMap<String, Location> = HashMap::new();
        let mut tenants: HashMap<String, TenantSeen> = HashMap::new();
        for r in raw_tenants {
            if let Some(t) = self.tenant(r, &mut tenant_names) {
                tenants.insert(t.config.name.clone(), t);
            }
        }
        // Plugins in file order, so `max_plugins` blames the ones past it.
        raw_plugins.sort_by_key(|r| r.name.span().start);
        let mut plugin_names: HashMap<String, Location> = HashMap::new();
        for r in raw_plugins {
            if let Some(p) = self.plugin(r, &informer_names, &tenant_names, &mut tenants, &mut plugin_names) {
                config.plugins.push(p);
            }
        }
        // Controllers after plugins (they share names and tenants' counts).
        raw_controllers.sort_by_key(|r| r.name.span().start);
        for r in raw_controllers {
            if let Some(c) =
                self.controller(r, &config.informers, &informer_names, &tenant_names, &mut tenants, &mut plugin_names)
            {
                config.controllers.push(c);
            }
        }
        config.tenants = tenants.into_values().map(|t| t.config).collect();
        config.informers.sort_by_key(|i| (i.location.line, i.location.column));
        config.tenants.sort_by_key(|t| (t.location.line, t.location.column));
        config.plugins.sort_by_key(|p| (p.location.line, p.location.column));
        config.controllers.sort_by_key(|c| (c.location.line, c.location.column));
        config
    }

    fn array_of_tables(&mut self, value: S<DeValue<'a>>, what: &str) -> Vec<S<DeValue<'a>>> {
        let span = value.span();
        match value.into_inner() {
            DeValue::Array(items) => {
                let mut out = Vec::new();
                for item in items {
                    if item.get_ref().is_table() {
                        out.push(item);
                    } else {
                        self.error(item.span(), format!("each `{what}` must be a table: write `[[{what}]]`"));
                    }
                }
                out
            }
            _ => {
                self.error(span, format!("`{what}` must be an array of tables: write `[[{what}]]`, not `[{what}]`"));
                Vec::new()
            }
        }
    }

    fn name(&mut self, v: &S<String>, what: &'static str, seen: &mut HashMap<String, Location>) -> bool {
        let name = v.get_ref();
        // A DNS label: it shows as is in logs, metric labels and URLs.
        if let Err(e) = crate::names::check(what, name) {
            self.error(v.span(), e.to_string());
            return false;
        }
        let here = self.location(v.span().start);
        if let Some(first) = seen.get(name) {
            self.error(v.span(), format!("duplicate {what} name {name:?} (first defined at line {})", first.line));
            return false;
        }
        seen.insert(name.clone(), here);
        true
    }

    fn informer(&mut self, r: RawInformer, names: &mut HashMap<String, Location>) -> Option<InformerConfig> {
        let before = self.problems.len();
        let location = self.location(r.name.span().start);
        self.name(&r.name, "informer", names);
        let resync = r.resync.as_ref().and_then(|v| self.duration(v, "resync")).unwrap_or(Duration::ZERO);
        if !resync.is_zero() && resync < crate::informer::MINIMUM_RESYNC_PERIOD {
            let span = r.resync.as_ref().map(|v| v.span()).unwrap_or_default();
            self.error(span, format!("`resync` must be 0s or at least {:?}", crate::informer::MINIMUM_RESYNC_PERIOD));
        }
        let mut indexers = Vec::new();
        for key in r.indexers.iter().flatten() {
            let k = key.get_ref();
            if k.is_empty() {
                self.error(key.span(), "indexer label key must not be empty");
            } else if k == crate::informer::NAMESPACE_INDEX {
                self.error(key.span(), "the `namespace` index is built in; remove it from `indexers`");
            } else if indexers.contains(k) {
                self.error(key.span(), format!("duplicate indexer {k:?}"));
            } else {
                indexers.push(k.clone());
            }
        }
        let mut strip = crate::informer::Strip::default();
        for what in r.strip.iter().flatten() {
            match what.get_ref().as_str() {
                "managed-fields" => strip.managed_fields = true,
                "last-applied" => strip.last_applied = true,
                other => self.error(
                    what.span(),
                    format!("cannot strip {other:?}: `strip` takes \"managed-fields\" and \"last-applied\""),
                ),
            }
        }
        let fifo = match r.fifo.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "delta")) => crate::informer::FifoKind::Delta,
            Some((_, "real")) => crate::informer::FifoKind::Real,
            Some((v, other)) => {
                self.error(v.span(), format!("unknown fifo {other:?}, expected \"delta\" or \"real\""));
                crate::informer::FifoKind::Delta
            }
        };
        if let Some(v) = &r.label_selector
            && let Err(e) = crate::source::selector::Selector::parse(v.get_ref())
        {
            self.error(v.span(), format!("`label_selector`: {e}"));
        }
        let opt = |v: &Option<S<String>>| v.as_ref().map(|s| s.get_ref().clone());
        let source = match r.source.get_ref().as_str() {
            "manifests" => {
                for (key, v) in [
                    ("group", &r.group),
                    ("version", &r.version),
                    ("plural", &r.plural),
                    ("field_selector", &r.field_selector),
                ] {
                    if let Some(v) = v {
                        self.error(v.span(), format!("`{key}` is only valid with source = \"kube\""));
                    }
                }
                if let Some(v) = &r.watch_list {
                    self.error(v.span(), "`watch_list` is only valid with source = \"kube\"");
                }
                let dir = match &r.dir {
                    None => {
                        self.error(r.source.span(), "source = \"manifests\" needs `dir`, the directory of manifests");
                        PathBuf::new()
                    }
                    Some(d) => {
                        let path = self.path(d.get_ref());
                        if !path.is_dir() {
                            let what = if path.exists() { "is not a directory" } else { "does not exist" };
                            self.error(d.span(), format!("manifests directory {} {what}", path.display()));
                        }
                        path
                    }
                };
                SourceConfig::Manifests(ManifestsConfig {
                    dir,
                    api_version: opt(&r.api_version),
                    kind: opt(&r.kind),
                    namespace: opt(&r.namespace),
                    label_selector: opt(&r.label_selector),
                })
            }
            "kube" => {
                if let Some(d) = &r.dir {
                    self.error(d.span(), "`dir` is only valid with source = \"manifests\"");
                }
                let (mut group, mut version) = (opt(&r.group).unwrap_or_default(), opt(&r.version));
                if let Some(av) = &r.api_version {
                    if r.group.is_some() || r.version.is_some() {
                        self.error(av.span(), "give either `api_version` or `group` and `version`, not both");
                    }
                    match av.get_ref().rsplit_once('/') {
                        Some((g, v)) => {
                            group = g.to_string();
                            version = Some(v.to_string());
                        }
                        None => {
                            group = String::new();
                            version = Some(av.get_ref().clone());
                        }
                    }
                }
                // No version: the group's preferred version, by discovery.
                let version = version.unwrap_or_default();
                if r.kind.is_none() {
                    self.error(
                        r.source.span(),
                        "source = \"kube\" needs `kind` (and `plural` when it is not the kind's regular plural)",
                    );
                }
                SourceConfig::Kube(KubeConfig {
                    group,
                    version,
                    kind: opt(&r.kind).unwrap_or_default(),
                    plural: opt(&r.plural),
                    namespace: opt(&r.namespace),
                    label_selector: opt(&r.label_selector),
                    field_selector: opt(&r.field_selector),
                    watch_list: r.watch_list.as_ref().is_none_or(|w| *w.get_ref()),
                })
            }
            other => {
                self.error(r.source.span(), format!("unknown source {other:?}, expected \"manifests\" or \"kube\""));
                return None;
            }
        };
        (self.problems.len() == before).then(|| InformerConfig {
            name: r.name.into_inner(),
            source,
            resync,
            indexers,
            strip,
            fifo,
            location,
        })
    }

    /// `fuel_per_call`: `Some(None)` is `"unlimited"`; `None` after an error.
    fn fuel(&mut self, v: &S<toml::Value>) -> Option<Option<u64>> {
        match v.get_ref() {
            toml::Value::Integer(n) if *n > 0 => Some(Some(*n as u64)),
            toml::Value::String(s) if s == "unlimited" => Some(None),
            _ => {
                self.error(v.span(), "`fuel_per_call` must be a positive integer or \"unlimited\"");
                None
            }
        }
    }

    /// A positive duration of at most [`MAX_DEADLINE`].
    fn deadline(&mut self, v: &S<String>) -> Option<Duration> {
        let d = self.duration(v, "deadline")?;
        if d.is_zero() {
            self.error(v.span(), "`deadline` must be greater than zero");
            return None;
        }
        if d > MAX_DEADLINE {
            self.error(
                v.span(),
                format!(
                    "`deadline` {:?} is longer than the maximum of {}",
                    v.get_ref(),
                    humantime::format_duration(MAX_DEADLINE)
                ),
            );
            return None;
        }
        Some(d)
    }

    /// A positive size: `"64MiB"` or a number of bytes.
    fn size(&mut self, v: &S<toml::Value>, what: &str) -> Option<usize> {
        match v.get_ref() {
            toml::Value::Integer(n) if *n > 0 => Some(*n as usize),
            toml::Value::String(s) => match parse_size(s) {
                Ok(n) if n > 0 => Some(n),
                Ok(_) => {
                    self.error(v.span(), format!("`{what}` must be greater than zero"));
                    None
                }
                Err(e) => {
                    self.error(v.span(), format!("`{what}`: {e}"));
                    None
                }
            },
            _ => {
                self.error(v.span(), format!("`{what}` must be a size such as \"64MiB\" or a number of bytes"));
                None
            }
        }
    }

    /// A positive integer.
    fn count(&mut self, v: &S<toml::Value>, what: &str) -> Option<usize> {
        match v.get_ref() {
            toml::Value::Integer(n) if *n > 0 => Some(*n as usize),
            _ => {
                self.error(v.span(), format!("`{what}` must be a positive integer"));
                None
            }
        }
    }

    fn tenant(&mut self, r: RawTenant, names: &mut HashMap<String, Location>) -> Option<TenantSeen> {
        let before = self.problems.len();
        let location = self.location(r.name.span().start);
        self.name(&r.name, "tenant", names);
        let mut namespaces: Vec<String> = Vec::new();
        for ns in r.namespaces.get_ref() {
            let n = ns.get_ref();
            if let Err(why) = crate::names::dns_label_problem(n) {
                self.error(ns.span(), format!("namespace {n:?} {why}"));
            } else if namespaces.contains(n) {
                self.error(ns.span(), format!("duplicate namespace {n:?}"));
            } else {
                namespaces.push(n.clone());
            }
        }
        let cluster_scoped = r.cluster_scoped.as_ref().is_some_and(|v| *v.get_ref());
        if r.namespaces.get_ref().is_empty() && !cluster_scoped {
            self.error(
                r.namespaces.span(),
                "the tenant would see no objects: list its namespaces (or set `cluster_scoped = true`)",
            );
        }
        let mut lines = HashMap::new();
        let mut line_of = |cx: &Self, key: &'static str, span: Range<usize>| {
            lines.insert(key, cx.location(span.start).line);
        };
        let mut t = TenantConfig {
            name: r.name.get_ref().clone(),
            namespaces,
            cluster_scoped,
            max_plugins: None,
            fuel_per_call: None,
            deadline: None,
            memory: None,
            max_pending: None,
            rules: None,
            impersonate: r.impersonate.as_ref().map(|v| v.get_ref().clone()),
            location,
        };
        if let Some(v) = &r.max_plugins {
            t.max_plugins = self.count(v, "max_plugins");
            line_of(self, "max_plugins", v.span());
        }
        if let Some(v) = &r.fuel_per_call {
            t.fuel_per_call = self.fuel(v).flatten();
            line_of(self, "fuel_per_call", v.span());
        }
        if let Some(v) = &r.deadline {
            t.deadline = self.deadline(v);
            line_of(self, "deadline", v.span());
        }
        if let Some(v) = &r.memory {
            t.memory = self.size(v, "memory");
            line_of(self, "memory", v.span());
        }
        if let Some(v) = &r.max_pending {
            t.max_pending = self.count(v, "max_pending");
            line_of(self, "max_pending", v.span());
        }
        if let Some(raw) = &r.rules {
            t.rules = Some(self.rules(raw));
            line_of(self, "rules", raw.first().map_or(r.name.span(), |f| f.span()));
        }
        (self.problems.len() == before).then(|| TenantSeen { config: t, lines, plugins: Vec::new() })
    }

    fn admin(&mut self, r: RawAdmin, header: Range<usize>) -> Option<AdminSettings> {
        let before = self.problems.len();
        let location = self.location(header.start);
        let allow_remote = r.allow_remote.as_ref().is_some_and(|v| *v.get_ref());
        let addr = match &r.addr {
            None => DEFAULT_ADMIN_ADDR.parse().ok(),
            Some(v) => match v.get_ref().parse::<SocketAddr>() {
                Ok(a) => {
                    if !a.ip().is_loopback() && !allow_remote {
                        self.error(
                            v.span(),
                            format!(
                                "`addr` {a} is not a loopback address; the admin API loads code into this \
                                 process, so serving it beyond this machine needs `allow_remote = true`"
                            ),
                        );
                    }
                    Some(a)
                }
                Err(e) => {
                    self.error(v.span(), format!("`addr`: {e} (expected e.g. \"{DEFAULT_ADMIN_ADDR}\")"));
                    None
                }
            },
        };
        let token = match (&r.token_file, &r.token_env) {
            (Some(_), Some(e)) => {
                self.error(e.span(), "give either `token_file` or `token_env`, not both");
                None
            }
            (None, None) => {
                self.error(
                    header.clone(),
                    "`[admin]` needs `token_file` or `token_env`: the bearer token every request must carry",
                );
                None
            }
            (Some(f), None) => {
                let path = self.path(f.get_ref());
                match std::fs::read_to_string(&path) {
                    Ok(t) if t.trim().is_empty() => {
                        self.error(f.span(), format!("`token_file` {} is empty", path.display()));
                        None
                    }
                    Ok(t) => Some((Secret(t.trim().to_string()), format!("token_file {}", path.display()))),
                    Err(e) => {
                        self.error(f.span(), format!("`token_file`: cannot read {}: {e}", path.display()));
                        None
                    }
                }
            }
            (None, Some(e)) => {
                let name = e.get_ref();
                match std::env::var(name) {
                    Ok(t) if t.trim().is_empty() => {
                        self.error(e.span(), format!("`token_env`: environment variable {name} is empty"));
                        None
                    }
                    Ok(t) => Some((Secret(t.trim().to_string()), format!("token_env {name}"))),
                    Err(std::env::VarError::NotPresent) => {
                        self.error(e.span(), format!("`token_env`: environment variable {name} is not set"));
                        None
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        self.error(e.span(), format!("`token_env`: environment variable {name} is not valid UTF-8"));
                        None
                    }
                }
            }
        };
        let max_upload = match &r.max_upload {
            Some(v) => self.size(v, "max_upload"),
            None => Some(crate::admin_api::DEFAULT_MAX_UPLOAD),
        };
        let mut wasm_dirs = Vec::new();
        for dir in r.wasm_dirs.iter().flatten() {
            let path = self.path(dir.get_ref());
            // Checked now, so a typo is an error at start, not a 403 later.
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => wasm_dirs.push(path),
                Ok(_) => self.error(dir.span(), format!("`wasm_dirs`: {} is not a directory", path.display())),
                Err(e) => self.error(dir.span(), format!("`wasm_dirs`: cannot read {}: {e}", path.display())),
            }
        }
        if self.problems.len() != before {
            return None;
        }
        let ((token, token_source), addr, max_upload) = (token?, addr?, max_upload?);
        Some(AdminSettings { addr, allow_remote, token, token_source, max_upload, wasm_dirs, location })
    }

    /// The component file `v` names, reported when it is not a file.
    fn wasm_file(&mut self, v: &S<String>) -> PathBuf {
        let wasm = self.path(v.get_ref());
        if !wasm.is_file() {
            let what = if wasm.exists() { "is not a file" } else { "does not exist" };
            let hint = if v.get_ref().contains("target/plugins") {
                " (build the plugins first: `cargo run -p xtask -- demo` does)"
            } else {
                ""
            };
            self.error(v.span(), format!("wasm file {} {what}{hint}", wasm.display()));
        }
        wasm
    }

    /// Whether the informer `v` names is defined (reported when not).
    fn known_informer(&mut self, v: &S<String>, informers: &HashMap<String, Location>) -> bool {
        if informers.contains_key(v.get_ref()) {
            return true;
        }
        let mut known: Vec<&String> = informers.keys().collect();
        known.sort();
        let known = if known.is_empty() {
            "no [[informer]] is defined".to_string()
        } else {
            format!("defined: {}", known.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", "))
        };
        self.error(v.span(), format!("unknown informer {:?} ({known})", v.get_ref()));
        false
    }

    /// Reports a tenant that is not defined (unless it is, with problems
    /// of its own).
    fn unknown_tenant(&mut self, tv: &S<String>, tenant_names: &HashMap<String, Location>) {
        let tenant = tv.get_ref();
        if tenant_names.contains_key(tenant) {
            return;
        }
        let mut known: Vec<&String> = tenant_names.keys().collect();
        known.sort();
        let known = if known.is_empty() {
            "no [[tenant]] is defined".to_string()
        } else {
            format!("defined: {}", quoted(&known.iter().map(|k| k.as_str()).collect::<Vec<_>>()))
        };
        self.error(tv.span(), format!("unknown tenant {tenant:?} ({known})"));
    }

    /// Counts plugin `name` (at `line`) against the `max_plugins` of the
    /// tenant `tv` names (which is defined).
    fn count_against_tenant(
        &mut self,
        tv: &S<String>,
        name: &str,
        line: usize,
        tenants: &mut HashMap<String, TenantSeen>,
    ) {
        let tenant = tv.get_ref();
        let Some(t) = tenants.get_mut(tenant) else { return };
        t.plugins.push((name.to_string(), line));
        if let Some(max) = t.config.max_plugins
            && t.plugins.len() > max
        {
            let others: Vec<String> =
                t.plugins[..t.plugins.len() - 1].iter().map(|(n, l)| format!("{n:?} at line {l}")).collect();
            let msg = format!(
                "tenant {tenant:?} allows at most {max} plugin(s) (`max_plugins` at line {}), \
                 and this is plugin number {} of it (before it: {})",
                t.lines["max_plugins"],
                t.plugins.len(),
                others.join(", ")
            );
            self.error(tv.span(), msg);
        }
    }

    /// Lowers `limits` the plugin left out to the tenant's caps, and
    /// returns the problems of those it set above them.
    fn cap_limits(
        &self,
        t: &TenantSeen,
        limits: &mut Limits,
        fuel: &Option<S<toml::Value>>,
        deadline: &Option<S<String>>,
        memory: &Option<S<toml::Value>>,
    ) -> Vec<(Range<usize>, String)> {
        let mut problems = Vec::new();
        if let Some(cap) = t.config.fuel_per_call {
            match (fuel, limits.fuel_per_call) {
                (None, f) => limits.fuel_per_call = Some(f.map_or(cap, |f| f.min(cap))),
                (Some(v), None) => {
                    problems.push((v.span(), over(t, "fuel_per_call", "\"unlimited\"".into(), cap.to_string())))
                }
                (Some(v), Some(n)) if n > cap => {
                    problems.push((v.span(), over(t, "fuel_per_call", n.to_string(), cap.to_string())))
                }
                _ => {}
            }
        }
        if let Some(cap) = t.config.deadline {
            match deadline {
                None => limits.deadline_per_call = limits.deadline_per_call.min(cap),
                Some(v) if limits.deadline_per_call > cap => problems.push((
                    v.span(),
                    over(
                        t,
                        "deadline",
                        humantime::format_duration(limits.deadline_per_call).to_string(),
                        humantime::format_duration(cap).to_string(),
                    ),
                )),
                _ => {}
            }
        }
        if let Some(cap) = t.config.memory {
            match memory {
                None => limits.memory_bytes = limits.memory_bytes.min(cap),
                Some(v) if limits.memory_bytes > cap => problems.push((
                    v.span(),
                    over(
                        t,
                        "memory",
                        crate::app::fmt_size(limits.memory_bytes as u64),
                        crate::app::fmt_size(cap as u64),
                    ),
                )),
                _ => {}
            }
        }
        problems
    }

    fn plugin(
        &mut self,
        r: RawPlugin,
        informers: &HashMap<String, Location>,
        tenant_names: &HashMap<String, Location>,
        tenants: &mut HashMap<String, TenantSeen>,
        names: &mut HashMap<String, Location>,
    ) -> Option<PluginConfig> {
        let before = self.problems.len();
        let location = self.location(r.name.span().start);
        self.name(&r.name, "plugin", names);
        let wasm = self.wasm_file(&r.wasm);
        self.known_informer(&r.informer, informers);
        let resync = r.resync.as_ref().and_then(|v| self.duration(v, "resync"));
        if let (Some(d), Some(v)) = (resync, &r.resync)
            && !d.is_zero()
            && d < crate::informer::MINIMUM_RESYNC_PERIOD
        {
            self.error(
                v.span(),
                format!("`resync` must be 0s or at least {:?}", crate::informer::MINIMUM_RESYNC_PERIOD),
            );
        }
        let mut limits = Limits::default();
        if let Some(d) = r.deadline.as_ref().and_then(|v| self.deadline(v)) {
            limits.deadline_per_call = d;
        }
        if let Some(f) = r.fuel_per_call.as_ref().and_then(|v| self.fuel(v)) {
            limits.fuel_per_call = f;
        }
        if let Some(m) = r.memory.as_ref().and_then(|v| self.size(v, "memory")) {
            limits.memory_bytes = m;
        }
        let mut max_pending = r.max_pending.as_ref().and_then(|v| self.count(v, "max_pending"));
        if let Some(tv) = &r.tenant {
            let tenant = tv.get_ref();
            if tenants.contains_key(tenant) {
                self.count_against_tenant(tv, r.name.get_ref(), location.line, tenants);
                let t = &tenants[tenant];
                let mut problems = self.cap_limits(t, &mut limits, &r.fuel_per_call, &r.deadline, &r.memory);
                if let Some(cap) = t.config.max_pending {
                    match (&r.max_pending, max_pending) {
                        (None, _) => max_pending = Some(cap),
                        (Some(v), Some(n)) if n > cap => {
                            problems.push((v.span(), over(t, "max_pending", n.to_string(), cap.to_string())))
                        }
                        _ => {}
                    }
                }
                for (span, msg) in problems {
                    self.error(span, msg);
                }
            } else {
                self.unknown_tenant(tv, tenant_names);
            }
        }
        let on_swap = match r.on_swap.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "continue")) => OnSwap::Continue,
            Some((_, "replay")) => OnSwap::Replay,
            Some((v, other)) => {
                self.error(v.span(), format!("unknown on_swap {other:?}, expected \"continue\" or \"replay\""));
                OnSwap::Continue
            }
        };
        let mut grants = Grants::default();
        let mut grant_names = Vec::new();
        for g in r.grants.iter().flatten() {
            let name = g.get_ref().as_str();
            if grant_names.iter().any(|n| n == name) {
                self.error(g.span(), format!("duplicate grant {name:?}"));
                continue;
            }
            match name {
                "log" => grants.log = true,
                "cache" => grants.cache = true,
                "clocks" => grants.clocks = true,
                _ => {
                    self.error(g.span(), format!("unknown grant {name:?}, expected one of {}", quoted(GRANT_NAMES)));
                    continue;
                }
            }
            grant_names.push(name.to_string());
        }
        let on_trap = match r.on_trap.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "continue")) => OnTrap::Continue,
            Some((_, "replay")) => OnTrap::Replay,
            Some((v, other)) => {
                self.error(v.span(), format!("unknown on_trap {other:?}, expected \"continue\" or \"replay\""));
                OnTrap::Continue
            }
        };
        let idle_timeout = match &r.idle_timeout {
            None => Some(DEFAULT_IDLE_TIMEOUT),
            Some(v) => self.duration(v, "idle_timeout").filter(|d| !d.is_zero()),
        };
        let on_wake = match r.on_wake.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "init")) => OnWake::Init,
            Some((_, "replay")) => OnWake::Replay,
            Some((v, other)) => {
                self.error(v.span(), format!("unknown on_wake {other:?}, expected \"init\" or \"replay\""));
                OnWake::Init
            }
        };
        let config_json = match &r.config {
            Some(t) => serde_json::Value::Object(t.get_ref().iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
            None => serde_json::Value::Object(Default::default()),
        }
        .to_string();
        (self.problems.len() == before).then(|| PluginConfig {
            name: r.name.into_inner(),
            wasm,
            informer: r.informer.into_inner(),
            resync,
            limits,
            grants,
            grant_names,
            config_json,
            on_trap,
            idle_timeout,
            on_wake,
            tenant: r.tenant.map(|t| t.into_inner()),
            watch: r.watch.is_some_and(|w| w.into_inner()),
            on_swap,
            max_pending,
            location,
        })
    }

    fn host(&mut self, r: RawHost) -> HostSettings {
        let mut h = HostSettings::default();
        if let Some(v) = &r.metrics_addr {
            match v.get_ref().parse::<SocketAddr>() {
                Ok(a) => h.metrics_addr = Some(a),
                Err(e) => self.error(v.span(), format!("`metrics_addr`: {e} (expected e.g. \"127.0.0.1:9464\")")),
            }
        }
        if let Some(v) = &r.cache_dir {
            h.cache_dir = Some(self.path(v.get_ref()));
        }
        if let Some(v) = &r.log_format {
            match LogFormat::parse(v.get_ref()) {
                Some(f) => h.log_format = Some(f),
                None => {
                    self.error(v.span(), format!("unknown log_format {:?}, expected \"text\" or \"json\"", v.get_ref()))
                }
            }
        }
        if let Some(v) = &r.shutdown_grace {
            h.shutdown_grace = self.duration(v, "shutdown_grace");
        }
        h
    }
}

/// A limit set above its tenant's cap, for messages naming both lines.
fn over(t: &TenantSeen, key: &str, asked: String, cap: String) -> String {
    format!(
        "`{key}` = {asked} exceeds the cap of tenant {:?} ({key} = {cap} at line {}); lower it, or raise the tenant's",
        t.config.name, t.lines[key]
    )
}

fn quoted(names: &[&str]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

/// TOML to JSON; datetimes become their RFC 3339 text.
fn to_json(v: &toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => J::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

/// Parses `64MiB`, `512 KiB`, `1GB`, `4096` (bytes).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: String = num.chars().filter(|c| *c != '_').collect();
    if num.is_empty() {
        return Err(format!("invalid size {s:?} (examples: \"64MiB\", \"512KiB\", \"1GiB\")"));
    }
    let n: u128 = num.parse().map_err(|e| format!("invalid size {s:?}: {e}"))?;
    let units: BTreeMap<&str, u128> = [
        ("", 1),
        ("b", 1),
        ("kb", 1000),
        ("mb", 1000 * 1000),
        ("gb", 1000 * 1000 * 1000),
        ("kib", 1 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
    ]
    .into_iter()
    .collect();
    let unit = unit.trim().to_ascii_lowercase();
    let Some(mult) = units.get(unit.as_str()) else {
        return Err(format!("unknown size unit in {s:?}, expected B, KiB, MiB, GiB, KB, MB or GB"));
    };
    usize::try_from(n * mult).map_err(|_| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("manifests")).unwrap();
            std::fs::write(dir.path().join("a.wasm"), b"\0asm").unwrap();
            std::fs::write(dir.path().join("b.wasm"), b"\0asm").unwrap();
            Fixture { dir }
        }
        fn parse(&self, text: &str) -> Result<Config, ConfigError> {
            Config::parse(text, "host.toml", self.dir.path())
        }
        fn errors(&self, text: &str) -> Vec<String> {
            match self.parse(text) {
                Ok(_) => panic!("expected errors"),
                Err(e) => e.short_lines(),
            }
        }
    }

    const GOOD: &str = r#"
[host]
metrics_addr = "127.0.0.1:9464"
cache_dir = "cache"
log_format = "json"
shutdown_grace = "3s"

[[informer]]
name = "configmaps"
source = "manifests"
dir = "manifests"
kind = "ConfigMap"
resync = "30s"
indexers = ["app", "team"]

[[informer]]
name = "deployments"
source = "kube"
api_version = "apps/v1"
kind = "Deployment"
namespace = "default"
label_selector = "app=web"
field_selector = "metadata.name!=x"

[[plugin]]
name = "audit"
wasm = "a.wasm"
informer = "configmaps"
resync = "1m"
fuel_per_call = 5_000_000
deadline = "500ms"
memory = "32MiB"
grants = ["log", "cache"]
on_trap = "replay"
config = { required = ["app", "team"], nested = { n = 1, f = 1.5, on = true } }

[[plugin]]
name = "second"
wasm = "b.wasm"
informer = "deployments"
fuel_per_call = "unlimited"
"#;

    #[test]
    fn good_config() {
        let f = Fixture::new();
        let c = f.parse(GOOD).unwrap();
        assert_eq!(c.host.metrics_addr, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(c.host.cache_dir, Some(f.dir.path().join("cache")));
        assert_eq!(c.host.log_format, Some(LogFormat::Json));
        assert_eq!(c.host.shutdown_grace, Some(Duration::from_secs(3)));
        assert_eq!(c.informers.len(), 2);
        let cm = &c.informers[0];
        assert_eq!(cm.name, "configmaps");
        assert_eq!(cm.resync, Duration::from_secs(30));
        assert_eq!(cm.indexers, ["app", "team"]);
        assert_eq!(cm.location, Location { line: 9, column: 8 });
        let SourceConfig::Manifests(m) = &cm.source else { panic!() };
        assert_eq!(m.dir, f.dir.path().join("manifests"));
        assert_eq!(m.kind.as_deref(), Some("ConfigMap"));
        let SourceConfig::Kube(k) = &c.informers[1].source else { panic!() };
        assert_eq!((k.group.as_str(), k.version.as_str()), ("apps", "v1"));
        assert_eq!(k.kind, "Deployment");
        assert_eq!(k.field_selector.as_deref(), Some("metadata.name!=x"));

        let p = &c.plugins[0];
        assert_eq!(p.name, "audit");
        assert_eq!(p.wasm, f.dir.path().join("a.wasm"));
        assert_eq!(p.resync, Some(Duration::from_secs(60)));
        assert_eq!(p.limits.fuel_per_call, Some(5_000_000));
        assert_eq!(p.limits.deadline_per_call, Duration::from_millis(500));
        assert_eq!(p.limits.memory_bytes, 32 << 20);
        assert!(p.grants.log && p.grants.cache && !p.grants.clocks);
        assert_eq!(p.grant_names, ["log", "cache"]);
        let json: serde_json::Value = serde_json::from_str(&p.config_json).unwrap();
        assert_eq!(json, serde_json::json!({"required": ["app", "team"], "nested": {"n": 1, "f": 1.5, "on": true}}));
        let spec = p.spec();
        assert_eq!(spec.name, "audit");
        assert_eq!(spec.config_json, p.config_json);
        assert_eq!(spec.on_trap, OnTrap::Replay);

        let q = &c.plugins[1];
        assert_eq!(q.limits.fuel_per_call, None);
        assert_eq!(q.resync, None);
        assert_eq!(q.config_json, "{}");
        assert!(!q.grants.log);
    }

    #[test]
    fn kube_group_version_and_plural() {
        let f = Fixture::new();
        let c = f
            .parse(
                r#"
[[informer]]
name = "pods"
source = "kube"
version = "v1"
kind = "Pod"
resource = "pods"
"#,
            )
            .unwrap();
        let SourceConfig::Kube(k) = &c.informers[0].source else { panic!() };
        assert_eq!(k.group, "");
        assert_eq!(k.version, "v1");
        assert_eq!(k.plural.as_deref(), Some("pods"));
        assert!(c.plugins.is_empty());
        let e = f.errors("[[informer]]\nname = \"p\"\nsource = \"kube\"\nversion = \"v1\"\nkind = \"Pod\"\nresource = \"pods\"\nplural = \"pods\"\n");
        assert_eq!(e, ["host.toml:6:1: `resource` is another name for `plural`: give one of them"]);
        assert_eq!(c.host.metrics_addr, None);
    }

    #[test]
    fn kube_without_a_version_leaves_it_to_discovery() {
        let f = Fixture::new();
        let c = f
            .parse("[[informer]]\nname = \"d\"\nsource = \"kube\"\ngroup = \"apps\"\nkind = \"Deployment\"\n")
            .unwrap();
        let SourceConfig::Kube(k) = &c.informers[0].source else { panic!() };
        assert_eq!((k.group.as_str(), k.version.as_str(), k.kind.as_str()), ("apps", "", "Deployment"));
    }

    #[test]
    fn empty_config_is_valid() {
        let f = Fixture::new();
        let c = f.parse("").unwrap();
        assert!(c.informers.is_empty() && c.plugins.is_empty());
    }

    #[test]
    fn syntax_error_names_line_and_column() {
        let f = Fixture::new();
        let e = f.errors("[[informer]]\nname = \"x\nsource = 1\n");
        assert!(e[0].starts_with("host.toml:2:"), "{e:?}");
    }

    #[test]
    fn unknown_keys_in_every_table_are_all_reported() {
        let f = Fixture::new();
        let text = r#"[host]
metrics_adr = "x"

[[informer]]
name = "a"
source = "manifests"
dir = "manifests"
resyn = "1s"

[[plugin]]
name = "p"
wasm = "a.wasm"
informer = "a"
fule = 3

[tenants]
x = 1
"#;
        let e = f.errors(text);
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e[0].starts_with("host.toml:2:1: unknown field `metrics_adr`"), "{e:?}");
        assert!(e[1].starts_with("host.toml:8:1: unknown field `resyn`"), "{e:?}");
        assert!(e[2].starts_with("host.toml:14:1: unknown field `fule`"), "{e:?}");
        assert!(e[3].starts_with("host.toml:16:2: unknown section `tenants`"), "{e:?}");
    }

    #[test]
    fn semantic_errors_point_at_values() {
        let f = Fixture::new();
        let text = r#"
[[informer]]
name = "a"
source = "manifests"
dir = "nope"
resync = "soon"

[[informer]]
name = "a"
source = "etcd"

[[plugin]]
name = "p"
wasm = "missing.wasm"
informer = "b"
deadline = "5 parsecs"
memory = "lots"
fuel_per_call = -1
grants = ["log", "network"]

[[plugin]]
name = "p"
wasm = "a.wasm"
informer = "a"
"#;
        let err = f.parse(text).unwrap_err();
        let e = err.short_lines();
        let expect = [
            "host.toml:5:7: manifests directory",
            "host.toml:6:10: `resync`: invalid duration \"soon\"",
            "host.toml:9:8: duplicate informer name \"a\" (first defined at line 3)",
            "host.toml:10:10: unknown source \"etcd\"",
            "host.toml:14:8: wasm file",
            "host.toml:15:12: unknown informer \"b\" (defined: \"a\")",
            "host.toml:16:12: `deadline`: invalid duration \"5 parsecs\"",
            "host.toml:17:10: `memory`: invalid size \"lots\"",
            "host.toml:18:17: `fuel_per_call` must be a positive integer",
            "host.toml:19:18: unknown grant \"network\"",
            "host.toml:22:8: duplicate plugin name \"p\" (first defined at line 13)",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
        assert!(e[0].contains("does not exist"));
        assert!(e[4].contains("missing.wasm does not exist"));
        // The full rendering shows the line and a caret under the value.
        let text = err.to_string();
        assert!(text.contains("15 | informer = \"b\"\n   |            ^^^"), "{text}");
        assert!(text.ends_with("host.toml has 11 problems"), "{text}");
    }

    #[test]
    fn source_specific_keys() {
        let f = Fixture::new();
        let e = f.errors(
            r#"
[[informer]]
name = "m"
source = "manifests"
field_selector = "a=b"

[[informer]]
name = "k"
source = "kube"
dir = "manifests"
api_version = "v1"
version = "v1"
"#,
        );
        let expect = [
            "host.toml:4:10: source = \"manifests\" needs `dir`",
            "host.toml:5:18: `field_selector` is only valid with source = \"kube\"",
            "host.toml:9:10: source = \"kube\" needs `kind`",
            "host.toml:10:7: `dir` is only valid with source = \"manifests\"",
            "host.toml:11:15: give either `api_version` or `group` and `version`, not both",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn wrong_types_and_shapes() {
        let f = Fixture::new();
        let e = f.errors(
            r#"
informer = "x"

[[plugin]]
name = 3
wasm = "a.wasm"
informer = "x"
"#,
        );
        assert_eq!(e.len(), 2, "{e:#?}");
        assert!(e[0].starts_with("host.toml:2:12: `informer` must be an array of tables"), "{e:?}");
        assert!(e[1].starts_with("host.toml:5:8: invalid type: integer `3`, expected a string"), "{e:?}");
    }

    #[test]
    fn missing_required_keys() {
        let f = Fixture::new();
        let e = f.errors("[[plugin]]\nname = \"p\"\nwasm = \"a.wasm\"\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("host.toml:1:1: missing field `informer`"), "{e:?}");
    }

    #[test]
    fn host_values() {
        let f = Fixture::new();
        let e = f.errors("[host]\nmetrics_addr = \"localhost\"\nlog_format = \"xml\"\nshutdown_grace = \"x\"\n");
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].starts_with("host.toml:2:16: `metrics_addr`"), "{e:?}");
        assert!(e[1].starts_with("host.toml:3:14: unknown log_format \"xml\""), "{e:?}");
        assert!(e[2].starts_with("host.toml:4:18: `shutdown_grace`: invalid duration"), "{e:?}");
    }

    #[test]
    fn bad_label_selector() {
        let f = Fixture::new();
        let e = f.errors(
            "[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\nlabel_selector = \"app in (\"\n",
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("host.toml:5:18: `label_selector`: invalid label selector \"app in (\""), "{e:?}");
    }

    #[test]
    fn indexer_problems() {
        let f = Fixture::new();
        let e = f.errors(
            "[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\nindexers = [\"app\", \"app\", \"namespace\", \"\"]\n",
        );
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].contains("duplicate indexer \"app\""), "{e:?}");
        assert!(e[1].contains("the `namespace` index is built in"), "{e:?}");
        assert!(e[2].contains("must not be empty"), "{e:?}");
    }

    #[test]
    fn strip_names_what_it_drops_or_is_refused_at_its_value() {
        let f = Fixture::new();
        let base = "[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\n";
        let c =
            Config::parse(&format!("{base}strip = [\"managed-fields\"]\nfifo = \"real\"\n"), "host.toml", f.dir.path())
                .unwrap();
        assert_eq!(c.informers[0].strip, crate::informer::Strip { managed_fields: true, last_applied: false });
        assert_eq!(c.informers[0].fifo, crate::informer::FifoKind::Real);
        let e = f.errors(&format!("{base}fifo = \"fast\"\n"));
        assert!(e[0].starts_with("host.toml:5:8: unknown fifo \"fast\", expected \"delta\" or \"real\""), "{e:?}");
        let e = f.errors(&format!("{base}strip = [\"last-applied\", \"status\"]\n"));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with(
                "host.toml:5:26: cannot strip \"status\": `strip` takes \"managed-fields\" and \"last-applied\""
            ),
            "{e:?}"
        );
    }

    #[test]
    fn watch_list_is_a_kube_informer_setting() {
        let f = Fixture::new();
        let kube = "[[informer]]\nname = \"a\"\nsource = \"kube\"\napi_version = \"v1\"\nkind = \"Pod\"\n";
        let watch_list = |extra: &str| {
            let c = Config::parse(&format!("{kube}{extra}"), "host.toml", f.dir.path()).unwrap();
            let SourceConfig::Kube(k) = &c.informers[0].source else { panic!("kube") };
            k.watch_list
        };
        assert!(watch_list(""), "on by default, as client-go >= 1.35");
        assert!(!watch_list("watch_list = false\n"));
        let e =
            f.errors("[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\nwatch_list = true\n");
        assert!(e[0].starts_with("host.toml:5:14: `watch_list` is only valid with source = \"kube\""), "{e:?}");
    }

    #[test]
    fn load_reads_files_relative_to_the_config() {
        let f = Fixture::new();
        let path = f.dir.path().join("host.toml");
        std::fs::write(&path, GOOD).unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(c.plugins[0].wasm, f.dir.path().join("a.wasm"));
        let missing = Config::load(f.dir.path().join("nope.toml")).unwrap_err();
        assert_eq!(missing.problems.len(), 1);
        assert!(missing.to_string().contains("nope.toml: cannot read"), "{missing}");
    }

    const TENANTS: &str = r#"
[[informer]]
name = "cms"
source = "manifests"
dir = "manifests"

[[tenant]]
name = "shop"
namespaces = ["shop", "shop-staging"]
max_plugins = 2
fuel_per_call = 1_000_000
deadline = "200ms"
memory = "32MiB"
max_pending = 500

[[tenant]]
name = "platform"
namespaces = []
cluster_scoped = true

[[plugin]]
name = "audit"
wasm = "a.wasm"
informer = "cms"
tenant = "shop"
deadline = "100ms"
watch = true
on_swap = "replay"

[[plugin]]
name = "ns-watch"
wasm = "b.wasm"
informer = "cms"
tenant = "platform"
max_pending = 10
fuel_per_call = "unlimited"

[[plugin]]
name = "free"
wasm = "b.wasm"
informer = "cms"
"#;

    #[test]
    fn tenants_and_effective_limits() {
        let f = Fixture::new();
        let c = f.parse(TENANTS).unwrap();
        assert_eq!(c.tenants.len(), 2);
        let shop = c.tenant("shop").unwrap();
        assert_eq!(shop.namespaces, ["shop", "shop-staging"]);
        assert!(!shop.cluster_scoped);
        assert_eq!(shop.max_plugins, Some(2));
        assert_eq!(shop.location, Location { line: 8, column: 8 });
        assert!(shop.sees(Some("shop")) && !shop.sees(Some("other")) && !shop.sees(None));
        let platform = c.tenant("platform").unwrap();
        assert!(platform.sees(None) && !platform.sees(Some("shop")));
        let vis = shop.visibility();
        let obj = |json: &str| Object::from_json(json).unwrap();
        assert!(vis(&obj(r#"{"metadata":{"name":"a","namespace":"shop"}}"#)));
        assert!(!vis(&obj(r#"{"metadata":{"name":"a","namespace":"bank"}}"#)));
        assert!(!vis(&obj(r#"{"metadata":{"name":"shop"}}"#)));
        assert!(platform.visibility()(&obj(r#"{"metadata":{"name":"shop"}}"#)));

        // Its own deadline (stricter); the tenant's fuel, memory and pending cap.
        let audit = &c.plugins[0];
        assert_eq!(audit.tenant.as_deref(), Some("shop"));
        assert!(audit.watch);
        assert_eq!(audit.on_swap, OnSwap::Replay);
        assert_eq!(audit.limits.deadline_per_call, Duration::from_millis(100));
        assert_eq!(audit.limits.fuel_per_call, Some(1_000_000));
        assert_eq!(audit.limits.memory_bytes, 32 << 20);
        assert_eq!(audit.max_pending, Some(500));
        assert_eq!(audit.spec().tenant.as_deref(), Some("shop"));
        // A tenant without caps: the plugin's own settings.
        let ns = &c.plugins[1];
        assert_eq!(ns.limits.fuel_per_call, None);
        assert_eq!(ns.max_pending, Some(10));
        assert_eq!(ns.on_swap, OnSwap::Continue);
        assert!(!ns.watch);
        let free = &c.plugins[2];
        assert_eq!((free.tenant.as_deref(), free.max_pending), (None, None));
        assert_eq!(free.limits, Limits::default());
        assert!(c.admin.is_none());

        // What needs a reload.
        let mut changed = audit.clone();
        assert!(audit.changed_keys(&changed).is_empty());
        changed.wasm = "elsewhere.wasm".into();
        changed.watch = false;
        changed.location = Location::default();
        assert!(audit.changed_keys(&changed).is_empty());
        changed.limits.memory_bytes = 1;
        changed.grants.log = true;
        assert_eq!(audit.changed_keys(&changed), ["limits", "grants"]);
    }

    #[test]
    fn tenant_problems_name_both_lines() {
        let f = Fixture::new();
        let text = TENANTS.replace("tenant = \"platform\"", "tenant = \"platfrom\"").replace(
            "deadline = \"100ms\"",
            "deadline = \"2s\"\nmemory = \"64MiB\"\nmax_pending = 501\nfuel_per_call = \"unlimited\"",
        ) + "\n[[plugin]]\nname = \"b\"\nwasm = \"a.wasm\"\ninformer = \"cms\"\ntenant = \"shop\"\n\n\
               [[plugin]]\nname = \"c\"\nwasm = \"a.wasm\"\ninformer = \"cms\"\ntenant = \"shop\"\n";
        let e = f.errors(&text);
        let expect = [
            "host.toml:26:12: `deadline` = 2s exceeds the cap of tenant \"shop\" (deadline = 200ms at line 12)",
            "host.toml:27:10: `memory` = 64 MiB exceeds the cap of tenant \"shop\" (memory = 32 MiB at line 13)",
            "host.toml:28:15: `max_pending` = 501 exceeds the cap of tenant \"shop\" (max_pending = 500 at line 14)",
            "host.toml:29:17: `fuel_per_call` = \"unlimited\" exceeds the cap of tenant \"shop\" (fuel_per_call = 1000000 at line 11)",
            "host.toml:37:10: unknown tenant \"platfrom\" (defined: \"platform\", \"shop\")",
            "host.toml:56:10: tenant \"shop\" allows at most 2 plugin(s) (`max_plugins` at line 10), and this is plugin number 3 of it (before it: \"audit\" at line 22, \"b\" at line 47)",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn tenant_values() {
        let f = Fixture::new();
        let e = f.errors(
            r#"
[[tenant]]
name = "a"
namespaces = ["Shop", "ok", "ok", "-x"]
max_plugins = 0
memory = "lots"
deadline = "0s"
max_pending = -3

[[tenant]]
name = "a"
namespaces = []

[[tenant]]
name = "c"
namespace = ["x"]
"#,
        );
        let expect = [
            "host.toml:4:15: namespace \"Shop\" may contain only lowercase letters, digits and '-'",
            "host.toml:4:29: duplicate namespace \"ok\"",
            "host.toml:4:35: namespace \"-x\" must start and end with a letter or digit",
            "host.toml:5:15: `max_plugins` must be a positive integer",
            "host.toml:6:10: `memory`: invalid size \"lots\"",
            "host.toml:7:12: `deadline` must be greater than zero",
            "host.toml:8:15: `max_pending` must be a positive integer",
            "host.toml:11:8: duplicate tenant name \"a\" (first defined at line 3)",
            "host.toml:12:14: the tenant would see no objects",
            // The misspelt key is unknown, and the right one missing.
            "host.toml:14:1: missing field `namespaces`",
            "host.toml:16:1: unknown field `namespace`",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn plugin_swap_keys() {
        let f = Fixture::new();
        let e = f.errors(
            "[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\n\n\
             [[plugin]]\nname = \"p\"\nwasm = \"a.wasm\"\ninformer = \"a\"\non_swap = \"later\"\nwatch = \"yes\"\n",
        );
        // The type error does not hide the other problems of the table.
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("host.toml:10:11: unknown on_swap \"later\""), "{e:?}");
        assert!(e[1].starts_with("host.toml:11:9: invalid type: string \"yes\", expected a boolean"), "{e:?}");
        let e = f.errors(
            "[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\n\n\
             [[plugin]]\nname = \"p\"\nwasm = \"a.wasm\"\ninformer = \"a\"\non_swap = \"later\"\nmax_pending = 0\ntenant = \"t\"\n",
        );
        let expect = [
            "host.toml:10:11: unknown on_swap \"later\", expected \"continue\" or \"replay\"",
            "host.toml:11:15: `max_pending` must be a positive integer",
            "host.toml:12:10: unknown tenant \"t\" (no [[tenant]] is defined)",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn admin_settings() {
        let f = Fixture::new();
        std::fs::write(f.dir.path().join("token"), "s3cret\n").unwrap();
        let c = f.parse("[admin]\ntoken_file = \"token\"\n").unwrap();
        let a = c.admin.unwrap();
        assert_eq!(a.addr, DEFAULT_ADMIN_ADDR.parse().unwrap());
        assert_eq!(a.token.expose(), "s3cret");
        assert!(!format!("{a:?}").contains("s3cret"));
        assert_eq!(a.token_source, format!("token_file {}", f.dir.path().join("token").display()));
        assert_eq!(a.max_upload, crate::admin_api::DEFAULT_MAX_UPLOAD);
        assert_eq!(a.location, Location { line: 1, column: 2 });

        // SAFETY: tests in this module do not read this variable concurrently.
        unsafe { std::env::set_var("INFORMER_HOST_TEST_ADMIN_TOKEN", "from-env") };
        let c = f
            .parse(
                "[admin]\naddr = \"0.0.0.0:9000\"\nallow_remote = true\ntoken_env = \"INFORMER_HOST_TEST_ADMIN_TOKEN\"\nmax_upload = \"1MiB\"\n",
            )
            .unwrap();
        let a = c.admin.unwrap();
        assert_eq!(a.addr, "0.0.0.0:9000".parse().unwrap());
        assert_eq!((a.token.expose(), a.max_upload), ("from-env", 1 << 20));
        assert_eq!(a.token_source, "token_env INFORMER_HOST_TEST_ADMIN_TOKEN");
        assert!(a.wasm_dirs.is_empty());

        std::fs::create_dir(f.dir.path().join("wasm")).unwrap();
        let c = f
            .parse(
                "[admin]
token_file = \"token\"\nwasm_dirs = [\"wasm\"]\n",
            )
            .unwrap();
        assert_eq!(c.admin.unwrap().wasm_dirs, [f.dir.path().join("wasm")]);
    }

    #[test]
    fn deadlines_beyond_the_maximum_are_refused() {
        // Both used to be accepted: the first made the load panic
        // (`deadline * 10` overflows a Duration), the second enforced about
        // 0.8 s (its nanoseconds overflow the epoch tick count).
        let f = Fixture::new();
        let text = r#"[[informer]]
name = "cms"
source = "manifests"
dir = "manifests"

[[tenant]]
name = "shop"
namespaces = ["shop"]
deadline = "36893488147419104s"

[[plugin]]
name = "p"
wasm = "a.wasm"
informer = "cms"
deadline = "500000000000y"

[[plugin]]
name = "q"
wasm = "a.wasm"
informer = "cms"
deadline = "36893488147419104s"

[[plugin]]
name = "r"
wasm = "a.wasm"
informer = "cms"
deadline = "1h"
"#;
        let e = f.errors(text);
        let expect = [
            "host.toml:9:12: `deadline` \"36893488147419104s\" is longer than the maximum of 1h",
            "host.toml:15:12: `deadline` \"500000000000y\" is longer than the maximum of 1h",
            "host.toml:21:12: `deadline` \"36893488147419104s\" is longer than the maximum of 1h",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
        // The maximum itself is fine.
        let c = f.parse(&text.replace("500000000000y", "3600s").replace("36893488147419104s", "59m")).unwrap();
        assert_eq!(c.plugins[0].limits.deadline_per_call, MAX_DEADLINE);
        assert_eq!(c.tenants[0].deadline, Some(Duration::from_secs(59 * 60)));
    }

    #[test]
    fn every_wrong_field_of_a_table_is_reported() {
        // A wrong type used to stop the table's deserialization at the
        // first bad field: its other fields were never looked at.
        let f = Fixture::new();
        let e = f.errors(
            r#"[[informer]]
name = "cms"
source = "manifests"
dir = "manifests"
resync = 30
indexers = "app"
kind = "ConfigMap"
label_selectr = "app=web"

[[plugin]]
name = "p"
wasm = "a.wasm"
informer = "cms"
watch = "yes"
fuel = 3
grants = "log"
on_swap = "later"

[host]
metrics_addr = 9464
shutdown_grace = 5
log_fromat = "json"
"#,
        );
        let expect = [
            "host.toml:5:10: invalid type: integer `30`, expected a string",
            "host.toml:6:12: invalid type: string \"app\", expected a sequence",
            "host.toml:8:1: unknown field `label_selectr`, expected one of `name`, `source`, `dir`",
            "host.toml:14:9: invalid type: string \"yes\", expected a boolean",
            "host.toml:15:1: unknown field `fuel`, expected one of `name`, `wasm`, `informer`",
            "host.toml:16:10: invalid type: string \"log\", expected a sequence",
            // With the table's types fixed or not, its values are checked too.
            "host.toml:17:11: unknown on_swap \"later\"",
            "host.toml:20:16: invalid type: integer `9464`, expected a string",
            "host.toml:21:18: invalid type: integer `5`, expected a string",
            "host.toml:22:1: unknown field `log_fromat`, expected one of `metrics_addr`",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
        // Every missing key, not just the first; a key of the wrong type is
        // not also reported missing.
        let e = f.errors("[[plugin]]\nname = 1\n\n[[tenant]]\nname = \"t\"\n");
        let expect = [
            "host.toml:1:1: missing field `wasm`",
            "host.toml:1:1: missing field `informer`",
            "host.toml:2:8: invalid type: integer `1`, expected a string",
            "host.toml:4:1: missing field `namespaces`",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn admin_problems() {
        let f = Fixture::new();
        std::fs::write(f.dir.path().join("empty"), "\n").unwrap();
        let e = f.errors("[admin]\naddr = \"0.0.0.0:8081\"\n");
        let expect = [
            "host.toml:1:2: `[admin]` needs `token_file` or `token_env`",
            "host.toml:2:8: `addr` 0.0.0.0:8081 is not a loopback address; the admin API loads code into this process, so serving it beyond this machine needs `allow_remote = true`",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
        let e = f.errors("[admin]\ntoken_file = \"nope.token\"\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("host.toml:2:14: `token_file`: cannot read "), "{e:?}");
        assert!(e[0].contains("nope.token"), "{e:?}");
        let e = f.errors("[admin]\ntoken_env = \"INFORMER_HOST_TEST_SURELY_UNSET\"\n");
        assert_eq!(e, ["host.toml:2:13: `token_env`: environment variable INFORMER_HOST_TEST_SURELY_UNSET is not set"],);
        let e =
            f.errors("[admin]\ntoken_file = \"empty\"\ntoken_env = \"X\"\naddr = \"nowhere\"\nmax_upload = \"big\"\n");
        let expect = [
            "host.toml:3:13: give either `token_file` or `token_env`, not both",
            "host.toml:4:8: `addr`: invalid socket address syntax",
            "host.toml:5:14: `max_upload`: invalid size \"big\"",
        ];
        assert_eq!(e.len(), expect.len(), "{e:#?}");
        for (got, want) in e.iter().zip(expect) {
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
        let e = f.errors("[admin]\ntoken_file = \"empty\"\n");
        assert!(e[0].starts_with("host.toml:2:14: `token_file`") && e[0].ends_with("is empty"), "{e:?}");
        let e = f.errors("[admin]\ntoken_file = \"empty\"\nwasm_dirs = [\"no-such-dir\", \"empty\"]\n");
        assert!(e.iter().any(|e| e.starts_with("host.toml:3:14: `wasm_dirs`: cannot read ")), "{e:?}");
        assert!(
            e.iter().any(|e| e.starts_with("host.toml:3:29: `wasm_dirs`: ") && e.ends_with("is not a directory")),
            "{e:?}"
        );
        let e = f.errors("admin = 3\n");
        assert!(e[0].starts_with("host.toml:1:9: `admin` must be a table"), "{e:?}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1_024 kib"), Ok(1 << 20));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("3 parsecs").is_err());
    }
}
