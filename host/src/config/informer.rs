//! `[[informer]]`: one list+watch and its cache, fed by a directory of
//! manifests or by an API server, with its resync period, indexers, what is
//! stripped before the cache and the FIFO it uses.
//!
//! This module owns the section's shape and checks; names shared with other
//! sections (`informer = "..."` in a plugin or controller) are checked
//! through [`Cx::known_informer`].

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use super::{Cx, Fields, Location, S};

/// One `[[informer]]`.
#[derive(Debug, Clone)]
pub struct InformerConfig {
    pub name: String,
    pub source: SourceConfig,
    /// Default resync period of its handlers (zero: none).
    pub resync: Duration,
    /// Label keys to index by; each index is named after its key.
    pub indexers: Vec<String>,
    /// Field indexes by name: the JSONPath queries whose string results
    /// index each object (`field_indexers`).
    pub field_indexers: BTreeMap<String, Vec<String>>,
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
            && self.field_indexers == other.field_indexers
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

pub(super) struct RawInformer {
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
    field_indexers: Option<BTreeMap<String, S<Vec<S<String>>>>>,
    strip: Option<Vec<S<String>>>,
    fifo: Option<S<String>>,
    watch_list: Option<S<bool>>,
}

impl RawInformer {
    pub(super) fn read(mut f: Fields<'_, '_>) -> Option<Self> {
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
                field_indexers,
                strip,
                fifo,
                watch_list
            ]
        )
    }
}

impl<'a> Cx<'a> {
    pub(super) fn informer(&mut self, r: RawInformer, names: &mut HashMap<String, Location>) -> Option<InformerConfig> {
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
        let field_indexers = self.field_indexers(r.field_indexers.unwrap_or_default(), &indexers);
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
            field_indexers,
            strip,
            fifo,
            location,
        })
    }

    /// `field_indexers = { name = ["$.json.path", ...] }`: names apart from
    /// the built-in `namespace` and the label `indexers`, each with at
    /// least one query that parses as RFC 9535 JSONPath.
    fn field_indexers(
        &mut self,
        raw: BTreeMap<String, S<Vec<S<String>>>>,
        label_indexers: &[String],
    ) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        for (name, queries) in raw {
            if name.is_empty() {
                self.error(queries.span(), "a field indexer's name must not be empty");
            } else if name == crate::informer::NAMESPACE_INDEX {
                self.error(queries.span(), "the `namespace` index is built in; name the field indexer otherwise");
            } else if label_indexers.contains(&name) {
                self.error(queries.span(), format!("field indexer {name:?} has the name of a label indexer"));
            }
            if queries.get_ref().is_empty() {
                self.error(queries.span(), format!("field indexer {name:?} needs at least one JSONPath query"));
            }
            for q in queries.get_ref() {
                if let Err(e) = crate::informer::parse_field_path(q.get_ref()) {
                    let hint = if q.get_ref().trim_start().starts_with('$') {
                        ""
                    } else {
                        " (a query starts with `$`: \"$.spec.volumes[*].configMap.name\")"
                    };
                    self.error(
                        q.span(),
                        format!("field indexer {name:?}: invalid JSONPath {:?}: {e}{hint}", q.get_ref()),
                    );
                }
            }
            out.insert(name, queries.into_inner().into_iter().map(S::into_inner).collect());
        }
        out
    }

    /// Whether the informer `v` names is defined (reported when not).
    pub(super) fn known_informer(&mut self, v: &S<String>, informers: &HashMap<String, Location>) -> bool {
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
}
