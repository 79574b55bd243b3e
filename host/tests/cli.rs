//! The `informer-host` binary, driven as a user drives it: `check` on good
//! and broken configs, `run` on a copy of `examples/` with a manifest edited
//! mid-run, `/metrics` and `/readyz` over real HTTP on a loopback port, and
//! SIGTERM exiting 0.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_informer-host");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn host() -> Command {
    let mut c = Command::new(BIN);
    c.env("RUST_LOG", "info").env("NO_COLOR", "1").env_remove("INFORMER_HOST_CONFIG").stdin(Stdio::null());
    c
}

fn output(args: &[&str], dir: &Path) -> Output {
    host().args(args).current_dir(dir).output().expect("run informer-host")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether a log line is one plugin `name` logged (`plugin=name`, or
/// `plugin="name"` when the field is written quoted).
fn from_plugin(line: &str, name: &str) -> bool {
    line.contains(&format!("plugin={name}")) || line.contains(&format!("plugin=\"{name}\""))
}

/// A copy of `examples/` in a temp dir whose config points at the built
/// plugins, a private compile cache and a free loopback port.
struct Demo {
    dir: tempfile::TempDir,
}

impl Demo {
    fn new() -> Demo {
        let plugins = plugin_build::build_all().unwrap_or_else(|e| panic!("building the plugins failed:\n{e}"));
        let dir = tempfile::tempdir().unwrap();
        let src = repo().join("examples");
        std::fs::create_dir(dir.path().join("manifests")).unwrap();
        for entry in std::fs::read_dir(src.join("manifests")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.path().join("manifests").join(entry.file_name())).unwrap();
        }
        let config = std::fs::read_to_string(src.join("host.toml")).unwrap();
        let config = config
            .replace("../target/plugins/wasm32-wasip2/release", plugins.to_str().unwrap())
            .replace("\"../target/informer-host-cache\"", "\"cache\"")
            .replace("\"127.0.0.1:9464\"", "\"127.0.0.1:0\"");
        assert!(config.contains("127.0.0.1:0") && !config.contains("../target"), "examples/host.toml changed shape");
        std::fs::write(dir.path().join("host.toml"), config).unwrap();
        Demo { dir }
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn config(&self) -> String {
        std::fs::read_to_string(self.path("host.toml")).unwrap()
    }
    fn set_config(&self, text: &str) {
        std::fs::write(self.path("host.toml"), text).unwrap();
    }
}

/// A running host whose stderr is collected in the background.
struct Running {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Running {
    fn start(dir: &Path, args: &[&str]) -> Running {
        let mut child = host()
            .arg("run")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start informer-host run");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Running { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the log contains `needle`; panics with the log after `secs`.
    fn wait_for(&mut self, needle: &str, secs: u64) -> String {
        self.wait_until(needle, secs, |log| log.contains(needle))
    }

    /// Waits until `done(log)`; panics with `what` and the log after `secs`.
    fn wait_until(&mut self, what: &str, secs: u64, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let log = self.log();
            if done(&log) {
                return log;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // Give the reader thread a moment to drain the pipe.
                std::thread::sleep(Duration::from_millis(100));
                let log = self.log();
                if done(&log) {
                    return log;
                }
                panic!("informer-host exited ({status}) before logging {what:?}:\n{log}");
            }
            assert!(Instant::now() < deadline, "no {what:?} within {secs}s:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The admin address from the start-up line.
    fn admin_addr(&mut self) -> SocketAddr {
        let log = self.wait_for("serving http://", 60);
        let start = log.find("serving http://").expect("serving line") + "serving http://".len();
        let rest = &log[start..];
        rest[..rest.find('/').unwrap()].parse().unwrap()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(ok.success(), "kill -{sig} failed");
    }

    /// Sends SIGTERM and returns the exit code and the whole log.
    fn terminate(mut self) -> (Option<i32>, String) {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(100));
                return (status.code(), self.log());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("informer-host did not exit within 30s of SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `GET path` over a real socket: (status, body).
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let status = buf.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("bad response {buf:?}"));
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

// ---------------------------------------------------------------------------
// check

#[test]
fn help_lists_the_commands_and_flags() {
    let out = output(&["--help"], &repo());
    assert!(out.status.success());
    let help = text(&out.stdout);
    for word in ["run", "check", "--config", "--log-format"] {
        assert!(help.contains(word), "{word} missing from --help:\n{help}");
    }
    let out = output(&["run", "--help"], &repo());
    let help = text(&out.stdout);
    for word in ["--metrics-addr", "--kubeconfig", "--context", "--shutdown-grace"] {
        assert!(help.contains(word), "{word} missing from run --help:\n{help}");
    }
}

#[test]
fn check_on_the_examples_prints_the_plugin_table() {
    let demo = Demo::new();
    let out = output(&["check", "--config", "host.toml"], demo.dir.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "check failed:\n{stdout}\n{}", text(&out.stderr));
    let header = stdout.lines().next().unwrap();
    for col in ["PLUGIN", "FILE", "SIZE", "WORLD", "IMPORTS", "GRANTED", "LIMITS"] {
        assert!(header.contains(col), "{col} missing from {header:?}");
    }
    for (plugin, file) in [
        ("event-log", "event_log.wasm"),
        ("label-audit", "label_audit.wasm"),
        ("label-audit-pods", "label_audit.wasm"),
        ("cache-reader", "cache_reader.wasm"),
    ] {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(plugin))
            .unwrap_or_else(|| panic!("no row for {plugin}:\n{stdout}"));
        assert!(line.contains(file), "{line}");
        assert!(line.contains("informer-host:plugin/batched-plugin@"), "{line}");
        assert!(line.contains("KiB"), "{line}");
    }
    let cache_reader = stdout.lines().find(|l| l.starts_with("cache-reader")).unwrap();
    assert!(cache_reader.contains("log,cache"), "{cache_reader}");
    let event_log = stdout.lines().find(|l| l.starts_with("event-log")).unwrap();
    assert!(event_log.contains("fuel 10000000, deadline 500ms, memory 16 MiB"), "{event_log}");
    assert!(stdout.contains("host.toml: ok (5 informer(s), 4 plugin(s), 1 controller(s))"), "{stdout}");
    let reloader =
        stdout.lines().find(|l| l.starts_with("reloader ")).unwrap_or_else(|| panic!("no reloader row:\n{stdout}"));
    assert!(reloader.contains("reloader.wasm") && reloader.contains("informer-host:plugin/controller@"), "{reloader}");
    assert!(reloader.contains("log,cache,kube") && reloader.contains("deadline 500ms, memory 32 MiB"), "{reloader}");
}

#[test]
fn check_lists_every_config_problem_with_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("manifests")).unwrap();
    std::fs::write(
        dir.path().join("host.toml"),
        r#"[[informer]]
name = "cms"
source = "manifests"
dir = "manifests"
resync = "every so often"

[[plugin]]
name = "a"
wasm = "missing.wasm"
informer = "configmaps"
deadline = "500000000000y"
fuel = 10
watch = "yes"

[[tenant]]
name = "t"
namespaces = ["t"]
deadline = "36893488147419104s"
max_plugins = "two"
"#,
    )
    .unwrap();
    let out = output(&["check", "--config", "host.toml"], dir.path());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = text(&out.stderr);
    // Everything in one pass: an unknown key or a wrong type in a table
    // does not hide the table's other problems.
    for want in [
        "host.toml:5:10: `resync`: invalid duration \"every so often\"",
        "host.toml:9:8: wasm file",
        "missing.wasm does not exist",
        "host.toml:10:12: unknown informer \"configmaps\" (defined: \"cms\")",
        "10 | informer = \"configmaps\"",
        "host.toml:11:12: `deadline` \"500000000000y\" is longer than the maximum of 1h",
        "host.toml:12:1: unknown field `fuel`",
        "host.toml:13:9: invalid type: string \"yes\", expected a boolean",
        "host.toml:18:12: `deadline` \"36893488147419104s\" is longer than the maximum of 1h",
        "host.toml:19:15: `max_plugins` must be a positive integer",
        "host.toml has 8 problems",
    ] {
        assert!(stderr.contains(want), "missing {want:?} in:\n{stderr}");
    }
}

#[test]
fn check_on_a_syntax_error_and_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("host.toml"), "[[informer]]\nname = \"x\nsource = \"kube\"\n").unwrap();
    let out = output(&["check", "--config", "host.toml"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("host.toml:2:"), "{}", text(&out.stderr));

    let out = output(&["check", "--config", "nope.toml"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("nope.toml: cannot read"), "{}", text(&out.stderr));
}

#[test]
fn check_names_a_plugin_that_is_not_a_component_and_still_checks_the_rest() {
    let demo = Demo::new();
    std::fs::write(demo.path("bogus.wasm"), b"this is not wasm").unwrap();
    let mut config = demo.config();
    config.push_str("\n[[plugin]]\nname = \"bogus\"\nwasm = \"bogus.wasm\"\ninformer = \"pods\"\n");
    demo.set_config(&config);
    let line = config.lines().position(|l| l == "name = \"bogus\"").unwrap() + 1;
    let out = output(&["check", "--config", "host.toml"], demo.dir.path());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.lines().any(|l| l.starts_with("event-log ")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("bogus ") && l.contains("FAILED")), "{stdout}");
    let want = format!("error: host.toml:{line}:8: plugin \"bogus\"");
    assert!(stdout.contains(&want), "missing {want:?} in:\n{stdout}");
    assert!(stdout.contains("is not a WebAssembly component"), "{stdout}");
    assert!(stdout.contains("host.toml: 1 problem"), "{stdout}");
}

// ---------------------------------------------------------------------------
// run

#[test]
fn run_the_examples_edit_a_manifest_scrape_and_terminate() {
    let demo = Demo::new();
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml"]);
    let addr = host.admin_addr();
    let log = host.wait_for("ready in", 60);
    for want in [
        "informer{name=configmaps}: listed 4 objects, synced in",
        "informer{name=deployments}: listed 3 objects, synced in",
        "plugin{name=event-log}: loaded event_log.wasm",
        "added ConfigMap shop/feature-flags at rv",
        "Deployment shop/checkout is missing required labels: team",
        "Pod monitoring/debug-shell is missing required labels: app, team",
        "5 informer(s) synced, 4 plugin(s) handled their initial list, 1 controller(s) synced",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }

    let (status, body) = http_get(addr, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, body) = http_get(addr, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[+]informer configmaps: synced, 4 objects"), "{body}");
    assert!(body.contains("[+]plugin event-log: synced"), "{body}");

    // Edit a manifest while it runs: event-log sees the update.
    let flags = demo.path("manifests/feature-flags.yaml");
    let edited = std::fs::read_to_string(&flags).unwrap().replace("new-checkout: \"false\"", "new-checkout: \"true\"");
    // Like an editor: write a hidden temp file, then rename it over the original.
    let tmp = demo.path("manifests/.feature-flags.yaml.swp");
    std::fs::write(&tmp, edited).unwrap();
    std::fs::rename(&tmp, &flags).unwrap();
    host.wait_for("updated ConfigMap shop/feature-flags rv", 30);

    let (status, metrics) = http_get(addr, "/metrics");
    assert_eq!(status, 200);
    for want in [
        "informer_host_informer_synced{informer=\"configmaps\"} 1",
        "informer_host_plugin_up{plugin=\"event-log\",informer=\"configmaps\"} 1",
        // 4 initial adds and the update.
        "informer_host_notifications_delivered_total{plugin=\"event-log\",informer=\"configmaps\"} 5",
        "informer_host_plugin_pending{plugin=\"event-log\",informer=\"configmaps\"} 0",
        "informer_host_plugin_call_duration_seconds_count{plugin=\"event-log\",informer=\"configmaps\"}",
        "informer_host_plugin_fuel_consumed_total{plugin=\"event-log\",informer=\"configmaps\"}",
        "# EOF",
    ] {
        assert!(metrics.contains(want), "missing {want:?} in:\n{metrics}");
    }

    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "exit status after SIGTERM:\n{log}");
    assert!(log.contains("received SIGTERM, shutting down"), "{log}");
    assert!(log.contains("all informers stopped"), "{log}");
}

#[test]
fn the_informers_of_one_directory_share_one_parse_so_a_bad_file_is_reported_once() {
    // The demo runs five informers (five kinds) over ./manifests: one
    // embedded cluster reads and watches the directory for all of them.
    let demo = Demo::new();
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml"]);
    host.wait_for("ready in", 60);
    let broken = demo.path("manifests/broken.yaml");
    std::fs::write(&broken, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: shop\n").unwrap();
    host.wait_for("malformed manifest", 30);
    // Time for any other informer's copy of the report to show up.
    std::thread::sleep(Duration::from_millis(1000));
    let reports =
        |log: &str| log.lines().filter(|l| l.contains("malformed manifest") && l.contains("broken.yaml")).count();
    assert_eq!(reports(&host.log()), 1, "{}", host.log());
    // Fixed, it loads once, and only the ConfigMaps' informer delivers it.
    std::fs::write(&broken, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: shop}\n").unwrap();
    let log = host.wait_for("added ConfigMap shop/late", 30);
    assert_eq!(reports(&log), 1, "{log}");
    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(log.lines().filter(|l| l.contains("added ConfigMap shop/late")).count(), 1, "{log}");
}

/// The resourceVersion a write produced, from its `write:` log line.
fn written_rv(log: &str, needle: &str) -> String {
    let line = log.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} in:\n{log}"));
    let rest = line.split(" rv=\"").nth(1).unwrap_or_else(|| panic!("no rv in {line}"));
    rest.split('"').next().unwrap().to_string()
}

/// Lines the reloader controller logged (`controller{name=reloader}`).
fn reloader_lines(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains("controller{name=reloader}") && l.contains(needle)).count()
}

#[test]
fn the_reloader_patches_the_deployment_in_the_embedded_store_once_per_change() {
    let demo = Demo::new();
    // A second event-log on the Deployments: it sees what the controller
    // wrote, as every informer of the directory does.
    let mut config = demo.config();
    let event_log = toml_path(&plugin_build::plugin_path("event-log"));
    config.push_str(&format!(
        "\n[[plugin]]\nname = \"deployment-log\"\nwasm = {event_log}\ninformer = \"deployments\"\ngrants = [\"log\"]\n"
    ));
    demo.set_config(&config);
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml"]);
    let addr = host.admin_addr();
    host.wait_for("ready in", 60);
    // First sight: the hash goes on the Deployment's metadata (no roll).
    // The deployment-log plugin may load before or after that patch, so it
    // sees the patched version as an update or in its initial list: either
    // way, at the resourceVersion the write produced.
    let log = host.wait_for("write: patch Deployment shop/web", 30);
    let rv = written_rv(&log, "write: patch Deployment shop/web");
    let log = host.wait_until("the deployment-log plugin sees the patched Deployment", 30, |log| {
        log.lines().any(|l| {
            from_plugin(l, "deployment-log")
                && l.contains("Deployment shop/web")
                && (l.contains(&format!("at rv {rv} ")) || l.contains(&format!("-> {rv} ")))
        })
    });
    assert!(log.contains("controller{name=reloader}: started in"), "{log}");
    assert_eq!(reloader_lines(&log, "write: patch Deployment shop/web"), 1, "{log}");
    let (status, body) = http_get(addr, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[+]controller reloader: synced"), "{body}");
    let (_, metrics) = http_get(addr, "/metrics");
    for want in [
        "informer_host_controller_writes_total{controller=\"reloader\",informer=\"deployments\",outcome=\"succeeded\"} 1",
        "informer_host_controller_writes_total{controller=\"reloader\",informer=\"deployments\",outcome=\"refused\"} 0",
        "informer_host_controller_reconciles_total{controller=\"reloader\",informer=\"deployments\",outcome=\"failed\"} 0",
        "informer_host_workqueue_depth{controller=\"reloader\",informer=\"deployments\"} 0",
        "informer_host_workqueue_work_duration_seconds_bucket{le=\"+Inf\",controller=\"reloader\",informer=\"deployments\"}",
        "informer_host_workqueue_longest_running_processor_seconds{controller=\"reloader\",informer=\"deployments\"}",
    ] {
        assert!(metrics.contains(want), "missing {want:?} in:\n{metrics}");
    }
    let adds =
        metric_value(&metrics, "informer_host_workqueue_adds_total{controller=\"reloader\",informer=\"deployments\"}");
    assert!(adds >= 1.0, "the Deployment's key was added: {adds}");

    // A real change of the ConfigMap it uses: one more patch (the pod
    // template: a roll) and an Event.
    let web = demo.path("manifests/web.yaml");
    let text = std::fs::read_to_string(&web).unwrap();
    assert!(text.contains("CACHE_TTL: \"30s\""), "examples/manifests/web.yaml changed shape");
    std::fs::write(&web, text.replace("CACHE_TTL: \"30s\"", "CACHE_TTL: \"60s\"")).unwrap();
    let log = host.wait_for("write: create Event shop/web", 30);
    assert!(reloader_lines(&log, "shop/web: configuration changed, rolling") == 1, "{log}");
    // The files are never rewritten.
    assert!(std::fs::read_to_string(&web).unwrap().contains("CACHE_TTL: \"60s\""));
    assert!(!std::fs::read_to_string(&web).unwrap().contains("config-hash"));

    // A label-only change of the ConfigMap changes no data: no write.
    let text = std::fs::read_to_string(&web).unwrap();
    std::fs::write(&web, text.replace("team: storefront\ndata:", "team: storefront\n    tier: front\ndata:")).unwrap();
    host.wait_until("the label change delivered", 30, |log| {
        log.lines().filter(|l| from_plugin(l, "event-log") && l.contains("updated ConfigMap shop/web-config")).count()
            >= 2
    });
    std::thread::sleep(Duration::from_millis(500));
    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(reloader_lines(&log, "write: patch Deployment shop/web"), 2, "one per real change:\n{log}");
    assert_eq!(reloader_lines(&log, "write: create Event"), 1, "{log}");
    assert!(log.contains("1 controller(s) stopped in"), "{log}");
    let stopped = log.find("1 controller(s) stopped in").unwrap();
    assert!(stopped < log.find("all informers stopped").unwrap(), "controllers stop before the informers:\n{log}");
}

#[test]
fn run_keeps_going_when_one_plugin_fails_to_load() {
    let demo = Demo::new();
    std::fs::write(demo.path("bogus.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let mut config = demo.config();
    config.push_str("\n[[plugin]]\nname = \"bogus\"\nwasm = \"bogus.wasm\"\ninformer = \"pods\"\n");
    demo.set_config(&config);
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml", "--log-format", "json"]);
    let addr = host.admin_addr();
    let log = host.wait_for("handled their initial list", 60);
    assert!(log.contains("1 plugin(s) failed to load"), "{log}");
    let failure = log.lines().find(|l| l.contains("bogus") && l.contains("ERROR")).expect("an error line for bogus");
    let json: serde_json::Value = serde_json::from_str(failure).expect("json log lines");
    let message = json["fields"]["message"].as_str().unwrap();
    assert!(message.contains("plugin \"bogus\"") && message.contains("core wasm module"), "{message}");
    assert!(message.contains("host.toml:"), "{message}");

    let (status, body) = http_get(addr, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[+]plugin bogus: failed to load"), "{body}");
    let (_, metrics) = http_get(addr, "/metrics");
    assert!(metrics.contains("informer_host_plugin_up{plugin=\"bogus\",informer=\"pods\"} 0"), "{metrics}");
    assert!(metrics.contains("informer_host_plugin_up{plugin=\"event-log\",informer=\"configmaps\"} 1"), "{metrics}");
    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
}

/// The compiled form of `wasm` in the compile cache `cache` (written by a
/// `check` that compiled it): `<sha256 of the component>-<engine>.cwasm`.
fn cached_compile(cache: &Path, wasm: &Path) -> PathBuf {
    use sha2::Digest as _;
    let hash = hex::encode(sha2::Sha256::digest(std::fs::read(wasm).unwrap()));
    let found: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&hash) && name.ends_with(".cwasm")
        })
        .collect();
    assert_eq!(found.len(), 1, "one compiled {} in {}: {found:?}", wasm.display(), cache.display());
    found.into_iter().next().unwrap()
}

/// The examples and a plugin `slow` whose load does not finish until the
/// test says so: its compiled form in the compile cache is a FIFO (the
/// path returned), which the runtime opens, and blocks on, when it loads
/// the plugin. Opened for writing and closed, it reads as empty: the
/// component is compiled anew and its `init` panics, so it ends as failed.
///
/// (`spin` with `in_init = true` makes a load that lasts its whole init
/// budget, but the checks made while it loads would then race that budget;
/// the FIFO holds the load exactly until the test lets it go.)
fn slow_loading_demo() -> (Demo, PathBuf) {
    let demo = Demo::new();
    let slow = plugin_build::plugin_path("panic-on");
    let mut config = demo.config();
    config.push_str(&format!(
        "\n[[plugin]]\nname = \"slow\"\nwasm = {:?}\ninformer = \"pods\"\ngrants = [\"log\"]\n\
         config = {{ panic_in_init = true }}\n",
        slow.display().to_string()
    ));
    demo.set_config(&config);
    let out = output(&["check", "--config", "host.toml"], demo.dir.path());
    assert_eq!(out.status.code(), Some(1), "only `slow` fails its check: {out:?}");
    let cached = cached_compile(&demo.path("cache"), &slow);
    std::fs::remove_file(&cached).unwrap();
    let made = Command::new("mkfifo").arg(&cached).status().unwrap();
    assert!(made.success(), "mkfifo {}", cached.display());
    (demo, cached)
}

#[test]
fn a_slow_plugin_load_holds_back_neither_health_nor_the_other_plugins() {
    let (demo, cached) = slow_loading_demo();
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml"]);
    // Health is served and the healthy plugins run while `slow` loads.
    let addr = host.admin_addr();
    assert_eq!(http_get(addr, "/healthz"), (200, "ok\n".to_string()));
    let log = host.wait_for("added ConfigMap shop/feature-flags at rv", 30);
    host.wait_for("Deployment shop/checkout is missing required labels: team", 30);
    assert!(!log.contains("ready in"), "ready while `slow` still loads:\n{log}");
    let (status, body) = http_get(addr, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("[-]plugin slow: loading"), "{body}");
    assert!(body.contains("[+]plugin event-log: synced"), "{body}");
    assert_eq!(http_get(addr, "/metrics").0, 200);

    // Let it go: the cache entry reads as empty, the component is compiled
    // and its `init` panics.
    std::fs::OpenOptions::new().write(true).open(&cached).unwrap();
    let log = host.wait_for("ready in", 60);
    assert!(log.contains("4 plugin(s) handled their initial list, 1 plugin(s) failed to load"), "{log}");
    let failure = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("plugin \"slow\""))
        .unwrap_or_else(|| panic!("no error line naming `slow`:\n{log}"));
    assert!(failure.contains("host.toml:") && failure.contains("panic"), "{failure}");
    let healthy = log.find("added ConfigMap shop/feature-flags at rv").unwrap();
    assert!(healthy < log.find(failure).unwrap(), "{log}");
    let (status, body) = http_get(addr, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[+]plugin slow: failed to load") && body.contains("panic"), "{body}");
    let (_, metrics) = http_get(addr, "/metrics");
    assert!(metrics.contains("informer_host_plugin_up{plugin=\"slow\",informer=\"pods\"} 0"), "{metrics}");
    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn sigterm_while_a_plugin_still_loads_exits_in_order() {
    let (demo, _cached) = slow_loading_demo();
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml"]);
    host.admin_addr();
    host.wait_for("added ConfigMap shop/feature-flags at rv", 30);
    let t = Instant::now();
    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("all informers stopped"), "{log}");
    assert!(!log.contains("ready in"), "{log}");
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?} to exit:\n{log}", t.elapsed());
}

#[test]
fn run_with_a_flag_address_and_sigint() {
    let demo = Demo::new();
    let config = demo.config();
    let broken: String = config
        .lines()
        .map(|l| if l.starts_with("metrics_addr") { "metrics_addr = \"256.0.0.1:1\"" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    demo.set_config(&broken);
    // The config's address is invalid: `check`/`run` refuse it...
    let out = output(&["check", "--config", "host.toml"], demo.dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("`metrics_addr`"), "{}", text(&out.stderr));
    // ...and a valid one from the command line does not rescue an invalid config.
    let fixed: String = config.lines().filter(|l| !l.starts_with("metrics_addr")).collect::<Vec<_>>().join("\n");
    demo.set_config(&fixed);
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml", "--metrics-addr", "127.0.0.1:0"]);
    let addr = host.admin_addr();
    host.wait_for("ready in", 60);
    assert_eq!(http_get(addr, "/healthz").0, 200);
    host.signal("INT");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = host.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after SIGINT:\n{}", host.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{}", host.log());
}

#[test]
fn run_refuses_an_invalid_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("host.toml"), "[[plugin]]\nname = \"x\"\n").unwrap();
    let out = host().args(["run", "--config", "host.toml"]).current_dir(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("host.toml:1:1: missing field `wasm`"), "{stderr}");
}

/// A demo whose `spin` plugin loops in its call on ConfigMap `late-arrival`
/// until its `deadline` stops it; the ConfigMap is added after start.
fn spinning_demo(deadline: &str, extra: &[&str]) -> (Demo, Running) {
    let demo = Demo::new();
    let mut config = demo.config();
    let spin = plugin_build::plugin_path("spin");
    config.push_str(&format!(
        "\n[[plugin]]\nname = \"spin\"\nwasm = {:?}\ninformer = \"configmaps\"\ngrants = [\"log\"]\n\
         fuel_per_call = \"unlimited\"\ndeadline = \"{deadline}\"\nconfig = {{ name = \"late-arrival\" }}\n",
        spin.display().to_string()
    ));
    demo.set_config(&config);
    let mut args = vec!["--config", "host.toml"];
    args.extend_from_slice(extra);
    let mut host = Running::start(demo.dir.path(), &args);
    host.wait_for("ready in", 60);
    let tmp = demo.path("manifests/.late.yaml.swp");
    std::fs::write(
        &tmp,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: late-arrival\n  namespace: shop\ndata:\n  a: b\n",
    )
    .unwrap();
    std::fs::rename(&tmp, demo.path("manifests/late.yaml")).unwrap();
    // event-log gets the same add at the same moment as spin.
    host.wait_for("added ConfigMap shop/late-arrival", 30);
    // spin's worker was woken together with event-log's; give it ample
    // time to enter the call (which then runs until its deadline).
    std::thread::sleep(Duration::from_secs(1));
    (demo, host)
}

#[test]
fn sigterm_lets_the_in_flight_call_finish() {
    let (_demo, host) = spinning_demo("3s", &[]);
    let t = Instant::now();
    let (code, log) = host.terminate();
    let took = t.elapsed();
    assert_eq!(code, Some(0), "{log}");
    // The call ran until its deadline, within the grace period.
    assert!(log.contains("all informers stopped in"), "{log}");
    assert!(!log.contains("grace period"), "{log}");
    assert!(log.contains("deadline"), "the spinning call should end at its deadline:\n{log}");
    assert!(took >= Duration::from_millis(1500), "exited after {took:?}, before the in-flight call ended:\n{log}");
}

#[test]
fn sigterm_gives_up_on_a_call_after_the_grace_period() {
    // The same scenario with a grace period shorter than the call's deadline.
    let (_demo, host) = spinning_demo("8s", &["--shutdown-grace", "300ms"]);
    let t = Instant::now();
    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("grace period of 300ms elapsed"), "{log}");
    // Waiting for the call would take about 7 s more.
    assert!(t.elapsed() < Duration::from_secs(4), "took {:?}:\n{log}", t.elapsed());
}

// ---------------------------------------------------------------------------
// kube source, against a minimal API server on a loopback port

/// Serves a ConfigMap list of `shop` and, on the first watch, one MODIFIED
/// event once [`FakeApiServer::modify`] is called; later watches stay open
/// without events. Records request targets.
struct FakeApiServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
    modify: Arc<std::sync::atomic::AtomicBool>,
}

impl FakeApiServer {
    fn start() -> FakeApiServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let modify = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (seen, go) = (requests.clone(), modify.clone());
        std::thread::spawn(move || {
            let watches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (seen, watches, go) = (seen.clone(), watches.clone(), go.clone());
                std::thread::spawn(move || serve_fake(conn, &seen, &watches, &go));
            }
        });
        FakeApiServer { addr, requests, modify }
    }
    /// Lets the first watch send its MODIFIED event.
    fn modify(&self) {
        self.modify.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve_fake(
    mut conn: TcpStream,
    seen: &Mutex<Vec<String>>,
    watches: &std::sync::atomic::AtomicUsize,
    modify: &std::sync::atomic::AtomicBool,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
    seen.lock().unwrap().push(target.clone());
    if target == "/api/v1" {
        // Discovery, asked once before the first list.
        let body = r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["create","delete","get","list","patch","update","watch"],"shortNames":["cm"]}]}"#;
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    if !target.starts_with("/api/v1/namespaces/shop/configmaps") {
        let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"not found","reason":"NotFound","code":404}"#;
        let _ = write!(
            conn,
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    if target.contains("sendInitialEvents=true") {
        // A server with the WatchList feature gate off refuses a watch-list
        // (apimachinery's ValidateListOptions); the host lists instead.
        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","reason":"Invalid","code":422}"#;
        let _ = write!(
            conn,
            "HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    if target.contains("watch=true") || target.contains("watch=1") {
        let _ = write!(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n");
        if watches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !modify.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let event = r#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web-config","namespace":"shop","resourceVersion":"11","labels":{"app":"web"}},"data":{"CACHE_TTL":"60s"}}}"#;
            let _ = writeln!(conn, "{event}");
            let _ = conn.flush();
        }
        // Hold the watch open; the host closes it at shutdown.
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let body = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[
        {"metadata":{"name":"web-config","namespace":"shop","resourceVersion":"8","labels":{"app":"web"}},"data":{"CACHE_TTL":"30s"}},
        {"metadata":{"name":"flags","namespace":"shop","resourceVersion":"9","labels":{"app":"web"}},"data":{}}]}"#;
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

#[test]
fn run_a_kube_informer_through_a_kubeconfig_context() {
    let server = FakeApiServer::start();
    let event_log = plugin_build::plugin_path("event-log");
    let dir = tempfile::tempdir().unwrap();
    // The current context points nowhere; --context picks the right one.
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: elsewhere\n\
             clusters:\n- name: nowhere\n  cluster:\n    server: http://127.0.0.1:1\n\
             - name: fake\n  cluster:\n    server: http://{}\n\
             contexts:\n- name: elsewhere\n  context:\n    cluster: nowhere\n    user: nobody\n\
             - name: test\n  context:\n    cluster: fake\n    user: nobody\n\
             users:\n- name: nobody\n  user: {{}}\n",
            server.addr
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("host.toml"),
        format!(
            "[host]\ncache_dir = \"cache\"\n\n[[informer]]\nname = \"configmaps\"\nsource = \"kube\"\n\
             api_version = \"v1\"\nkind = \"ConfigMap\"\nnamespace = \"shop\"\nlabel_selector = \"app=web\"\n\n\
             [[plugin]]\nname = \"event-log\"\nwasm = {:?}\ninformer = \"configmaps\"\ngrants = [\"log\"]\n",
            event_log.display().to_string()
        ),
    )
    .unwrap();
    let mut host = Running::start(
        dir.path(),
        &["--config", "host.toml", "--kubeconfig", "kubeconfig", "--context", "test", "--metrics-addr", "127.0.0.1:0"],
    );
    let addr = host.admin_addr();
    let log = host.wait_for("ready in", 60);
    for want in [
        "informer{name=configmaps}: source: v1/ConfigMap in namespace shop, labels \"app=web\"",
        "listed 2 objects, synced in",
        "added ConfigMap shop/web-config at rv 8 (initial list)",
        "added ConfigMap shop/flags at rv 9 (initial list)",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    // The plugin loads while the informer runs: the update comes once it
    // has handled the initial list, so it sees both.
    server.modify();
    host.wait_for("updated ConfigMap shop/web-config rv 8 -> 11", 30);
    let (status, body) = http_get(addr, "/readyz");
    assert_eq!(status, 200, "{body}");
    let (_, metrics) = http_get(addr, "/metrics");
    assert!(metrics.contains("informer_host_informer_resource_version{informer=\"configmaps\"} 11"), "{metrics}");
    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
    let requests = server.requests();
    assert_eq!(requests[0], "/api/v1", "discovery first: {requests:?}");
    let rest = &requests[1..];
    assert!(rest.iter().all(|r| r.starts_with("/api/v1/namespaces/shop/configmaps?")), "{requests:?}");
    assert!(rest.iter().all(|r| r.contains("labelSelector=app%3Dweb")), "{requests:?}");
}

#[test]
fn run_names_the_informer_when_the_kubeconfig_is_unusable() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("host.toml"),
        "[[informer]]\nname = \"pods\"\nsource = \"kube\"\nversion = \"v1\"\nkind = \"Pod\"\n",
    )
    .unwrap();
    let out = host()
        .args(["run", "--config", "host.toml", "--kubeconfig", "missing-kubeconfig"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("host.toml:2:8: informer \"pods\": cannot open its kube source"), "{stderr}");
    assert!(stderr.contains("missing-kubeconfig"), "{stderr}");
}

// ---------------------------------------------------------------------------
// tenants, the admin API, SIGHUP and watched wasm files

/// A request over a real socket: (status, body).
fn http(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Option<(&str, &[u8])>) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let (ctype, bytes) = body.unwrap_or(("text/plain", b""));
    head.push_str(&format!("Content-Type: {ctype}\r\nContent-Length: {}\r\n\r\n", bytes.len()));
    s.write_all(head.as_bytes()).unwrap();
    // A server refusing an oversized body may answer before reading it all.
    let _ = s.write_all(bytes);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let buf = text(&buf);
    let status = buf.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("bad response {buf:?}"));
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

impl Running {
    /// The admin API's address from its start-up line.
    fn api_addr(&mut self) -> SocketAddr {
        let log = self.wait_for("admin API on http://", 60);
        let start = log.find("admin API on http://").unwrap() + "admin API on http://".len();
        let rest = &log[start..];
        rest[..rest.find('/').unwrap()].parse().unwrap()
    }

    /// Waits until `needle` occurs at least `n` times in the log.
    fn wait_for_count(&mut self, needle: &str, n: usize, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let log = self.wait_for(needle, secs);
            if log.matches(needle).count() >= n {
                return log;
            }
            assert!(Instant::now() < deadline, "fewer than {n} {needle:?} within {secs}s:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// 1-based line of the first line of `text` equal to `line` after `from`.
fn line_of(text: &str, line: &str, from: usize) -> usize {
    text.lines().enumerate().skip(from).find(|(_, l)| *l == line).map(|(i, _)| i + 1).unwrap_or_else(|| {
        panic!("no line {line:?} in:\n{text}");
    })
}

fn toml_path(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

#[test]
fn check_accepts_tenants_and_names_every_broken_tenant_setting() {
    let demo = Demo::new();
    let event_log = toml_path(&plugin_build::plugin_path("event-log"));
    let mut config = demo.config();
    config.push_str(&format!(
        "\n[[tenant]]\nname = \"shop\"\nnamespaces = [\"shop\"]\nmax_plugins = 1\nmemory = \"8MiB\"\nmax_pending = 100\n\
         \n[[tenant]]\nname = \"ops\"\nnamespaces = [\"monitoring\"]\ncluster_scoped = true\n\
         \n[[plugin]]\nname = \"shop-log\"\nwasm = {event_log}\ninformer = \"configmaps\"\ntenant = \"shop\"\n\
         grants = [\"log\"]\nwatch = true\non_swap = \"replay\"\n"
    ));
    demo.set_config(&config);
    let out = output(&["check", "--config", "host.toml"], demo.dir.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "check failed:\n{stdout}\n{}", text(&out.stderr));
    assert!(stdout.lines().next().unwrap().contains("TENANT"), "{stdout}");
    let row = stdout.lines().find(|l| l.starts_with("shop-log ")).unwrap_or_else(|| panic!("no shop-log:\n{stdout}"));
    // The tenant's caps apply to what the plugin left out.
    assert!(row.contains(" shop ") && row.contains("memory 8 MiB, pending 100"), "{row}");
    assert!(stdout.contains("host.toml: ok (5 informer(s), 5 plugin(s), 1 controller(s)"), "{stdout}");

    // Too many plugins for the tenant, an unknown tenant, a plugin asking
    // for more than its tenant allows, and an admin API without a token.
    let shop_line = line_of(&config, "name = \"shop\"", 0);
    let mut broken = config.clone();
    broken.push_str(&format!(
        "\n[[plugin]]\nname = \"shop-two\"\nwasm = {event_log}\ninformer = \"configmaps\"\ntenant = \"shop\"\n\
         memory = \"16MiB\"\n\
         \n[[plugin]]\nname = \"bank-log\"\nwasm = {event_log}\ninformer = \"configmaps\"\ntenant = \"bank\"\n\
         \n[admin]\naddr = \"127.0.0.1:0\"\n"
    ));
    demo.set_config(&broken);
    let out = output(&["check", "--config", "host.toml"], demo.dir.path());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = text(&out.stderr);
    let two = line_of(&broken, "name = \"shop-two\"", 0);
    let bank = line_of(&broken, "name = \"bank-log\"", 0);
    let admin = line_of(&broken, "[admin]", 0);
    let shop_log = line_of(&broken, "name = \"shop-log\"", 0);
    for want in [
        format!(
            "host.toml:{}:10: tenant \"shop\" allows at most 1 plugin(s) (`max_plugins` at line {}), and this is \
             plugin number 2 of it (before it: \"shop-log\" at line {shop_log})",
            two + 3,
            shop_line + 2
        ),
        format!(
            "host.toml:{}:10: `memory` = 16 MiB exceeds the cap of tenant \"shop\" (memory = 8 MiB at line {})",
            two + 4,
            shop_line + 3
        ),
        format!("host.toml:{}:10: unknown tenant \"bank\" (defined: \"ops\", \"shop\")", bank + 3),
        format!("host.toml:{admin}:2: `[admin]` needs `token_file` or `token_env`"),
        "host.toml has 4 problems".to_string(),
    ] {
        assert!(stderr.contains(&want), "missing {want:?} in:\n{stderr}");
    }

    // A token file that is not there is named.
    demo.set_config(&format!("{config}\n[admin]\ntoken_file = \"secrets/admin.token\"\n"));
    let out = output(&["check", "--config", "host.toml"], demo.dir.path());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = text(&out.stderr);
    let line = line_of(&demo.config(), "[admin]", 0) + 1;
    let want = format!("host.toml:{line}:14: `token_file`: cannot read ");
    assert!(stderr.contains(&want) && stderr.contains("secrets/admin.token"), "missing {want:?} in:\n{stderr}");
}

#[test]
fn run_serves_the_admin_api_with_its_token_only() {
    let demo = Demo::new();
    std::fs::write(demo.path("admin.token"), "let-me-in\n").unwrap();
    let event_log = toml_path(&plugin_build::plugin_path("event-log"));
    let mut config = demo.config();
    config.push_str(&format!(
        "\n[admin]\naddr = \"127.0.0.1:0\"\ntoken_file = \"admin.token\"\nmax_upload = \"64KiB\"\n\
         \n[[tenant]]\nname = \"ops\"\nnamespaces = [\"monitoring\"]\n\
         \n[[plugin]]\nname = \"ops-log\"\nwasm = {event_log}\ninformer = \"configmaps\"\ntenant = \"ops\"\n\
         grants = [\"log\"]\n"
    ));
    demo.set_config(&config);
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml"]);
    let metrics = host.admin_addr();
    let api = host.api_addr();
    let log = host.wait_for("ready in", 60);
    assert!(log.contains("bearer token from token_file"), "{log}");
    assert!(log.contains("5 plugin(s) handled their initial list"), "{log}");

    // No token, a wrong token: 401 with a JSON error. Metrics stay open.
    for token in [None, Some("let-me-out")] {
        let (status, body) = http(api, "GET", "/v1/plugins", token, None);
        assert_eq!(status, 401, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(json["error"].as_str().unwrap().contains("bearer token"), "{body}");
    }
    assert_eq!(http_get(metrics, "/healthz").0, 200);

    let token = Some("let-me-in");
    let (status, body) = http(api, "GET", "/v1/plugins", token, None);
    assert_eq!(status, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cache-reader", "event-log", "label-audit", "label-audit-pods", "ops-log"], "{body}");
    let (status, body) = http(api, "GET", "/v1/plugins/ops-log", token, None);
    assert_eq!(status, 200, "{body}");
    let ops: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((ops["tenant"].as_str(), ops["informer"].as_str()), (Some("ops"), Some("configmaps")), "{body}");
    assert_eq!(http(api, "GET", "/v1/plugins/nope", token, None).0, 404);
    // Uploads past `max_upload` are refused.
    let big = vec![0u8; 100 << 10];
    let (status, _) = http(api, "PUT", "/v1/plugins/event-log/wasm", token, Some(("application/wasm", &big)));
    assert_eq!(status, 413);
    let (status, body) =
        http(api, "PUT", "/v1/plugins/event-log/wasm", token, Some(("application/wasm", b"not a component")));
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("is not a WebAssembly component"), "{body}");

    // Unloaded through the API: metrics and readiness follow.
    let (status, body) = http(api, "DELETE", "/v1/plugins/label-audit-pods", token, None);
    assert_eq!(status, 204, "{body}");
    let (_, m) = http_get(metrics, "/metrics");
    assert!(!m.contains("plugin=\"label-audit-pods\""), "{m}");
    assert!(m.contains("informer_host_plugin_up{plugin=\"ops-log\",informer=\"configmaps\"} 1"), "{m}");
    let (status, body) = http_get(metrics, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("label-audit-pods"), "{body}");

    // The tenant's plugin got only its namespace's objects.
    let ops: Vec<&str> = log.lines().filter(|l| from_plugin(l, "ops-log") && l.contains("added ConfigMap")).collect();
    assert_eq!(ops.len(), 1, "{ops:#?}\n{log}");
    assert!(ops[0].contains("monitoring/grafana-dashboards"), "{ops:?}");
    let (_, body) = http(api, "GET", "/v1/plugins/ops-log", token, None);
    let ops: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ops["delivered"], 1, "{body}");

    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn sighup_applies_config_changes_and_survives_a_broken_config() {
    let demo = Demo::new();
    let original = demo.config();
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml"]);
    let addr = host.admin_addr();
    host.wait_for("ready in", 60);

    // A plugin added: it loads and gets the cache as initial-list adds.
    let event_log = toml_path(&plugin_build::plugin_path("event-log"));
    let added = format!(
        "{original}\n[[plugin]]\nname = \"second-log\"\nwasm = {event_log}\ninformer = \"configmaps\"\ngrants = [\"log\"]\n"
    );
    demo.set_config(&added);
    host.signal("HUP");
    let log = host.wait_for("reloaded host.toml", 60);
    for want in [
        "plugin{name=second-log}: added to the config: loading it",
        "plugin{name=second-log}: loaded event_log.wasm",
        "reloaded host.toml: 1 plugin(s) added, 0 removed, 0 swapped, 0 reloaded, 4 unchanged, 0 failed",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    host.wait_until("second-log's initial add of shop/feature-flags", 30, |log| {
        log.lines().any(|l| {
            l.contains("added ConfigMap shop/feature-flags at rv 3 (initial list)") && from_plugin(l, "second-log")
        })
    });
    // Its adds are logged during the call that delivers them; it counts
    // as synced once that call has returned.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (status, body) = loop {
        let (status, body) = http_get(addr, "/readyz");
        if status == 200 || std::time::Instant::now() > deadline {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[+]plugin second-log: synced"), "{body}");

    // A broken config: every problem is logged, nothing changes.
    let broken = added
        .replace("informer = \"pods\"\n", "informer = \"pods\"\nfule = 3\n")
        .replace("name = \"second-log\"\n", "name = \"second-log\"\ntenant = \"nobody\"\n");
    demo.set_config(&broken);
    host.signal("HUP");
    let log = host.wait_for("nothing was changed", 60);
    let fule = line_of(&broken, "fule = 3", 0);
    let nobody = line_of(&broken, "tenant = \"nobody\"", 0);
    for want in [
        format!("host.toml:{fule}:1: unknown field `fule`"),
        format!("host.toml:{nobody}:10: unknown tenant \"nobody\" (no [[tenant]] is defined)"),
        "host.toml has 2 problems; nothing was changed, the host keeps running as it was".to_string(),
    ] {
        assert!(log.contains(&want), "missing {want:?} in:\n{log}");
    }
    assert_eq!(http_get(addr, "/healthz").0, 200);
    assert!(http_get(addr, "/readyz").1.contains("[+]plugin second-log: synced"));

    // Removed, limits changed, informer changed: unload, unload + load,
    // and a refusal to touch the informer.
    let changed = original
        .replace("fuel_per_call = 10_000_000\n", "fuel_per_call = 20_000_000\n")
        .replace("kind = \"Namespace\"\n", "kind = \"Namespace\"\nresync = \"1m\"\n");
    assert_ne!(changed, original);
    demo.set_config(&changed);
    host.signal("HUP");
    let log = host.wait_for_count("reloaded host.toml", 2, 60);
    for want in [
        "informer changes need a restart (informer \"namespaces\" changed)",
        "plugin{name=second-log}: removed from the config: unloaded",
        "plugin{name=event-log}: limits changed: reloading it (unload + load)",
        "reloaded host.toml: 0 plugin(s) added, 1 removed, 0 swapped, 1 reloaded, 3 unchanged, 0 failed",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    assert_eq!(log.matches("plugin{name=event-log}: loaded event_log.wasm").count(), 2, "{log}");
    let (_, metrics) = http_get(addr, "/metrics");
    assert!(!metrics.contains("plugin=\"second-log\""), "{metrics}");
    assert!(metrics.contains("informer_host_plugin_up{plugin=\"event-log\",informer=\"configmaps\"} 1"), "{metrics}");

    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn a_watched_plugin_is_swapped_when_its_wasm_file_changes() {
    let demo = Demo::new();
    let wasm = demo.path("swapper.wasm");
    std::fs::copy(plugin_build::plugin_path("swap-v1"), &wasm).unwrap();
    let mut config = demo.config();
    config.push_str(
        "\n[[plugin]]\nname = \"swapper\"\nwasm = \"swapper.wasm\"\ninformer = \"configmaps\"\ngrants = [\"log\"]\n\
         watch = true\non_swap = \"replay\"\n",
    );
    demo.set_config(&config);
    let mut host = Running::start(demo.dir.path(), &["--config", "host.toml"]);
    let addr = host.admin_addr();
    let log = host.wait_for("ready in", 60);
    assert!(log.contains("plugin{name=swapper}: watching"), "{log}");
    assert!(log.contains("v1 add shop/feature-flags rv=3 initial=true"), "{log}");

    // Like `cargo build` writing the new component in place.
    std::fs::copy(plugin_build::plugin_path("swap-v2"), &wasm).unwrap();
    let log = host.wait_for("swapped to version", 60);
    assert!(log.contains("(swapper.wasm changed; on_swap = replay; version "), "{log}");
    // Replay: the new version gets the whole cache.
    host.wait_for("v2 add shop/feature-flags rv=3 initial=true", 30);
    let log = host.wait_for("v2 add monitoring/grafana-dashboards rv=1 initial=true", 30);
    assert!(!log.contains("v2 update"), "{log}");

    // A broken file: the swap fails and v2 keeps serving.
    let tmp = demo.path(".swapper.wasm.tmp");
    std::fs::write(&tmp, b"not a component").unwrap();
    std::fs::rename(&tmp, &wasm).unwrap();
    host.wait_for("swapper.wasm changed, but the new version cannot be swapped in", 30);
    let flags = demo.path("manifests/feature-flags.yaml");
    let edited = std::fs::read_to_string(&flags).unwrap().replace("new-checkout: \"false\"", "new-checkout: \"true\"");
    std::fs::write(&flags, edited).unwrap();
    host.wait_for("v2 update shop/feature-flags rv=3->", 30);
    let (status, body) = http_get(addr, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[+]plugin swapper: synced"), "{body}");

    let (code, log) = host.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains("v1 update"), "{log}");
}

/// The value of the sample `series` (name and labels) in a scrape.
fn metric_value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{metrics}"))
}
