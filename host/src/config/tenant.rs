//! `[[tenant]]`: the namespaces a tenant's plugins see and the caps on
//! each of its plugins' limits, and how a plugin's limits are checked
//! against its tenant's (the stricter wins; asking above a cap is an error
//! naming both lines, never silently clamped).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use super::controller::RawRule;
use super::{Cx, Fields, Location, S, quoted};
use crate::controller::WriteRule;
use crate::informer::Object;
use crate::plugin::{Limits, Visibility};

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

pub(super) struct RawTenant {
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
    pub(super) fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(
            f,
            RawTenant,
            [name, namespaces],
            [cluster_scoped, max_plugins, fuel_per_call, deadline, memory, max_pending, rules, impersonate]
        )
    }
}

/// A tenant as plugins see it while the config is checked: its settings and
/// where each limit is written, for messages naming both lines.
pub(super) struct TenantSeen {
    pub(super) config: TenantConfig,
    /// Line of each limit key that is set.
    pub(super) lines: HashMap<&'static str, usize>,
    /// The plugins that name it so far (name, line).
    pub(super) plugins: Vec<(String, usize)>,
}

/// A limit set above its tenant's cap, for messages naming both lines.
pub(super) fn over(t: &TenantSeen, key: &str, asked: String, cap: String) -> String {
    format!(
        "`{key}` = {asked} exceeds the cap of tenant {:?} ({key} = {cap} at line {}); lower it, or raise the tenant's",
        t.config.name, t.lines[key]
    )
}

impl<'a> Cx<'a> {
    pub(super) fn tenant(&mut self, r: RawTenant, names: &mut HashMap<String, Location>) -> Option<TenantSeen> {
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

    /// Reports a tenant that is not defined (unless it is, with problems
    /// of its own).
    pub(super) fn unknown_tenant(&mut self, tv: &S<String>, tenant_names: &HashMap<String, Location>) {
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
    pub(super) fn count_against_tenant(
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
    pub(super) fn cap_limits(
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
}
