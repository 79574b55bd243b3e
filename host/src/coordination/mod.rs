//! Replicas sharing plugins through coordination.k8s.io Leases: which live
//! replica owns (delivers and writes for) which plugin.
//!
//! This module owns that decision and nothing else: it reads and writes
//! `Lease` objects in one namespace through a `kube::Client` and publishes
//! the set of plugin keys this replica owns on a `watch` channel
//! ([`Coordinator::owned`]). Running informers, delivering, `/readyz` and
//! `/metrics` are the caller's: deliver a plugin's events only while its
//! key is in the owned set.
//!
//! # Design
//!
//! - One lease per plugin, `ih-plugin-<key>-<hash>` (label
//!   `informer-host.dev/lease=plugin`, annotation
//!   `informer-host.dev/plugin-key`), and one membership lease per replica,
//!   `ih-replica-<identity>` (`informer-host.dev/lease=replica`), so every
//!   replica knows N, the number of live replicas.
//! - Every `retry_period` a replica renews its membership, lists the
//!   managed leases, renews the plugin leases it holds, releases those above
//!   its fair share ⌈P/N⌉ (a hand-over: others take them on their next
//!   round; with [`Coordinator::confirm_stops`], only once the caller
//!   stopped running them, the lease renewed meanwhile), and acquires free
//!   or expired ones while below it, in its own
//!   rendezvous-hash order so replicas rarely race for the same lease.
//!   Writes carry the listed `resourceVersion`: of two replicas taking one
//!   lease, one gets `409 Conflict` and leaves it.
//! - Expiry follows client-go's `leaderelection`: a lease is expired when
//!   its record has not changed for `leaseDurationSeconds` since this
//!   replica saw it change, on the local monotonic clock; lease times are
//!   written (for people and tools) but never compared across replicas.
//! - Ownership ends locally before anyone else can take it: a plugin stops
//!   being owned `renew_deadline` after the start of its last successful
//!   renewal (a watchdog enforces this even while a request hangs), and
//!   `renew_deadline < lease_duration` is required. Another replica takes
//!   the lease no sooner than `lease_duration` after it saw that renewal,
//!   which it saw after the renewal started.
//! - [`Coordinator::shutdown`] releases the membership and every plugin
//!   lease (no holder, a one-second duration), so the others take them on
//!   their next round. Dropping a [`Coordinator`] without `shutdown` stops
//!   it at once and releases nothing, as a crash would: its leases expire.
//! - A lease nobody holds whose record has not changed for
//!   [`CoordinatorConfig::abandoned_after`] (the membership of a replica
//!   that crashed, the lease of a plugin no replica runs any more) is
//!   deleted by the first live replica that notices, as the API server's
//!   own lease garbage collector deletes expired identity leases. The delete
//!   carries the listed `resourceVersion` as a precondition, so a lease
//!   renewed since the list is kept (`409`). A replica never deletes its
//!   own membership, nor the lease of a plugin it runs (it takes that one
//!   instead).
//! - A new replica's first round only registers its membership; it takes
//!   plugins from its second round, once the others' memberships are
//!   visible, so replicas started together do not first grab everything.
//!
//! # Why not a lease crate
//!
//! `kube-leader-election` 0.44 depends on kube 4. `kube-lease-manager`
//! 0.13 fits kube 5 but elects one holder per lease with its own loop: it
//! cannot take a lease only while below a fair share, takes whole-second
//! durations only, and judges expiry by comparing `renewTime` with the
//! local wall clock, which client-go avoids (clock skew) and which tokio's
//! paused clock cannot drive in tests.

mod lease;
mod replica;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use lease::{LEASE_LABEL, PLUGIN_KEY_ANNOTATION, fair_share, plugin_lease_name, replica_lease_name};

/// Errors of the coordinator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The durations break client-go's rules, or a name is empty.
    #[error("invalid coordination config: {0}")]
    Config(String),
    /// A lease request failed.
    #[error("lease request failed: {0}")]
    Kube(#[from] kube::Error),
}

/// The default [`CoordinatorConfig::abandoned_after`]: 40 lease durations,
/// long enough that only a replica or plugin that is gone leaves a lease
/// unrenewed that long (a partitioned replica that comes back recreates its
/// membership), short enough that `kubectl get leases` shows the replicas
/// and plugins there are rather than every pod and plugin there ever was.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(600);

/// Where and how a replica coordinates (client-go's `LeaderElectionConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// The namespace of the leases (the host's own).
    pub namespace: String,
    /// This replica's identity (the pod name); unique among replicas.
    pub identity: String,
    /// How long a lease holds without renewal (written as
    /// `leaseDurationSeconds`, rounded up to whole seconds).
    pub lease_duration: Duration,
    /// How long after the start of its last successful renewal a replica
    /// still counts a plugin as owned.
    pub renew_deadline: Duration,
    /// Time between rounds.
    pub retry_period: Duration,
    /// How long a managed lease may sit unheld and unchanged before a live
    /// replica deletes it: the membership of a replica that crashed, the
    /// lease of a plugin no replica runs any more. At least
    /// `lease_duration`.
    pub abandoned_after: Duration,
}

impl CoordinatorConfig {
    /// client-go's defaults: lease 15 s, renew deadline 10 s, retry 2 s.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        CoordinatorConfig {
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            abandoned_after: ABANDONED_AFTER,
        }
    }

    /// client-go's `NewLeaderElector` checks: `lease_duration >
    /// renew_deadline > 1.2 × retry_period > 0`, a whole number of seconds
    /// for the lease, non-empty identity and namespace.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::Config(m.to_string()));
        if self.identity.is_empty() {
            return bad("identity must not be empty");
        }
        if self.namespace.is_empty() {
            return bad("namespace must not be empty");
        }
        if self.lease_duration.subsec_nanos() != 0 || self.lease_duration.is_zero() {
            return bad("lease_duration must be a whole number of seconds (leaseDurationSeconds)");
        }
        if self.lease_duration <= self.renew_deadline {
            return bad("lease_duration must be greater than renew_deadline");
        }
        if self.retry_period.is_zero() {
            return bad("retry_period must be greater than zero");
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return bad("renew_deadline must be greater than 1.2 × retry_period");
        }
        if self.abandoned_after < self.lease_duration {
            return bad("abandoned_after must be at least lease_duration");
        }
        Ok(())
    }
}

/// Counters for `/metrics` and `/readyz` (monotonic except `owned` and
/// `replicas`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoordinatorStats {
    /// Plugins owned now.
    pub owned: u64,
    /// Live replicas seen in the last round (this one included).
    pub replicas: u64,
    /// Plugin leases acquired (created or taken over).
    pub acquisitions: u64,
    /// Plugins lost without releasing them: renew deadline passed, lease
    /// taken or deleted by someone else.
    pub losses: u64,
    /// Plugin leases handed over (above the fair share, plugin removed, shutdown).
    pub releases: u64,
    /// Writes that lost an optimistic-concurrency race (`409`).
    pub conflicts: u64,
    /// Abandoned leases this replica deleted (see
    /// [`CoordinatorConfig::abandoned_after`]).
    pub collected: u64,
}

#[derive(Default)]
struct Counters {
    replicas: AtomicU64,
    acquisitions: AtomicU64,
    losses: AtomicU64,
    releases: AtomicU64,
    conflicts: AtomicU64,
    collected: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    fn set(counter: &AtomicU64, v: u64) {
        counter.store(v, Ordering::Relaxed);
    }
}

/// A running replica's share of the plugins. See the module docs.
pub struct Coordinator {
    shared: Arc<replica::Shared>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    watchdog: JoinHandle<()>,
}

impl Coordinator {
    /// Validates `config` and starts the rounds on the current tokio
    /// runtime. Cancelling `stop` is a graceful [`Coordinator::shutdown`]
    /// (the leases are released) without waiting for it.
    pub fn start(
        client: kube::Client,
        config: CoordinatorConfig,
        stop: CancellationToken,
    ) -> Result<Coordinator, Error> {
        config.validate()?;
        let shared = Arc::new(replica::Shared::new(config));
        let api = kube::Api::namespaced(client, &shared.config.namespace);
        let stop = stop.child_token();
        let task = tokio::spawn(replica::run(shared.clone(), api, stop.clone()));
        let watchdog = tokio::spawn(replica::watchdog(shared.clone()));
        Ok(Coordinator { shared, stop, task: Some(task), watchdog })
    }

    /// The plugin keys to share (e.g. `<namespace>/<name>`); every replica
    /// should be given the same set. Leases of keys no longer listed are
    /// released.
    pub fn set_plugins<I, S>(&self, keys: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let keys: BTreeSet<String> = keys.into_iter().map(Into::into).collect();
        self.shared.plugins.send_if_modified(|cur| {
            let changed = *cur != keys;
            *cur = keys;
            changed
        });
    }

    /// The keys this replica owns now, updated on every change: deliver a
    /// plugin's events only while its key is in here.
    pub fn owned(&self) -> watch::Receiver<BTreeSet<String>> {
        self.shared.owned.subscribe()
    }

    /// From now on, a plugin handed over to another replica (this one is
    /// above its fair share) leaves the owned set at once but keeps its
    /// lease, renewed, until [`Coordinator::stopped`] says the caller
    /// stopped running it: the other replica cannot start it while this
    /// one still finishes what it was doing. Without it, the lease is
    /// released in the same round. A lease lost to expiry does not wait.
    pub fn confirm_stops(&self) {
        self.shared.set_confirm_stops();
    }

    /// The caller stopped running `key` after it left the owned set: its
    /// lease, kept since the hand-over, is released at once.
    pub fn stopped(&self, key: &str) {
        self.shared.stopped(key);
    }

    /// Keys handed over whose stop [`Coordinator::stopped`] has not
    /// confirmed yet.
    pub fn handing_over(&self) -> Vec<String> {
        self.shared.handing_over_keys()
    }

    /// Whether this replica owns `key` now.
    pub fn is_owned(&self, key: &str) -> bool {
        self.shared.owned.borrow().contains(key)
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.shared.config.identity
    }

    /// The counters.
    pub fn stats(&self) -> CoordinatorStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CoordinatorStats {
            owned: self.shared.owned.borrow().len() as u64,
            replicas: get(&c.replicas),
            acquisitions: get(&c.acquisitions),
            losses: get(&c.losses),
            releases: get(&c.releases),
            conflicts: get(&c.conflicts),
            collected: get(&c.collected),
        }
    }

    /// Stops the rounds and hands every lease over: the owned set empties
    /// first, then the membership and plugin leases are released. Returns
    /// when the releases were sent, or after `renew_deadline` if the API
    /// server does not answer (failures are logged: those leases expire).
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Coordinator {
    /// Without [`Coordinator::shutdown`]: stops at once and releases
    /// nothing, as a crashed replica would.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.watchdog.abort();
        self.shared.owned.send_replace(BTreeSet::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// client-go `TestLeaderElectionConfigValidation` / `NewLeaderElector`'s checks.
    #[test]
    fn leader_election_config_validation() {
        assert!(CoordinatorConfig::new("ns", "a").validate().is_ok());
        let with = |f: fn(&mut CoordinatorConfig)| {
            let mut c = CoordinatorConfig::new("ns", "a");
            f(&mut c);
            c.validate()
        };
        assert!(with(|c| c.renew_deadline = c.lease_duration).is_err());
        assert!(with(|c| c.retry_period = Duration::from_millis(8400)).is_err());
        assert!(with(|c| c.retry_period = Duration::ZERO).is_err());
        assert!(with(|c| c.lease_duration = Duration::from_millis(15500)).is_err());
        assert!(with(|c| c.identity.clear()).is_err());
        assert!(with(|c| c.namespace.clear()).is_err());
        assert!(with(|c| c.abandoned_after = c.lease_duration - Duration::from_secs(1)).is_err());
        assert!(with(|c| c.abandoned_after = c.lease_duration).is_ok());
    }
}
