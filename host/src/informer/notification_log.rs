//! The notification log: one append-only sequence of notifications that
//! every listener of a processor reads at its own pace.
//!
//! This module owns how fan-out stores notifications. `distribute` appends a
//! notification once; each listener has its own [`Cursor`] into the log, so
//! a listener's "buffer" is the part of the log after its cursor: it grows
//! without bound, never blocks the producer or another listener, and costs
//! nothing per listener at distribution time. The log is a chain of
//! fixed-size chunks; a chunk is freed when every cursor and the producer
//! have moved past it. It may not know about handlers, the store or the FIFO.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::handler::Notification;

/// Entries per chunk.
const CHUNK: usize = 256;

/// The listeners of one resync round (client-go's per-listener `syncing`
/// flags at the time a sync notification was distributed).
#[derive(Debug, Default)]
pub(crate) struct SyncRound {
    /// Listener ids, sorted.
    ids: Vec<u64>,
}

impl SyncRound {
    pub(crate) fn new(mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        SyncRound { ids }
    }
    pub(crate) fn includes(&self, id: u64) -> bool {
        self.ids.binary_search(&id).is_ok()
    }
}

/// One notification as every listener sees it.
pub(crate) struct Entry {
    pub notification: Notification,
    /// Set for sync notifications: only listeners of this round get it.
    pub round: Option<Arc<SyncRound>>,
}

impl Entry {
    /// Whether the listener `id` is to receive this entry.
    pub(crate) fn is_for(&self, id: u64) -> bool {
        self.round.as_ref().is_none_or(|r| r.includes(id))
    }
}

struct Chunk {
    /// Sequence number of `slots[0]`.
    base: u64,
    slots: Box<[OnceLock<Entry>]>,
    next: OnceLock<Arc<Chunk>>,
}

impl Chunk {
    fn new(base: u64) -> Arc<Chunk> {
        Arc::new(Chunk { base, slots: (0..CHUNK).map(|_| OnceLock::new()).collect(), next: OnceLock::new() })
    }
}

impl Drop for Chunk {
    /// Frees a chain of chunks nobody else holds iteratively, so a long
    /// backlog dropped at once cannot overflow the stack.
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(chunk) = next {
            next = match Arc::try_unwrap(chunk) {
                Ok(mut c) => c.next.take(),
                Err(_) => None,
            };
        }
    }
}

struct Tail {
    chunk: Arc<Chunk>,
    idx: usize,
}

/// The producer side of the log.
pub(crate) struct Log {
    tail: Mutex<Tail>,
    /// Sequence number of the next entry (entries appended so far).
    appended: AtomicU64,
    /// One past the sequence number of the last initial-list add.
    initial_end: AtomicU64,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            tail: Mutex::new(Tail { chunk: Chunk::new(0), idx: 0 }),
            appended: AtomicU64::new(0),
            initial_end: AtomicU64::new(0),
        }
    }
}

impl Log {
    /// Appends an entry; returns its sequence number.
    pub(crate) fn append(&self, entry: Entry) -> u64 {
        let mut t = self.tail.lock();
        if t.idx == CHUNK {
            let next = Chunk::new(t.chunk.base + CHUNK as u64);
            let _ = t.chunk.next.set(next.clone());
            t.chunk = next;
            t.idx = 0;
        }
        let seq = t.chunk.base + t.idx as u64;
        if entry.notification.is_initial() {
            self.initial_end.store(seq + 1, Ordering::Release);
        }
        let _ = t.chunk.slots[t.idx].set(entry);
        t.idx += 1;
        self.appended.store(seq + 1, Ordering::Release);
        seq
    }

    /// Entries appended so far.
    pub(crate) fn appended(&self) -> u64 {
        self.appended.load(Ordering::Acquire)
    }

    /// One past the last initial-list add appended (0: none yet). A reader
    /// that got this far has handled every initial add it was given.
    pub(crate) fn initial_end(&self) -> u64 {
        self.initial_end.load(Ordering::Acquire)
    }

    /// A cursor at the end of the log: it reads what is appended from now on.
    pub(crate) fn cursor(&self) -> Cursor {
        let t = self.tail.lock();
        Cursor { chunk: t.chunk.clone(), idx: t.idx }
    }
}

/// A reader's position in the log.
pub(crate) struct Cursor {
    chunk: Arc<Chunk>,
    idx: usize,
}

impl Cursor {
    /// Sequence number of the next entry this cursor reads.
    pub(crate) fn seq(&self) -> u64 {
        self.chunk.base + self.idx as u64
    }

    /// The next entry and its sequence number, if one was appended; the
    /// cursor moves past it.
    pub(crate) fn next(&mut self) -> Option<(u64, &Entry)> {
        self.hop();
        let seq = self.seq();
        let entry = self.chunk.slots.get(self.idx)?.get()?;
        self.idx += 1;
        Some((seq, entry))
    }

    /// Moves to the next chunk once this one is read to its end and the
    /// next one exists.
    fn hop(&mut self) {
        if self.idx == CHUNK
            && let Some(next) = self.chunk.next.get()
        {
            self.chunk = next.clone();
            self.idx = 0;
        }
    }

    /// Up to `max` entries after the cursor, all from one chunk, without
    /// moving it (see [`Cursor::advance`]).
    pub(crate) fn peek(&mut self, max: usize) -> Run {
        self.hop();
        let mut end = self.idx;
        while end < CHUNK && end - self.idx < max && self.chunk.slots[end].get().is_some() {
            end += 1;
        }
        Run { chunk: self.chunk.clone(), start: self.idx, end }
    }

    /// Moves the cursor to `seq`, which must lie within the last [`Run`]
    /// peeked.
    pub(crate) fn advance(&mut self, seq: u64) {
        let idx = (seq - self.chunk.base) as usize;
        debug_assert!(idx >= self.idx && idx <= CHUNK);
        self.idx = idx;
    }

    /// Whether an entry is waiting.
    pub(crate) fn has_next(&self) -> bool {
        if self.idx == CHUNK {
            return self.chunk.next.get().is_some_and(|c| c.slots[0].get().is_some());
        }
        self.chunk.slots[self.idx].get().is_some()
    }
}

/// Consecutive entries of one chunk, as [`Cursor::peek`] saw them.
pub(crate) struct Run {
    chunk: Arc<Chunk>,
    start: usize,
    end: usize,
}

impl Run {
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// One past the sequence number of the last entry.
    pub(crate) fn end_seq(&self) -> u64 {
        self.chunk.base + self.end as u64
    }

    /// The entries with their sequence numbers.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u64, &Entry)> {
        let base = self.chunk.base + self.start as u64;
        self.chunk.slots[self.start..self.end]
            .iter()
            .enumerate()
            .map(move |(i, slot)| (base + i as u64, slot.get().expect("peeked entries are set")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::Object;

    fn entry(i: u64) -> Entry {
        let obj = Arc::new(
            Object::from_json(format!(r#"{{"metadata":{{"name":"o{i}","resourceVersion":"{i}"}}}}"#)).unwrap(),
        );
        Entry { notification: Notification::Add { obj, is_in_initial_list: false }, round: None }
    }

    #[test]
    fn cursors_read_from_where_they_joined_across_chunks() {
        let log = Log::default();
        let mut early = log.cursor();
        for i in 0..300 {
            log.append(entry(i));
        }
        let mut late = log.cursor();
        assert_eq!(late.seq(), 300);
        assert!(late.next().is_none());
        for i in 300..600 {
            log.append(entry(i));
        }
        let early_seen: Vec<u64> = std::iter::from_fn(|| early.next().map(|(s, _)| s)).collect();
        assert_eq!(early_seen, (0..600).collect::<Vec<_>>());
        let late_seen: Vec<String> =
            std::iter::from_fn(|| late.next().map(|(_, e)| e.notification.key().to_string())).collect();
        assert_eq!(late_seen.first().map(String::as_str), Some("o300"));
        assert_eq!(late_seen.len(), 300);
        assert!(!early.has_next() && !late.has_next());
        assert_eq!(log.appended(), 600);
    }

    #[test]
    fn long_backlog_drops_without_recursion() {
        let log = Log::default();
        let cursor = log.cursor();
        let Entry { notification, .. } = entry(1);
        for _ in 0..CHUNK * 1000 {
            log.append(Entry { notification: notification.clone(), round: None });
        }
        drop(cursor);
        assert_eq!(log.appended(), CHUNK as u64 * 1000);
    }

    #[test]
    fn sync_rounds_select_listeners() {
        let round = Arc::new(SyncRound::new(vec![7, 3]));
        let mut e = entry(1);
        e.round = Some(round);
        assert!(e.is_for(3) && e.is_for(7) && !e.is_for(5));
        assert!(entry(1).is_for(5));
    }
}
