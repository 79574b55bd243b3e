//! The admin API over real HTTP on a loopback port.

use std::net::SocketAddr;

use e2e::plugins::{Running, runtime, wasm};
use informer_host::admin_api::{AdminConfig, router};
use informer_host::registry::PluginRegistry;
use informer_host::source::MemorySource;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "s3cret";

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
    let app = router(registry.clone(), AdminConfig { token: TOKEN.into(), max_upload: 1 << 20 });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let (code, body) = request(addr, "GET", "/v1/plugins", "wrong", "application/json", b"").await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("bearer token"), "{body}");

    let load = json!({"name": "rec", "wasm": wasm("recorder"), "informer": "cms", "grants": ["log"]});
    let (code, body) =
        request(addr, "POST", "/v1/plugins", TOKEN, "application/json", load.to_string().as_bytes()).await;
    assert_eq!(code, 201, "{body}");
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
    let app = router(registry.clone(), AdminConfig { token: TOKEN.into(), max_upload: 1 << 20 });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
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
