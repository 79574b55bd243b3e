//! `[[controller]]` checks: what is accepted, what is refused and how the
//! refusal reads.

use super::super::tests::Fixture;
use super::*;

/// Twenty lines of informers, before each test's text.
const INFORMERS: &str = "\
[[informer]]\nname = \"deployments\"\nsource = \"manifests\"\ndir = \"manifests\"\nkind = \"Deployment\"\n\
[[informer]]\nname = \"configmaps\"\nsource = \"manifests\"\ndir = \"manifests\"\nkind = \"ConfigMap\"\n\
[[informer]]\nname = \"secrets\"\nsource = \"kube\"\napi_version = \"v1\"\nkind = \"Secret\"\n\
[[informer]]\nname = \"anything\"\nsource = \"manifests\"\ndir = \"manifests\"\n";

const RELOADER: &str = r#"
[[tenant]]
name = "shop"
namespaces = ["shop"]
impersonate = "system:serviceaccount:shop:host"

[[controller]]
name = "reloader"
wasm = "c.wasm"
informer = "deployments"
watches = [
  { informer = "configmaps", map = "plugin" },
  { informer = "secrets", map = { label = "app" } },
  { informer = "anything" },
]
grants = ["log", "cache", "kube"]
rules = [
  { api_groups = ["apps"], kinds = ["Deployment"], verbs = ["patch"] },
  { api_groups = [""], kinds = ["Event"], verbs = ["create"], names = ["x"] },
]
tenant = "shop"
max_concurrent_reconciles = 3
qps = 2.5
burst = 4
timeout = "2s"
dry_run = true
fuel_per_call = 1_000_000
deadline = "250ms"
memory = "16MiB"
base_delay = "10ms"
max_delay = "1m"
retry_qps = 20
retry_burst = 50
config = { annotation = "a/b" }
"#;

#[test]
fn a_full_controller() {
    let f = Fixture::with_prelude(INFORMERS);
    let c = f.parse(RELOADER).unwrap();
    assert_eq!(c.controllers.len(), 1);
    let r = &c.controllers[0];
    assert_eq!(r.name, "reloader");
    assert_eq!(r.wasm, f.dir.path().join("c.wasm"));
    assert_eq!(r.informer, "deployments");
    assert_eq!(r.primary_kind, "Deployment");
    assert_eq!(
        r.watches,
        [
            Secondary { informer: "configmaps".into(), mapping: Mapping::Plugin },
            Secondary { informer: "secrets".into(), mapping: Mapping::Label("app".into()) },
            Secondary { informer: "anything".into(), mapping: Mapping::Owner },
        ]
    );
    assert_eq!(r.grants, Grants { log: true, cache: true, kube: true, clocks: false });
    assert_eq!(r.grant_names, ["log", "cache", "kube"]);
    assert_eq!(r.rules.len(), 2);
    assert_eq!(r.rules[1].names, ["x"]);
    assert_eq!(r.max_concurrent_reconciles, 3);
    assert_eq!((r.qps, r.burst, r.timeout, r.dry_run), (2.5, 4, Duration::from_secs(2), true));
    assert_eq!(r.limits.fuel_per_call, Some(1_000_000));
    assert_eq!(r.limits.deadline_per_call, Duration::from_millis(250));
    assert_eq!(r.limits.memory_bytes, 16 << 20);
    assert_eq!(r.rate_limiter.base_delay, Duration::from_millis(10));
    assert_eq!(r.rate_limiter.max_delay, Duration::from_secs(60));
    assert_eq!((r.rate_limiter.qps, r.rate_limiter.burst), (20.0, 50));
    assert_eq!(r.config_json, r#"{"annotation":"a/b"}"#);
    assert_eq!(r.location, Location { line: 27, column: 8 });
    let g = r.guard_config(c.tenant_of_controller(r));
    assert_eq!(g.plugin, "reloader");
    assert_eq!(g.tenant.as_deref(), Some("shop"));
    assert_eq!(g.scope, Some(NamespaceScope { namespaces: vec!["shop".into()], cluster_scoped: false }));
    assert_eq!(g.impersonate.as_deref(), Some("system:serviceaccount:shop:host"), "the tenant's");
    let o = r.options();
    assert_eq!(
        (o.primary.as_str(), o.primary_kind.as_str(), o.max_concurrent_reconciles),
        ("deployments", "Deployment", 3)
    );
    assert_eq!(r.spec().tenant.as_deref(), Some("shop"));
}

#[test]
fn defaults_are_client_gos() {
    let f = Fixture::with_prelude(INFORMERS);
    let c = f.parse("[[controller]]\nname = \"c\"\nwasm = \"c.wasm\"\ninformer = \"configmaps\"\n").unwrap();
    let r = &c.controllers[0];
    assert_eq!(r.primary_kind, "ConfigMap");
    assert!(r.watches.is_empty() && r.rules.is_empty() && r.tenant.is_none() && !r.dry_run);
    assert_eq!(r.grants, Grants::default());
    assert_eq!((r.qps, r.burst, r.timeout, r.max_concurrent_reconciles), (5.0, 10, Duration::from_secs(10), 1));
    assert_eq!(r.rate_limiter.base_delay, Duration::from_millis(5));
    assert_eq!(r.rate_limiter.max_delay, Duration::from_secs(1000));
    assert_eq!((r.rate_limiter.qps, r.rate_limiter.burst), (10.0, 100));
    assert_eq!(r.limits, Limits::default());
    let g = r.guard_config(None);
    assert_eq!(g.scope, None);
    assert_eq!(g.impersonate, None);
}

#[test]
fn unknown_informers_kinds_and_watches() {
    let f = Fixture::with_prelude(INFORMERS);
    let e = f.errors(
        r#"
[[controller]]
name = "c"
wasm = "c.wasm"
informer = "nope"
watches = [{ informer = "gone" }, { informer = "configmaps", map = "sideways" }, { informer = "configmaps" }, { informer = "configmaps" }]

[[controller]]
name = "d"
wasm = "c.wasm"
informer = "anything"
watches = [{ informer = "anything" }]

[[controller]]
name = "e"
wasm = "c.wasm"
informer = "configmaps"
watches = [{ informr = "configmaps" }]
"#,
    );
    assert_eq!(
        e,
        [
            "host.toml:24:12: unknown informer \"nope\" (defined: \"anything\", \"configmaps\", \"deployments\", \"secrets\")",
            "host.toml:25:25: unknown informer \"gone\" (defined: \"anything\", \"configmaps\", \"deployments\", \"secrets\")",
            "host.toml:25:68: `map` must be \"owner\" (controller ownerReference), \"plugin\" (the plugin's `map`) or { label = \"<key>\" } (a label naming the primary object)",
            "host.toml:25:124: informer \"configmaps\" is watched twice",
            "host.toml:30:12: informer \"anything\" has no `kind` (line 17): a controller's primary informer must name the kind it reconciles",
            "host.toml:31:25: informer \"anything\" is the primary informer",
            "host.toml:37:14: unknown field `informr`, expected `informer` or `map`",
        ]
    );
}

#[test]
fn rules_and_the_kube_grant() {
    let f = Fixture::with_prelude(INFORMERS);
    let e = f.errors(
        r#"
[[controller]]
name = "no-rules"
wasm = "c.wasm"
informer = "configmaps"
grants = ["kube", "write"]

[[controller]]
name = "no-grant"
wasm = "c.wasm"
informer = "configmaps"
rules = [{ api_groups = [""], kinds = ["ConfigMap"], verbs = ["patch"] }]

[[controller]]
name = "bad-rules"
wasm = "c.wasm"
informer = "configmaps"
grants = ["kube"]
rules = [{ api_groups = [""], kinds = ["ConfigMap/scale"], verbs = ["patch", "get"] }, { api_groups = [], kinds = ["X"], verbs = ["*"] }]
"#,
    );
    assert_eq!(
        e,
        [
            "host.toml:25:11: the `kube` grant needs `rules`: what the controller may write, e.g. rules = [{ api_groups = [\"apps\"], kinds = [\"Deployment\"], verbs = [\"patch\"] }]",
            "host.toml:25:19: unknown grant \"write\", expected one of \"log\", \"cache\", \"kube\", \"clocks\"",
            "host.toml:31:10: `rules` without the `kube` grant: add \"kube\" to `grants`, or remove them",
            "host.toml:38:40: kind \"ConfigMap/scale\": expected a kind such as \"Deployment\", or \"Deployment/status\"",
            "host.toml:38:78: unknown verb \"get\", expected one of \"create\", \"update\", \"patch\", \"delete\", \"*\"",
            "host.toml:38:88: `api_groups` is empty, so the rule allows nothing: list at least one",
        ]
    );
}

#[test]
fn numbers_and_durations() {
    let f = Fixture::with_prelude(INFORMERS);
    let e = f.errors(
        r#"
[[controller]]
name = "c"
wasm = "missing.wasm"
informer = "configmaps"
max_concurrent_reconciles = 0
qps = -1
burst = "ten"
timeout = "0s"
base_delay = "1s"
max_delay = "10ms"
retry_qps = "fast"
deadline = "2h"
impersonate = " "
dry_run = "yes"
"#,
    );
    let wasm = f.dir.path().join("missing.wasm");
    assert_eq!(
        e,
        [
            format!("host.toml:23:8: wasm file {} does not exist", wasm.display()),
            "host.toml:25:29: `max_concurrent_reconciles` must be a positive integer".into(),
            "host.toml:26:7: `qps` must be a positive number (per second)".into(),
            "host.toml:27:9: `burst` must be a positive integer".into(),
            "host.toml:28:11: `timeout` must be greater than zero".into(),
            "host.toml:30:13: `max_delay` must be at least `base_delay`".into(),
            "host.toml:31:13: `retry_qps` must be a positive number (per second)".into(),
            "host.toml:32:12: `deadline` \"2h\" is longer than the maximum of 1h".into(),
            "host.toml:33:15: `impersonate` must name a user (e.g. \"system:serviceaccount:ns:name\")".into(),
            "host.toml:34:11: invalid type: string \"yes\", expected a boolean".into(),
        ]
    );
}

#[test]
fn tenant_caps_rules_limits_and_plugin_count() {
    let f = Fixture::with_prelude(INFORMERS);
    let e = f.errors(
        r#"
[[tenant]]
name = "shop"
namespaces = ["shop"]
max_plugins = 1
memory = "16MiB"
rules = [{ api_groups = ["apps"], kinds = ["Deployment"], verbs = ["patch", "update"] }, { api_groups = [""], kinds = ["Event"], verbs = ["create"], names = ["a", "b"] }]

[[controller]]
name = "ok"
wasm = "c.wasm"
informer = "deployments"
tenant = "shop"
grants = ["kube"]
rules = [{ api_groups = ["apps"], kinds = ["Deployment"], verbs = ["patch"] }, { api_groups = [""], kinds = ["Event"], verbs = ["create"], names = ["a"] }]

[[controller]]
name = "greedy"
wasm = "c.wasm"
informer = "deployments"
tenant = "shop"
grants = ["kube"]
memory = "32MiB"
rules = [{ api_groups = ["apps"], kinds = ["Deployment"], verbs = ["delete"] }, { api_groups = [""], kinds = ["Event"], verbs = ["create"] }, { api_groups = ["*"], kinds = ["Deployment"], verbs = ["patch"] }]

[[controller]]
name = "stranger"
wasm = "c.wasm"
informer = "deployments"
tenant = "nobody"
"#,
    );
    assert_eq!(
        e,
        [
            "host.toml:40:10: tenant \"shop\" allows at most 1 plugin(s) (`max_plugins` at line 24), and this is plugin number 2 of it (before it: \"ok\" at line 29)",
            "host.toml:42:10: `memory` = 32 MiB exceeds the cap of tenant \"shop\" (memory = 16 MiB at line 25); lower it, or raise the tenant's",
            "host.toml:43:10: this rule allows more than tenant \"shop\" does (`rules` at line 26): each rule of its controllers must be within one of the tenant's",
            "host.toml:43:81: this rule allows more than tenant \"shop\" does (`rules` at line 26): each rule of its controllers must be within one of the tenant's",
            "host.toml:43:143: this rule allows more than tenant \"shop\" does (`rules` at line 26): each rule of its controllers must be within one of the tenant's",
            "host.toml:49:10: unknown tenant \"nobody\" (defined: \"shop\")",
        ]
    );
    // A tenant's caps lower what a controller leaves out.
    let c = f
        .parse(
            "[[tenant]]\nname = \"t\"\nnamespaces = [\"t\"]\ndeadline = \"100ms\"\n\
             [[controller]]\nname = \"c\"\nwasm = \"c.wasm\"\ninformer = \"configmaps\"\ntenant = \"t\"\n",
        )
        .unwrap();
    assert_eq!(c.controllers[0].limits.deadline_per_call, Duration::from_millis(100));
}

#[test]
fn controller_and_plugin_names_share_one_namespace() {
    let f = Fixture::with_prelude(INFORMERS);
    let e = f.errors(
        "[[plugin]]\nname = \"x\"\nwasm = \"c.wasm\"\ninformer = \"configmaps\"\n\
         [[controller]]\nname = \"x\"\nwasm = \"c.wasm\"\ninformer = \"configmaps\"\nfrobnicate = 1\n",
    );
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e[0].starts_with("host.toml:25:8: duplicate plugin name \"x\" (first defined at line 21)"), "{e:#?}");
    assert!(e[1].starts_with("host.toml:28:1: unknown field `frobnicate`"), "{e:#?}");
}

#[test]
fn rule_containment() {
    let r = |g: &[&str], k: &[&str], v: &[&str], n: &[&str]| WriteRule {
        api_groups: g.iter().map(|s| s.to_string()).collect(),
        kinds: k.iter().map(|s| s.to_string()).collect(),
        verbs: v.iter().map(|s| s.to_string()).collect(),
        names: n.iter().map(|s| s.to_string()).collect(),
    };
    let cap = r(&["apps"], &["*"], &["patch", "update"], &[]);
    assert!(within(&r(&["apps"], &["Deployment"], &["patch"], &[]), &cap));
    assert!(within(&r(&["apps"], &["Deployment"], &["patch"], &["a"]), &cap));
    assert!(!within(&r(&["apps"], &["Deployment"], &["*"], &[]), &cap));
    assert!(!within(&r(&["apps", ""], &["Deployment"], &["patch"], &[]), &cap));
    let named = r(&["apps"], &["Deployment"], &["patch"], &["a"]);
    assert!(!within(&r(&["apps"], &["Deployment"], &["patch"], &[]), &named));
    assert!(within(&r(&["apps"], &["Deployment"], &["patch"], &["a"]), &named));
}
