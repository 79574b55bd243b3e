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

use super::crd::{Grant, LimitsSpec, OnSwapPolicy, PluginSpec, TenantPolicy, TenantPolicySpec};

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
}

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
pub fn admit(spec: &PluginSpec, policy: &TenantPolicy, defaults: &Limits) -> Result<Effective, Refusal> {
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
        }
    }

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
    })
}

struct ReadLimits {
    fuel: Option<u64>,
    deadline: Option<Duration>,
    memory: Option<usize>,
}

fn read_limits(l: &LimitsSpec, at: &str) -> Result<ReadLimits, Refusal> {
    Ok(ReadLimits {
        fuel: l.fuel_per_call,
        deadline: l.deadline.as_deref().map(|d| parse_duration(d, &format!("{at}.deadline"))).transpose()?,
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
    usize::try_from(n * mult).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_plugins::crd::{ComponentSource, KeySelector, WatchSpec};

    fn policy(name: &str, spec: TenantPolicySpec) -> TenantPolicy {
        TenantPolicy::new(name, spec)
    }

    fn team_a() -> TenantPolicy {
        policy(
            "team-a",
            TenantPolicySpec {
                namespaces: vec!["team-a".into()],
                namespace_labels: None,
                max_plugins: Some(3),
                limits: LimitsSpec {
                    fuel_per_call: Some(1_000_000),
                    deadline: Some("200ms".into()),
                    memory: Some("32Mi".into()),
                },
                max_pending: Some(100),
                allowed_grants: vec![Grant::Log],
            },
        )
    }

    fn spec() -> PluginSpec {
        PluginSpec {
            component: ComponentSource {
                config_map: Some(KeySelector { name: "rec".into(), key: "plugin.wasm".into() }),
                ..Default::default()
            },
            watch: WatchSpec {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                label_selector: None,
                field_selector: None,
            },
            resync: None,
            limits: LimitsSpec::default(),
            grants: vec![],
            config: None,
            on_swap: None,
            max_pending: None,
        }
    }

    #[test]
    fn unset_limits_get_the_tenants_cap() {
        let e = admit(&spec(), &team_a(), &Limits::default()).unwrap();
        assert_eq!(e.limits.fuel_per_call, Some(1_000_000));
        assert_eq!(e.limits.deadline_per_call, Duration::from_millis(200));
        assert_eq!(e.limits.memory_bytes, 32 << 20);
        assert_eq!(e.max_pending, Some(100));
        assert_eq!(e.config_json, "{}");
    }

    #[test]
    fn a_limit_over_the_cap_is_refused_naming_it() {
        let mut s = spec();
        s.limits.memory = Some("64Mi".into());
        let r = admit(&s, &team_a(), &Limits::default()).unwrap_err();
        assert_eq!(r.reason, "OverTenantPolicy");
        assert!(r.message.contains("spec.limits.memory 64Mi exceeds the cap of TenantPolicy \"team-a\" (32Mi)"), "{r}");
        let mut s = spec();
        s.limits.fuel_per_call = Some(2_000_000);
        assert!(admit(&s, &team_a(), &Limits::default()).unwrap_err().message.contains("fuelPerCall 2000000"));
    }

    #[test]
    fn a_grant_the_policy_does_not_allow_is_refused() {
        let mut s = spec();
        s.grants = vec![Grant::Log, Grant::Clocks];
        let r = admit(&s, &team_a(), &Limits::default()).unwrap_err();
        assert_eq!(r.reason, "GrantNotAllowed");
        assert!(r.message.contains("\"clocks\" is not allowed by TenantPolicy \"team-a\" (allowed: log)"), "{r}");
    }

    #[test]
    fn exactly_one_policy_must_match_the_namespace() {
        let by_label = policy(
            "labelled",
            TenantPolicySpec {
                namespaces: vec![],
                namespace_labels: Some([("tenant".to_string(), "yes".to_string())].into()),
                max_plugins: None,
                limits: LimitsSpec::default(),
                max_pending: None,
                allowed_grants: vec![],
            },
        );
        let policies = vec![team_a(), by_label];
        assert_eq!(name_of(policy_for("team-a", None, &policies).unwrap()), "team-a");
        assert_eq!(policy_for("other", None, &policies).unwrap_err().reason, "NoTenantPolicy");
        let labels: BTreeMap<String, String> = [("tenant".to_string(), "yes".to_string())].into();
        assert_eq!(name_of(policy_for("other", Some(&labels), &policies).unwrap()), "labelled");
        let r = policy_for("team-a", Some(&labels), &policies).unwrap_err();
        assert_eq!(r.reason, "AmbiguousTenantPolicy");
        assert!(r.message.contains("\"team-a\", \"labelled\""), "{r}");
    }

    #[test]
    fn quantities_and_durations_are_read_or_refused_clearly() {
        assert_eq!(parse_quantity("64Mi", "x").unwrap(), 64 << 20);
        assert_eq!(parse_quantity("500M", "x").unwrap(), 500_000_000);
        assert_eq!(parse_quantity("4096", "x").unwrap(), 4096);
        let r = parse_quantity("64MB", "spec.limits.memory").unwrap_err();
        assert_eq!(r.reason, "InvalidSpec");
        assert!(r.message.starts_with("spec.limits.memory \"64MB\" is not a quantity"), "{r}");
        let mut s = spec();
        s.resync = Some("often".into());
        let r = admit(&s, &team_a(), &Limits::default()).unwrap_err();
        assert!(r.message.starts_with("spec.resync \"often\" is not a duration"), "{r}");
    }
}
