//! Idle reclaim: a handler whose instance had no call for its idle timeout
//! drops it, and is instantiated again on its next notification. On the
//! paused clock, with random operations and random idle periods (resyncs
//! included), a reclaimed plugin sees exactly what a resident twin on the
//! same informer sees, in the same order; a stateful plugin that opts into
//! `replay` on wake ends with the source's state.

use std::time::Duration;

use e2e::eventually;
use e2e::plugins::{Log, Running, runtime, spec};
use informer_host::plugin::{OnWake, REAP_TICK};
use informer_host::source::MemorySource;
use std::sync::atomic::Ordering;

/// A small deterministic generator (no dependency, the same run each time).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test(start_paused = true)]
async fn reclaimed_plugins_see_what_resident_ones_see_and_replay_rebuilds_state() {
    for seed in [1_u64, 7, 42] {
        let rt = runtime();
        let src = MemorySource::new();
        for i in 0..5 {
            src.apply_config_map("ns", &format!("cm{i}"), "0").unwrap();
        }
        let (idle_log, resident_log, counter_log) = (Log::default(), Log::default(), Log::default());
        let mut idle = spec("idle", "recorder", &idle_log);
        idle.idle_timeout = Some(Duration::from_secs(3));
        let resident = spec("resident", "recorder", &resident_log);
        let mut counter = spec("counter", "counter", &counter_log);
        counter.idle_timeout = Some(Duration::from_secs(2));
        counter.on_wake = OnWake::Replay;
        let (idle, resident, counter) = (rt.load(idle).unwrap(), rt.load(resident).unwrap(), rt.load(counter).unwrap());
        let run = Running::start(&src);
        let regs = [&idle, &resident, &counter].map(|p| {
            let h = p.handler(Some(informer_host::plugin::CacheView::new(run.informer.indexer().clone()))).unwrap();
            // A resync every 10 s: some wake a reclaimed instance.
            run.informer.add_named_event_handler(p.spec.name.clone(), Box::new(h), Duration::from_secs(10)).unwrap()
        });
        eventually("synced", || regs.iter().all(|r| r.has_synced())).await;

        let mut rng = Lcg(seed);
        for step in 0..40 {
            let name = format!("cm{}", rng.below(8));
            match rng.below(4) {
                0 => _ = src.delete(&format!("ns/{name}")),
                _ => _ = src.apply_config_map("ns", &name, &step.to_string()).unwrap(),
            }
            // Idle periods from none to several timeouts.
            let pause = [0, 0, 1, 2, 5, 9][rng.below(6) as usize];
            tokio::time::sleep(Duration::from_secs(pause)).await;
        }
        // Quiescence: everything delivered to every handler.
        let delivered = || regs.iter().all(|r| r.pending() == 0);
        eventually("every notification delivered", delivered).await;
        tokio::time::sleep(REAP_TICK).await;
        eventually("every notification delivered", delivered).await;

        assert!(idle.stats.wakes.load(Ordering::Relaxed) > 0, "seed {seed}: the idle plugin was reclaimed and woken");
        assert_eq!(resident.stats.wakes.load(Ordering::Relaxed), 0, "seed {seed}");
        assert_eq!(idle_log.events(), resident_log.events(), "seed {seed}: the same notifications, in the same order");
        let count = counter_log.events().last().cloned().unwrap_or_default();
        assert_eq!(count, format!("count {}", src.keys().len()), "seed {seed}: replay on wake rebuilt the state");
        assert!(rt.instances().reclaimed_total > 0, "seed {seed}: {:?}", rt.instances());
        run.stop().await;
    }
}
