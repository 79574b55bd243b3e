//! What a plugin may write into the host's log, and how it is made safe.
//!
//! This module owns the log budget of one plugin registration: lines and
//! bytes per call (per notification, re-armed with the call's fuel) and per
//! second (a token bucket that survives a trap, so a crashing plugin gains
//! nothing), the truncation of long messages, and the escaping of control
//! characters so that a message can neither forge a log line nor move a
//! terminal's cursor. What is dropped is counted, and said in one line at
//! most once a second. Both the `log` import and the guest's stderr draw on
//! the same budget. It writes to `tracing` only through [`LogBudget::emit`]
//! and [`LogBudget::report_dropped`].

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Level, PluginStats};

/// A plugin's log budget. The defaults let a chatty but sane plugin log
/// every notification and stop a flood long before it costs the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLimits {
    /// Longest message kept, in bytes; the rest is cut and the cut said.
    pub max_line_bytes: usize,
    /// Lines and bytes one call (one notification) may log.
    pub lines_per_call: u32,
    pub bytes_per_call: usize,
    /// Lines and bytes per second, over every call (burst: one second's).
    pub lines_per_second: u32,
    pub bytes_per_second: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            max_line_bytes: 4096,
            lines_per_call: 100,
            bytes_per_call: 64 << 10,
            lines_per_second: 10_000,
            bytes_per_second: 4 << 20,
        }
    }
}

/// How often, at most, the host says that lines were dropped.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What the current call has logged.
#[derive(Default)]
struct Call {
    lines: u32,
    bytes: usize,
}

/// The per-second budget of a registration, and what it dropped.
struct Rate {
    /// Token buckets (lines, bytes), refilled at the per-second rates.
    tokens: (f64, f64),
    refilled: Instant,
    /// Dropped since the last report.
    dropped: (u64, u64),
    reported: Option<Instant>,
}

/// The log budget of one instance: its own per-call counts, and the
/// per-second bucket of its plugin registration, which every instance of
/// the registration shares ([`LogBudget::another_instance`]), so an
/// instance made fresh after a trap (or one more worker's) gains nothing.
pub(crate) struct LogBudget {
    limits: LogLimits,
    call: Mutex<Call>,
    rate: Arc<Mutex<Rate>>,
}

impl LogBudget {
    pub fn new(limits: LogLimits) -> Self {
        let tokens = (limits.lines_per_second as f64, limits.bytes_per_second as f64);
        let rate = Rate { tokens, refilled: Instant::now(), dropped: (0, 0), reported: None };
        LogBudget { limits, call: Mutex::default(), rate: Arc::new(Mutex::new(rate)) }
    }

    /// The budget of another instance of the same registration: a call of
    /// its own, the same per-second bucket.
    pub fn another_instance(&self) -> Self {
        LogBudget { limits: self.limits.clone(), call: Mutex::default(), rate: self.rate.clone() }
    }

    /// A new call (or batch item) starts: its per-call budget is whole again.
    pub fn new_call(&self) {
        *self.call.lock() = Call::default();
    }

    /// Takes one line of `len` bytes (as kept, after truncation) from the
    /// budget; false when it must be dropped (and counts the drop).
    fn admit(&self, len: usize, stats: &PluginStats) -> bool {
        let l = &self.limits;
        let mut call = self.call.lock();
        let mut s = self.rate.lock();
        let now = Instant::now();
        let secs = now.duration_since(s.refilled).as_secs_f64();
        s.refilled = now;
        s.tokens.0 = (s.tokens.0 + secs * l.lines_per_second as f64).min(l.lines_per_second as f64);
        s.tokens.1 = (s.tokens.1 + secs * l.bytes_per_second as f64).min(l.bytes_per_second as f64);
        let fits = call.lines < l.lines_per_call
            && call.bytes + len <= l.bytes_per_call
            && s.tokens.0 >= 1.0
            && s.tokens.1 >= len as f64;
        if fits {
            call.lines += 1;
            call.bytes += len;
            s.tokens.0 -= 1.0;
            s.tokens.1 -= len as f64;
        } else {
            s.dropped.0 += 1;
            s.dropped.1 += len as u64;
            stats.log_dropped_lines.fetch_add(1, Ordering::Relaxed);
            stats.log_dropped_bytes.fetch_add(len as u64, Ordering::Relaxed);
        }
        fits
    }

    /// Writes one plugin message to `tracing` (and `sink`) if the budget
    /// allows, truncated and escaped; returns the line as written.
    pub fn emit(&self, plugin: &str, tenant: &str, level: Level, message: &str, stats: &PluginStats) -> Option<String> {
        let line = sanitize(message, self.limits.max_line_bytes);
        if !self.admit(line.len(), stats) {
            self.report_dropped(plugin);
            return None;
        }
        match level {
            Level::Trace => tracing::trace!(plugin = %plugin, tenant = %tenant, "{line}"),
            Level::Debug => tracing::debug!(plugin = %plugin, tenant = %tenant, "{line}"),
            Level::Info => tracing::info!(plugin = %plugin, tenant = %tenant, "{line}"),
            Level::Warn => tracing::warn!(plugin = %plugin, tenant = %tenant, "{line}"),
            Level::Error => tracing::error!(plugin = %plugin, tenant = %tenant, "{line}"),
        }
        Some(line.into_owned())
    }

    /// Says, at most once a second, how much was dropped since last said.
    pub fn report_dropped(&self, plugin: &str) {
        let mut s = self.rate.lock();
        if s.dropped.0 == 0 || s.reported.is_some_and(|t| t.elapsed() < REPORT_EVERY) {
            return;
        }
        let (lines, bytes) = std::mem::take(&mut s.dropped);
        s.reported = Some(Instant::now());
        drop(s);
        let l = &self.limits;
        tracing::warn!(
            plugin = %plugin,
            "dropped {lines} log line(s) ({bytes} bytes) over the plugin's log budget \
             ({} lines / {} bytes per call, {} lines / {} bytes per second)",
            l.lines_per_call,
            l.bytes_per_call,
            l.lines_per_second,
            l.bytes_per_second
        );
    }
}

/// `text` cut to at most about `max` bytes (at a character boundary, the
/// cut said) with control characters escaped (`\n` as the two characters
/// `\` `n`), so it stays one line and moves no cursor.
pub fn sanitize(text: &str, max: usize) -> Cow<'_, str> {
    let cut = if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Some(end)
    } else {
        None
    };
    let kept = &text[..cut.unwrap_or(text.len())];
    if cut.is_none() && !kept.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(kept.len() + 32);
    for c in kept.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if let Some(end) = cut {
        let _ = write!(out, "… ({} more bytes cut)", text.len() - end);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_escapes_control_characters_and_cuts_long_text() {
        assert!(matches!(sanitize("plain text", 100), Cow::Borrowed(_)));
        assert_eq!(sanitize("a\nINFO forged\r\x1b[2J", 100), "a\\nINFO forged\\r\\u{1b}[2J");
        assert_eq!(sanitize("abcdef", 3), "abc… (3 more bytes cut)");
        // Never cuts inside a character.
        assert_eq!(sanitize("ééé", 3), "é… (4 more bytes cut)");
    }

    #[test]
    fn per_call_budget_drops_and_counts() {
        let stats = PluginStats::default();
        let budget = LogBudget::new(LogLimits { lines_per_call: 2, ..LogLimits::default() });
        let admitted = (0..5).filter(|_| budget.admit(10, &stats)).count();
        assert_eq!(admitted, 2);
        assert_eq!(stats.log_dropped_lines.load(Ordering::Relaxed), 3);
        budget.new_call();
        assert!(budget.admit(10, &stats));
    }

    #[test]
    fn per_second_budget_spans_calls() {
        let stats = PluginStats::default();
        let budget = LogBudget::new(LogLimits { lines_per_second: 3, ..LogLimits::default() });
        let mut admitted = 0;
        for _ in 0..10 {
            budget.new_call();
            admitted += usize::from(budget.admit(1, &stats));
        }
        // Three from the burst, and perhaps one refilled while looping.
        assert!((3..=4).contains(&admitted), "{admitted}");
    }

    /// A controller makes a fresh instance after every trap, and runs one
    /// per worker: they all draw on one per-second budget, each with a
    /// per-call budget of its own.
    #[test]
    fn another_instance_shares_the_per_second_budget_not_the_call() {
        let stats = PluginStats::default();
        let limits = LogLimits { lines_per_call: 2, lines_per_second: 3, ..LogLimits::default() };
        let first = LogBudget::new(limits);
        let second = first.another_instance();
        assert!(first.admit(1, &stats) && first.admit(1, &stats));
        assert!(!first.admit(1, &stats), "the first call has logged its two lines");
        assert!(second.admit(1, &stats), "the second instance's call has its own two");
        let third = second.another_instance();
        assert!(!third.admit(1, &stats), "but the three lines of the second are spent, for every instance");
    }
}
