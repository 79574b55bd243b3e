//! Deadlines from durations someone else chose (a guest's requeue-after, a
//! Plugin's resync period): `now + duration` panics past what an
//! `Instant` can hold, so a tenant asking for 300 000 000 000 years would
//! take down whatever task computed it. Owns only that arithmetic.

use std::time::Duration;

use tokio::time::Instant;

/// How far ahead a deadline too far to represent is put (~30 years, as
/// client-go's delaying queue caps a wait: never, in practice).
pub const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `now + after`, or [`FAR_FUTURE`] from now when that cannot be held.
pub fn after(now: Instant, after: Duration) -> Instant {
    now.checked_add(after).unwrap_or_else(|| now + FAR_FUTURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_too_long_for_an_instant_is_far_in_the_future_not_a_panic() {
        let now = Instant::now();
        assert_eq!(after(now, Duration::from_secs(5)), now + Duration::from_secs(5));
        assert_eq!(after(now, Duration::MAX), now + FAR_FUTURE);
        assert_eq!(after(now, Duration::from_secs(86_400 * 365 * 300_000_000_000)), now + FAR_FUTURE);
    }
}
