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
            ..Default::default()
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
            field_indexers: Default::default(),
        },
        resync: None,
        limits: LimitsSpec::default(),
        grants: vec![],
        config: None,
        on_swap: None,
        max_pending: None,
        controller: None,
    }
}

#[test]
fn unset_limits_get_the_tenants_cap() {
    let e = admit(&spec(), "team-a", &team_a(), &Limits::default()).unwrap();
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
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert_eq!(r.reason, "OverTenantPolicy");
    assert!(r.message.contains("spec.limits.memory 64Mi exceeds the cap of TenantPolicy \"team-a\" (32Mi)"), "{r}");
    let mut s = spec();
    s.limits.fuel_per_call = Some(2_000_000);
    assert!(admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err().message.contains("fuelPerCall 2000000"));
}

#[test]
fn a_grant_the_policy_does_not_allow_is_refused() {
    let mut s = spec();
    s.grants = vec![Grant::Log, Grant::Clocks];
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
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
            ..Default::default()
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

fn rule(groups: &[&str], kinds: &[&str], verbs: &[&str], names: &[&str]) -> WriteRuleSpec {
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
    WriteRuleSpec { api_groups: v(groups), kinds: v(kinds), verbs: v(verbs), names: v(names) }
}

fn controller(rules: Vec<WriteRuleSpec>) -> PluginSpec {
    let mut s = spec();
    s.controller = Some(ControllerSpec {
        store: "deployments".into(),
        watches: vec![],
        write_rules: rules,
        max_concurrent_reconciles: None,
        writes_per_second: None,
        dry_run: false,
    });
    s
}

fn writer_policy() -> TenantPolicy {
    let mut p = team_a();
    p.spec.allowed_write_rules = vec![
        rule(&["apps"], &["Deployment", "Deployment/status"], &["patch", "update"], &[]),
        rule(&[""], &["ConfigMap"], &["*"], &["settings"]),
    ];
    p.spec.max_concurrent_reconciles = Some(4);
    p.spec.impersonate_service_account = Some("plugins".into());
    p
}

#[test]
fn a_controllers_write_rules_must_lie_within_its_policys() {
    let ok = controller(vec![
        rule(&["apps"], &["Deployment/status"], &["patch"], &[]),
        rule(&[""], &["ConfigMap"], &["create", "delete"], &["settings"]),
    ]);
    let e = admit(&ok, "team-a", &writer_policy(), &Limits::default()).unwrap();
    let c = e.controller.unwrap();
    assert_eq!(c.rules.len(), 2);
    assert_eq!(c.max_concurrent_reconciles, 1, "one worker unless asked");
    assert_eq!(c.qps, 5, "client-go's default");
    assert_eq!(c.impersonate.as_deref(), Some("system:serviceaccount:team-a:plugins"));

    for (bad, names) in [
        (rule(&["apps"], &["Deployment"], &["delete"], &[]), "delete apps/Deployment"),
        (rule(&["apps"], &["*"], &["patch"], &[]), "patch apps/*"),
        (rule(&[""], &["ConfigMap"], &["patch"], &[]), "patch ConfigMap"),
        (rule(&[""], &["ConfigMap"], &["patch"], &["other"]), "patch ConfigMap named other"),
        (rule(&[""], &["Secret"], &["get"], &[]), "get Secret"),
    ] {
        let r = admit(&controller(vec![bad]), "team-a", &writer_policy(), &Limits::default()).unwrap_err();
        assert_eq!(r.reason, "WriteRuleNotAllowed", "{names}");
        assert!(
            r.message.starts_with(&format!(
                "spec.controller.writeRules[0] ({names}) is not within any allowedWriteRules of TenantPolicy \"team-a\" (allowed: "
            )),
            "{r}"
        );
    }
    let r =
        admit(&controller(vec![rule(&[""], &["Event"], &["create"], &[])]), "team-a", &team_a(), &Limits::default())
            .unwrap_err();
    assert!(r.message.ends_with("(it allows no writes)"), "{r}");
    // A `*` policy allows a `*` rule.
    let mut open = team_a();
    open.spec.allowed_write_rules = vec![rule(&["*"], &["*"], &["*"], &[])];
    admit(&controller(vec![rule(&["*"], &["*"], &["*"], &[])]), "team-a", &open, &Limits::default()).unwrap();
}

#[test]
fn a_controllers_workers_and_write_rate_are_capped() {
    let mut s = controller(vec![]);
    s.controller.as_mut().unwrap().max_concurrent_reconciles = Some(8);
    let r = admit(&s, "team-a", &writer_policy(), &Limits::default()).unwrap_err();
    assert_eq!(r.reason, "OverTenantPolicy");
    assert!(r.message.starts_with("spec.controller.maxConcurrentReconciles 8 exceeds the cap"), "{r}");
    s.controller.as_mut().unwrap().max_concurrent_reconciles = Some(2);
    s.controller.as_mut().unwrap().writes_per_second = Some(50);
    let r = admit(&s, "team-a", &writer_policy(), &Limits::default()).unwrap_err();
    assert!(r.message.starts_with("spec.controller.writesPerSecond 50 exceeds the cap"), "{r}");
    s.controller.as_mut().unwrap().writes_per_second = Some(3);
    let c = admit(&s, "team-a", &writer_policy(), &Limits::default()).unwrap().controller.unwrap();
    assert_eq!((c.max_concurrent_reconciles, c.qps, c.tenant_qps), (2, 3, None));
    // A tenant-wide rate the policy sets reaches every controller it admits.
    let mut shared = writer_policy();
    shared.spec.tenant_writes_per_second = Some(7);
    let c = admit(&s, "team-a", &shared, &Limits::default()).unwrap().controller.unwrap();
    assert_eq!(c.tenant_qps, Some(7));
}

#[test]
fn a_controllers_stores_have_distinct_names_and_label_mappings_a_label() {
    let mut s = controller(vec![]);
    let watch = |store: &str, mapped_by, label: Option<&str>| SecondaryWatch {
        field_indexers: Default::default(),
        store: store.into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        label_selector: None,
        mapped_by,
        label: label.map(String::from),
    };
    s.controller.as_mut().unwrap().watches = vec![watch("deployments", MappedBy::Map, None)];
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert!(r.message.contains("watches[0].store \"deployments\" names a store already named"), "{r}");
    s.controller.as_mut().unwrap().watches = vec![watch("configmaps", MappedBy::Label, None)];
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert!(r.message.contains("mappedBy Label needs the label"), "{r}");
}

#[test]
fn a_controller_may_not_start_more_informers_than_its_policy_allows() {
    let mut s = controller(vec![]);
    let watch = |i: usize| SecondaryWatch {
        field_indexers: Default::default(),
        store: format!("s{i}"),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        label_selector: Some(format!("n={i}")),
        mapped_by: MappedBy::Map,
        label: None,
    };
    s.controller.as_mut().unwrap().watches = (0..4).map(watch).collect();
    admit(&s, "team-a", &team_a(), &Limits::default()).expect("four watches by default");
    // A hostile plugin asking for many informers is refused before any
    // of them is started.
    s.controller.as_mut().unwrap().watches = (0..32).map(watch).collect();
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert_eq!(r.reason, "OverTenantPolicy");
    assert_eq!(
        r.message,
        "spec.controller.watches has 32 entries; TenantPolicy \"team-a\" allows 4 (maxWatches): \
         each is an informer on the API server"
    );
    let mut policy = team_a();
    policy.spec.max_watches = Some(32);
    admit(&s, "team-a", &policy, &Limits::default()).expect("within a raised cap");
    policy.spec.max_watches = Some(0);
    s.controller.as_mut().unwrap().watches = vec![watch(0)];
    let r = admit(&s, "team-a", &policy, &Limits::default()).unwrap_err();
    assert!(r.message.contains("allows 0 (maxWatches)"), "{r}");
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
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert!(r.message.starts_with("spec.resync \"often\" is not a duration"), "{r}");
    // Past u128: refused, not a panic (debug) or a wrapped small number.
    let r = parse_quantity(&format!("{}Ti", u128::MAX / 2), "spec.limits.memory").unwrap_err();
    assert_eq!(r.reason, "InvalidSpec");
    // A deadline as the config file bounds it, whatever the policy says.
    let mut s = spec();
    s.limits.deadline = Some("2h".into());
    let r = admit(&s, "team-a", &TenantPolicy::new("open", Default::default()), &Limits::default()).unwrap_err();
    assert_eq!(r.message, "spec.limits.deadline 2h must be more than zero and at most 1h");
}

#[test]
fn field_indexers_are_checked_before_any_informer_starts() {
    let mut s = controller(vec![]);
    let index = |queries: &[&str]| [("configmaps".to_string(), queries.iter().map(|q| q.to_string()).collect())].into();
    s.watch.field_indexers = index(&["$.spec.template.spec.volumes[*].configMap.name"]);
    admit(&s, "team-a", &team_a(), &Limits::default()).expect("a valid field indexer");

    s.watch.field_indexers = index(&["$.ok", "spec.name"]);
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert_eq!(r.reason, "InvalidSpec");
    assert!(r.message.starts_with("spec.watch.fieldIndexers.configmaps[1]: invalid JSONPath \"spec.name\""), "{r}");
    s.watch.field_indexers = index(&[]);
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert!(r.message.contains("spec.watch.fieldIndexers.configmaps has 0 queries"), "{r}");
    s.watch.field_indexers = [("namespace".to_string(), vec!["$.x".to_string()])].into();
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert!(r.message.contains("\"namespace\" is not a name an indexer may have"), "{r}");
    // Each query runs over every cached object on every change: bounded.
    s.watch.field_indexers = (0..9).map(|i| (format!("i{i}"), vec!["$.x".to_string()])).collect();
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert!(r.message.contains("has 9 indexers; a watch may have 8"), "{r}");

    s.watch.field_indexers = Default::default();
    s.controller.as_mut().unwrap().watches = vec![SecondaryWatch {
        field_indexers: index(&["$["]),
        store: "configmaps".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        label_selector: None,
        mapped_by: MappedBy::Map,
        label: None,
    }];
    let r = admit(&s, "team-a", &team_a(), &Limits::default()).unwrap_err();
    assert!(r.message.starts_with("spec.controller.watches[0].fieldIndexers.configmaps[0]: invalid JSONPath"), "{r}");
}
