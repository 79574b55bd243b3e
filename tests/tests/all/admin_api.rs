//! The admin API over real HTTP on a loopback port.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e::plugins::{Running, runtime, wasm};
use informer_host::admin_api::{AdminConfig, router, router_with_wasm_dirs};
use informer_host::registry::{OnSwap, PluginDef, PluginRegistry, RegistryError};
use informer_host::source::MemorySource;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "s3cret";

/// The folder of the built plugins: the wasm directory of the tests' routers.
fn plugins_dir() -> PathBuf {
    wasm("recorder").parent().unwrap().to_path_buf()
}

/// Serves `app` on a loopback port.
async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// One HTTP/1.1 request; returns the status and the body.
async fn request(addr: SocketAddr, method: &str, path: &str, token: &str, ctype: &str, body: &[u8]) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (413) before reading the whole body.
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    // Chunked bodies: keep the JSON part.
    let body = match (body.find(['{', '[']), body.rfind(['}', ']'])) {
        (Some(a), Some(b)) if a <= b => body[a..=b].to_string(),
        _ => body,
    };
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_authenticates_loads_swaps_and_rejects_bad_uploads() {
    let src = MemorySource::new();
    src.apply_config_map("ns", "a", "1").unwrap();
    let run = Running::start(&src);
    let registry = PluginRegistry::new(runtime());
    registry.add_informer("cms", run.informer.clone());
    let config = AdminConfig { token: TOKEN.into(), max_upload: 1 << 20 };
    let addr = serve(router_with_wasm_dirs(registry.clone(), config, vec![plugins_dir()])).await;

    let (code, body) = request(addr, "GET", "/v1/plugins", "wrong", "application/json", b"").await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("bearer token"), "{body}");

    let load = json!({"name": "rec", "wasm": wasm("recorder"), "informer": "cms", "grants": ["log"]});
    let (code, body) =
        request(addr, "POST", "/v1/plugins", TOKEN, "application/json", load.to_string().as_bytes()).await;
    assert_eq!(code, 201, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["file"], wasm("recorder").canonicalize().unwrap().display().to_string(), "{body}");
    let (code, body) =
        request(addr, "POST", "/v1/plugins", TOKEN, "application/json", load.to_string().as_bytes()).await;
    assert_eq!(code, 409, "{body}");

    let bad_grant = json!({"name": "x", "wasm": wasm("recorder"), "informer": "cms", "grants": ["network"]});
    let (code, body) =
        request(addr, "POST", "/v1/plugins", TOKEN, "application/json", bad_grant.to_string().as_bytes()).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("unknown grant"), "{body}");

    e2e::eventually("synced", || registry.get("rec").is_some_and(|s| s.synced)).await;
    let (code, body) = request(addr, "GET", "/v1/plugins/rec", TOKEN, "application/json", b"").await;
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["delivered"], 1);
    let first_version = status["version"].as_str().unwrap().to_string();

    let (code, body) = request(addr, "PUT", "/v1/plugins/rec/wasm", TOKEN, "application/wasm", b"hello").await;
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("not a WebAssembly component"), "{body}");

    let big = vec![0u8; 2 << 20];
    let (code, body) = request(addr, "PUT", "/v1/plugins/rec/wasm", TOKEN, "application/wasm", &big).await;
    assert_eq!(code, 413);
    let err: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(err["error"].as_str().unwrap().contains("max_upload"), "{body}");

    // A real upload swaps; the next notification is handled by it.
    let v2 = std::fs::read(wasm("swap-v2")).unwrap();
    let (code, body) = request(addr, "PUT", "/v1/plugins/rec/wasm", TOKEN, "application/wasm", &v2).await;
    assert_eq!(code, 200, "{body}");
    src.apply_config_map("ns", "b", "1").unwrap();
    e2e::eventually("new version active", || {
        registry.get("rec").is_some_and(|s| s.version != first_version && s.delivered == 2)
    })
    .await;

    let (code, body) = request(addr, "GET", "/v1/plugins/nope", TOKEN, "application/json", b"").await;
    assert_eq!(code, 404, "{body}");
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["error"], "no plugin named \"nope\"");
    let (code, _) = request(addr, "DELETE", "/v1/plugins/rec", TOKEN, "application/json", b"").await;
    assert_eq!(code, 204);
    let (_, body) = request(addr, "GET", "/v1/plugins", TOKEN, "application/json", b"").await;
    assert_eq!(body, "[]");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_loaded_through_the_api_get_their_tenants_policy() {
    use informer_host::registry::TenantPolicy;
    use std::sync::Arc;
    let src = MemorySource::new();
    src.apply_config_map("team-a", "mine", "1").unwrap();
    src.apply_config_map("team-b", "theirs", "1").unwrap();
    let run = Running::start(&src);
    let registry = PluginRegistry::new(runtime());
    registry.add_informer("cms", run.informer.clone());
    registry.set_tenant(
        "a",
        TenantPolicy {
            visibility: Arc::new(|o: &informer_host::informer::Object| o.namespace() == Some("team-a")),
            max_plugins: Some(1),
            fuel_per_call: Some(1_000_000),
            deadline_per_call: None,
            memory_bytes: None,
            max_pending: Some(100),
        },
    );
    let config = AdminConfig { token: TOKEN.into(), max_upload: 1 << 20 };
    let addr = serve(router_with_wasm_dirs(registry.clone(), config, vec![plugins_dir()])).await;
    let body = |name: &str, tenant: &str| {
        json!({"name": name, "wasm": wasm("recorder"), "informer": "cms", "grants": ["log"], "tenant": tenant})
            .to_string()
    };
    let (code, b) =
        request(addr, "POST", "/v1/plugins", TOKEN, "application/json", body("x", "nobody").as_bytes()).await;
    assert_eq!(code, 404, "{b}");
    assert!(b.contains("no tenant named"), "{b}");
    let (code, b) = request(addr, "POST", "/v1/plugins", TOKEN, "application/json", body("a1", "a").as_bytes()).await;
    assert_eq!(code, 201, "{b}");
    let (code, b) = request(addr, "POST", "/v1/plugins", TOKEN, "application/json", body("a2", "a").as_bytes()).await;
    assert_eq!(code, 409, "{b}");
    assert!(b.contains("maximum of 1 plugins"), "{b}");
    e2e::eventually("synced", || registry.get("a1").is_some_and(|s| s.synced)).await;
    src.apply_config_map("team-b", "theirs", "2").unwrap();
    src.apply_config_map("team-a", "mine", "2").unwrap();
    e2e::eventually("a's update", || registry.get("a1").is_some_and(|s| s.delivered == 2)).await;
    let loaded = registry.loaded("a1").unwrap();
    assert_eq!(loaded.spec.limits.fuel_per_call, Some(1_000_000), "the tenant's fuel cap applies");
    run.stop().await;
}

/// A router whose wasm directories are a fresh folder and `/dev`, with a
/// 1 MiB size cap; returns its address, the folder and the registry.
async fn hardened() -> (SocketAddr, tempfile::TempDir, PluginRegistry, Running) {
    let src = MemorySource::new();
    src.apply_config_map("ns", "a", "1").unwrap();
    let run = Running::start(&src);
    let registry = PluginRegistry::new(runtime());
    registry.add_informer("cms", run.informer.clone());
    let dir = tempfile::tempdir().unwrap();
    // `/dev` is allowed so that a device there is refused for what it is,
    // not for where it is.
    let dirs = vec![dir.path().to_path_buf(), PathBuf::from("/dev")];
    let config = AdminConfig { token: TOKEN.into(), max_upload: 1 << 20 };
    let addr = serve(router_with_wasm_dirs(registry.clone(), config, dirs)).await;
    (addr, dir, registry, run)
}

/// POSTs a JSON load of `wasm` (bounded in time); the status, the error
/// message with the path replaced by `P`, and how long it took.
async fn load_path(addr: SocketAddr, name: &str, wasm: &Path) -> (u16, String, Duration) {
    let load = json!({"name": name, "wasm": wasm, "informer": "cms"}).to_string();
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        request(addr, "POST", "/v1/plugins", TOKEN, "application/json", load.as_bytes()),
    )
    .await;
    let (code, body) = answer.unwrap_or_else(|_| panic!("loading {wasm:?} hung"));
    let err: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let message = err["error"].as_str().unwrap_or_else(|| panic!("no error in {body}"));
    (code, message.replace(&format!("{wasm:?}"), "P"), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_are_not_dns_labels_are_refused_before_anything_is_read() {
    let (addr, _dir, registry, run) = hardened().await;
    let forged = "x\"} 1\ninformer_host_forged 1\n#";
    for (load, what) in [
        (json!({"name": forged, "wasm": wasm("recorder"), "informer": "cms"}), "plugin name"),
        (json!({"name": "Rec", "wasm": wasm("recorder"), "informer": "cms"}), "plugin name"),
        (json!({"name": "rec", "wasm": wasm("recorder"), "informer": forged}), "informer name"),
        (json!({"name": "rec", "wasm": wasm("recorder"), "informer": "cms", "tenant": "a\nb"}), "tenant name"),
    ] {
        let (code, body) =
            request(addr, "POST", "/v1/plugins", TOKEN, "application/json", load.to_string().as_bytes()).await;
        assert_eq!(code, 400, "{load}: {body}");
        let err: Value = serde_json::from_str(&body).unwrap();
        let message = err["error"].as_str().unwrap();
        assert!(message.starts_with(what) && message.contains("may contain only lowercase letters"), "{message}");
        assert!(!message.contains('\n'), "the message quotes the name escaped: {message:?}");
    }
    // The same through an upload, whose request is in the query.
    let v1 = std::fs::read(wasm("recorder")).unwrap();
    let (code, body) =
        request(addr, "POST", "/v1/plugins?name=x%22%7D%0A1&informer=cms", TOKEN, "application/wasm", &v1).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("plugin name"), "{body}");
    assert!(registry.list().is_empty());

    // The registry checks too, whoever calls it.
    let def = PluginDef {
        spec: informer_host::plugin::PluginSpec::new(forged, wasm("recorder")),
        informer: "cms".into(),
        resync: Duration::ZERO,
        on_swap: OnSwap::Continue,
        visibility: None,
        max_pending: None,
    };
    let err = registry.load(def).unwrap_err();
    assert!(matches!(err, RegistryError::InvalidName(_)), "{err}");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_load_only_regular_files_inside_the_wasm_dirs_and_say_nothing_else() {
    let (addr, dir, registry, run) = hardened().await;
    let other = tempfile::tempdir().unwrap();
    let outside = other.path().join("recorder.wasm");
    std::fs::copy(wasm("recorder"), &outside).unwrap();
    let link = dir.path().join("link.wasm");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let fifo = dir.path().join("fifo.wasm");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let escape = dir.path().join("..").join(other.path().file_name().unwrap()).join("recorder.wasm");

    let mut answers = Vec::new();
    for path in [
        dir.path().join("missing.wasm"),
        outside.clone(),
        link,
        escape,
        fifo,
        PathBuf::from("/dev/zero"),
        PathBuf::from("/dev/stdin"),
        dir.path().to_path_buf(),
        PathBuf::from("/etc/hostname"),
        PathBuf::from("relative.wasm"),
    ] {
        let (code, message, took) = load_path(addr, "p", &path).await;
        assert!(took < Duration::from_secs(5), "{path:?} took {took:?}");
        answers.push((code, message, path));
    }
    let (code, message, _) = &answers[0];
    assert_eq!(*code, 403, "{message}");
    assert_eq!(
        message,
        "P cannot be loaded: it does not exist, or it is not a regular file inside the directories the host loads components from"
    );
    for (c, m, path) in &answers {
        assert_eq!((c, m), (code, message), "{path:?} is answered like a missing file");
    }

    // A swap naming a path obeys the same rules.
    let inside = dir.path().join("recorder.wasm");
    std::fs::copy(wasm("recorder"), &inside).unwrap();
    let load = json!({"name": "rec", "wasm": inside, "informer": "cms", "grants": ["log"]}).to_string();
    let (code, body) = request(addr, "POST", "/v1/plugins", TOKEN, "application/json", load.as_bytes()).await;
    assert_eq!(code, 201, "{body}");
    let swap = json!({"path": outside}).to_string();
    let (code, body) = request(addr, "PUT", "/v1/plugins/rec/wasm", TOKEN, "application/json", swap.as_bytes()).await;
    assert_eq!(code, 403, "{body}");
    let swap = json!({"path": "/dev/zero"}).to_string();
    let (code, body) = request(addr, "PUT", "/v1/plugins/rec/wasm", TOKEN, "application/json", swap.as_bytes()).await;
    assert_eq!(code, 403, "{body}");
    let v2 = dir.path().join("sub").join("v2.wasm");
    std::fs::create_dir(v2.parent().unwrap()).unwrap();
    std::fs::copy(wasm("swap-v2"), &v2).unwrap();
    let swap = json!({"path": v2}).to_string();
    let (code, body) = request(addr, "PUT", "/v1/plugins/rec/wasm", TOKEN, "application/json", swap.as_bytes()).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(registry.get("rec").unwrap().file, v2.canonicalize().unwrap().display().to_string());

    // Larger than max_upload: refused, whether the file says so or not.
    let big = dir.path().join("big.wasm");
    std::fs::write(&big, vec![0u8; (1 << 20) + 1]).unwrap();
    let (code, message, _) = load_path(addr, "big", &big).await;
    assert_eq!(code, 413, "{message}");
    assert!(message.contains("max_upload"), "{message}");
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_wasm_dirs_paths_are_refused_and_uploads_load() {
    let src = MemorySource::new();
    src.apply_config_map("ns", "a", "1").unwrap();
    let run = Running::start(&src);
    let registry = PluginRegistry::new(runtime());
    registry.add_informer("cms", run.informer.clone());
    let addr = serve(router(registry.clone(), AdminConfig { token: TOKEN.into(), max_upload: 1 << 20 })).await;

    let (code, message, _) = load_path(addr, "rec", &wasm("recorder")).await;
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("upload the component instead"), "{message}");

    let v1 = std::fs::read(wasm("recorder")).unwrap();
    let config = "%7B%22x%22%3A1%7D"; // {"x":1}
    let path = format!("/v1/plugins?name=rec&informer=cms&grants=log&on_swap=replay&config={config}");
    let (code, body) = request(addr, "POST", &path, TOKEN, "application/wasm", &v1).await;
    assert_eq!(code, 201, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["file"], "(uploaded component)", "{body}");
    e2e::eventually("synced", || registry.get("rec").is_some_and(|s| s.synced && s.delivered == 1)).await;
    let loaded = registry.loaded("rec").unwrap();
    assert_eq!(loaded.spec.config_json, r#"{"x":1}"#);
    assert!(loaded.spec.grants.log);

    for (path, want) in [
        ("/v1/plugins?name=x&informer=cms&grants=network", "unknown grant"),
        ("/v1/plugins?name=x&informer=cms&config=%7B", "`config` is not JSON"),
        ("/v1/plugins?name=x", "the query of an upload"),
    ] {
        let (code, body) = request(addr, "POST", path, TOKEN, "application/wasm", &v1).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.contains(want), "{path}: {body}");
    }
    let (code, body) = request(addr, "POST", "/v1/plugins", TOKEN, "text/plain", b"hi").await;
    assert_eq!(code, 415, "{body}");
    run.stop().await;
}
