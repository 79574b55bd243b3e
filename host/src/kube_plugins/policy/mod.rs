//! What a `Plugin` resource may have: its spec read into the host's terms
//! and checked against the one `TenantPolicy` matching its namespace.
//!
//! This module owns that decision and the words of a refusal (a condition
//! reason and a message naming the limit); it never loads anything. A cap
//! is never applied silently to a plugin that asked for more: the plugin is
//! refused, so its author learns what the platform team allows.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::plugin::{Grants, Limits};
use crate::registry::OnSwap;

use crate::controller::WriteRule;

use super::crd::{
    ControllerSpec, Grant, LimitsSpec, MappedBy, OnSwapPolicy, PluginSpec, SecondaryWatch, TenantPolicy,
    TenantPolicySpec, WriteRuleSpec,
};

/// Why a plugin is not loaded, as a condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// A `Ready=False` reason (CamelCase).
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Refusal { reason, message: message.into() }
    }
}

/// A plugin's settings once its spec was read and allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The name of the policy that allowed it.
    pub policy: String,
    pub limits: Limits,
    pub grants: Grants,
    pub resync: Duration,
    pub on_swap: OnSwap,
    pub max_pending: Option<usize>,
    pub config_json: String,
    pub max_plugins: Option<usize>,
    /// Present for a controller.
    pub controller: Option<ControllerSettings>,
}

/// A controller's settings once allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerSettings {
    /// The primary's store name.
    pub store: String,
    pub watches: Vec<SecondaryWatch>,
    pub rules: Vec<WriteRule>,
    pub max_concurrent_reconciles: usize,
    pub qps: u32,
    /// The writes per second all the tenant's controllers share, if its
    /// policy sets one.
    pub tenant_qps: Option<u32>,
    pub dry_run: bool,
    /// `system:serviceaccount:<namespace>:<name>`, from the policy.
    pub impersonate: Option<String>,
}

/// client-go's default QPS, the writes per second when nothing says more.
const DEFAULT_WRITES_PER_SECOND: u32 = 5;

/// Secondary watches a controller may have when its policy says nothing:
/// each is an informer (a list and a watch on the API server), so a plugin
/// must not be able to start them without bound.
const DEFAULT_MAX_WATCHES: u32 = 4;

/// The policy whose namespaces (by name or labels) include `namespace`.
/// None matching, or more than one, is a refusal: which caps would apply
/// must never depend on the order policies were seen.
pub fn policy_for<'a>(
    namespace: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
    policies: &'a [TenantPolicy],
) -> Result<&'a TenantPolicy, Refusal> {
    let matching: Vec<&TenantPolicy> =
        policies.iter().filter(|p| matches(&p.spec, namespace, namespace_labels)).collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(Refusal::new(
            "NoTenantPolicy",
            format!("no TenantPolicy matches namespace {namespace:?}; ask the platform team to admit it"),
        )),
        many => Err(Refusal::new(
            "AmbiguousTenantPolicy",
            format!(
                "namespace {namespace:?} is matched by more than one TenantPolicy ({}); each namespace must be matched by one",
                many.iter().map(|p| format!("{:?}", name_of(p))).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

fn matches(spec: &TenantPolicySpec, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
    if spec.namespaces.iter().any(|n| n == namespace) {
        return true;
    }
    match (&spec.namespace_labels, labels) {
        (Some(want), Some(have)) if !want.is_empty() => want.iter().all(|(k, v)| have.get(k) == Some(v)),
        _ => false,
    }
}

fn name_of(p: &TenantPolicy) -> &str {
    p.metadata.name.as_deref().unwrap_or("")
}

/// Reads `spec` and checks it against `policy`; `defaults` are the host's
/// limits for what neither sets.
pub fn admit(
    spec: &PluginSpec,
    namespace: &str,
    policy: &TenantPolicy,
    defaults: &Limits,
) -> Result<Effective, Refusal> {
    let cap = &policy.spec;
    let pname = name_of(policy);
    let over = |field: &str, asked: String, allowed: String| {
        Refusal::new(
            "OverTenantPolicy",
            format!(
                "{field} {asked} exceeds the cap of TenantPolicy {pname:?} ({allowed}); lower it, or ask for a higher cap"
            ),
        )
    };

    let asked = read_limits(&spec.limits, "spec.limits")?;
    let caps = read_limits(&cap.limits, &format!("TenantPolicy {pname:?} limits")).map_err(|mut r| {
        r.reason = "InvalidTenantPolicy";
        r
    })?;
    let mut limits = defaults.clone();
    limits.fuel_per_call = match (asked.fuel, caps.fuel) {
        (Some(a), Some(c)) if a > c => return Err(over("spec.limits.fuelPerCall", a.to_string(), c.to_string())),
        (Some(a), _) => Some(a),
        (None, Some(c)) => Some(defaults.fuel_per_call.map_or(c, |d| d.min(c))),
        (None, None) => defaults.fuel_per_call,
    };
    limits.deadline_per_call = match (asked.deadline, caps.deadline) {
        (Some(a), Some(c)) if a > c => {
            return Err(over(
                "spec.limits.deadline",
                humantime::format_duration(a).to_string(),
                humantime::format_duration(c).to_string(),
            ));
        }
        (Some(a), _) => a,
        (None, Some(c)) => defaults.deadline_per_call.min(c),
        (None, None) => defaults.deadline_per_call,
    };
    limits.memory_bytes = match (asked.memory, caps.memory) {
        (Some(a), Some(c)) if a > c => {
            return Err(over(
                "spec.limits.memory",
                spec.limits.memory.clone().unwrap_or_default(),
                cap.limits.memory.clone().unwrap_or_default(),
            ));
        }
        (Some(a), _) => a,
        (None, Some(c)) => defaults.memory_bytes.min(c),
        (None, None) => defaults.memory_bytes,
    };

    let mut grants = Grants::default();
    for g in &spec.grants {
        if !cap.allowed_grants.contains(g) {
            return Err(Refusal::new(
                "GrantNotAllowed",
                format!(
                    "grant {:?} is not allowed by TenantPolicy {pname:?} (allowed: {})",
                    g.as_str(),
                    if cap.allowed_grants.is_empty() {
                        "none".to_string()
                    } else {
                        cap.allowed_grants.iter().map(|g| g.as_str()).collect::<Vec<_>>().join(", ")
                    }
                ),
            ));
        }
        match g {
            Grant::Log => grants.log = true,
            Grant::Cache => grants.cache = true,
            Grant::Clocks => grants.clocks = true,
            Grant::Kube => grants.kube = true,
        }
    }
    check_field_indexers(&spec.watch.field_indexers, "spec.watch")?;
    let controller = spec.controller.as_ref().map(|c| admit_controller(c, namespace, policy)).transpose()?;

    let max_pending = match (spec.max_pending, cap.max_pending) {
        (Some(a), Some(c)) if a > c => return Err(over("spec.maxPending", a.to_string(), c.to_string())),
        (a, c) => a.or(c).map(|n| n as usize),
    };
    let resync = match &spec.resync {
        Some(s) => parse_duration(s, "spec.resync")?,
        None => Duration::ZERO,
    };
    let config_json = match &spec.config {
        Some(v) => v.to_string(),
        None => "{}".to_string(),
    };
    let on_swap = match spec.on_swap {
        Some(OnSwapPolicy::Replay) => OnSwap::Replay,
        Some(OnSwapPolicy::Continue) | None => OnSwap::Continue,
    };
    Ok(Effective {
        policy: pname.to_string(),
        limits,
        grants,
        resync,
        on_swap,
        max_pending,
        config_json,
        max_plugins: cap.max_plugins.map(|n| n as usize),
        controller,
    })
}

/// Checks a controller's settings against the policy: no more watches than
/// it allows, every write rule within an allowed one, workers and writes
/// per second under the caps.
fn admit_controller(c: &ControllerSpec, namespace: &str, policy: &TenantPolicy) -> Result<ControllerSettings, Refusal> {
    let cap = &policy.spec;
    let pname = name_of(policy);
    let watches_cap = cap.max_watches.unwrap_or(DEFAULT_MAX_WATCHES);
    if c.watches.len() > watches_cap as usize {
        return Err(Refusal::new(
            "OverTenantPolicy",
            format!(
                "spec.controller.watches has {} entries; TenantPolicy {pname:?} allows {watches_cap} (maxWatches): \
                 each is an informer on the API server",
                c.watches.len()
            ),
        ));
    }
    let mut stores = vec![c.store.as_str()];
    for (i, w) in c.watches.iter().enumerate() {
        if stores.contains(&w.store.as_str()) {
            return Err(Refusal::new(
                "InvalidSpec",
                format!("spec.controller.watches[{i}].store {:?} names a store already named", w.store),
            ));
        }
        stores.push(&w.store);
        check_field_indexers(&w.field_indexers, &format!("spec.controller.watches[{i}]"))?;
        if w.mapped_by == MappedBy::Label && w.label.as_deref().is_none_or(str::is_empty) {
            return Err(Refusal::new(
                "InvalidSpec",
                format!("spec.controller.watches[{i}]: mappedBy Label needs the label whose value names the object"),
            ));
        }
    }
    for (i, rule) in c.write_rules.iter().enumerate() {
        if !cap.allowed_write_rules.iter().any(|allowed| within(rule, allowed)) {
            return Err(Refusal::new(
                "WriteRuleNotAllowed",
                format!(
                    "spec.controller.writeRules[{i}] ({}) is not within any allowedWriteRules of TenantPolicy {pname:?}{}",
                    describe(rule),
                    if cap.allowed_write_rules.is_empty() {
                        " (it allows no writes)".to_string()
                    } else {
                        format!(
                            " (allowed: {})",
                            cap.allowed_write_rules.iter().map(describe).collect::<Vec<_>>().join("; ")
                        )
                    }
                ),
            ));
        }
    }
    let over = |field: &str, asked: u32, allowed: u32| {
        Refusal::new(
            "OverTenantPolicy",
            format!(
                "{field} {asked} exceeds the cap of TenantPolicy {pname:?} ({allowed}); lower it, or ask for a higher cap"
            ),
        )
    };
    let workers_cap = cap.max_concurrent_reconciles.unwrap_or(1);
    let workers = c.max_concurrent_reconciles.unwrap_or(1);
    if workers > workers_cap {
        return Err(over("spec.controller.maxConcurrentReconciles", workers, workers_cap));
    }
    let qps_cap = cap.max_writes_per_second.unwrap_or(DEFAULT_WRITES_PER_SECOND);
    let qps = match c.writes_per_second {
        Some(q) if q > qps_cap => return Err(over("spec.controller.writesPerSecond", q, qps_cap)),
        Some(q) => q,
        None => DEFAULT_WRITES_PER_SECOND.min(qps_cap),
    };
    Ok(ControllerSettings {
        store: c.store.clone(),
        watches: c.watches.clone(),
        rules: c
            .write_rules
            .iter()
            .map(|r| WriteRule {
                api_groups: r.api_groups.clone(),
                kinds: r.kinds.clone(),
                verbs: r.verbs.clone(),
                names: r.names.clone(),
            })
            .collect(),
        max_concurrent_reconciles: workers as usize,
        qps,
        tenant_qps: cap.tenant_writes_per_second,
        dry_run: c.dry_run,
        impersonate: cap
            .impersonate_service_account
            .as_ref()
            .map(|sa| format!("system:serviceaccount:{namespace}:{sa}")),
    })
}

/// Whether everything `rule` allows, `allowed` allows too.
fn within(rule: &WriteRuleSpec, allowed: &WriteRuleSpec) -> bool {
    // A `*` in the plugin's rule is covered only by a `*` in the policy's.
    let covers = |have: &[String], asked: &[String]| {
        have.iter().any(|h| h == "*") || asked.iter().all(|a| a != "*" && have.contains(a))
    };
    covers(&allowed.api_groups, &rule.api_groups)
        && covers(&allowed.kinds, &rule.kinds)
        && covers(&allowed.verbs, &rule.verbs)
        && (allowed.names.is_empty()
            || (!rule.names.is_empty() && rule.names.iter().all(|n| allowed.names.contains(n))))
}

/// `patch apps/Deployment`, `create Event named a, b`.
fn describe(rule: &WriteRuleSpec) -> String {
    let kinds: Vec<String> = rule
        .api_groups
        .iter()
        .flat_map(|g| rule.kinds.iter().map(move |k| if g.is_empty() { k.clone() } else { format!("{g}/{k}") }))
        .collect();
    let mut out = format!("{} {}", rule.verbs.join(","), kinds.join(","));
    if !rule.names.is_empty() {
        out.push_str(&format!(" named {}", rule.names.join(",")));
    }
    out
}

/// The most field indexers one watch may have, and queries one may have:
/// each query runs over every object the watch caches, on every change.
pub const MAX_FIELD_INDEXERS: usize = 8;
pub const MAX_FIELD_INDEX_QUERIES: usize = 16;

/// A watch's `fieldIndexers`: names apart from the built-in `namespace`,
/// each with 1 to [`MAX_FIELD_INDEX_QUERIES`] queries that parse as JSONPath.
fn check_field_indexers(indexers: &BTreeMap<String, Vec<String>>, at: &str) -> Result<(), Refusal> {
    let invalid = |message: String| Refusal::new("InvalidSpec", message);
    if indexers.len() > MAX_FIELD_INDEXERS {
        return Err(invalid(format!(
            "{at}.fieldIndexers has {} indexers; a watch may have {MAX_FIELD_INDEXERS}",
            indexers.len()
        )));
    }
    for (name, queries) in indexers {
        let field = format!("{at}.fieldIndexers.{name}");
        if name.is_empty() || name == crate::informer::NAMESPACE_INDEX {
            return Err(invalid(format!("{at}.fieldIndexers: {name:?} is not a name an indexer may have")));
        }
        if queries.is_empty() || queries.len() > MAX_FIELD_INDEX_QUERIES {
            return Err(invalid(format!(
                "{field} has {} queries; an indexer has 1 to {MAX_FIELD_INDEX_QUERIES}",
                queries.len()
            )));
        }
        for (i, q) in queries.iter().enumerate() {
            crate::informer::parse_field_path(q)
                .map_err(|e| invalid(format!("{field}[{i}]: invalid JSONPath {q:?}: {e}")))?;
        }
    }
    Ok(())
}

struct ReadLimits {
    fuel: Option<u64>,
    deadline: Option<Duration>,
    memory: Option<usize>,
}

fn read_limits(l: &LimitsSpec, at: &str) -> Result<ReadLimits, Refusal> {
    let deadline = l.deadline.as_deref().map(|d| parse_duration(d, &format!("{at}.deadline"))).transpose()?;
    // As the config file's: a deadline past an hour is a hung plugin, and
    // `init` gets ten of them, which the epoch tick count must still hold.
    if let Some(d) = deadline.filter(|d| d.is_zero() || *d > crate::config::MAX_DEADLINE) {
        return Err(Refusal::new(
            "InvalidSpec",
            format!(
                "{at}.deadline {} must be more than zero and at most {}",
                humantime::format_duration(d),
                humantime::format_duration(crate::config::MAX_DEADLINE)
            ),
        ));
    }
    Ok(ReadLimits {
        fuel: l.fuel_per_call,
        deadline,
        memory: l.memory.as_deref().map(|m| parse_quantity(m, &format!("{at}.memory"))).transpose()?,
    })
}

fn parse_duration(s: &str, field: &str) -> Result<Duration, Refusal> {
    humantime::parse_duration(s).map_err(|e| {
        Refusal::new(
            "InvalidSpec",
            format!("{field} {s:?} is not a duration ({e}); examples: \"500ms\", \"30s\", \"5m\""),
        )
    })
}

/// A Kubernetes quantity of bytes: `64Mi`, `1Gi`, `500M`, `1048576`.
pub fn parse_quantity(s: &str, field: &str) -> Result<usize, Refusal> {
    let invalid = || {
        Refusal::new("InvalidSpec", format!("{field} {s:?} is not a quantity of bytes; examples: \"64Mi\", \"1Gi\""))
    };
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: u128 = num.parse().map_err(|_| invalid())?;
    let mult: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return Err(invalid()),
    };
    n.checked_mul(mult).and_then(|b| usize::try_from(b).ok()).ok_or_else(invalid)
}

#[cfg(test)]
mod tests;
