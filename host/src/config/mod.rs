//! The host's TOML configuration: `[[informer]]`, `[[plugin]]`,
//! `[[controller]]` (see [`controller`]), `[[tenant]]`, `[host]` and
//! `[admin]`.
//!
//! Each section has its own module (`informer`, `plugin`, [`controller`],
//! `tenant`, `settings` for `[host]` and `[admin]`, [`plugin_resources`]):
//! its validated type, its raw shape and the checks between them. This one
//! holds what they share: reading a document table by table ([`Config`])
//! and reporting problems; `values` reads the typed values (durations,
//! sizes, fuel, names, grants) with their spans.
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
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

/// `idle_timeout` of a plugin that does not set it: its instance is dropped
/// after this long without a call, and made again on the next.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

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

// One module per section of the file: its validated type, its raw shape
// and the `Cx` methods that check one into the other. They come after
// `read_table!`, which they use.
pub mod controller;
mod informer;
mod plugin;
pub mod plugin_resources;
mod settings;
mod tenant;
mod values;

use controller::RawController;
pub use controller::{CONTROLLER_GRANT_NAMES, ControllerConfig, RULE_VERBS};
use informer::RawInformer;
pub use informer::{InformerConfig, KubeConfig, ManifestsConfig, SourceConfig};
pub use plugin::PluginConfig;
use plugin::RawPlugin;
pub use plugin_resources::PluginResourcesConfig;
use plugin_resources::RawPluginResources;
pub use settings::{AdminSettings, HostSettings, LogFormat, Secret};
use settings::{RawAdmin, RawHost};
pub use tenant::TenantConfig;
use tenant::{RawTenant, TenantSeen};
pub use values::parse_size;
use values::{quoted, to_json};

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
}

#[cfg(test)]
mod tests;
