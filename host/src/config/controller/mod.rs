//! `[[controller]]`: a controller plugin (the `controller` world) and how
//! the host runs it: its informers, grants, write rules, tenant, workqueue
//! and write limits.
//!
//! ```toml
//! [[controller]]
//! name = "reloader"
//! wasm = "plugins/reloader.wasm"
//! informer = "deployments"            # primary: its `kind` is the primary kind
//! watches = [
//!   { informer = "configmaps", map = "plugin" },            # the plugin's `map`
//!   { informer = "replicasets", map = "owner" },            # controller ownerReference (default)
//!   { informer = "services", map = { label = "app" } },     # a label naming the primary
//! ]
//! grants = ["log", "cache", "kube"]
//! rules = [
//!   { api_groups = ["apps"], kinds = ["Deployment"], verbs = ["patch"] },
//!   { api_groups = [""], kinds = ["Event"], verbs = ["create"] },
//! ]
//! tenant = "shop"                     # writes only in its namespaces
//! max_concurrent_reconciles = 2
//! qps = 5.0                           # writes per second (client-go: 5)
//! burst = 10                          # (client-go: 10)
//! timeout = "10s"                     # per write, waiting for a token included
//! dry_run = false                     # true: dryRun=All, and log what would change
//! impersonate = "system:serviceaccount:shop:reloader"
//! fuel_per_call = 100_000_000
//! deadline = "1s"
//! memory = "64MiB"
//! base_delay = "5ms"                  # per-key backoff, doubling ...
//! max_delay = "1000s"                 # ... up to this
//! retry_qps = 10.0                    # overall retry bucket
//! retry_burst = 100
//! config = { annotation = "example.com/config-hash" }
//! ```
//!
//! A rule names kinds (`Deployment`, `Deployment/status` for the status
//! subresource), API groups (`""` for the core group), verbs (`create`,
//! `update`, `patch`, `delete`, or `*`) and optionally object names. A
//! `kube` grant needs at least one rule, and rules need the `kube` grant.
//! A tenant's controllers write only in its namespaces (and cluster-scoped
//! objects only with `cluster_scoped = true`); a tenant with `rules` caps
//! what its controllers may declare: each controller rule must be within
//! one of the tenant's. A controller counts against its tenant's
//! `max_plugins`, and its limits are capped as a plugin's are.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{Cx, Fields, InformerConfig, Location, S, SourceConfig, TenantSeen, quoted, to_json};
use crate::controller::{ControllerOptions, GuardConfig, Mapping, NamespaceScope, Secondary, WriteRule};
use crate::plugin::{Grants, Limits, PluginSpec};
use crate::workqueue::ControllerRateLimiterConfig;

/// Names of the capabilities a controller can be granted.
pub const CONTROLLER_GRANT_NAMES: &[&str] = &["log", "cache", "kube", "clocks"];

/// The verbs a write rule may name (`*`: all of them).
pub const RULE_VERBS: &[&str] = &["create", "update", "patch", "delete", "*"];

/// One `[[controller]]`.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub name: String,
    /// The component file, resolved against the config file's directory.
    pub wasm: PathBuf,
    /// The primary informer: each of its objects' keys is reconciled.
    pub informer: String,
    /// The primary informer's `kind` (owner references name it).
    pub primary_kind: String,
    /// Secondary informers and how their objects map to primary keys.
    pub watches: Vec<Secondary>,
    pub grants: Grants,
    /// Granted capability names, in config order (for display).
    pub grant_names: Vec<String>,
    /// What it may write.
    pub rules: Vec<WriteRule>,
    /// The `[[tenant]]` it belongs to (`None`: it sees every object and
    /// may write in every namespace its rules allow).
    pub tenant: Option<String>,
    pub max_concurrent_reconciles: usize,
    /// Writes per second and burst.
    pub qps: f64,
    pub burst: usize,
    /// Longest a write may take.
    pub timeout: Duration,
    pub dry_run: bool,
    /// The user its writes impersonate (its own, else its tenant's).
    pub impersonate: Option<String>,
    pub limits: Limits,
    /// The `config` table as JSON text, for `init`.
    pub config_json: String,
    /// The workqueue's retry backoff.
    pub rate_limiter: ControllerRateLimiterConfig,
    /// Where the controller is defined (its `name`).
    pub location: Location,
}

impl ControllerConfig {
    /// What the plugin runtime needs to load it.
    pub fn spec(&self) -> PluginSpec {
        let mut spec = PluginSpec::new(self.name.clone(), self.wasm.clone());
        spec.config_json = self.config_json.clone();
        spec.limits = self.limits.clone();
        spec.grants = self.grants.clone();
        spec.tenant = self.tenant.clone();
        spec
    }

    /// How the runner runs it.
    pub fn options(&self) -> ControllerOptions {
        ControllerOptions {
            secondaries: self.watches.clone(),
            max_concurrent_reconciles: self.max_concurrent_reconciles,
            rate_limiter: self.rate_limiter,
            ..ControllerOptions::new(self.informer.clone(), self.primary_kind.clone())
        }
    }

    /// How its writes are checked, bounded by `tenant` (its tenant).
    pub fn guard_config(&self, tenant: Option<&super::TenantConfig>) -> GuardConfig {
        GuardConfig {
            tenant: tenant.map(|t| t.name.clone()),
            rules: self.rules.clone(),
            scope: tenant
                .map(|t| NamespaceScope { namespaces: t.namespaces.clone(), cluster_scoped: t.cluster_scoped }),
            qps: self.qps,
            burst: self.burst,
            timeout: self.timeout,
            dry_run: self.dry_run,
            impersonate: self.impersonate.clone().or_else(|| tenant.and_then(|t| t.impersonate.clone())),
            ..GuardConfig::new(self.name.clone())
        }
    }
}

/// A write rule as written in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    api_groups: Vec<S<String>>,
    kinds: Vec<S<String>>,
    verbs: Vec<S<String>>,
    #[serde(default)]
    names: Vec<S<String>>,
}

/// A `watches` entry as written in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWatch {
    informer: S<String>,
    #[serde(default)]
    map: Option<S<toml::Value>>,
}

pub(super) struct RawController {
    pub(super) name: S<String>,
    wasm: S<String>,
    informer: S<String>,
    watches: Option<Vec<S<RawWatch>>>,
    grants: Option<Vec<S<String>>>,
    rules: Option<Vec<S<RawRule>>>,
    tenant: Option<S<String>>,
    max_concurrent_reconciles: Option<S<toml::Value>>,
    qps: Option<S<toml::Value>>,
    burst: Option<S<toml::Value>>,
    timeout: Option<S<String>>,
    dry_run: Option<S<bool>>,
    impersonate: Option<S<String>>,
    fuel_per_call: Option<S<toml::Value>>,
    deadline: Option<S<String>>,
    memory: Option<S<toml::Value>>,
    config: Option<S<toml::Table>>,
    base_delay: Option<S<String>>,
    max_delay: Option<S<String>>,
    retry_qps: Option<S<toml::Value>>,
    retry_burst: Option<S<toml::Value>>,
}

impl RawController {
    pub(super) fn read(mut f: Fields<'_, '_>) -> Option<Self> {
        read_table!(
            f,
            RawController,
            [name, wasm, informer],
            [
                watches,
                grants,
                rules,
                tenant,
                max_concurrent_reconciles,
                qps,
                burst,
                timeout,
                dry_run,
                impersonate,
                fuel_per_call,
                deadline,
                memory,
                config,
                base_delay,
                max_delay,
                retry_qps,
                retry_burst
            ]
        )
    }
}

/// Whether the rule `inner` allows nothing `outer` does not.
fn within(inner: &WriteRule, outer: &WriteRule) -> bool {
    let covers = |outer: &[String], inner: &[String]| {
        outer.iter().any(|o| o == "*") || inner.iter().all(|i| i != "*" && outer.contains(i))
    };
    covers(&outer.api_groups, &inner.api_groups)
        && covers(&outer.kinds, &inner.kinds)
        && covers(&outer.verbs, &inner.verbs)
        && (outer.names.is_empty() || (!inner.names.is_empty() && inner.names.iter().all(|n| outer.names.contains(n))))
}

impl<'a> Cx<'a> {
    /// A positive number (integer or float).
    fn rate(&mut self, v: &S<toml::Value>, what: &str) -> Option<f64> {
        match v.get_ref() {
            toml::Value::Integer(n) if *n > 0 => Some(*n as f64),
            toml::Value::Float(f) if f.is_finite() && *f > 0.0 => Some(*f),
            _ => {
                self.error(v.span(), format!("`{what}` must be a positive number (per second)"));
                None
            }
        }
    }

    /// The write rules of `raw`, each list checked; `what` names where
    /// they are (`rules`).
    pub(super) fn rules(&mut self, raw: &[S<RawRule>]) -> Vec<WriteRule> {
        let mut out = Vec::new();
        for r in raw {
            let rule = r.get_ref();
            let before = self.problems.len();
            for (key, list) in [("api_groups", &rule.api_groups), ("kinds", &rule.kinds), ("verbs", &rule.verbs)] {
                if list.is_empty() {
                    self.error(r.span(), format!("`{key}` is empty, so the rule allows nothing: list at least one"));
                }
            }
            for v in &rule.verbs {
                if !RULE_VERBS.contains(&v.get_ref().as_str()) {
                    self.error(
                        v.span(),
                        format!("unknown verb {:?}, expected one of {}", v.get_ref(), quoted(RULE_VERBS)),
                    );
                }
            }
            for k in &rule.kinds {
                let kind = k.get_ref();
                let (base, sub) = kind.split_once('/').map_or((kind.as_str(), None), |(b, s)| (b, Some(s)));
                if base.is_empty() || sub.is_some_and(|s| s != "status") {
                    self.error(
                        k.span(),
                        format!("kind {kind:?}: expected a kind such as \"Deployment\", or \"Deployment/status\""),
                    );
                }
            }
            for n in &rule.names {
                if n.get_ref().is_empty() {
                    self.error(n.span(), "an object name must not be empty");
                }
            }
            if self.problems.len() == before {
                let strings = |l: &[S<String>]| l.iter().map(|s| s.get_ref().clone()).collect();
                out.push(WriteRule {
                    api_groups: strings(&rule.api_groups),
                    kinds: strings(&rule.kinds),
                    verbs: strings(&rule.verbs),
                    names: strings(&rule.names),
                });
            }
        }
        out
    }

    pub(super) fn controller(
        &mut self,
        r: RawController,
        informers: &[InformerConfig],
        informer_names: &HashMap<String, Location>,
        tenant_names: &HashMap<String, Location>,
        tenants: &mut HashMap<String, TenantSeen>,
        names: &mut HashMap<String, Location>,
    ) -> Option<ControllerConfig> {
        let before = self.problems.len();
        let location = self.location(r.name.span().start);
        self.name(&r.name, "plugin", names);
        let wasm = self.wasm_file(&r.wasm);
        let mut primary_kind = String::new();
        if self.known_informer(&r.informer, informer_names) {
            // (An informer with problems of its own is known by name only.)
            if let Some(i) = informers.iter().find(|i| &i.name == r.informer.get_ref()) {
                let kind = match &i.source {
                    SourceConfig::Manifests(m) => m.kind.clone(),
                    SourceConfig::Kube(k) => Some(k.kind.clone()),
                };
                match kind {
                    Some(k) => primary_kind = k,
                    None => self.error(
                        r.informer.span(),
                        format!(
                            "informer {:?} has no `kind` (line {}): a controller's primary informer must name \
                             the kind it reconciles",
                            i.name, i.location.line
                        ),
                    ),
                }
            }
        }
        let mut watches: Vec<Secondary> = Vec::new();
        for w in r.watches.iter().flatten() {
            let w = w.get_ref();
            if !self.known_informer(&w.informer, informer_names) {
                continue;
            }
            let informer = w.informer.get_ref();
            if informer == r.informer.get_ref() || watches.iter().any(|s| &s.informer == informer) {
                let why = if informer == r.informer.get_ref() { "is the primary informer" } else { "is watched twice" };
                self.error(w.informer.span(), format!("informer {informer:?} {why}"));
                continue;
            }
            let mapping = match w.map.as_ref().map(|m| (m, m.get_ref())) {
                None => Mapping::Owner,
                Some((_, toml::Value::String(s))) if s == "owner" => Mapping::Owner,
                Some((_, toml::Value::String(s))) if s == "plugin" => Mapping::Plugin,
                Some((_, toml::Value::Table(t)))
                    if t.len() == 1 && t.get("label").and_then(|l| l.as_str()).is_some_and(|l| !l.is_empty()) =>
                {
                    Mapping::Label(t["label"].as_str().unwrap_or_default().to_string())
                }
                Some((m, _)) => {
                    self.error(
                        m.span(),
                        "`map` must be \"owner\" (controller ownerReference), \"plugin\" (the plugin's `map`) \
                         or { label = \"<key>\" } (a label naming the primary object)",
                    );
                    continue;
                }
            };
            watches.push(Secondary { informer: informer.clone(), mapping });
        }
        let (grants, grant_names) = self.grants(r.grants.as_deref(), CONTROLLER_GRANT_NAMES);
        let rules = self.rules(r.rules.as_deref().unwrap_or_default());
        match (&r.rules, grants.kube) {
            (None, true) => {
                let span = r.grants.iter().flatten().find(|g| g.get_ref() == "kube").map(|g| g.span());
                self.error(
                    span.unwrap_or(r.name.span()),
                    "the `kube` grant needs `rules`: what the controller may write, e.g. \
                     rules = [{ api_groups = [\"apps\"], kinds = [\"Deployment\"], verbs = [\"patch\"] }]",
                );
            }
            (Some(raw), true) if raw.is_empty() => {
                self.error(r.name.span(), "the `kube` grant needs at least one rule in `rules`");
            }
            (Some(raw), false) if !raw.is_empty() => {
                self.error(raw[0].span(), "`rules` without the `kube` grant: add \"kube\" to `grants`, or remove them");
            }
            _ => {}
        }
        let count = |cx: &mut Self, v: &Option<S<toml::Value>>, what: &str, default: usize| match v {
            Some(v) => cx.count(v, what).unwrap_or(default),
            None => default,
        };
        let rate = |cx: &mut Self, v: &Option<S<toml::Value>>, what: &str, default: f64| match v {
            Some(v) => cx.rate(v, what).unwrap_or(default),
            None => default,
        };
        let duration = |cx: &mut Self, v: &Option<S<String>>, what: &str, default: Duration| match v {
            Some(v) => match cx.duration(v, what) {
                Some(d) if d.is_zero() => {
                    cx.error(v.span(), format!("`{what}` must be greater than zero"));
                    default
                }
                Some(d) => d,
                None => default,
            },
            None => default,
        };
        let guard_defaults = GuardConfig::new("");
        let limiter_defaults = ControllerRateLimiterConfig::default();
        let max_concurrent_reconciles = count(self, &r.max_concurrent_reconciles, "max_concurrent_reconciles", 1);
        let qps = rate(self, &r.qps, "qps", guard_defaults.qps);
        let burst = count(self, &r.burst, "burst", guard_defaults.burst);
        let timeout = duration(self, &r.timeout, "timeout", guard_defaults.timeout);
        let rate_limiter = ControllerRateLimiterConfig {
            base_delay: duration(self, &r.base_delay, "base_delay", limiter_defaults.base_delay),
            max_delay: duration(self, &r.max_delay, "max_delay", limiter_defaults.max_delay),
            qps: rate(self, &r.retry_qps, "retry_qps", limiter_defaults.qps),
            burst: count(self, &r.retry_burst, "retry_burst", limiter_defaults.burst),
        };
        if rate_limiter.max_delay < rate_limiter.base_delay
            && let Some(v) = r.max_delay.as_ref().or(r.base_delay.as_ref())
        {
            self.error(v.span(), "`max_delay` must be at least `base_delay`");
        }
        if let Some(v) = &r.impersonate
            && v.get_ref().trim().is_empty()
        {
            self.error(v.span(), "`impersonate` must name a user (e.g. \"system:serviceaccount:ns:name\")");
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
        if let Some(tv) = &r.tenant {
            let tenant = tv.get_ref();
            if tenants.contains_key(tenant) {
                self.count_against_tenant(tv, r.name.get_ref(), location.line, tenants);
                let t = &tenants[tenant];
                let mut problems = self.cap_limits(t, &mut limits, &r.fuel_per_call, &r.deadline, &r.memory);
                if let Some(caps) = &t.config.rules {
                    for (raw, rule) in r.rules.iter().flatten().zip(&rules) {
                        if !caps.iter().any(|cap| within(rule, cap)) {
                            problems.push((
                                raw.span(),
                                format!(
                                    "this rule allows more than tenant {tenant:?} does (`rules` at line {}): \
                                     each rule of its controllers must be within one of the tenant's",
                                    t.lines["rules"]
                                ),
                            ));
                        }
                    }
                }
                for (span, msg) in problems {
                    self.error(span, msg);
                }
            } else {
                self.unknown_tenant(tv, tenant_names);
            }
        }
        let config_json = match &r.config {
            Some(t) => serde_json::Value::Object(t.get_ref().iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
            None => serde_json::Value::Object(Default::default()),
        }
        .to_string();
        (self.problems.len() == before).then(|| ControllerConfig {
            name: r.name.into_inner(),
            wasm,
            informer: r.informer.into_inner(),
            primary_kind,
            watches,
            grants,
            grant_names,
            rules,
            tenant: r.tenant.map(|t| t.into_inner()),
            max_concurrent_reconciles,
            qps,
            burst,
            timeout,
            dry_run: r.dry_run.is_some_and(|d| d.into_inner()),
            impersonate: r.impersonate.map(|i| i.into_inner()),
            limits,
            config_json,
            rate_limiter,
            location,
        })
    }
}

#[cfg(test)]
mod tests;
