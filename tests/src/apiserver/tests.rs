//! Unit tests of the fixture over real sockets: list/watch wire format.

use super::*;

fn labels(l: &[(&str, &str)]) -> Value {
    config_map("ns", "x", l, &[])
}

#[test]
fn label_selector_equality_and_existence() {
    let s = LabelSelector::parse("app=web,tier!=db,env,!legacy").unwrap();
    assert!(s.matches(&labels(&[("app", "web"), ("env", "p")])));
    assert!(s.matches(&labels(&[("app", "web"), ("env", "p"), ("tier", "fe")])));
    assert!(!s.matches(&labels(&[("app", "web"), ("env", "p"), ("tier", "db")])));
    assert!(!s.matches(&labels(&[("app", "web")])));
    assert!(!s.matches(&labels(&[("app", "web"), ("env", "p"), ("legacy", "")])));
    assert!(!s.matches(&labels(&[("app", "api"), ("env", "p")])));
    assert!(LabelSelector::parse("").unwrap().matches(&labels(&[])));
    assert!(LabelSelector::parse("app==web").unwrap().matches(&labels(&[("app", "web")])));
}

#[test]
fn label_selector_set_based() {
    let s = LabelSelector::parse("env in (prod, staging),tier notin (db),x>2").unwrap();
    assert!(s.matches(&labels(&[("env", "prod"), ("x", "3")])));
    assert!(s.matches(&labels(&[("env", "staging"), ("tier", "fe"), ("x", "9")])));
    assert!(!s.matches(&labels(&[("env", "dev"), ("x", "3")])));
    assert!(!s.matches(&labels(&[("env", "prod"), ("tier", "db"), ("x", "3")])));
    assert!(!s.matches(&labels(&[("env", "prod"), ("x", "1")])));
}

#[test]
fn label_selector_rejects_garbage() {
    for bad in ["app=web,", "in (a)", "a in ()", "a in (b", "a b", "=x", "a>b"] {
        assert!(LabelSelector::parse(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn field_selector() {
    let s = FieldSelector::parse("metadata.name=a,metadata.namespace!=kube-system").unwrap();
    let key = |ns: &str, n: &str| Key { ty: 0, namespace: ns.into(), name: n.into() };
    assert!(s.matches(&key("default", "a")));
    assert!(!s.matches(&key("kube-system", "a")));
    assert!(!s.matches(&key("default", "b")));
    assert!(FieldSelector::parse("spec.nodeName=x").unwrap_err().contains("field label not supported"));
}

#[test]
fn routes() {
    let types = vec![ResourceType::config_maps(), ResourceType::namespaces(), ResourceType::deployments()];
    let r = route(&types, "/api/v1/namespaces/ns/configmaps").unwrap();
    assert_eq!((r.ty, r.namespace.as_deref(), r.name.as_deref()), (0, Some("ns"), None));
    let r = route(&types, "/api/v1/configmaps").unwrap();
    assert_eq!((r.ty, r.namespace.as_deref()), (0, None));
    let r = route(&types, "/api/v1/namespaces/ns").unwrap();
    assert_eq!((r.ty, r.name.as_deref()), (1, Some("ns")));
    let r = route(&types, "/apis/apps/v1/namespaces/ns/deployments/d").unwrap();
    assert_eq!((r.ty, r.namespace.as_deref(), r.name.as_deref()), (2, Some("ns"), Some("d")));
    assert!(route(&types, "/api/v1/namespaces/ns/namespaces").is_none());
    assert!(route(&types, "/api/v1/pods").is_none());
    assert!(route(&types, "/healthz").is_none());
}

#[test]
fn query_and_continue_round_trip() {
    let q = parse_query("labelSelector=app%3Dweb%2Ctier%21%3Ddb&watch=true&x=a+b");
    assert_eq!(q[0], ("labelSelector".into(), "app=web,tier!=db".into()));
    assert_eq!(q[2].1, "a b");
    let key = Key { ty: 3, namespace: "ns".into(), name: "n".into() };
    assert_eq!(decode_continue(&encode_continue(42, &key)), Some((42, key)));
    assert_eq!(decode_continue("zz"), None);
}

#[test]
fn timestamps_are_rfc3339() {
    let ts = rfc3339_now();
    assert_eq!(ts.len(), 20, "{ts}");
    assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
}

async fn get(server: &ApiServer, path_and_query: &str) -> (u16, Value) {
    let req = hyper::Request::get(path_and_query).body(Vec::new()).unwrap();
    match server.client().request_text(req).await {
        Ok(text) => (200, serde_json::from_str(&text).unwrap()),
        Err(kube::Error::Api(s)) => (s.code, serde_json::to_value(&*s).unwrap()),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn list_resource_version_semantics_and_paging() {
    let server = ApiServer::start().await;
    let a = server.create(config_map("ns", "a", &[], &[])).unwrap();
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    let rv_ab = server.resource_version();
    server.create(config_map("ns", "c", &[], &[])).unwrap();
    server.delete_config_map("ns", "a").unwrap();
    assert_eq!(a["metadata"]["resourceVersion"], "2");

    let (code, list) = get(&server, "/api/v1/namespaces/ns/configmaps").await;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["metadata"]["resourceVersion"], server.resource_version());
    let names: Vec<_> = list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].clone()).collect();
    assert_eq!(names, vec!["b", "c"]);
    assert_eq!(list["items"][0]["kind"], "ConfigMap");

    // Exact: the state at that version.
    let (_, list) =
        get(&server, &format!("/api/v1/configmaps?resourceVersion={rv_ab}&resourceVersionMatch=Exact")).await;
    assert_eq!(list["metadata"]["resourceVersion"], rv_ab);
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    assert_eq!(list["items"][0]["metadata"]["name"], "a");

    // Future versions time out; compacted ones are gone.
    // (Raw: kube's client retries a 504 fifteen times.)
    let (head, body, _) = raw_get(&server, "/api/v1/configmaps?resourceVersion=999").await;
    assert!(head.starts_with("HTTP/1.1 504 Gateway Timeout\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(status["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    server.compact();
    let (code, status) =
        get(&server, &format!("/api/v1/configmaps?resourceVersion={rv_ab}&resourceVersionMatch=Exact")).await;
    assert_eq!((code, status["reason"].as_str()), (410, Some("Expired")));

    // Paging over a consistent snapshot, even across compaction-free changes.
    for n in ["d", "e", "f"] {
        server.create(config_map("ns", n, &[], &[])).unwrap();
    }
    let (_, page1) = get(&server, "/api/v1/configmaps?limit=2").await;
    let token = page1["metadata"]["continue"].as_str().unwrap().to_string();
    assert_eq!(page1["metadata"]["remainingItemCount"], 3);
    server.create(config_map("ns", "g", &[], &[])).unwrap();
    let (_, page2) = get(&server, &format!("/api/v1/configmaps?limit=2&continue={token}")).await;
    let (_, page3) = get(
        &server,
        &format!("/api/v1/configmaps?limit=2&continue={}", page2["metadata"]["continue"].as_str().unwrap()),
    )
    .await;
    assert_eq!(page3["metadata"].get("continue"), None);
    let all: Vec<_> = [&page1, &page2, &page3]
        .iter()
        .flat_map(|p| p["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].clone()))
        .collect();
    assert_eq!(all, vec!["b", "c", "d", "e", "f"]);
    assert_eq!(page3["metadata"]["resourceVersion"], page1["metadata"]["resourceVersion"]);
    server.compact();
    let (code, _) = get(&server, &format!("/api/v1/configmaps?limit=2&continue={token}")).await;
    assert_eq!(code, 410);

    let (code, status) = get(&server, "/api/v1/configmaps?labelSelector=a%20in%20(").await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    let (code, _) = get(&server, "/api/v1/namespaces/ns/configmaps/b").await;
    assert_eq!(code, 200);
    let (code, status) = get(&server, "/api/v1/namespaces/ns/configmaps/nope").await;
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
    let (code, _) = get(&server, "/apis/example.com/v1/widgets").await;
    assert_eq!(code, 404);
    assert_eq!(server.lists().len(), 9);
}

/// A raw HTTP exchange: the head, the de-chunked body, and whether the
/// body ended with the terminating chunk.
async fn raw_get(server: &ApiServer, path_and_query: &str) -> (String, String, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let req = format!("GET {path_and_query} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await.unwrap().unwrap();
    let text = String::from_utf8(out).unwrap();
    let (head, mut rest) = text.split_once("\r\n\r\n").unwrap();
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return (head.to_string(), rest.to_string(), true);
    }
    let mut body = String::new();
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else { return (head.to_string(), body, false) };
        let size = usize::from_str_radix(size, 16).unwrap();
        if size == 0 {
            return (head.to_string(), body, true);
        }
        body.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap();
    }
}

#[tokio::test]
async fn watch_wire_format() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[("app", "web")], &[])).unwrap();
    let rv = server.resource_version();
    server.create(config_map("ns", "b", &[("app", "web")], &[])).unwrap();
    server.create(config_map("ns", "c", &[("app", "db")], &[])).unwrap();
    let (head, body, clean) = raw_get(
        &server,
        &format!(
            "/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb&allowWatchBookmarks=true&timeoutSeconds=1"
        ),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    // Only b: a is not after rv, c does not match. After timeoutSeconds
    // the stream ends cleanly, with the terminating chunk.
    assert!(clean);
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 1, "{body}");
    assert!(lines[0].starts_with(r#"{"type":"ADDED","object":{"#), "{body}");
    let ev: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(ev["object"]["metadata"]["name"], "b");
    assert_eq!(ev["object"]["kind"], "ConfigMap");
    assert!(ev["object"]["metadata"]["uid"].is_string() && ev["object"]["metadata"]["creationTimestamp"].is_string());

    // Compacted: an ERROR event (default) or an HTTP 410.
    server.compact();
    let (head, body, clean) = raw_get(&server, &format!("/api/v1/configmaps?watch=true&resourceVersion={rv}")).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && clean, "{head}");
    assert!(body.starts_with(r#"{"type":"ERROR","object":{"#), "{body}");
    let ev: Value = serde_json::from_str(body.trim_end()).unwrap();
    assert_eq!(ev["object"]["kind"], "Status");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert!(ev["object"]["message"].as_str().unwrap().starts_with("too old resource version: "));
    server.set_gone_style(GoneStyle::HttpStatus);
    let (head, body, _) = raw_get(&server, &format!("/api/v1/configmaps?watch=true&resourceVersion={rv}")).await;
    assert!(head.starts_with("HTTP/1.1 410 Gone\r\n"), "{head}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("Expired")));
}

#[tokio::test]
async fn watch_selection_changes_bookmarks_and_drops() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let server = ApiServer::start().await;
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let req = "GET /api/v1/configmaps?watch=true&labelSelector=app%3Dweb&allowWatchBookmarks=true HTTP/1.1\r\nHost: x\r\n\r\n";
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    // Headers.
    while !lines.next_line().await.unwrap().unwrap().is_empty() {}
    let mut next_event = async || loop {
        let line = lines.next_line().await.unwrap().unwrap();
        if line.starts_with('{') {
            return serde_json::from_str::<Value>(&line).unwrap();
        }
    };
    server.create(config_map("ns", "a", &[("app", "db")], &[])).unwrap();
    server.update(config_map("ns", "a", &[("app", "web")], &[])).unwrap();
    let ev = next_event().await;
    assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["resourceVersion"].as_str()), (Some("ADDED"), Some("3")));
    server.update(config_map("ns", "a", &[("app", "web")], &[("k", "v")])).unwrap();
    assert_eq!(next_event().await["type"], "MODIFIED");
    server.update(config_map("ns", "a", &[("app", "db")], &[])).unwrap();
    let ev = next_event().await;
    assert_eq!(ev["type"], "DELETED");
    // The previous state, at the new version.
    assert_eq!(ev["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(ev["object"]["metadata"]["resourceVersion"], "5");
    let rv = server.bookmark();
    let ev = next_event().await;
    assert_eq!(
        ev,
        json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"resourceVersion": rv, "creationTimestamp": null}}})
    );
    assert_eq!(server.open_watches(), 1);
    assert_eq!(server.drop_watches(), 1);
    // The connection ends without the terminating chunk.
    while let Ok(Some(line)) = lines.next_line().await {
        assert_ne!(line, "0", "clean end after a drop");
    }
    crate::eventually("the dropped watch to close", || server.open_watches() == 0).await;
}

/// A handler's `429` (`ThrottleStyle::Status`): a `Status` with reason
/// `TooManyRequests` and `details.retryAfterSeconds`, and the `Retry-After`
/// header set from it; the next request is answered normally.
#[tokio::test]
async fn throttle_as_status_wire_format() {
    let server = ApiServer::start().await;
    server.throttle_styled_where(|r| r.is_watch(), 1, 4, ThrottleStyle::Status);
    let (head, body, _) = raw_get(&server, "/api/v1/configmaps?watch=true&resourceVersion=1&timeoutSeconds=1").await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 4\r\n") && lower.contains("content-type: application/json"), "{head}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Too many requests: storage is (re)initializing", "reason": "TooManyRequests",
               "details": {"retryAfterSeconds": 4}, "code": 429})
    );
    let (head, _, _) = raw_get(&server, "/api/v1/configmaps").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn the_log_keeps_each_answer_and_holds_can_be_per_resource() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = ApiServer::start().await;
    server.register(ResourceType::deployments());
    let created = server.create(config_map("ns", "a", &[], &[])).unwrap();
    // A stale resourceVersion in a merge patch is a precondition: 409.
    let client = server.client();
    let patch = |rv: &str| {
        let body = json!({"metadata": {"resourceVersion": rv, "labels": {"x": "1"}}}).to_string();
        hyper::Request::patch("/api/v1/namespaces/ns/configmaps/a")
            .header("content-type", "application/merge-patch+json")
            .body(body.into_bytes())
            .unwrap()
    };
    let current = created["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    client.request_text(patch(&current)).await.unwrap();
    let stale = client.request_text(patch(&current)).await.unwrap_err();
    assert!(matches!(stale, kube::Error::Api(ref s) if s.code == 409), "{stale}");
    let answers: Vec<_> = server.writes().iter().map(RecordedRequest::status).collect();
    assert_eq!(answers, [Some(200), Some(409)]);

    // Deployments' watches wait; ConfigMaps' are served.
    server.hold_watches_of(&["deployments"]);
    let (head, _, _) = raw_get(&server, "/api/v1/configmaps?watch=1&timeoutSeconds=1").await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let req = "GET /apis/apps/v1/deployments?watch=1&timeoutSeconds=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    stream.write_all(req.as_bytes()).await.unwrap();
    crate::eventually("the held watch logged", || {
        server.watches().iter().any(|w| w.path == "/apis/apps/v1/deployments")
    })
    .await;
    let watch = server.watches().into_iter().find(|w| w.path == "/apis/apps/v1/deployments").unwrap();
    assert_eq!(watch.status(), None, "held, not answered");
    server.release_watches();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200 OK\r\n"));
    let watch = server.watches().into_iter().find(|w| w.path == "/apis/apps/v1/deployments").unwrap();
    assert_eq!(watch.status(), Some(200));
}
