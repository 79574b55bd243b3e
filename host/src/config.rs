//! The host's TOML configuration: `[[informer]]`, `[[plugin]]` and `[host]`.
//!
//! This module owns the file format, its defaults and its validation. Every
//! problem names the file, line and column of the offending key or value,
//! and all problems are collected before reporting, not just the first.
//! Paths (`dir`, `wasm`, `cache_dir`) are relative to the config file.
//!
//! ```toml
//! [host]
//! metrics_addr = "127.0.0.1:9464"
//!
//! [[informer]]
//! name = "configmaps"
//! source = "manifests"
//! dir = "manifests"
//! kind = "ConfigMap"
//! resync = "30s"
//! indexers = ["app"]
//!
//! [[plugin]]
//! name = "label-audit"
//! wasm = "plugins/label-audit.wasm"
//! informer = "configmaps"
//! deadline = "500ms"
//! memory = "64MiB"
//! grants = ["log"]
//! config = { required = ["app", "team"] }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use crate::plugin::{Grants, Limits, OnTrap, PluginSpec};

/// Names of the capabilities a plugin can be granted.
pub const GRANT_NAMES: &[&str] = &["log", "cache", "clocks"];

/// The default grace period for in-flight calls at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The config file, as given.
    pub file: PathBuf,
    /// The directory relative paths are resolved against.
    pub base_dir: PathBuf,
    pub host: HostSettings,
    pub informers: Vec<InformerConfig>,
    pub plugins: Vec<PluginConfig>,
}

/// `[host]`: process-wide settings (command-line flags override them).
#[derive(Debug, Clone, Default)]
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
    /// Where the informer is defined (its `name`).
    pub location: Location,
}

/// Where an informer's objects come from.
#[derive(Debug, Clone)]
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
        spec
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

    /// The `file:line:column` of a location in this config, for messages.
    pub fn at(&self, loc: Location) -> String {
        format!("{}:{}", self.file.display(), loc)
    }
}

// ---------------------------------------------------------------------------
// Raw, serde-facing shapes. Spans point messages at keys and values.

type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
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
    #[serde(alias = "resource")]
    plural: Option<S<String>>,
    field_selector: Option<S<String>>,
    // informer
    resync: Option<S<String>>,
    indexers: Option<Vec<S<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
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
    config: Option<S<toml::Table>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    metrics_addr: Option<S<String>>,
    cache_dir: Option<S<String>>,
    log_format: Option<S<String>>,
    shutdown_grace: Option<S<String>>,
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

    fn path(&self, v: &str) -> PathBuf {
        let p = Path::new(v);
        if p.is_absolute() { p.to_path_buf() } else { self.base.join(p) }
    }

    fn document(&mut self, file: &Path) -> Config {
        let mut config = Config {
            file: file.to_path_buf(),
            base_dir: self.base.to_path_buf(),
            host: HostSettings::default(),
            informers: Vec::new(),
            plugins: Vec::new(),
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
        for (key, value) in root.into_inner() {
            let section = key.get_ref().to_string();
            match section.as_str() {
                "informer" => {
                    for v in self.array_of_tables(value, "informer") {
                        let span = v.span();
                        match RawInformer::deserialize(ValueDeserializer::from(v)) {
                            Ok(r) => raw_informers.push(r),
                            Err(e) => self.toml_error(&e, span),
                        }
                    }
                }
                "plugin" => {
                    for v in self.array_of_tables(value, "plugin") {
                        let span = v.span();
                        match RawPlugin::deserialize(ValueDeserializer::from(v)) {
                            Ok(r) => raw_plugins.push(r),
                            Err(e) => self.toml_error(&e, span),
                        }
                    }
                }
                "host" => {
                    let span = value.span();
                    if !value.get_ref().is_table() {
                        self.error(span, "`host` must be a table: write `[host]`");
                        continue;
                    }
                    match RawHost::deserialize(ValueDeserializer::from(value)) {
                        Ok(r) => config.host = self.host(r),
                        Err(e) => self.toml_error(&e, span),
                    }
                }
                other => self.error(
                    key.span(),
                    format!("unknown section `{other}`, expected one of `[[informer]]`, `[[plugin]]`, `[host]`"),
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
        let mut plugin_names: HashMap<String, Location> = HashMap::new();
        for r in raw_plugins {
            if let Some(p) = self.plugin(r, &informer_names, &mut plugin_names) {
                config.plugins.push(p);
            }
        }
        config.informers.sort_by_key(|i| (i.location.line, i.location.column));
        config.plugins.sort_by_key(|p| (p.location.line, p.location.column));
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

    fn name(&mut self, v: &S<String>, what: &str, seen: &mut HashMap<String, Location>) -> bool {
        let name = v.get_ref();
        if name.trim().is_empty() {
            self.error(v.span(), format!("{what} name must not be empty"));
            return false;
        }
        if name.chars().any(|c| c.is_control()) {
            self.error(v.span(), format!("{what} name {name:?} contains control characters"));
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
                let version = version.unwrap_or_else(|| {
                    self.error(
                        r.source.span(),
                        "source = \"kube\" needs `version` (and `group` unless core) or `api_version`",
                    );
                    String::new()
                });
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
            location,
        })
    }

    fn plugin(
        &mut self,
        r: RawPlugin,
        informers: &HashMap<String, Location>,
        names: &mut HashMap<String, Location>,
    ) -> Option<PluginConfig> {
        let before = self.problems.len();
        let location = self.location(r.name.span().start);
        self.name(&r.name, "plugin", names);
        let wasm = self.path(r.wasm.get_ref());
        if !wasm.is_file() {
            let what = if wasm.exists() { "is not a file" } else { "does not exist" };
            let hint = if r.wasm.get_ref().contains("target/plugins") {
                " (build the plugins first: `cargo run -p xtask -- demo` does)"
            } else {
                ""
            };
            self.error(r.wasm.span(), format!("wasm file {} {what}{hint}", wasm.display()));
        }
        if !informers.contains_key(r.informer.get_ref()) {
            let mut known: Vec<&String> = informers.keys().collect();
            known.sort();
            let known = if known.is_empty() {
                "no [[informer]] is defined".to_string()
            } else {
                format!("defined: {}", known.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", "))
            };
            self.error(r.informer.span(), format!("unknown informer {:?} ({known})", r.informer.get_ref()));
        }
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
        if let Some(v) = &r.deadline
            && let Some(d) = self.duration(v, "deadline")
        {
            if d.is_zero() {
                self.error(v.span(), "`deadline` must be greater than zero");
            }
            limits.deadline_per_call = d;
        }
        if let Some(v) = &r.fuel_per_call {
            match v.get_ref() {
                toml::Value::Integer(n) if *n > 0 => limits.fuel_per_call = Some(*n as u64),
                toml::Value::String(s) if s == "unlimited" => limits.fuel_per_call = None,
                _ => self.error(v.span(), "`fuel_per_call` must be a positive integer or \"unlimited\""),
            }
        }
        if let Some(v) = &r.memory {
            match v.get_ref() {
                toml::Value::Integer(n) if *n > 0 => limits.memory_bytes = *n as usize,
                toml::Value::String(s) => match parse_size(s) {
                    Ok(n) if n > 0 => limits.memory_bytes = n,
                    Ok(_) => self.error(v.span(), "`memory` must be greater than zero"),
                    Err(e) => self.error(v.span(), format!("`memory`: {e}")),
                },
                _ => self.error(v.span(), "`memory` must be a size such as \"64MiB\" or a number of bytes"),
            }
        }
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
        assert_eq!(c.host.metrics_addr, None);
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

[tenant]
x = 1
"#;
        let e = f.errors(text);
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e[0].starts_with("host.toml:2:1: unknown field `metrics_adr`"), "{e:?}");
        assert!(e[1].starts_with("host.toml:8:1: unknown field `resyn`"), "{e:?}");
        assert!(e[2].starts_with("host.toml:14:1: unknown field `fule`"), "{e:?}");
        assert!(e[3].starts_with("host.toml:16:2: unknown section `tenant`"), "{e:?}");
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
