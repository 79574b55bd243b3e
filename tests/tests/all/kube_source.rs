//! `KubeSource` against the loopback API server: a real
//! `SharedIndexInformer`, a real `kube::Client`, real sockets.
//!
//! Every wait is bounded (`e2e::eventually`, 10 s); nothing sleeps to make a
//! point. "Nothing more arrived" is shown with a sentinel: a last change
//! whose notification must come after anything still in flight, since one
//! handler's notifications are delivered in order.

use std::sync::Arc;

use e2e::apiserver::{ApiServer, GoneStyle, RequestKind, ResourceType, ThrottleStyle, config_map};
use e2e::eventually;
use informer_host::informer::{
    DeletedObject, HandlerError, InformerOptions, ObjectRef, Registration, ResourceEventHandler, SharedIndexInformer,
    SourceError,
};
use informer_host::source::kube::{KubeResource, KubeSource, KubeSourceOptions, ListSemantic};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// One notification as a handler saw it.
#[derive(Debug, Clone)]
enum Seen {
    Add { obj: ObjectRef, initial: bool },
    Update { old: ObjectRef, new: ObjectRef },
    Delete(DeletedObject),
}

impl Seen {
    /// `add ns/a@2 initial`, `update ns/a 2->4`, `delete ns/b@5`, `tombstone ns/b@3`.
    fn line(&self) -> String {
        let rv = |o: &ObjectRef| o.resource_version().unwrap_or("?").to_string();
        match self {
            Seen::Add { obj, initial } => {
                format!("add {}@{}{}", obj.key(), rv(obj), if *initial { " initial" } else { "" })
            }
            Seen::Update { old, new } => format!("update {} {}->{}", new.key(), rv(old), rv(new)),
            Seen::Delete(DeletedObject::Object(o)) => format!("delete {}@{}", o.key(), rv(o)),
            Seen::Delete(DeletedObject::FinalStateUnknown { key, obj }) => format!("tombstone {key}@{}", rv(obj)),
        }
    }
}

/// A native handler that records every notification.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    fn len(&self) -> usize {
        self.0.lock().len()
    }
    fn seen(&self) -> Vec<Seen> {
        self.0.lock().clone()
    }
    fn lines(&self) -> Vec<String> {
        self.0.lock().iter().map(Seen::line).collect()
    }
}

impl ResourceEventHandler for Recorder {
    fn on_add(&mut self, obj: &ObjectRef, initial: bool) -> Result<(), HandlerError> {
        self.0.lock().push(Seen::Add { obj: obj.clone(), initial });
        Ok(())
    }
    fn on_update(&mut self, old: &ObjectRef, new: &ObjectRef) -> Result<(), HandlerError> {
        self.0.lock().push(Seen::Update { old: old.clone(), new: new.clone() });
        Ok(())
    }
    fn on_delete(&mut self, obj: &DeletedObject) -> Result<(), HandlerError> {
        self.0.lock().push(Seen::Delete(obj.clone()));
        Ok(())
    }
}

/// An informer over `KubeSource` against `server`, run until dropped.
struct Harness {
    informer: SharedIndexInformer,
    reg: Registration,
    rec: Recorder,
    errors: Arc<Mutex<Vec<SourceError>>>,
    stop: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Harness {
    /// Starts the informer; does not wait for it to sync.
    fn start(server: &ApiServer, resource: KubeResource, options: KubeSourceOptions) -> Harness {
        Harness::start_with(server.client(), resource, options)
    }

    /// Starts the informer over `client`; does not wait for it to sync.
    fn start_with(client: kube::Client, resource: KubeResource, options: KubeSourceOptions) -> Harness {
        Harness::over(KubeSource::new(client, &resource, options))
    }

    /// Starts an informer over `source`; does not wait for it to sync.
    fn over(source: KubeSource) -> Harness {
        let informer = SharedIndexInformer::new(source, InformerOptions { name: "kube".into(), ..Default::default() });
        let rec = Recorder::default();
        let reg = informer.add_event_handler(rec.clone()).unwrap();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        informer.set_watch_error_handler(Arc::new(move |e: &SourceError| sink.lock().push(e.clone()))).unwrap();
        let stop = CancellationToken::new();
        tokio::spawn({
            let informer = informer.clone();
            let stop = stop.clone();
            async move { informer.run(stop).await }
        });
        Harness { informer, reg, rec, errors, stop }
    }

    /// Starts the informer and waits until it and its handler synced.
    async fn synced(server: &ApiServer, resource: KubeResource, options: KubeSourceOptions) -> Harness {
        let h = Harness::start(server, resource, options);
        eventually("the informer and its handler to sync", || h.informer.has_synced() && h.reg.has_synced()).await;
        h
    }

    async fn wait_for(&self, n: usize) {
        eventually(format_args!("{n} notifications (have {:?})", self.rec.lines()), || self.rec.len() >= n).await;
    }

    fn errors(&self) -> Vec<SourceError> {
        self.errors.lock().clone()
    }

    fn keys(&self) -> Vec<String> {
        let mut keys = self.informer.store().list_keys();
        keys.sort();
        keys
    }
}

/// Paged lists, as most tests here check: the list requests they count
/// are the protocol a server without watch-list sees (watch-list, the
/// default, has its own tests below, compared with this path).
fn paged() -> KubeSourceOptions {
    KubeSourceOptions::default().watch_list(false)
}

fn config_maps() -> KubeResource {
    KubeResource::new("v1", "ConfigMap")
}

fn json_of(obj: &ObjectRef) -> Value {
    serde_json::from_str(obj.json()).unwrap()
}

fn watch_rvs(server: &ApiServer) -> Vec<String> {
    server.watches().iter().map(|w| w.param("resourceVersion").unwrap_or("").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_list_arrives_as_initial_adds_and_syncs() {
    let server = ApiServer::start().await;
    let a = server.create(config_map("ns1", "a", &[("app", "web")], &[("k", "1")])).unwrap();
    server.create(config_map("ns1", "b", &[], &[("k", "2")])).unwrap();
    server.create(config_map("ns2", "c", &[], &[("k", "3")])).unwrap();

    let h = Harness::synced(&server, config_maps(), paged()).await;

    // The registration synced only after its initial adds were handled.
    assert_eq!(h.rec.lines(), ["add ns1/a@2 initial", "add ns1/b@3 initial", "add ns2/c@4 initial"]);
    let Seen::Add { obj, .. } = &h.rec.seen()[0] else { panic!() };
    assert_eq!(json_of(obj), a, "the object arrives as the server sent it");
    assert_eq!((obj.api_version(), obj.kind(), obj.label("app")), ("v1", "ConfigMap", Some("web")));
    assert_eq!(h.keys(), ["ns1/a", "ns1/b", "ns2/c"]);
    assert_eq!(h.informer.last_sync_resource_version(), server.resource_version());

    // One paged list of every namespace, then a watch from its resourceVersion.
    let lists = server.lists();
    assert_eq!(lists.len(), 1);
    assert_eq!(lists[0].path, "/api/v1/configmaps");
    assert_eq!(lists[0].param("limit"), Some("500"));
    assert_eq!(lists[0].param("resourceVersion"), None, "MostRecent: a consistent read");
    eventually("the watch", || server.watches().len() == 1).await;
    let watch = &server.watches()[0];
    assert_eq!(watch.path, "/api/v1/configmaps");
    assert_eq!(watch.param("watch"), Some("true"));
    assert_eq!(watch.param("resourceVersion"), Some("4"));
    assert_eq!(watch.param("allowWatchBookmarks"), Some("true"));
    assert_eq!(watch.param("timeoutSeconds"), Some("290"));
    assert!(h.errors().is_empty(), "{:?}", h.errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_arrive_as_add_update_delete() {
    let server = ApiServer::start().await;
    let a = server.create(config_map("ns", "a", &[], &[("k", "1")])).unwrap();
    let h = Harness::synced(&server, config_maps(), paged()).await;

    let b = server.create(config_map("ns", "b", &[], &[("k", "2")])).unwrap();
    let a2 = server.update(config_map("ns", "a", &[], &[("k", "changed")])).unwrap();
    let b_deleted = server.delete_config_map("ns", "b").unwrap();
    h.wait_for(4).await;

    assert_eq!(h.rec.lines(), ["add ns/a@2 initial", "add ns/b@3", "update ns/a 2->4", "delete ns/b@5"]);
    let seen = h.rec.seen();
    let Seen::Add { obj, .. } = &seen[1] else { panic!() };
    assert_eq!(json_of(obj), b);
    let Seen::Update { old, new } = &seen[2] else { panic!() };
    assert_eq!((json_of(old), json_of(new)), (a, a2.clone()));
    let Seen::Delete(DeletedObject::Object(last)) = &seen[3] else { panic!("{:?}", seen[3]) };
    assert_eq!(json_of(last), b_deleted, "a delete carries the last state");
    assert_eq!(last.pointer_value("/data/k"), Some(json!("2")));

    assert_eq!(h.keys(), ["ns/a"]);
    assert_eq!(json_of(&h.informer.store().get("ns/a").unwrap()), a2);
    assert_eq!(h.informer.last_sync_resource_version(), "5");
    assert_eq!(server.lists().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_advance_last_sync_resource_version() {
    let server = ApiServer::start().await;
    server.create(config_map("watched", "a", &[], &[])).unwrap();
    let h = Harness::synced(&server, config_maps(), paged().namespace("watched")).await;
    eventually("the watch to open", || server.open_watches() == 1).await;

    // Changes the informer does not select move the server's version on.
    server.create(config_map("other", "x", &[], &[])).unwrap();
    server.create(config_map("other", "y", &[], &[])).unwrap();
    assert_eq!(h.informer.last_sync_resource_version(), "2");
    let bookmark = server.bookmark();
    assert_eq!(bookmark, "4");
    eventually("the bookmark", || h.informer.last_sync_resource_version() == bookmark).await;

    // The next watch resumes from the bookmark, not from the last object.
    assert_eq!(server.drop_watches(), 1);
    eventually("the watch to resume", || server.watches().len() == 2).await;
    assert_eq!(watch_rvs(&server), ["2", "4"]);
    server.create(config_map("watched", "b", &[], &[])).unwrap();
    h.wait_for(2).await;
    assert_eq!(h.rec.lines(), ["add watched/a@2 initial", "add watched/b@5"]);
    assert_eq!(server.lists().len(), 1, "no relist");
    assert!(h.errors().is_empty(), "{:?}", h.errors());
}

/// A watch that comes back after history was compacted gets `410 Gone`; the
/// informer relists, and an object deleted meanwhile arrives as a tombstone.
/// A change and a delete missed while the watch was held, then compaction:
/// the informer relists (by paged lists, or by watch-lists). Returns once
/// the handler has its six notifications, with the server and `b` as it
/// was created.
async fn missed_changes_then_relist(style: GoneStyle, watch_list: bool) -> (Harness, ApiServer, Value) {
    let server = ApiServer::start().await;
    server.set_gone_style(style);
    server.create(config_map("ns", "a", &[], &[("k", "1")])).unwrap();
    let b = server.create(config_map("ns", "b", &[], &[("k", "2")])).unwrap();
    let options = KubeSourceOptions { watch_list, ..KubeSourceOptions::default() };
    let h = Harness::synced(&server, config_maps(), options).await;
    server.create(config_map("ns", "c", &[], &[])).unwrap();
    h.wait_for(3).await;

    // The connection drops; the watch that replaces it is held while the
    // server moves on and compacts.
    server.hold_watches();
    assert_eq!(server.drop_watches(), 1);
    eventually("the held watch", || server.watches().len() == 2).await;
    server.update(config_map("ns", "a", &[], &[("k", "changed")])).unwrap();
    server.delete_config_map("ns", "b").unwrap();
    server.compact();
    server.release_watches();
    h.wait_for(6).await;
    (h, server, b)
}

async fn gone_forces_relist_with_tombstone(style: GoneStyle) {
    let (h, server, b) = missed_changes_then_relist(style, false).await;
    // As in client-go, a handler without resync still gets an update for an
    // unchanged object on relist: a new listener counts as syncing until the
    // first resync check, and an informer without resync never checks.
    assert_eq!(
        h.rec.lines(),
        [
            "add ns/a@2 initial",
            "add ns/b@3 initial",
            "add ns/c@4",
            "update ns/a 2->5",
            "update ns/c 4->4",
            "tombstone ns/b@3",
        ]
    );
    let Seen::Delete(DeletedObject::FinalStateUnknown { obj, .. }) = &h.rec.seen()[5] else { panic!() };
    assert_eq!(json_of(obj), b, "the tombstone carries the last state the cache had");
    assert_eq!(watch_rvs(&server)[..2], ["3", "4"]);
    assert_eq!(server.lists().len(), 2, "one relist");
    let errors = h.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].is_gone(), "{errors:?}");
    assert!(errors[0].to_string().contains("too old resource version"), "{errors:?}");

    // Watching again from the relist: the next change arrives once.
    server.create(config_map("ns", "d", &[], &[])).unwrap();
    h.wait_for(7).await;
    assert_eq!(h.rec.lines()[6..], ["add ns/d@7"]);
    assert_eq!(h.keys(), ["ns/a", "ns/c", "ns/d"]);
    assert_eq!(h.rec.len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_as_error_event_forces_relist_with_tombstone() {
    gone_forces_relist_with_tombstone(GoneStyle::ErrorEvent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_as_http_410_forces_relist_with_tombstone() {
    gone_forces_relist_with_tombstone(GoneStyle::HttpStatus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_established_watch_relists() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    let h = Harness::synced(&server, config_maps(), paged()).await;
    eventually("the watch to open", || server.open_watches() == 1).await;

    assert_eq!(server.expire_watches(), 1);
    eventually("the relist", || server.lists().len() == 2).await;
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    h.wait_for(3).await;
    // The relist found nothing new: only client-go's same-version update
    // (see `gone_forces_relist_with_tombstone`), then the next change, once.
    assert_eq!(h.rec.lines(), ["add ns/a@2 initial", "update ns/a 2->2", "add ns/b@3"]);
    let errors = h.errors();
    assert!(errors.len() == 1 && errors[0].is_gone(), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connection_resumes_from_last_resource_version() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[("k", "1")])).unwrap();
    let h = Harness::synced(&server, config_maps(), paged()).await;
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    h.wait_for(2).await;

    // Dropped, and the server changes before the client is back.
    server.hold_watches();
    assert_eq!(server.drop_watches(), 1);
    eventually("the resumed watch", || server.watches().len() == 2).await;
    server.update(config_map("ns", "a", &[], &[("k", "2")])).unwrap();
    server.create(config_map("ns", "c", &[], &[])).unwrap();
    server.delete_config_map("ns", "b").unwrap();
    server.release_watches();
    h.wait_for(5).await;

    // Dropped again, changes racing the reconnect.
    eventually("the watch to open", || server.open_watches() == 1).await;
    assert_eq!(server.drop_watches(), 1);
    server.create(config_map("ns", "d", &[], &[])).unwrap();
    server.update(config_map("ns", "c", &[], &[("k", "3")])).unwrap();
    h.wait_for(7).await;

    server.create(config_map("ns", "sentinel", &[], &[])).unwrap();
    h.wait_for(8).await;
    assert_eq!(
        h.rec.lines(),
        [
            "add ns/a@2 initial",
            "add ns/b@3",
            "update ns/a 2->4",
            "add ns/c@5",
            "delete ns/b@6",
            "add ns/d@7",
            "update ns/c 5->8",
            "add ns/sentinel@9",
        ]
    );
    // Each watch resumed from the last event the one before delivered.
    assert_eq!(watch_rvs(&server), ["2", "3", "6"]);
    assert_eq!(server.lists().len(), 1, "no relist");
    assert!(h.errors().is_empty(), "{:?}", h.errors());
    assert_eq!(h.keys(), ["ns/a", "ns/c", "ns/d", "ns/sentinel"]);
}

/// The server goes down for a while (connections refused; the open watch
/// ends abruptly) and comes back with its history intact. As client-go's
/// reflector does (`isWatchErrorRetriable`), the informer retries the
/// *watch* from the last resourceVersion with backoff and never lists
/// again: a handler receives the change made during the outage, once, and
/// nothing for the unchanged objects. With `changed = false` it receives
/// nothing at all.
async fn outage_resumes_the_watch_without_relist(changed: bool, watch_list: bool) {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[("k", "1")])).unwrap();
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    let h = Harness::synced(&server, config_maps(), paged().watch_list(watch_list)).await;
    server.create(config_map("ns", "c", &[], &[])).unwrap();
    h.wait_for(3).await;
    assert_eq!(server.open_watches(), 1);

    server.refuse_connections().await;
    eventually(format_args!("two refused watches (errors {:?})", h.errors()), || h.errors().len() >= 2).await;
    if changed {
        server.update(config_map("ns", "a", &[], &[("k", "2")])).unwrap();
    }
    server.accept_connections().await;
    eventually("the resumed watch", || server.open_watches() == 1).await;
    server.create(config_map("ns", "sentinel", &[], &[])).unwrap();
    let expected: &[&str] = if changed { &["update ns/a 2->5", "add ns/sentinel@6"] } else { &["add ns/sentinel@5"] };
    h.wait_for(3 + expected.len()).await;

    assert_eq!(h.rec.lines()[..3], ["add ns/a@2 initial", "add ns/b@3 initial", "add ns/c@4"]);
    assert_eq!(h.rec.lines()[3..], *expected, "only what changed, once");
    let uris = server.requests().iter().map(|r| r.uri.clone()).collect::<Vec<_>>();
    if watch_list {
        // The initial state came through the watch-list (no resourceVersion,
        // `sendInitialEvents`), which then went on with changes.
        assert_eq!(server.lists().len(), 0, "no list: {uris:?}");
        assert_eq!(server.watches()[0].param("sendInitialEvents"), Some("true"));
        assert_eq!(
            watch_rvs(&server),
            ["", "4"],
            "the refused watches never reached the server; the next resumed at 4"
        );
        assert!(server.watches()[1].param("sendInitialEvents").is_none(), "no second watch-list: {uris:?}");
    } else {
        assert_eq!(server.lists().len(), 1, "no relist: {uris:?}");
        assert_eq!(
            watch_rvs(&server),
            ["3", "4"],
            "the refused watches never reached the server; the next resumed at 4"
        );
    }
    let errors = h.errors();
    assert!(errors.iter().all(SourceError::is_retriable), "{errors:?}");
    let message = errors[0].to_string();
    assert!(message.starts_with("watch v1/ConfigMap in all namespaces failed: "), "{message}");
    assert!(message.to_lowercase().contains("connection refused"), "{message}");
    assert_eq!(h.keys(), ["ns/a", "ns/b", "ns/c", "ns/sentinel"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_retry_the_watch_and_deliver_the_change_once() {
    outage_resumes_the_watch_without_relist(true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_without_changes_deliver_nothing() {
    outage_resumes_the_watch_without_relist(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_after_a_watch_list_retry_the_watch_and_deliver_the_change_once() {
    outage_resumes_the_watch_without_relist(true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_after_a_watch_list_deliver_nothing() {
    outage_resumes_the_watch_without_relist(false, true).await;
}

/// A watch answered `429 Too Many Requests` with `Retry-After: 2`. With
/// `client_retries`, kube's client retries it itself after `Retry-After`, as
/// client-go's REST client does (kube's default `RetryPolicy`): the
/// informer never sees the `429`. Without (`Config::default_retry = false`,
/// or once the client gave up), the reflector gets it as a retriable error
/// and watches again from the same resourceVersion no sooner than
/// `Retry-After`. Either way nothing is listed again and the handler sees
/// nothing extra.
async fn too_many_requests_waits_retry_after(style: ThrottleStyle, client_retries: bool) {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    let mut config = server.config();
    config.default_retry = client_retries;
    let client = kube::Client::try_from(config).unwrap();
    let h = Harness::start_with(client, config_maps(), paged());
    eventually("the informer and its handler to sync", || h.informer.has_synced() && h.reg.has_synced()).await;
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    h.wait_for(2).await;

    server.throttle_styled_where(|r| r.is_watch(), 1, 2, style);
    assert_eq!(server.drop_watches(), 1);
    eventually("the watch after the 429", || server.watches().len() == 3).await;
    let watches = server.watches();
    let waited = watches[2].at - watches[1].at;
    assert!(waited >= std::time::Duration::from_secs(2), "watched again after {waited:?}");
    assert!(waited < std::time::Duration::from_secs(4), "watched again after {waited:?}");
    assert_eq!(watch_rvs(&server), ["2", "3", "3"]);
    assert_eq!(server.lists().len(), 1, "no relist");
    let errors = h.errors();
    if client_retries {
        assert!(errors.is_empty(), "{errors:?}");
    } else {
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].is_retriable(), "{errors:?}");
        assert_eq!(errors[0].retry_after(), Some(std::time::Duration::from_secs(2)));
        assert!(errors[0].to_string().contains("code 429"), "{}", errors[0]);
    }

    server.create(config_map("ns", "sentinel", &[], &[])).unwrap();
    h.wait_for(3).await;
    assert_eq!(h.rec.lines(), ["add ns/a@2 initial", "add ns/b@3", "add ns/sentinel@4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_status_waits_retry_after_and_resumes() {
    too_many_requests_waits_retry_after(ThrottleStyle::Status, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_from_flow_control_waits_retry_after_and_resumes() {
    too_many_requests_waits_retry_after(ThrottleStyle::FlowControl, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_retried_by_the_client_after_retry_after() {
    too_many_requests_waits_retry_after(ThrottleStyle::Status, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_namespace_reach_the_server_and_filter() {
    let server = ApiServer::start().await;
    let web = [("app", "web")];
    server.create(config_map("team-a", "match", &web, &[])).unwrap();
    server.create(config_map("team-a", "db", &[("app", "web"), ("tier", "db")], &[])).unwrap();
    server.create(config_map("team-a", "skip-me", &web, &[])).unwrap();
    server.create(config_map("team-a", "other-app", &[("app", "api")], &[])).unwrap();
    server.create(config_map("team-b", "match", &web, &[])).unwrap();
    let options = paged().namespace("team-a").labels("app=web,tier!=db").fields("metadata.name!=skip-me");
    let h = Harness::synced(&server, config_maps(), options).await;
    assert_eq!(h.rec.lines(), ["add team-a/match@2 initial"]);

    // Objects move in and out of the selection.
    server.update(config_map("team-a", "other-app", &web, &[])).unwrap();
    server.update(config_map("team-a", "match", &[("app", "web"), ("tier", "db")], &[])).unwrap();
    server.create(config_map("team-b", "x", &web, &[])).unwrap();
    server.create(config_map("team-a", "skip-me-not", &web, &[])).unwrap();
    h.wait_for(4).await;
    assert_eq!(
        h.rec.lines(),
        ["add team-a/match@2 initial", "add team-a/other-app@7", "delete team-a/match@8", "add team-a/skip-me-not@10",]
    );
    assert_eq!(h.keys(), ["team-a/other-app", "team-a/skip-me-not"]);

    let list = &server.lists()[0];
    assert!(list.uri.starts_with("/api/v1/namespaces/team-a/configmaps?"), "{}", list.uri);
    assert_eq!(list.param("labelSelector"), Some("app=web,tier!=db"));
    assert_eq!(list.param("fieldSelector"), Some("metadata.name!=skip-me"));
    let watch = &server.watches()[0];
    assert_eq!(watch.path, "/api/v1/namespaces/team-a/configmaps");
    assert_eq!(watch.param("labelSelector"), Some("app=web,tier!=db"));
    assert_eq!(watch.param("fieldSelector"), Some("metadata.name!=skip-me"));
    assert_eq!(watch.param("resourceVersion"), Some("6"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_and_cluster_scoped_resources() {
    let server = ApiServer::start().await;
    let deployment = |ns: &str, name: &str, labels: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {"replicas": 1}})
    };
    server.create(deployment("ns1", "web", json!({"env": "prod"}))).unwrap();
    server.create(deployment("ns2", "api", json!({"env": "staging"}))).unwrap();
    server.create(deployment("ns1", "old", json!({"env": "prod", "legacy": "true"}))).unwrap();
    server.create(deployment("ns3", "dev", json!({"env": "dev"}))).unwrap();
    server.register(ResourceType::new("example.com", "v1", "Widget", "widgets", false));
    let widget = |name: &str| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}});
    server.create(widget("w1")).unwrap();

    let deployments = Harness::synced(
        &server,
        KubeResource::new("apps/v1", "Deployment"),
        paged().labels("env in (prod,staging),!legacy"),
    )
    .await;
    let widgets = Harness::synced(&server, KubeResource::new("example.com/v1", "Widget"), paged()).await;
    assert_eq!(deployments.rec.lines(), ["add ns1/web@2 initial", "add ns2/api@3 initial"]);
    assert_eq!(widgets.rec.lines(), ["add w1@6 initial"]);

    server.create(widget("w2")).unwrap();
    server.create(deployment("ns3", "canary", json!({"env": "staging"}))).unwrap();
    widgets.wait_for(2).await;
    deployments.wait_for(3).await;
    assert_eq!(widgets.rec.lines()[1..], ["add w2@7"]);
    assert_eq!(deployments.rec.lines()[2..], ["add ns3/canary@8"]);
    let Seen::Add { obj, .. } = &widgets.rec.seen()[1] else { panic!() };
    assert_eq!((obj.namespace(), obj.api_version(), obj.kind()), (None, "example.com/v1", "Widget"));

    let paths: Vec<String> = server.lists().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/apis/apps/v1/deployments", "/apis/example.com/v1/widgets"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_list_follows_continue_tokens() {
    let server = ApiServer::start().await;
    for i in 0..7 {
        server.create(config_map("ns", &format!("cm-{i}"), &[], &[])).unwrap();
    }
    let h = Harness::synced(&server, config_maps(), paged().page_size(Some(3))).await;
    assert_eq!(h.rec.len(), 7);
    assert!(h.rec.seen().iter().all(|s| matches!(s, Seen::Add { initial: true, .. })));
    let lists = server.lists();
    assert_eq!(lists.len(), 3);
    assert!(lists.iter().all(|l| l.param("limit") == Some("3")));
    assert_eq!(lists[0].param("continue"), None);
    assert!(lists[1].param("continue").is_some() && lists[2].param("continue").is_some());
    eventually("the watch", || server.watches().len() == 1).await;
    assert_eq!(watch_rvs(&server), ["8"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_continue_token_falls_back_to_one_full_list() {
    let server = ApiServer::start().await;
    for i in 0..5 {
        server.create(config_map("ns", &format!("cm-{i}"), &[], &[])).unwrap();
    }
    server.fail_next_where(|r| r.param("continue").is_some(), 410);
    let h = Harness::synced(&server, config_maps(), paged().page_size(Some(2))).await;
    let lists = server.lists();
    assert_eq!(lists.len(), 3);
    assert_eq!((lists[0].param("limit"), lists[0].param("continue").is_some()), (Some("2"), false));
    assert_eq!((lists[1].param("limit"), lists[1].param("continue").is_some()), (Some("2"), true));
    assert_eq!((lists[2].param("limit"), lists[2].param("continue").is_some()), (None, false));
    assert_eq!(h.rec.len(), 5, "the first page is not delivered twice: {:?}", h.rec.lines());
    assert!(h.errors().is_empty(), "handled inside the list: {:?}", h.errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_semantic_any_reads_from_the_cache() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    let options = KubeSourceOptions { list_semantic: ListSemantic::Any, page_size: None, ..paged() };
    let h = Harness::synced(&server, config_maps(), options).await;
    assert_eq!(h.rec.lines(), ["add ns/a@2 initial"]);
    let list = &server.lists()[0];
    assert_eq!(list.param("resourceVersion"), Some("0"));
    assert_eq!(list.param("resourceVersionMatch"), Some("NotOlderThan"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_failure_calls_the_watch_error_handler_and_recovers() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    server.fail_next(RequestKind::Watch, 500);
    let h = Harness::synced(&server, config_maps(), paged()).await;
    eventually("the watch error", || !h.errors().is_empty()).await;
    let e = h.errors()[0].clone();
    assert!(!e.is_gone());
    let msg = e.to_string();
    assert!(msg.starts_with("watch v1/ConfigMap in all namespaces failed: injected failure"), "{msg}");
    assert!(msg.contains("\"InternalError\", code 500"), "{msg}");

    // After the backoff: a relist, a watch, and the next change.
    eventually("the relist", || server.lists().len() == 2).await;
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    h.wait_for(3).await;
    assert_eq!(h.rec.lines(), ["add ns/a@2 initial", "update ns/a 2->2", "add ns/b@3"]);
    assert_eq!(h.errors().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_failure_calls_the_watch_error_handler_and_retries() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    server.fail_next(RequestKind::List, 403);
    let h = Harness::start(&server, config_maps(), paged().namespace("ns"));
    eventually("the list error", || !h.errors().is_empty()).await;
    assert!(!h.informer.has_synced());
    let msg = h.errors()[0].to_string();
    assert!(msg.starts_with("list v1/ConfigMap in namespace ns failed:"), "{msg}");
    assert!(msg.contains("\"Forbidden\", code 403"), "{msg}");
    eventually("the retried list to sync", || h.informer.has_synced() && h.reg.has_synced()).await;
    assert_eq!(h.rec.lines(), ["add ns/a@2 initial"]);
    assert_eq!(server.lists().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_timeout_rewatches_without_relist() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    let h = Harness::synced(&server, config_maps(), paged().watch_timeout(2)).await;
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    h.wait_for(2).await;
    // The server ends the watch after timeoutSeconds; the reflector watches
    // again from where it was.
    eventually("the second watch", || server.watches().len() >= 2).await;
    assert_eq!(server.watches()[0].param("timeoutSeconds"), Some("2"));
    assert_eq!(watch_rvs(&server)[..2], ["2", "3"]);
    server.create(config_map("ns", "c", &[], &[])).unwrap();
    h.wait_for(3).await;
    assert_eq!(h.rec.lines(), ["add ns/a@2 initial", "add ns/b@3", "add ns/c@4"]);
    assert_eq!(server.lists().len(), 1, "no relist");
    assert!(h.errors().is_empty(), "{:?}", h.errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infer_from_a_kubeconfig_file_and_context() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    let kubeconfig = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fixture
  cluster: {{server: \"{}\"}}
- name: nowhere
  cluster: {{server: \"http://127.0.0.1:1\"}}
contexts:
- name: fixture
  context: {{cluster: fixture, user: tester, namespace: ns}}
- name: nowhere
  context: {{cluster: nowhere, user: tester}}
current-context: nowhere
users:
- name: tester
  user: {{token: test-token}}
",
        server.url()
    );
    std::fs::write(&path, kubeconfig).unwrap();

    let options = paged().namespace("ns");
    let source = KubeSource::infer(&config_maps(), options, Some(&path), Some("fixture")).await.unwrap();
    assert_eq!(source.client().default_namespace(), "ns");
    assert_eq!(source.url_path(), Some("/api/v1/namespaces/ns/configmaps"));
    let informer = SharedIndexInformer::new(source, InformerOptions::default());
    let stop = CancellationToken::new();
    tokio::spawn({
        let (informer, stop) = (informer.clone(), stop.clone());
        async move { informer.run(stop).await }
    });
    eventually("the informer to sync through the kubeconfig", || informer.has_synced()).await;
    assert_eq!(informer.store().list_keys(), ["ns/a"]);
    stop.cancel();

    let missing = dir.path().join("missing");
    let err = KubeSource::infer(&config_maps(), Default::default(), Some(&missing), None).await.err().unwrap();
    assert!(err.to_string().starts_with(&format!("kubeconfig {}: ", missing.display())), "{err}");
    let err = KubeSource::infer(&config_maps(), Default::default(), Some(&path), Some("nope")).await.err().unwrap();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_names_the_plural_the_kind_does_not_give() {
    let server = ApiServer::start().await;
    // "Octopus" would be guessed as "octopuses".
    server.register(ResourceType::new("example.com", "v1", "Octopus", "octopi", true));
    server
        .create(
            json!({"apiVersion": "example.com/v1", "kind": "Octopus", "metadata": {"name": "o", "namespace": "sea"}}),
        )
        .unwrap();
    let source =
        KubeSource::discovered(server.client(), &KubeResource::new("example.com/v1", "Octopus"), Default::default());
    assert_eq!(source.url_path(), None, "resolved only when it lists");
    let h = Harness::over(source);
    eventually("synced", || h.informer.has_synced()).await;
    assert_eq!(h.keys(), ["sea/o"]);
    let paths: Vec<String> = server.watches().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/apis/example.com/v1/octopi"]);
}

/// No version: the group's preferred version serving the kind (GA before
/// beta, as the server orders a CRD's versions), else the first other
/// version that serves it: client-go's `DiscoveryRESTMapper` choice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_without_a_version_uses_the_preferred_version_serving_the_kind() {
    let server = ApiServer::start().await;
    // Registered beta first: the preferred version is still v1.
    server.register(ResourceType::new("example.com", "v1beta1", "Widget", "widgets", true));
    server.register(ResourceType::new("example.com", "v1", "Widget", "widgets", true));
    server.register(ResourceType::new("example.com", "v1alpha1", "Gadget", "gadgets", true));
    let object = |api_version: &str, kind: &str, name: &str| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "ns"}});
    server.create(object("example.com/v1", "Widget", "ga")).unwrap();
    server.create(object("example.com/v1beta1", "Widget", "beta")).unwrap();
    server.create(object("example.com/v1alpha1", "Gadget", "g")).unwrap();
    server.create(config_map("ns", "c", &[], &[])).unwrap();

    let widgets = Harness::over(KubeSource::new(
        server.client(),
        &KubeResource::preferred("example.com", "Widget"),
        Default::default(),
    ));
    let gadgets =
        Harness::over(KubeSource::new(server.client(), &KubeResource::preferred("example.com", "Gadget"), paged()));
    let core = Harness::over(KubeSource::new(server.client(), &KubeResource::preferred("", "ConfigMap"), paged()));
    for h in [&widgets, &gadgets, &core] {
        eventually("synced", || h.informer.has_synced()).await;
    }
    assert_eq!(widgets.keys(), ["ns/ga"], "the v1 Widgets");
    let Seen::Add { obj, .. } = &widgets.rec.seen()[0] else { panic!() };
    assert_eq!(obj.api_version(), "example.com/v1");
    assert_eq!(gadgets.keys(), ["ns/g"], "Gadget is served by v1alpha1 only");
    assert_eq!(core.keys(), ["ns/c"]);
    let mut paths: Vec<String> = server.lists().iter().chain(&server.watches()).map(|r| r.path.clone()).collect();
    paths.sort();
    paths.dedup();
    assert_eq!(paths, ["/api/v1/configmaps", "/apis/example.com/v1/widgets", "/apis/example.com/v1alpha1/gadgets"]);

    // A kind no version serves: named with what the preferred one serves.
    let missing =
        Harness::over(KubeSource::new(server.client(), &KubeResource::preferred("example.com", "Nope"), paged()));
    eventually("the error", || !missing.errors().is_empty()).await;
    let message = missing.errors()[0].to_string();
    assert!(
        message.starts_with(
            "example.com/Nope in all namespaces: the server does not serve kind Nope in example.com/v1 \
             (example.com/v1 serves Widget)"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_server_lacks_is_named_with_what_it_offers_and_starts_once_its_crd_appears() {
    let server = ApiServer::start().await;
    server.register(ResourceType::new("example.com", "v1", "Widget", "widgets", false));
    let source =
        KubeSource::discovered(server.client(), &KubeResource::new("example.com/v1", "Gadget"), Default::default());
    let h = Harness::over(source);
    eventually("a discovery error", || !h.errors().is_empty()).await;
    let e = h.errors()[0].to_string();
    assert!(e.contains("does not serve kind Gadget in example.com/v1 (example.com/v1 serves Widget)"), "{e}");
    assert!(!h.informer.has_synced());
    assert!(server.lists().is_empty(), "nothing listed before the kind exists");
    // /readyz says why the informer is not ready.
    let observed = informer_host::metrics::Observed::new();
    observed.add_informer(informer_host::metrics::InformerEntry {
        name: "gadgets".into(),
        source: "kube".into(),
        informer: h.informer.clone(),
    });
    let readiness = observed.readiness().render();
    assert!(
        readiness.contains("[-]informer gadgets: not synced: ") && readiness.contains("serves Widget"),
        "{readiness}"
    );

    // The CustomResourceDefinition is installed: the informer starts.
    server.register(ResourceType::new("example.com", "v1", "Gadget", "gadgets", false));
    server.create(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}})).unwrap();
    eventually("synced once the kind exists", || h.informer.has_synced()).await;
    assert_eq!(h.keys(), ["g"]);

    // A group the server does not have at all: its groups are listed.
    let missing =
        KubeSource::discovered(server.client(), &KubeResource::new("nope.io/v1", "Thing"), Default::default());
    let h = Harness::over(missing);
    eventually("a discovery error", || !h.errors().is_empty()).await;
    let e = h.errors()[0].to_string();
    assert!(
        e.contains("the server has no nope.io/v1; its API groups: core (v1), ") && e.contains("example.com"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_on_a_cluster_scoped_kind_is_a_clear_error() {
    let server = ApiServer::start().await;
    let source =
        KubeSource::discovered(server.client(), &KubeResource::new("v1", "Namespace"), paged().namespace("default"));
    let h = Harness::over(source);
    eventually("an error", || !h.errors().is_empty()).await;
    let e = h.errors()[0].to_string();
    assert!(e.contains("Namespace is cluster-scoped; an informer of it cannot have a namespace"), "{e}");
}

/// The relist scenario of `gone_forces_relist_with_tombstone`, then one
/// more change; the handler's notifications.
async fn relist_through(watch_list: bool) -> (Vec<String>, ApiServer) {
    let (h, server, _) = missed_changes_then_relist(GoneStyle::HttpStatus, watch_list).await;
    server.create(config_map("ns", "d", &[], &[])).unwrap();
    h.wait_for(7).await;
    assert_eq!(h.keys(), ["ns/a", "ns/c", "ns/d"]);
    (h.rec.lines(), server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_list_syncs_and_relists_like_paged_lists_without_a_list_request() {
    let (paged, paged_server) = relist_through(false).await;
    let (streamed, server) = relist_through(true).await;
    assert_eq!(streamed, paged, "the same notifications, in the same order");
    assert_eq!(paged_server.lists().len(), 2);
    assert!(server.lists().is_empty(), "no list request: {:?}", server.lists());
    // The initial sync and the relist: watches with sendInitialEvents.
    let watch_lists: Vec<_> =
        server.watches().into_iter().filter(|w| w.param("sendInitialEvents") == Some("true")).collect();
    assert_eq!(watch_lists.len(), 2, "{watch_lists:#?}");
    for w in &watch_lists {
        assert_eq!(w.param("resourceVersionMatch"), Some("NotOlderThan"));
        assert_eq!(w.param("allowWatchBookmarks"), Some("true"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_watch_list_is_listed_instead() {
    let server = ApiServer::start().await;
    server.set_watch_list(false);
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    let h = Harness::synced(&server, config_maps(), KubeSourceOptions::default()).await;
    assert_eq!(h.rec.lines(), ["add ns/a@2 initial"]);
    assert_eq!(server.lists().len(), 1, "a paged list after the refusal");
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    h.wait_for(2).await;
    // Refused once, it is not asked again.
    let asked = server.watches().into_iter().filter(|w| w.param("sendInitialEvents") == Some("true")).count();
    assert_eq!(asked, 1);
}

/// A watch-list that fails with a server error (a 500 from a struggling API
/// server) is listed this time and asked for again at the next relist,
/// as client-go falls back per attempt; only a refusal (`4xx`) stops the
/// asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_failing_with_a_server_error_is_asked_for_again_at_the_next_relist() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    server.fail_next_where(|r| r.param("sendInitialEvents") == Some("true"), 500);
    let h = Harness::synced(&server, config_maps(), KubeSourceOptions::default()).await;
    assert_eq!(server.lists().len(), 1, "this attempt listed");
    assert!(h.errors().is_empty(), "the fallback is not a watch error: {:?}", h.errors());
    // A 410 forces a relist: a watch-list again, not a list.
    server.create(config_map("ns", "b", &[], &[])).unwrap();
    h.wait_for(2).await;
    server.compact();
    assert_eq!(server.expire_watches(), 1);
    let asked = || server.watches().into_iter().filter(|w| w.param("sendInitialEvents") == Some("true")).count();
    eventually("a second watch-list", || asked() == 2).await;
    server.create(config_map("ns", "c", &[], &[])).unwrap();
    h.wait_for(3).await;
    assert_eq!(server.lists().len(), 1, "the relist did not list: {:?}", server.lists());
}

/// A watch-list that fails for the network (connections refused), not
/// because the server refused it, is tried again: the informer syncs through
/// a watch-list once the server is back, never listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_failing_on_the_network_is_tried_again_not_given_up() {
    let server = ApiServer::start().await;
    server.create(config_map("ns", "a", &[], &[])).unwrap();
    server.refuse_connections().await;
    let h = Harness::start(&server, config_maps(), KubeSourceOptions::default());
    eventually("a refused attempt", || !h.errors().is_empty()).await;
    assert!(h.errors()[0].is_retriable(), "{:?}", h.errors());
    server.accept_connections().await;
    eventually("synced", || h.informer.has_synced() && h.reg.has_synced()).await;
    assert_eq!(h.rec.lines(), ["add ns/a@2 initial"]);
    assert!(server.lists().is_empty(), "no list reached the server: {:?}", server.lists());
    let watches = server.watches();
    assert_eq!(watches.len(), 1, "{watches:#?}");
    assert_eq!(watches[0].param("sendInitialEvents"), Some("true"));
}
