//! Three replicas sharing plugins through coordination.k8s.io Leases on the
//! test API server (`informer_host::coordination`, issue 13 item 3), and
//! the deletion of the leases they abandon.
//!
//! The clock is tokio's paused clock: the API server runs in the same
//! runtime on loopback, so every bound below is on virtual time and speaks
//! of the protocol (lease duration, retry period), never of machine speed.
//! Ownership is sampled on every change of any replica's owned set, in one
//! synchronous step (a current-thread runtime), and checked pairwise.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use e2e::apiserver::{ApiServer, namespace};
use informer_host::coordination::{Coordinator, CoordinatorConfig, fair_share, plugin_lease_name, replica_lease_name};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NS: &str = "ih-system";
const P: usize = 10;
const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_secs(2);

fn keys() -> Vec<String> {
    (0..P).map(|i| format!("tenant-{}/plugin-{i}", i % 3)).collect()
}

fn config(identity: &str) -> CoordinatorConfig {
    // client-go's defaults: lease 15 s, renew deadline 10 s, retry 2 s.
    CoordinatorConfig::new(NS, identity)
}

/// Samples every replica's owned set after every change and records what
/// broke: a plugin owned by two replicas, a replica above ⌈P/N⌉ + 1.
struct Checker {
    violations: Arc<Mutex<Vec<String>>>,
    /// Live replicas the balance bound is computed for.
    alive: Arc<Mutex<usize>>,
    samples: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Checker {
    fn start(mut rxs: Vec<watch::Receiver<BTreeSet<String>>>) -> Checker {
        let violations = Arc::new(Mutex::new(Vec::new()));
        let alive = Arc::new(Mutex::new(rxs.len()));
        let samples = Arc::new(Mutex::new(0));
        let (v, a, s) = (violations.clone(), alive.clone(), samples.clone());
        let task = tokio::spawn(async move {
            let mut open = vec![true; rxs.len()];
            loop {
                // One synchronous snapshot of every replica's set.
                let sets: Vec<BTreeSet<String>> = rxs.iter_mut().map(|rx| rx.borrow_and_update().clone()).collect();
                *s.lock() += 1;
                let bound = fair_share(P, *a.lock()) + 1;
                for (i, si) in sets.iter().enumerate() {
                    if si.len() > bound {
                        v.lock().push(format!("replica {i} owns {} > {bound}: {si:?}", si.len()));
                    }
                    for (j, sj) in sets.iter().enumerate().skip(i + 1) {
                        let both: Vec<_> = si.intersection(sj).collect();
                        if !both.is_empty() {
                            v.lock().push(format!("replicas {i} and {j} both own {both:?}"));
                        }
                    }
                }
                let changes = rxs
                    .iter_mut()
                    .zip(open.iter())
                    .enumerate()
                    .filter(|(_, (_, o))| **o)
                    .map(|(i, (rx, _))| Box::pin(async move { (i, rx.changed().await.is_ok()) }));
                let changes: Vec<_> = changes.collect();
                if changes.is_empty() {
                    return;
                }
                let ((i, ok), _, _) = futures::future::select_all(changes).await;
                if !ok {
                    open[i] = false;
                }
            }
        });
        Checker { violations, alive, samples, task }
    }

    fn assert_clean(&self) {
        let v = self.violations.lock();
        assert!(v.is_empty(), "ownership violations:\n{}", v.join("\n"));
    }
}

fn union(rxs: &[watch::Receiver<BTreeSet<String>>], which: &[usize]) -> BTreeSet<String> {
    which.iter().flat_map(|i| rxs[*i].borrow().clone()).collect()
}

/// Polls (on virtual time) until `cond`; the virtual time it took.
async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() <= limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

async fn server() -> ApiServer {
    let server = ApiServer::start().await;
    server.create(namespace(NS)).unwrap();
    server
}

fn holder_of(server: &ApiServer, key: &str) -> Option<String> {
    let lease = server.get("coordination.k8s.io/v1", "Lease", Some(NS), &plugin_lease_name(key))?;
    lease["spec"]["holderIdentity"].as_str().map(String::from)
}

#[tokio::test(start_paused = true)]
async fn three_replicas_own_every_plugin_once_balanced_and_take_over_from_the_dead_and_the_departing() {
    let server = server().await;
    let all: BTreeSet<String> = keys().into_iter().collect();
    let names = ["replica-a", "replica-b", "replica-c"];
    let mut replicas: Vec<Option<Coordinator>> = names
        .iter()
        .map(|n| Some(Coordinator::start(server.client(), config(n), CancellationToken::new()).unwrap()))
        .collect();
    let rxs: Vec<_> = replicas.iter().map(|r| r.as_ref().unwrap().owned()).collect();
    let checker = Checker::start(rxs.clone());
    for r in replicas.iter().flatten() {
        r.set_plugins(keys());
    }

    // All owned within a few rounds: one to announce, one to take, one
    // for whatever lost a race.
    let took =
        wait_for("every plugin owned", 3 * RETRY + Duration::from_millis(500), || union(&rxs, &[0, 1, 2]) == all).await;
    eprintln!("all {P} plugins owned after {took:?} (virtual)");
    let counts: Vec<usize> = rxs.iter().map(|rx| rx.borrow().len()).collect();
    assert!(counts.iter().all(|c| *c <= fair_share(P, 3)), "balanced at ⌈P/N⌉: {counts:?}");

    // Steady: a minute of renewals, nothing lost, nothing moves.
    let before: Vec<_> = rxs.iter().map(|rx| rx.borrow().clone()).collect();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after: Vec<_> = rxs.iter().map(|rx| rx.borrow().clone()).collect();
    assert_eq!(before, after, "ownership moved while every replica was healthy");
    for r in replicas.iter().flatten() {
        let s = r.stats();
        assert_eq!(s.losses, 0, "{}: {s:?}", r.identity());
        assert_eq!(s.replicas, 3, "{}: {s:?}", r.identity());
    }
    // The leases say what the replicas think.
    for (i, set) in after.iter().enumerate() {
        for key in set {
            assert_eq!(holder_of(&server, key).as_deref(), Some(names[i]), "{key}");
        }
    }

    // Kill the busiest replica: no release, its leases must expire.
    let victim = (0..3).max_by_key(|i| rxs[*i].borrow().len()).unwrap();
    let orphans = rxs[victim].borrow().clone();
    let survivors: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
    *checker.alive.lock() = 2;
    drop(replicas[victim].take());
    let moved =
        wait_for("the dead replica's plugins taken over", LEASE + 3 * RETRY, || union(&rxs, &survivors) == all).await;
    eprintln!("{} plugins of the killed {} moved after {moved:?} (virtual)", orphans.len(), names[victim]);
    // Not before the lease could expire (the last renewal was at most one
    // retry period before the kill), and within one lease duration after
    // it plus the rounds that observe and take it.
    assert!(moved >= LEASE - RETRY, "taken over before the lease expired: {moved:?}");
    assert!(moved <= LEASE + 2 * RETRY, "not taken over within the lease duration: {moved:?}");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(union(&rxs, &survivors), all);
    for i in &survivors {
        let n = rxs[*i].borrow().len();
        assert!(n <= fair_share(P, 2), "{} owns {n} of {P} with two replicas", names[*i]);
        assert_eq!(replicas[*i].as_ref().unwrap().stats().replicas, 2);
    }

    // A graceful stop hands over at once: the last replica takes all on
    // its next round, long before any lease could expire.
    let (leaving, staying) = (survivors[0], survivors[1]);
    *checker.alive.lock() = 1;
    let gone = replicas[leaving].take().unwrap();
    gone.shutdown().await;
    assert!(rxs[leaving].borrow().is_empty());
    let handed =
        wait_for("the departing replica's plugins taken over", LEASE, || rxs[staying].borrow().len() == P).await;
    eprintln!("graceful hand-over after {handed:?} (virtual)");
    assert!(handed <= RETRY + Duration::from_millis(500), "hand-over took {handed:?}, more than a round");
    for key in &all {
        assert_eq!(holder_of(&server, key).as_deref(), Some(names[staying]), "{key}");
    }

    let last = replicas[staying].take().unwrap();
    let stats = last.stats();
    assert_eq!(stats.owned, P as u64);
    last.shutdown().await;
    for key in &all {
        assert_eq!(holder_of(&server, key), None, "{key} still held after every replica stopped");
    }
    assert!(*checker.samples.lock() > 10, "the checker sampled the changes");
    checker.assert_clean();
    checker.task.abort();
}

/// Replica a alone until it owns every plugin (confirming its stops if
/// `confirm_stops`), then replica b joining, with a checker over both
/// that checks only exclusivity until told b is in (`alive` = 2): a still
/// holds what it took alone.
async fn a_alone_then_b(server: &ApiServer, confirm_stops: bool) -> (Coordinator, Coordinator, Checker) {
    let a = Coordinator::start(server.client(), config("replica-a"), CancellationToken::new()).unwrap();
    if confirm_stops {
        a.confirm_stops();
    }
    a.set_plugins(keys());
    let ra = a.owned();
    wait_for("a owns every plugin", 3 * RETRY, || ra.borrow().len() == P).await;
    let b = Coordinator::start(server.client(), config("replica-b"), CancellationToken::new()).unwrap();
    b.set_plugins(keys());
    let checker = Checker::start(vec![ra, b.owned()]);
    *checker.alive.lock() = 1;
    (a, b, checker)
}

#[tokio::test(start_paused = true)]
async fn a_new_replica_gets_its_share_handed_over_and_a_removed_plugin_is_released() {
    let server = server().await;
    let (a, b, checker) = a_alone_then_b(&server, false).await;
    let (ra, rb) = (a.owned(), b.owned());
    let settled = wait_for("b gets its share", 4 * RETRY, || rb.borrow().len() == fair_share(P, 2)).await;
    eprintln!("second replica got {} plugins after {settled:?} (virtual)", fair_share(P, 2));
    assert_eq!(ra.borrow().len(), P - fair_share(P, 2));
    assert_eq!(a.stats().losses, 0, "a handed over, it lost nothing");
    assert!(a.stats().releases >= 5);
    *checker.alive.lock() = 2;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!((ra.borrow().len(), rb.borrow().len()), (P - fair_share(P, 2), fair_share(P, 2)), "stable once shared");

    // Removing a plugin releases its lease.
    let removed = keys()[0].clone();
    let rest: Vec<String> = keys().into_iter().skip(1).collect();
    a.set_plugins(rest.clone());
    b.set_plugins(rest);
    wait_for("the removed plugin released", 2 * RETRY, || {
        !ra.borrow().contains(&removed) && !rb.borrow().contains(&removed) && holder_of(&server, &removed).is_none()
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
    checker.assert_clean();
    checker.task.abort();
}

/// With `confirm_stops` (as the Plugin host runs it), a plugin handed over
/// leaves the owned set at once but keeps its lease, renewed, until the
/// replica handing it over says it stopped: the newcomer cannot start it
/// while the old owner still finishes a reconcile, however long (here two
/// lease durations); each confirmed stop is taken over within a round.
#[tokio::test(start_paused = true)]
async fn a_hand_over_waits_until_the_old_owner_stopped_the_plugin() {
    let server = server().await;
    let (a, b, checker) = a_alone_then_b(&server, true).await;
    let (ra, rb) = (a.owned(), b.owned());
    let share = fair_share(P, 2);
    wait_for("a hands over its surplus", 4 * RETRY, || ra.borrow().len() == P - share).await;
    tokio::time::sleep(2 * LEASE).await;
    assert!(rb.borrow().is_empty(), "b took plugins a had not stopped: {:?}", rb.borrow());
    let mut waiting = a.handing_over();
    assert_eq!(waiting.len(), share, "{waiting:?}");
    for key in &waiting {
        assert_eq!(holder_of(&server, key).as_deref(), Some("replica-a"), "{key}: the lease was kept");
    }

    let stopped: Vec<String> = waiting.drain(..2).collect();
    stopped.iter().for_each(|k| a.stopped(k));
    let took = wait_for("b takes the two stopped", 2 * RETRY, || stopped.iter().all(|k| rb.borrow().contains(k))).await;
    eprintln!("a confirmed stop was taken over after {took:?} (virtual)");
    tokio::time::sleep(3 * RETRY).await;
    assert_eq!(rb.borrow().len(), 2, "only the stopped ones: {:?}", rb.borrow());

    waiting.iter().for_each(|k| a.stopped(k));
    wait_for("b gets its share", 2 * RETRY, || rb.borrow().len() == share).await;
    assert!(a.handing_over().is_empty());
    assert_eq!(a.stats().losses, 0, "a handed over, it lost nothing");
    a.shutdown().await;
    b.shutdown().await;
    checker.assert_clean();
    checker.task.abort();
}

/// A replica owning many plugins keeps them all while every Lease write
/// takes a while: 500 plugins at 30 ms a write would take 15 s renewed
/// one after another, past the 10 s renew deadline, and the replica would
/// lose every plugin it had renewed first, round after round.
#[tokio::test(start_paused = true)]
async fn a_replica_owning_many_plugins_keeps_them_while_lease_writes_are_slow() {
    const MANY: usize = 500;
    let server = server().await;
    server.set_write_latency(Duration::from_millis(30));
    let keys: Vec<String> = (0..MANY).map(|i| format!("tenant-{}/plugin-{i}", i % 7)).collect();
    let a = Coordinator::start(server.client(), config("replica-a"), CancellationToken::new()).unwrap();
    a.set_plugins(keys);
    let ra = a.owned();
    wait_for("a owns every plugin", 10 * RETRY, || ra.borrow().len() == MANY).await;
    let losses = a.stats().losses;
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(ra.borrow().len(), MANY, "still owns every plugin");
    assert_eq!(a.stats().losses, losses, "lost none to the renew deadline");
    a.shutdown().await;
}

/// A loopback TCP proxy to the API server that can be cut: after `cut`,
/// open connections and new ones hang (a network partition, not a refusal).
async fn cuttable_proxy(upstream: std::net::SocketAddr, cut: CancellationToken) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut down, _)) = listener.accept().await else { return };
            let cut = cut.clone();
            tokio::spawn(async move {
                if cut.is_cancelled() {
                    std::future::pending::<()>().await;
                }
                let mut up = tokio::net::TcpStream::connect(upstream).await.unwrap();
                // Buffers larger than any response: with the default 8 KiB
                // ones a multi-buffer list response stalled in this proxy
                // under the paused clock (not understood; not the code
                // under test, whose direct clients never stalled).
                tokio::select! {
                    _ = tokio::io::copy_bidirectional_with_sizes(&mut down, &mut up, 1 << 20, 1 << 20) => {}
                    _ = cut.cancelled() => std::future::pending::<()>().await,
                }
            });
        }
    });
    url
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_replica_stops_owning_at_its_renew_deadline_before_another_takes_over() {
    let server = server().await;
    let cut = CancellationToken::new();
    let proxy = cuttable_proxy(server.addr(), cut.clone()).await;
    let client_a = kube::Client::try_from(kube::Config::new(proxy.parse().unwrap())).unwrap();
    let a = Coordinator::start(client_a, config("replica-a"), CancellationToken::new()).unwrap();
    let b = Coordinator::start(server.client(), config("replica-b"), CancellationToken::new()).unwrap();
    let (ra, rb) = (a.owned(), b.owned());
    let checker = Checker::start(vec![ra.clone(), rb.clone()]);
    a.set_plugins(keys());
    b.set_plugins(keys());
    let all: BTreeSet<String> = keys().into_iter().collect();
    wait_for("every plugin owned", 3 * RETRY, || union(&[ra.clone(), rb.clone()], &[0, 1]) == all).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let owned_a = ra.borrow().len();
    assert!(owned_a > 0);

    // Partition a: its requests hang. It must stop owning by its renew
    // deadline (10 s after its last renewal began, at most one round
    // before the cut), while b may take over only after the lease
    // duration (15 s after it saw that renewal).
    *checker.alive.lock() = 1;
    cut.cancel();
    let dropped = wait_for("a stops owning", LEASE, || ra.borrow().is_empty()).await;
    let renew_deadline = config("a").renew_deadline;
    assert!(dropped <= renew_deadline, "a owned past its renew deadline: {dropped:?}");
    assert!(dropped + RETRY >= renew_deadline, "a dropped early: {dropped:?}");
    assert!(rb.borrow().len() < P, "b took a's plugins while a could still own them: dropped {dropped:?}");
    let taken = wait_for("b takes over", LEASE + 3 * RETRY, || rb.borrow().len() == P).await + dropped;
    eprintln!("partitioned replica dropped {owned_a} plugins after {dropped:?}, taken over after {taken:?} (virtual)");
    assert!(taken >= LEASE - RETRY && taken <= LEASE + 2 * RETRY, "{taken:?}");
    assert_eq!(a.stats().losses, owned_a as u64);
    checker.assert_clean();
    checker.task.abort();
    drop(a);
    b.shutdown().await;
}

fn lease_exists(server: &ApiServer, name: &str) -> bool {
    server.get("coordination.k8s.io/v1", "Lease", Some(NS), name).is_some()
}

/// The membership of a crashed replica and the lease of a removed plugin
/// are deleted once nobody has held or changed them for `abandoned_after`,
/// and not before; the leases of live replicas and running plugins, and a
/// Lease the coordinator does not manage, stay. The crashed replica's
/// identity can come back and gets its membership and share again.
#[tokio::test(start_paused = true)]
async fn abandoned_leases_are_deleted_after_the_period_and_live_ones_never() {
    const ABANDONED: Duration = Duration::from_secs(60);
    let cfg = |identity: &str| CoordinatorConfig { abandoned_after: ABANDONED, ..config(identity) };
    let server = server().await;
    let foreign = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "someone-elses", "namespace": NS}, "spec": {}});
    server.create(foreign).unwrap();
    let start = |identity: &str| Coordinator::start(server.client(), cfg(identity), CancellationToken::new()).unwrap();
    let (a, b, c) = (start("replica-a"), start("replica-b"), start("replica-c"));
    let (ra, rb, rc) = (a.owned(), b.owned(), c.owned());
    for r in [&a, &b, &c] {
        r.set_plugins(keys());
    }
    let all: BTreeSet<String> = keys().into_iter().collect();
    let rxs = [ra.clone(), rb.clone(), rc.clone()];
    wait_for("every plugin owned", 3 * RETRY + Duration::from_millis(500), || union(&rxs, &[0, 1, 2]) == all).await;
    let checker = Checker::start(rxs.to_vec());

    // c crashes: nothing released, its membership stops changing.
    *checker.alive.lock() = 2;
    let crashed = Instant::now();
    drop(c);
    let c_membership = replica_lease_name("replica-c");
    // A plugin of a live replica is removed: its lease is released and
    // nobody takes it.
    let removed = ra.borrow().iter().next().unwrap().clone();
    let rest: Vec<String> = keys().into_iter().filter(|k| *k != removed).collect();
    a.set_plugins(rest.clone());
    b.set_plugins(rest.clone());
    wait_for("the removed plugin released", 2 * RETRY, || holder_of(&server, &removed).is_none()).await;
    let released = Instant::now();
    let removed_lease = plugin_lease_name(&removed);

    // Not before the period: c's last renewal was at most one round
    // before the crash, the release is no older than now.
    tokio::time::sleep_until(crashed + ABANDONED - RETRY - Duration::from_millis(500)).await;
    assert!(lease_exists(&server, &c_membership), "the crashed replica's membership deleted early");
    tokio::time::sleep_until(released + ABANDONED - Duration::from_millis(500)).await;
    assert!(lease_exists(&server, &removed_lease), "the removed plugin's lease deleted early");
    // Within the period plus the rounds that see the last change and act.
    let limit = ABANDONED + 2 * RETRY + Duration::from_millis(500);
    wait_for("the crashed replica's membership deleted", crashed + limit - Instant::now(), || {
        !lease_exists(&server, &c_membership)
    })
    .await;
    eprintln!("abandoned membership deleted {:?} after the crash (virtual)", crashed.elapsed());
    wait_for("the removed plugin's lease deleted", released + limit - Instant::now(), || {
        !lease_exists(&server, &removed_lease)
    })
    .await;

    // c comes back under the same name: a new membership, a fair share.
    let c = start("replica-c");
    let rc = c.owned();
    c.set_plugins(rest.clone());
    *checker.alive.lock() = 3;
    wait_for("the returning replica gets its share", LEASE + 4 * RETRY, || rc.borrow().len() == fair_share(P - 1, 3))
        .await;
    assert!(lease_exists(&server, &c_membership));

    // Steady for several periods: nothing live is deleted.
    tokio::time::sleep(3 * ABANDONED).await;
    for key in &rest {
        assert!(holder_of(&server, key).is_some(), "{key}: lease gone or unheld");
    }
    for identity in ["replica-a", "replica-b", "replica-c"] {
        assert!(lease_exists(&server, &replica_lease_name(identity)), "{identity}'s membership deleted");
    }
    assert!(lease_exists(&server, "someone-elses"), "a lease the coordinator does not manage was deleted");
    assert!(!lease_exists(&server, &removed_lease), "the removed plugin's lease came back");
    let collected: u64 = [&a, &b, &c].iter().map(|r| r.stats().collected).sum();
    assert_eq!(collected, 2, "exactly the two abandoned leases were deleted, once each");
    let rest: BTreeSet<String> = rest.into_iter().collect();
    assert_eq!(union(&[ra, rb, rc], &[0, 1, 2]), rest, "every remaining plugin owned");
    for r in [a, b, c] {
        r.shutdown().await;
    }
    checker.assert_clean();
    checker.task.abort();
}
