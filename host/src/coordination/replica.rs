//! One replica's rounds: membership, renewals, hand-overs, acquisitions
//! (see the module docs of `coordination`), and the watchdog that ends
//! local ownership at the renew deadline.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use futures::StreamExt as _;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::lease::{
    Claim, LEASE_LABEL, Observed, PLUGIN, PLUGIN_KEY_ANNOTATION, REPLICA, Record, claim, fair_share, held_by,
    new_lease, plugin_lease_name, preference, released, replica_lease_name,
};
use super::{CoordinatorConfig, Counters, Error};

/// Lease writes (renewals, acquisitions) a round has in flight at once.
const CONCURRENT_WRITES: usize = 16;

/// What the handle, the rounds and the watchdog share.
pub(super) struct Shared {
    pub config: CoordinatorConfig,
    /// The keys to share, as the caller last set them.
    pub plugins: watch::Sender<BTreeSet<String>>,
    /// The keys owned now; always the key set of `held`.
    pub owned: watch::Sender<BTreeSet<String>>,
    /// Owned keys and the instant each stops being owned unless renewed.
    held: Mutex<BTreeMap<String, Instant>>,
    held_changed: Notify,
    /// Whether a handed-over key keeps its lease until the caller says it
    /// stopped ([`super::Coordinator::confirm_stops`]).
    confirm_stops: AtomicBool,
    /// Keys handed over, no longer owned, whose leases this replica keeps
    /// renewing until the caller stopped them (`true` once it did).
    handing_over: Mutex<BTreeMap<String, bool>>,
    /// Wakes the rounds early (a stop confirmed: hand it over now).
    wake: Notify,
    pub counters: Counters,
}

impl Shared {
    pub fn new(config: CoordinatorConfig) -> Shared {
        Shared {
            config,
            plugins: watch::Sender::new(BTreeSet::new()),
            owned: watch::Sender::new(BTreeSet::new()),
            held: Mutex::new(BTreeMap::new()),
            held_changed: Notify::new(),
            confirm_stops: AtomicBool::new(false),
            handing_over: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
            counters: Counters::default(),
        }
    }

    /// Publishes the owned set; called with `held` locked, so the channel
    /// sees every change in order.
    fn publish(&self, held: &BTreeMap<String, Instant>) {
        let set: BTreeSet<String> = held.keys().cloned().collect();
        self.owned.send_if_modified(|cur| {
            let changed = *cur != set;
            *cur = set;
            changed
        });
        self.held_changed.notify_one();
    }

    /// Owns `key` until `deadline` (later deadlines only); whether it is new.
    fn hold(&self, key: &str, deadline: Instant) -> bool {
        let mut held = self.held.lock();
        let new = match held.get_mut(key) {
            Some(d) => {
                *d = (*d).max(deadline);
                false
            }
            None => {
                held.insert(key.to_string(), deadline);
                true
            }
        };
        self.publish(&held);
        new
    }

    fn is_held(&self, key: &str) -> bool {
        self.held.lock().contains_key(key)
    }

    fn held_keys(&self) -> Vec<String> {
        self.held.lock().keys().cloned().collect()
    }

    /// Stops owning `key`; whether it was owned.
    fn unhold(&self, key: &str) -> bool {
        let mut held = self.held.lock();
        let was = held.remove(key).is_some();
        self.publish(&held);
        was
    }

    /// Stops owning `key` to hand it over; whether its lease may be
    /// released now (else it is kept until [`Shared::stopped`]). The entry
    /// is made before the owned set changes, so a confirmation always
    /// finds it.
    fn hand_over(&self, key: &str) -> bool {
        let confirm = self.confirm_stops.load(Ordering::Relaxed);
        if confirm {
            self.handing_over.lock().insert(key.to_string(), false);
        }
        self.unhold(key);
        !confirm
    }

    pub fn set_confirm_stops(&self) {
        self.confirm_stops.store(true, Ordering::Relaxed);
    }

    /// The caller stopped `key`: a hand-over waiting for it completes.
    pub fn stopped(&self, key: &str) {
        if let Some(stopped) = self.handing_over.lock().get_mut(key) {
            *stopped = true;
            self.wake.notify_one();
        }
    }

    pub fn handing_over_keys(&self) -> Vec<String> {
        self.handing_over.lock().iter().filter(|(_, stopped)| !**stopped).map(|(k, _)| k.clone()).collect()
    }

    fn is_handing_over(&self, key: &str) -> bool {
        self.handing_over.lock().contains_key(key)
    }

    fn unhold_all(&self) {
        let mut held = self.held.lock();
        held.clear();
        self.publish(&held);
    }

    /// Drops every key whose deadline is not after `now`.
    fn expire_due(&self, now: Instant) {
        let mut held = self.held.lock();
        let due: Vec<String> = held.iter().filter(|(_, d)| **d <= now).map(|(k, _)| k.clone()).collect();
        for key in &due {
            held.remove(key);
            tracing::warn!(identity = %self.config.identity, plugin = %key, "renew deadline passed: plugin no longer owned");
        }
        Counters::add(&self.counters.losses, due.len() as u64);
        self.publish(&held);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.held.lock().values().min().copied()
    }
}

/// Ends local ownership of every plugin at its renew deadline, whatever the
/// rounds are doing (a hung request included).
pub(super) async fn watchdog(shared: Arc<Shared>) {
    loop {
        match shared.next_deadline() {
            Some(deadline) => tokio::select! {
                _ = sleep_until(deadline) => shared.expire_due(Instant::now()),
                _ = shared.held_changed.notified() => {}
            },
            None => shared.held_changed.notified().await,
        }
    }
}

/// The rounds, until `stop`; then every lease is released.
pub(super) async fn run(shared: Arc<Shared>, api: Api<Lease>, stop: CancellationToken) {
    let mut plugins = shared.plugins.subscribe();
    let mut round = Rounds { shared: shared.clone(), api, observed: HashMap::new(), rounds: 0 };
    loop {
        let started = Instant::now();
        let next = started + shared.config.retry_period;
        tokio::select! {
            _ = stop.cancelled() => break,
            r = round.once() => if let Err(e) = r {
                tracing::warn!(identity = %shared.config.identity, error = %e, "lease round failed");
            },
        }
        plugins.mark_unchanged();
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = sleep_until(next) => {}
            // A confirmed stop is handed over at once.
            _ = shared.wake.notified() => {}
            // A new plugin set gets a round at once.
            _ = plugins.changed() => {}
        }
        // But not more often than four times a period: each round lists
        // every managed lease, and Plugins created and deleted in a loop
        // must not turn that into a stream of lists.
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = sleep_until(started + shared.config.retry_period / 4) => {}
        }
    }
    // Bounded: an API server that does not answer must not hold the
    // process; the owned set is empty from the first poll, and unreleased
    // leases expire.
    let grace = shared.config.renew_deadline;
    if tokio::time::timeout(grace, round.release_all()).await.is_err() {
        tracing::warn!(identity = %shared.config.identity, "releasing the leases timed out: they will expire");
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn holder(lease: &Lease) -> &str {
    lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).unwrap_or("")
}

fn kind(lease: &Lease) -> &str {
    lease.metadata.labels.as_ref().and_then(|l| l.get(LEASE_LABEL)).map_or("", String::as_str)
}

struct Rounds {
    shared: Arc<Shared>,
    api: Api<Lease>,
    /// Every managed lease by name, as last seen changing.
    observed: HashMap<String, Observed>,
    rounds: u64,
}

impl Rounds {
    fn cfg(&self) -> &CoordinatorConfig {
        &self.shared.config
    }

    async fn once(&mut self) -> Result<(), Error> {
        self.rounds += 1;
        tracing::trace!(identity = %self.cfg().identity, round = self.rounds, "lease round");
        self.renew_membership().await?;
        let listed = self.api.list(&ListParams::default().labels(LEASE_LABEL)).await?;
        let now = Instant::now();
        let me = self.cfg().identity.clone();
        let mut leases: HashMap<String, Lease> = HashMap::new();
        let mut observed = HashMap::new();
        for lease in listed.items {
            let Some(name) = lease.metadata.name.clone() else { continue };
            let record = Record::of(&lease, self.cfg().lease_duration);
            observed.insert(name.clone(), Observed::observe(self.observed.remove(&name), record, now));
            leases.insert(name, lease);
        }
        self.observed = observed;

        let replicas = leases
            .iter()
            .filter(|(name, l)| kind(l) == REPLICA && (holder(l) == me || self.observed[*name].is_held(now)))
            .count()
            .max(1);
        Counters::set(&self.shared.counters.replicas, replicas as u64);
        let plugins = self.shared.plugins.borrow().clone();
        let share = fair_share(plugins.len(), replicas);

        // Leases we hold for plugins no longer listed: hand them over.
        for (name, lease) in &leases {
            if kind(lease) != PLUGIN || holder(lease) != me {
                continue;
            }
            let key = lease.metadata.annotations.as_ref().and_then(|a| a.get(PLUGIN_KEY_ANNOTATION));
            if key.is_none_or(|k| !plugins.contains(k)) {
                if let Some(k) = key {
                    self.shared.unhold(k);
                    self.shared.handing_over.lock().remove(k);
                }
                self.release(name, lease).await;
            }
        }
        // Hand-overs waiting for the caller: release those it stopped,
        // keep the others' leases so nobody takes them yet.
        let waiting: Vec<(String, bool)> =
            self.shared.handing_over.lock().iter().map(|(k, s)| (k.clone(), *s)).collect();
        for (key, stopped) in waiting {
            let name = plugin_lease_name(&key);
            match leases.get(&name).filter(|l| holder(l) == me) {
                Some(lease) if stopped => {
                    self.shared.handing_over.lock().remove(&key);
                    self.release(&name, &lease.clone()).await;
                }
                Some(lease) => self.keep(&key, &lease.clone()).await,
                // Gone, or taken after it expired: nothing to hand over.
                None => {
                    self.shared.handing_over.lock().remove(&key);
                }
            }
        }
        for key in self.shared.held_keys() {
            if !plugins.contains(&key) {
                self.shared.unhold(&key);
            }
        }
        // Owned keys above the fair share, least preferred first: hand over.
        let mut held: Vec<String> = self.shared.held_keys().into_iter().filter(|k| plugins.contains(k)).collect();
        held.sort_by_key(|k| preference(&me, k));
        while held.len() > share {
            let key = held.remove(0);
            if !self.shared.hand_over(&key) {
                // Kept, then released once the caller stopped it.
                continue;
            }
            let name = plugin_lease_name(&key);
            if let Some(lease) = leases.get(&name) {
                self.release(&name, &lease.clone()).await;
            }
        }
        // Concurrently: one after another, the renewals of a replica owning
        // a few thousand plugins would take longer than the renew deadline
        // (3 000 at 5 ms is 15 s against 10), and it would lose them all.
        // (Collected first: a stream over the closure is not `Send` for
        // every lifetime, which the spawned round needs.)
        let renewals: Vec<_> = held.iter().map(|key| self.renew(key, leases.get(&plugin_lease_name(key)))).collect();
        futures::stream::iter(renewals).buffer_unordered(CONCURRENT_WRITES).collect::<Vec<()>>().await;
        // The first round only announced this replica: take plugins once
        // the others' memberships are visible.
        if self.rounds < 2 {
            return Ok(());
        }
        let mut candidates: Vec<&String> =
            plugins.iter().filter(|k| !self.shared.is_held(k) && !self.shared.is_handing_over(k)).collect();
        candidates.sort_by_key(|k| std::cmp::Reverse(preference(&me, k)));
        // Those it may take, most preferred first, up to its share (those
        // lost to a race are tried again next round), concurrently.
        let room = share.saturating_sub(self.shared.held_keys().len());
        let now = Instant::now();
        let takes: Vec<(&String, Option<&Lease>)> = candidates
            .into_iter()
            .filter_map(|key| {
                let name = plugin_lease_name(key);
                match claim(&me, self.observed.get(&name), now) {
                    Claim::HeldBy(_) => None,
                    Claim::Create => Some((key, None)),
                    Claim::Renew | Claim::Acquire => Some((key, leases.get(&name))),
                }
            })
            .take(room)
            .collect();
        let acquisitions: Vec<_> = takes.into_iter().map(|(key, lease)| self.acquire(key, lease)).collect();
        futures::stream::iter(acquisitions).buffer_unordered(CONCURRENT_WRITES).collect::<Vec<()>>().await;
        self.collect_abandoned(&leases, &plugins, now).await;
        Ok(())
    }

    /// Deletes the leases nobody has held or changed for `abandoned_after`:
    /// memberships of replicas that are gone, and leases of plugins this
    /// replica does not run (one it runs it would rather take). The listed
    /// `resourceVersion` is the delete's precondition, so a lease renewed
    /// since the list stays; of replicas deleting the same lease, one
    /// succeeds and the others get `404` or `409`.
    async fn collect_abandoned(&mut self, leases: &HashMap<String, Lease>, plugins: &BTreeSet<String>, now: Instant) {
        let cfg = self.cfg().clone();
        let me = replica_lease_name(&cfg.identity);
        for (name, lease) in leases {
            if *name == me || !self.observed[name].is_abandoned(now, cfg.abandoned_after) {
                continue;
            }
            let key = lease.metadata.annotations.as_ref().and_then(|a| a.get(PLUGIN_KEY_ANNOTATION));
            match kind(lease) {
                REPLICA => {}
                PLUGIN if key.is_none_or(|k| !plugins.contains(k)) => {}
                _ => continue,
            }
            let preconditions = Preconditions {
                resource_version: lease.metadata.resource_version.clone(),
                uid: lease.metadata.uid.clone(),
            };
            let dp = DeleteParams { preconditions: Some(preconditions), ..DeleteParams::default() };
            match self.api.delete(name, &dp).await {
                Ok(_) => {
                    Counters::add(&self.shared.counters.collected, 1);
                    self.observed.remove(name);
                    tracing::info!(identity = %cfg.identity, lease = %name, holder = holder(lease), "abandoned lease deleted");
                }
                Err(e) if is_conflict(&e) || is_not_found(&e) => {
                    tracing::debug!(identity = %cfg.identity, lease = %name, error = %e, "abandoned lease changed or gone first");
                }
                Err(e) => {
                    tracing::warn!(identity = %cfg.identity, lease = %name, error = %e, "deleting an abandoned lease failed")
                }
            }
        }
    }

    /// Creates or renews this replica's membership lease.
    async fn renew_membership(&mut self) -> Result<(), Error> {
        let cfg = self.cfg().clone();
        let name = replica_lease_name(&cfg.identity);
        let now = SystemTime::now();
        let pp = PostParams::default();
        match self.api.get_opt(&name).await? {
            None => match self
                .api
                .create(&pp, &new_lease(&name, REPLICA, None, &cfg.identity, cfg.lease_duration, now))
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if is_conflict(&e) => Ok(()),
                Err(e) => Err(e.into()),
            },
            Some(lease) => {
                match self.api.replace(&name, &pp, &held_by(&lease, &cfg.identity, cfg.lease_duration, now)).await {
                    Ok(_) => Ok(()),
                    Err(e) if is_conflict(&e) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Renews an owned plugin's lease; on success it stays owned until the
    /// request's start plus the renew deadline.
    async fn renew(&self, key: &str, lease: Option<&Lease>) {
        let cfg = self.cfg().clone();
        let Some(lease) = lease.filter(|l| holder(l) == cfg.identity) else {
            // Deleted, or taken over (this replica was partitioned longer
            // than the lease): not ours any more.
            if self.shared.unhold(key) {
                Counters::add(&self.shared.counters.losses, 1);
                tracing::warn!(identity = %cfg.identity, plugin = %key, "plugin lease gone or taken: no longer owned");
            }
            return;
        };
        let start = Instant::now();
        match self.write_held(key, lease, SystemTime::now()).await {
            Ok(_) => {
                tracing::trace!(identity = %cfg.identity, plugin = %key, "renewed");
                if self.shared.hold(key, start + cfg.renew_deadline) {
                    Counters::add(&self.shared.counters.acquisitions, 1);
                }
            }
            Err(e) if is_conflict(&e) || is_not_found(&e) => {
                // Someone else wrote it since the list: the next round sees
                // who holds it; until then the deadline stands.
                Counters::add(&self.shared.counters.conflicts, 1);
                tracing::debug!(identity = %cfg.identity, plugin = %key, error = %e, "renewal lost a race");
            }
            Err(e) => tracing::warn!(identity = %cfg.identity, plugin = %key, error = %e, "renewal failed"),
        }
    }

    /// Creates (`lease` `None`) or takes over a plugin's lease.
    async fn acquire(&self, key: &str, lease: Option<&Lease>) {
        let cfg = self.cfg().clone();
        let name = plugin_lease_name(key);
        let start = Instant::now();
        let now = SystemTime::now();
        let pp = PostParams::default();
        let result = match lease {
            None => {
                self.api.create(&pp, &new_lease(&name, PLUGIN, Some(key), &cfg.identity, cfg.lease_duration, now)).await
            }
            Some(l) => self.write_held(key, l, now).await,
        };
        match result {
            Ok(_) => {
                if self.shared.hold(key, start + cfg.renew_deadline) {
                    Counters::add(&self.shared.counters.acquisitions, 1);
                    tracing::info!(identity = %cfg.identity, plugin = %key, "plugin lease acquired");
                }
            }
            Err(e) if is_conflict(&e) => {
                Counters::add(&self.shared.counters.conflicts, 1);
                tracing::debug!(identity = %cfg.identity, plugin = %key, "another replica took the lease first");
            }
            Err(e) => tracing::warn!(identity = %cfg.identity, plugin = %key, error = %e, "acquiring failed"),
        }
    }

    /// Renews the lease of a key handed over but not yet stopped by the
    /// caller: held by this replica, not owned, so no other replica takes
    /// it while the caller still runs it.
    async fn keep(&self, key: &str, lease: &Lease) {
        let cfg = self.cfg();
        match self.write_held(key, lease, SystemTime::now()).await {
            Ok(_) => tracing::trace!(identity = %cfg.identity, plugin = %key, "kept until stopped"),
            Err(e) => tracing::debug!(identity = %cfg.identity, plugin = %key, error = %e, "keeping a lease failed"),
        }
    }

    /// Writes plugin `key`'s `lease` as held by this replica as of `now`
    /// (a renewal, a take-over, a hand-over kept), on the `resourceVersion`
    /// it was listed with.
    async fn write_held(&self, key: &str, lease: &Lease, now: SystemTime) -> Result<Lease, kube::Error> {
        let cfg = self.cfg();
        let held = held_by(lease, &cfg.identity, cfg.lease_duration, now);
        self.api.replace(&plugin_lease_name(key), &PostParams::default(), &held).await
    }

    /// Hands a lease over (the caller stopped owning it first).
    async fn release(&self, name: &str, lease: &Lease) {
        Counters::add(&self.shared.counters.releases, 1);
        let pp = PostParams::default();
        if let Err(e) = self.api.replace(name, &pp, &released(lease, SystemTime::now())).await {
            tracing::warn!(identity = %self.cfg().identity, lease = %name, error = %e, "release failed: the lease will expire");
        } else {
            tracing::info!(identity = %self.cfg().identity, lease = %name, "lease released");
        }
    }

    /// Shutdown: owns nothing at once, deletes the membership lease (N
    /// drops for everyone), releases every plugin lease it holds.
    async fn release_all(&mut self) {
        self.shared.unhold_all();
        self.shared.handing_over.lock().clear();
        let me = self.cfg().identity.clone();
        let membership = replica_lease_name(&me);
        if let Err(e) = self.api.delete(&membership, &DeleteParams::default()).await
            && !is_not_found(&e)
        {
            tracing::warn!(identity = %me, error = %e, "deleting the membership lease failed");
        }
        let listed = match self.api.list(&ListParams::default().labels(&format!("{LEASE_LABEL}={PLUGIN}"))).await {
            Ok(l) => l.items,
            Err(e) => {
                tracing::warn!(identity = %me, error = %e, "listing leases to release failed: they will expire");
                return;
            }
        };
        for lease in listed.iter().filter(|l| holder(l) == me) {
            if let Some(name) = &lease.metadata.name {
                self.release(name, lease).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    /// The local half of client-go's renew deadline: a plugin stops being
    /// owned when its deadline passes, a renewal moves it later (never
    /// earlier), and the owned channel shows every step.
    #[tokio::test(start_paused = true)]
    async fn ownership_ends_at_the_renew_deadline_unless_renewed() {
        let shared = Arc::new(Shared::new(CoordinatorConfig::new("ns", "a")));
        let owned = shared.owned.subscribe();
        let dog = tokio::spawn(watchdog(shared.clone()));
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert!(shared.hold("p1", t0 + ms(10_000)));
        assert!(shared.hold("p2", t0 + ms(10_000)));
        tokio::time::sleep(ms(6_000)).await;
        assert!(!shared.hold("p2", Instant::now() + ms(10_000)), "a renewal is not a new acquisition");
        assert!(!shared.hold("p2", t0 + ms(1_000)), "an older renewal does not shorten the deadline");
        tokio::time::sleep_until(t0 + ms(9_999)).await;
        assert_eq!(*owned.borrow(), set(&["p1", "p2"]));
        tokio::time::sleep_until(t0 + ms(10_001)).await;
        assert_eq!(*owned.borrow(), set(&["p2"]));
        assert_eq!(shared.counters.losses.load(std::sync::atomic::Ordering::Relaxed), 1);
        tokio::time::sleep_until(t0 + ms(16_001)).await;
        assert!(owned.borrow().is_empty());
        assert_eq!(shared.counters.losses.load(std::sync::atomic::Ordering::Relaxed), 2);
        // Holding again after the watchdog idled re-arms it.
        shared.hold("p3", Instant::now() + ms(500));
        tokio::time::sleep(ms(501)).await;
        assert!(owned.borrow().is_empty());
        dog.abort();
    }
}
