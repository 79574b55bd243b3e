//! One coordination.k8s.io `Lease` as this module reads and writes it: the
//! names and labels of plugin and replica leases, the record a replica
//! observes (client-go's `LeaderElectionRecord` and `observedTime`), and the
//! decision `tryAcquireOrRenew` makes, as pure functions.
//!
//! Expiry is judged the way client-go judges it: not by comparing the
//! lease's `renewTime` with the local wall clock (replicas' clocks differ),
//! but by how long the record has gone unchanged since this replica first
//! saw it, on the local monotonic clock. A lease whose holder stops renewing
//! is expired `leaseDurationSeconds` after this replica last saw it change.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// Label on every lease this module manages; its value is `plugin` or `replica`.
pub const LEASE_LABEL: &str = "informer-host.dev/lease";
/// [`LEASE_LABEL`] value of a plugin's lease.
pub const PLUGIN: &str = "plugin";
/// [`LEASE_LABEL`] value of a replica's membership lease.
pub const REPLICA: &str = "replica";
/// Annotation naming the plugin key a plugin lease stands for.
pub const PLUGIN_KEY_ANNOTATION: &str = "informer-host.dev/plugin-key";

/// The lease name of a plugin key: `ih-plugin-<sanitized key>-<hash>`.
/// The hash keeps keys apart that sanitize alike (`a-b/c`, `a/b-c`).
pub fn plugin_lease_name(key: &str) -> String {
    format!("ih-plugin-{}-{}", sanitize(key), short_hash(key))
}

/// The membership lease name of a replica: `ih-replica-<identity>`, with a
/// hash suffix when the identity is not already a short DNS label.
pub fn replica_lease_name(identity: &str) -> String {
    let clean = sanitize(identity);
    if clean == identity {
        format!("ih-replica-{clean}")
    } else {
        format!("ih-replica-{clean}-{}", short_hash(identity))
    }
}

fn sanitize(s: &str) -> String {
    let mapped: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(40).collect();
    mapped.trim_matches('-').to_string()
}

fn short_hash(s: &str) -> String {
    hex::encode(&Sha256::digest(s.as_bytes())[..5])
}

/// Rendezvous (highest random weight) score of `key` for `identity`: each
/// replica tries free leases in its own order, so replicas starting together
/// rarely race for the same lease.
pub fn preference(identity: &str, key: &str) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(identity.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    let d = h.finalize();
    let mut out = [0; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// ⌈P/N⌉: the most plugins one of `replicas` live replicas takes.
pub fn fair_share(plugins: usize, replicas: usize) -> usize {
    plugins.div_ceil(replicas.max(1))
}

/// The part of a lease whose change proves its holder alive (client-go's
/// `LeaderElectionRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub holder: String,
    pub duration: Duration,
    pub acquire_time: Option<MicroTime>,
    pub renew_time: Option<MicroTime>,
    pub transitions: i32,
}

impl Record {
    /// The record of a lease; `default_duration` when it names none.
    pub fn of(lease: &Lease, default_duration: Duration) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            duration: spec
                .lease_duration_seconds
                .filter(|s| *s > 0)
                .map_or(default_duration, |s| Duration::from_secs(s as u64)),
            acquire_time: spec.acquire_time,
            renew_time: spec.renew_time,
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

/// A record and when this replica saw it change last (client-go's
/// `observedRecord` and `observedTime`).
#[derive(Debug, Clone)]
pub struct Observed {
    pub record: Record,
    pub at: Instant,
}

impl Observed {
    /// Notes `record` as seen at `now`: the time moves only when the record
    /// changed (or was never seen).
    pub fn observe(previous: Option<Observed>, record: Record, now: Instant) -> Observed {
        match previous {
            Some(prev) if prev.record == record => prev,
            _ => Observed { record, at: now },
        }
    }
    /// Held by someone who renewed it within its duration, as far as this
    /// replica can tell (client-go's `isLeaseValid`).
    pub fn is_held(&self, now: Instant) -> bool {
        !self.record.holder.is_empty() && self.at + self.record.duration > now
    }
    /// Nobody holds it and its record has not changed for `after`: a
    /// released lease nobody took, or one whose holder stopped renewing
    /// (a crashed replica, a plugin no replica runs any more).
    pub fn is_abandoned(&self, now: Instant, after: Duration) -> bool {
        !self.is_held(now) && now.saturating_duration_since(self.at) >= after
    }
}

/// What `tryAcquireOrRenew` does with a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// No lease object: create one naming us.
    Create,
    /// Held by us: renew it.
    Renew,
    /// Free (no holder) or expired: take it over.
    Acquire,
    /// Held by another live replica: leave it.
    HeldBy(String),
}

/// client-go's `tryAcquireOrRenew` decision for `identity`.
pub fn claim(identity: &str, observed: Option<&Observed>, now: Instant) -> Claim {
    match observed {
        None => Claim::Create,
        Some(o) if o.record.holder == identity => Claim::Renew,
        Some(o) if o.is_held(now) => Claim::HeldBy(o.record.holder.clone()),
        Some(_) => Claim::Acquire,
    }
}

/// Seconds for `leaseDurationSeconds`: rounded up, at least one.
pub fn duration_seconds(d: Duration) -> i32 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).clamp(1, i32::MAX as u64) as i32
}

fn micro_time(t: SystemTime) -> MicroTime {
    let ts = k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    MicroTime(ts)
}

/// A new lease held by `identity`: what `Create` sends.
pub fn new_lease(
    name: &str,
    kind: &str,
    plugin_key: Option<&str>,
    identity: &str,
    duration: Duration,
    now: SystemTime,
) -> Lease {
    let mut annotations = BTreeMap::new();
    if let Some(key) = plugin_key {
        annotations.insert(PLUGIN_KEY_ANNOTATION.to_string(), key.to_string());
    }
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(LEASE_LABEL.to_string(), kind.to_string())])),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(identity.to_string()),
            lease_duration_seconds: Some(duration_seconds(duration)),
            acquire_time: Some(micro_time(now)),
            renew_time: Some(micro_time(now)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    }
}

/// `lease` renewed or taken over by `identity` (its resourceVersion kept as
/// the precondition): a new holder sets `acquireTime` and counts a transition.
pub fn held_by(lease: &Lease, identity: &str, duration: Duration, now: SystemTime) -> Lease {
    let mut out = lease.clone();
    let spec = out.spec.get_or_insert_with(LeaseSpec::default);
    let previous = spec.holder_identity.clone().unwrap_or_default();
    if previous != identity {
        spec.acquire_time = Some(micro_time(now));
        // client-go counts a transition whenever the holder changes, a
        // released (empty) holder included.
        if !previous.is_empty() || spec.lease_transitions.is_some() {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
    }
    spec.holder_identity = Some(identity.to_string());
    spec.lease_duration_seconds = Some(duration_seconds(duration));
    spec.renew_time = Some(micro_time(now));
    out
}

/// `lease` released (client-go's `release`): no holder, a one-second
/// duration, `renewTime` now, so every other replica may take it at once.
pub fn released(lease: &Lease, now: SystemTime) -> Lease {
    let mut out = lease.clone();
    let spec = out.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(micro_time(now));
    spec.acquire_time = Some(micro_time(now));
    out
}

#[cfg(test)]
mod tests {
    //! Ported from client-go `tools/leaderelection/leaderelection_test.go`
    //! (`TestTryAcquireOrRenewLeases`' cases, `TestReleaseLeaseLeases`,
    //! the `leaseTransitions` checks) against the pure decision; the
    //! network half runs in `tests/tests/all/coordination.rs`.
    use super::*;

    const DUR: Duration = Duration::from_secs(10);

    fn lease_of(holder: &str) -> Lease {
        let mut l = new_lease("l", PLUGIN, Some("ns/p"), holder, DUR, SystemTime::now());
        if holder.is_empty() {
            l.spec.as_mut().unwrap().holder_identity = None;
        }
        l
    }

    fn observed(holder: &str, at: Instant) -> Observed {
        Observed { record: Record::of(&lease_of(holder), DUR), at }
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_from_no_object() {
        assert_eq!(claim("baz", None, Instant::now()), Claim::Create);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_from_unled_object() {
        let o = observed("", Instant::now());
        assert_eq!(claim("baz", Some(&o), Instant::now()), Claim::Acquire);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_from_led_unacked_object() {
        // Seen 20 s ago with a 10 s duration, unchanged since: expired.
        let seen = Instant::now();
        let o = observed("bing", seen);
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(claim("baz", Some(&o), Instant::now()), Claim::Acquire);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_from_led_object_with_the_lease_duration_seconds() {
        // The lease's own leaseDurationSeconds (2 s) decides, not ours.
        let mut l = lease_of("bing");
        l.spec.as_mut().unwrap().lease_duration_seconds = Some(2);
        let o = Observed { record: Record::of(&l, DUR), at: Instant::now() };
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(claim("baz", Some(&o), Instant::now()), Claim::Acquire);
    }

    #[tokio::test(start_paused = true)]
    async fn dont_acquire_from_led_acked_object() {
        let o = observed("bing", Instant::now());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(claim("baz", Some(&o), Instant::now()), Claim::HeldBy("bing".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn renew_already_acquired_object() {
        let o = observed("baz", Instant::now());
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(claim("baz", Some(&o), Instant::now()), Claim::Renew);
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_record_restarts_the_observed_time() {
        // Expiry counts from the last change this replica saw, not from
        // the lease's renewTime (no wall-clock comparison across replicas).
        let t0 = Instant::now();
        let first = Observed::observe(None, Record::of(&lease_of("bing"), DUR), t0);
        tokio::time::advance(Duration::from_secs(8)).await;
        let same = Observed::observe(Some(first.clone()), first.record.clone(), Instant::now());
        assert_eq!(same.at, t0, "an unchanged record keeps its time");
        let renewed = held_by(&lease_of("bing"), "bing", DUR, SystemTime::now() + Duration::from_secs(8));
        let seen = Observed::observe(Some(same), Record::of(&renewed, DUR), Instant::now());
        assert_eq!(seen.at, Instant::now());
        tokio::time::advance(Duration::from_secs(8)).await;
        assert_eq!(claim("baz", Some(&seen), Instant::now()), Claim::HeldBy("bing".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_abandoned_only_when_unheld_and_unchanged_for_the_whole_period() {
        let after = Duration::from_secs(60);
        let held = observed("bing", Instant::now());
        let free =
            Observed { record: Record::of(&released(&lease_of("baz"), SystemTime::now()), DUR), at: Instant::now() };
        tokio::time::advance(Duration::from_secs(59)).await;
        // Expired (10 s) and released, but not for the whole period yet.
        assert!(!held.is_held(Instant::now()) && !held.is_abandoned(Instant::now(), after));
        assert!(!free.is_abandoned(Instant::now(), after));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(held.is_abandoned(Instant::now(), after) && free.is_abandoned(Instant::now(), after));
        // A lease whose own duration outlasts the period is not abandoned
        // while it holds.
        let mut long = lease_of("bing");
        long.spec.as_mut().unwrap().lease_duration_seconds = Some(3600);
        let long = Observed { record: Record::of(&long, DUR), at: Instant::now() };
        tokio::time::advance(Duration::from_secs(120)).await;
        assert!(!long.is_abandoned(Instant::now(), after));
    }

    #[test]
    fn release_lease_leases() {
        let l = released(&lease_of("baz"), SystemTime::now());
        let r = Record::of(&l, DUR);
        assert_eq!(r.holder, "");
        assert_eq!(r.duration, Duration::from_secs(1));
        assert!(!Observed { record: r, at: Instant::now() }.is_held(Instant::now()));
    }

    #[test]
    fn lease_transitions_count_holder_changes_only() {
        let now = SystemTime::now();
        let l = lease_of("bing");
        assert_eq!(held_by(&l, "bing", DUR, now).spec.unwrap().lease_transitions, Some(0));
        let taken = held_by(&l, "baz", DUR, now);
        assert_eq!(taken.spec.as_ref().unwrap().lease_transitions, Some(1));
        assert_eq!(taken.spec.as_ref().unwrap().holder_identity.as_deref(), Some("baz"));
        let again = held_by(&released(&taken, now), "bing", DUR, now);
        assert_eq!(again.spec.unwrap().lease_transitions, Some(2));
    }

    #[test]
    fn names_are_dns_subdomains_and_distinct() {
        let a = plugin_lease_name("a-b/c");
        let b = plugin_lease_name("a/b-c");
        assert_ne!(a, b);
        for n in [&a, &b, &plugin_lease_name(&"X/".repeat(300)), &replica_lease_name("Pod_1")] {
            assert!(n.len() <= 63, "{n}");
            assert!(n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{n}");
        }
        assert_eq!(replica_lease_name("host-0"), "ih-replica-host-0");
    }

    #[test]
    fn fair_share_is_the_ceiling() {
        assert_eq!(fair_share(10, 3), 4);
        assert_eq!(fair_share(9, 3), 3);
        assert_eq!(fair_share(10, 0), 10);
        assert_eq!(duration_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(duration_seconds(Duration::ZERO), 1);
    }
}
