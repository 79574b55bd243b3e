//! A token bucket that reserves: a port of the part of Go's
//! `golang.org/x/time/rate.Limiter` that client-go's `BucketRateLimiter`
//! uses (`Reserve().Delay()`).
//!
//! This module owns the bucket's arithmetic. The bucket holds up to `burst`
//! tokens, starts full and refills at `limit` tokens per second.
//! [`TokenBucket::reserve`] never refuses: it takes a token now, or one that
//! will exist later, going into debt, and returns how long the caller must
//! wait for it. So with 10/s and burst 100, the first 100 reservations wait
//! 0, the 101st 100 ms, the 102nd 200 ms, and so on.
//!
//! Why not the `governor` crate: its GCRA limiter answers `check()` with
//! "not until" and takes nothing, so it cannot hand out a future token and
//! make later callers wait behind it (no reservation with a delay); and its
//! clocks are not Tokio's, so it would not follow paused test time. This is
//! the few lines of `reserveN`/`advance` it takes, on Tokio's clock.
//!
//! Corner cases follow x/time/rate: an infinite limit never delays; a zero
//! burst (with a finite limit) can never be satisfied, so the delay is
//! [`INF_DURATION`]; a zero limit grants `burst` tokens in all, then
//! [`INF_DURATION`].

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The delay of a reservation that can never be satisfied (x/time/rate's
/// `InfDuration`, the largest Go duration: about 292 years).
pub const INF_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// A token bucket (x/time/rate's `Limiter`), on Tokio's clock.
pub struct TokenBucket {
    state: Mutex<BucketState>,
}

struct BucketState {
    /// Tokens per second; `f64::INFINITY`: no limit.
    limit: f64,
    burst: usize,
    tokens: f64,
    /// When `tokens` was last brought up to date; `None`: never (full).
    last: Option<Instant>,
}

impl TokenBucket {
    /// A bucket of `burst` tokens, initially full, refilled at `limit`
    /// tokens per second (`f64::INFINITY`: unlimited).
    pub fn new(limit: f64, burst: usize) -> Self {
        TokenBucket { state: Mutex::new(BucketState { limit, burst, tokens: burst as f64, last: None }) }
    }

    pub fn limit(&self) -> f64 {
        self.state.lock().limit
    }

    pub fn burst(&self) -> usize {
        self.state.lock().burst
    }

    /// Takes one token and returns how long to wait before using it
    /// (`Reserve().Delay()`): zero if one is available now.
    pub fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    /// [`TokenBucket::reserve`] as of `now` (`ReserveN(now, 1).DelayFrom(now)`).
    pub fn reserve_at(&self, now: Instant) -> Duration {
        let mut st = self.state.lock();
        if st.limit == f64::INFINITY {
            return Duration::ZERO;
        }
        if st.limit.is_nan() || st.limit <= 0.0 {
            // A zero limit: what is left of the burst, then nothing.
            if st.burst >= 1 {
                st.burst -= 1;
                return Duration::ZERO;
            }
            return INF_DURATION;
        }
        if st.burst < 1 {
            return INF_DURATION;
        }
        let (at, tokens) = st.advance(now);
        let tokens = tokens - 1.0;
        let wait = if tokens < 0.0 { duration_from_tokens(st.limit, -tokens) } else { Duration::ZERO };
        st.last = Some(at);
        st.tokens = tokens;
        // The token may be used at `at + wait`; from `now` that is:
        (at + wait).saturating_duration_since(now)
    }
}

impl BucketState {
    /// The tokens there would be at `now` (x/time/rate's `advance`): time
    /// never runs backwards, and the bucket holds at most `burst`.
    fn advance(&self, now: Instant) -> (Instant, f64) {
        let burst = self.burst as f64;
        let Some(last) = self.last else {
            return (now, burst);
        };
        if now < last {
            return (last, self.tokens);
        }
        let elapsed = (now - last).as_secs_f64();
        let max_elapsed = (burst - self.tokens) / self.limit;
        let delta = elapsed.min(max_elapsed) * self.limit;
        (now, (self.tokens + delta).min(burst))
    }
}

/// How long `tokens` take to accumulate at `limit` per second, truncated to
/// the nanosecond as x/time/rate does.
fn duration_from_tokens(limit: f64, tokens: f64) -> Duration {
    let nanos = 1e9 * (tokens / limit);
    if nanos >= INF_DURATION.as_nanos() as f64 { INF_DURATION } else { Duration::from_nanos(nanos as u64) }
}
