//! Tests of the whole format: files written to a temporary directory and
//! read with `Config::load`, checking what is accepted and every message
//! (file, line, column, snippet) for what is not.

use super::*;
use crate::informer::Object;
use crate::plugin::{Limits, OnTrap};
use crate::registry::OnSwap;

/// A directory with `manifests/` and the components `a.wasm`, `b.wasm`
/// and `c.wasm`, where configurations are parsed (each after `prelude`).
pub(super) struct Fixture {
    pub(super) dir: tempfile::TempDir,
    prelude: &'static str,
}

impl Fixture {
    pub(super) fn new() -> Self {
        Self::with_prelude("")
    }
    /// Each text parsed is `prelude` followed by the text (so lines are
    /// counted from the prelude's first).
    pub(super) fn with_prelude(prelude: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("manifests")).unwrap();
        for component in ["a.wasm", "b.wasm", "c.wasm"] {
            std::fs::write(dir.path().join(component), b"\0asm").unwrap();
        }
        Fixture { dir, prelude }
    }
    pub(super) fn parse(&self, text: &str) -> Result<Config, ConfigError> {
        Config::parse(&format!("{}{text}", self.prelude), "host.toml", self.dir.path())
    }
    pub(super) fn errors(&self, text: &str) -> Vec<String> {
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
    let c =
        f.parse("[[informer]]\nname = \"d\"\nsource = \"kube\"\ngroup = \"apps\"\nkind = \"Deployment\"\n").unwrap();
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
fn field_indexers_are_read_in_name_order_and_bad_ones_are_named_at_their_query() {
    let f = Fixture::new();
    let base = "[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\nindexers = [\"app\"]\n";
    let good = format!(
        "{base}[informer.field_indexers]\nsecrets = [\"$.spec.volumes[*].secret.secretName\"]\nconfigmaps = [\"$..configMapRef.name\", \"$.spec.volumes[*].configMap.name\"]\n"
    );
    let c = Config::parse(&good, "host.toml", f.dir.path()).unwrap();
    let names: Vec<&str> = c.informers[0].field_indexers.keys().map(String::as_str).collect();
    assert_eq!(names, ["configmaps", "secrets"]);
    assert_eq!(
        c.informers[0].field_indexers["configmaps"],
        ["$..configMapRef.name", "$.spec.volumes[*].configMap.name"]
    );

    let bad = format!(
        "{base}field_indexers = {{ refs = [\"$.ok\", \"spec.name\"], none = [], namespace = [\"$.x\"], app = [\"$.y\"] }}\n"
    );
    let e = f.errors(&bad);
    assert_eq!(e.len(), 4, "{e:?}");
    // In file order, each at its value.
    assert!(e[0].starts_with("host.toml:6:36: field indexer \"refs\": invalid JSONPath \"spec.name\""), "{e:?}");
    assert!(e[0].contains("a query starts with `$`"), "{e:?}");
    assert!(e[1].contains("field indexer \"none\" needs at least one JSONPath query"), "{e:?}");
    assert!(e[2].contains("the `namespace` index is built in"), "{e:?}");
    assert!(e[3].contains("field indexer \"app\" has the name of a label indexer"), "{e:?}");
}

#[test]
fn strip_names_what_it_drops_or_is_refused_at_its_value() {
    let f = Fixture::new();
    let base = "[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\n";
    let c = Config::parse(&format!("{base}strip = [\"managed-fields\"]\nfifo = \"real\"\n"), "host.toml", f.dir.path())
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
    let e = f.errors("[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \"manifests\"\nwatch_list = true\n");
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
    let e = f.errors("[admin]\ntoken_file = \"empty\"\ntoken_env = \"X\"\naddr = \"nowhere\"\nmax_upload = \"big\"\n");
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

#[test]
fn plugin_resources_lists_the_registries_spoken_to_without_tls_and_at_internal_addresses() {
    let config = Fixture::new()
        .parse(
            "[plugin_resources]\nplain_http_registries = [\"registry.tools:5000\"]\n\
             internal_registries = [\"harbor.tools.svc\", \"10.0.0.5:443\"]\n",
        )
        .unwrap();
    let pr = config.plugin_resources.unwrap();
    assert_eq!(pr.plain_http_registries, ["registry.tools:5000"]);
    assert_eq!(pr.internal_registries, ["harbor.tools.svc", "10.0.0.5:443"]);
}

#[test]
fn host_cache_max_size_bounds_the_compile_cache() {
    let f = Fixture::new();
    let config = f.parse("[host]\ncache_max_size = \"512MiB\"\n").unwrap();
    assert_eq!(config.host.cache_max_size, Some(512 << 20));
    let errors = f.errors("[host]\ncache_max_size = \"lots\"\n");
    assert!(errors.len() == 1 && errors[0].starts_with("host.toml:2:18: `cache_max_size`"), "{errors:?}");
}
