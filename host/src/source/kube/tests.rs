//! Unit tests of the translation: events, list items, errors, backoff.

use std::time::Duration;

use ::kube::api::WatchEvent as KubeEvent;
use ::kube::core::Status;
use kube_runtime::watcher::DefaultBackoff;
use serde_json::value::RawValue;

use super::errors::{is_probable_eof, is_timeout};
use super::list::with_type_meta;
use super::{KubeResource, Meta, RuntimeBackoff};
use crate::informer::Backoff;

#[test]
fn watch_events_keep_the_json_as_received() {
    let line = r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"z":"1","a":"2"}}}"#;
    let KubeEvent::Added(raw) = serde_json::from_str::<KubeEvent<Box<RawValue>>>(line).unwrap() else {
        panic!("not an ADDED event")
    };
    assert_eq!(
        raw.get(),
        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"z":"1","a":"2"}}"#
    );
    let bm = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","creationTimestamp":null}}}"#;
    let KubeEvent::Bookmark(b) = serde_json::from_str::<KubeEvent<Box<RawValue>>>(bm).unwrap() else {
        panic!("not a BOOKMARK")
    };
    assert_eq!(b.metadata.resource_version, "9");
    let err = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
    let KubeEvent::Error(s) = serde_json::from_str::<KubeEvent<Box<RawValue>>>(err).unwrap() else {
        panic!("not an ERROR")
    };
    let meta = Meta { describe: "v1/ConfigMap".into(), api_version: "v1".into(), kind: "ConfigMap".into() };
    assert!(meta.status("watch", "1", &s, None).is_gone());
}

#[test]
fn list_items_get_kind_and_api_version() {
    let meta = Meta { describe: "apps/v1/Deployment".into(), api_version: "apps/v1".into(), kind: "Deployment".into() };
    let raw = RawValue::from_string(r#"{"metadata":{"name":"d","namespace":"ns"},"spec":{}}"#.into()).unwrap();
    let obj = meta.object(raw).unwrap();
    assert_eq!((obj.api_version(), obj.kind(), obj.key()), ("apps/v1", "Deployment", "ns/d"));
    assert_eq!(
        obj.json(),
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"ns"},"spec":{}}"#
    );
    let raw = RawValue::from_string(r#"{"kind":"Deployment","metadata":{"name":"d"}}"#.into()).unwrap();
    assert_eq!(
        meta.object(raw).unwrap().json(),
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}"#
    );
    assert_eq!(with_type_meta("{}", None, Some("X")), r#"{"kind":"X"}"#);
    let complete = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#;
    let obj = meta.object(RawValue::from_string(complete.into()).unwrap()).unwrap();
    assert_eq!(obj.json(), complete);
}

#[test]
fn errors_name_the_resource_and_the_server_message() {
    let meta =
        Meta { describe: "v1/ConfigMap in namespace ns".into(), api_version: "v1".into(), kind: "ConfigMap".into() };
    let s = Status::failure("configmaps is forbidden", "Forbidden").with_code(403);
    let e = meta.error("list", "", ::kube::Error::Api(s.boxed()));
    assert_eq!(
        e.to_string(),
        r#"list v1/ConfigMap in namespace ns failed: configmaps is forbidden (reason "Forbidden", code 403)"#
    );
    let s = Status::failure("gone", "Expired").with_code(410);
    assert!(meta.error("watch", "5", ::kube::Error::Api(s.boxed())).is_gone());
    let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "eof");
    assert!(is_probable_eof(&eof));
    assert!(!is_probable_eof(&std::io::Error::other("bad frame")));
    let timed_out = ::kube::Error::Service(Box::new(std::io::Error::new(std::io::ErrorKind::TimedOut, "read")));
    assert!(is_timeout(&timed_out) && !is_probable_eof(&timed_out));
}

#[test]
fn too_many_requests_and_refused_connections_are_retriable() {
    let meta = Meta { describe: "v1/ConfigMap".into(), api_version: "v1".into(), kind: "ConfigMap".into() };
    // The watch cache's 429: a Status with details.retryAfterSeconds.
    let s: Status = serde_json::from_str(
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests: storage is (re)initializing","reason":"TooManyRequests","details":{"retryAfterSeconds":3},"code":429}"#,
    )
    .unwrap();
    let e = meta.status("watch", "5", &s, None);
    assert!(e.is_retriable() && !e.is_gone(), "{e:?}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
    // The Retry-After header, when there is one, is what counts.
    assert_eq!(meta.status("watch", "5", &s, Some(Duration::from_secs(7))).retry_after(), Some(Duration::from_secs(7)));
    // The flow-control filters' plain-text 429: no reason, no details.
    let plain = Status::failure("Too many requests, please try again later.", "").with_code(429);
    let e = meta.status("watch", "5", &plain, Some(Duration::from_secs(2)));
    assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    assert_eq!(e.to_string(), "watch v1/ConfigMap failed: Too many requests, please try again later. (code 429)");
    assert!(!meta.status("watch", "5", &Status::failure("boom", "InternalError").with_code(500), None).is_retriable());

    let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
    let e = meta.error("watch", "5", ::kube::Error::Service(Box::new(refused)));
    assert!(e.is_retriable() && e.retry_after().is_none(), "{e:?}");
    assert!(e.to_string().starts_with("watch v1/ConfigMap failed: "), "{e}");
    let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
    assert!(!meta.error("watch", "5", ::kube::Error::Service(Box::new(reset))).is_retriable());
}

#[test]
fn resources_and_urls() {
    let cm = KubeResource::new("v1", "ConfigMap");
    assert_eq!(cm.api_resource().plural, "configmaps");
    assert_eq!(cm.api_version(), "v1");
    let w = KubeResource::new("example.com/v1", "Widget").with_plural("widgetz");
    assert_eq!(w.api_resource().plural, "widgetz");
    assert_eq!(w.api_resource().api_version, "example.com/v1");
}

#[tokio::test]
async fn backoff_is_kube_runtimes_default() {
    let mut b = RuntimeBackoff(DefaultBackoff::default());
    let first = b.next_delay();
    assert!(first >= Duration::from_millis(800) && first <= Duration::from_millis(1600), "{first:?}");
    let second = b.next_delay();
    assert!(second >= Duration::from_millis(1600), "{second:?}");
    for _ in 0..20 {
        assert!(b.next_delay() <= Duration::from_secs(60));
    }
    b.reset();
    assert!(b.next_delay() <= Duration::from_millis(1600));
}

/// A proxy in front of the API server may answer with JSON that is not a
/// Status: the HTTP code still decides (a 429 is retried after its
/// Retry-After), and a client error is a refusal, a server error is not.
#[tokio::test]
async fn an_answer_that_is_not_a_status_keeps_its_http_code() {
    let meta = Meta { describe: "v1/ConfigMap".into(), api_version: "v1".into(), kind: "ConfigMap".into() };
    let answer = |code: u16, body: &str| {
        http::Response::builder()
            .status(code)
            .header("Retry-After", "4")
            .body(::kube::client::Body::from(body.as_bytes().to_vec()))
            .unwrap()
    };
    let e = meta.response_error("watch", "5", answer(429, r#"{"error":"slow down"}"#)).await;
    assert!(e.is_retriable(), "{e:?}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(4)));
    let e = meta.response_error("watch", "5", answer(403, r#"{"error":"denied by the proxy"}"#)).await;
    assert!(e.is_refused() && e.to_string().ends_with("(code 403)"), "{e:?}");
    let e = meta.response_error("watch", "5", answer(502, r#"{"error":"bad gateway"}"#)).await;
    assert!(!e.is_refused() && !e.is_retriable(), "{e:?}");
    let invalid = Status::failure("sendInitialEvents is forbidden", "Invalid").with_code(422);
    assert!(meta.status("watch", "", &invalid, None).is_refused());
}
