//! Retry policy: full-jitter exponential backoff within attempt and time limits.

use std::time::Duration;

/// When and how often the [`crate::Guard`] retries a transient failure.
///
/// The delay before attempt `n + 1` is uniform in `[0, min(max_delay, base_delay × 2^(n-1))]`
/// ("full jitter"). A `Retry-After` from the receiver replaces the computed delay. No retry
/// starts once `max_elapsed` would be exceeded; permanent errors are never retried.
/// Defaults follow the AWS SDK standard mode: 3 attempts, 100 ms base, 20 s cap, plus 60 s in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(20),
            max_elapsed: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Total attempts including the first (at least 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Base of the exponential backoff.
    pub fn with_base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// Cap of one computed delay.
    pub fn with_max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Cap of the time spent on one effect, first attempt to last.
    pub fn with_max_elapsed(mut self, elapsed: Duration) -> Self {
        self.max_elapsed = elapsed;
        self
    }

    /// Total attempts including the first.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Cap of the time spent on one effect.
    pub fn max_elapsed(&self) -> Duration {
        self.max_elapsed
    }

    /// The upper bound of the jittered delay after failed attempt `attempt` (from 1).
    pub fn backoff_ceiling(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(31);
        self.base_delay
            .saturating_mul(1u32 << exponent)
            .min(self.max_delay)
    }

    /// The delay after failed attempt `attempt`: `retry_after` if given, else full jitter.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            return wait;
        }
        let ceiling = self.backoff_ceiling(attempt);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(fastrand::u64(0..=nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_and_caps() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.backoff_ceiling(1), Duration::from_millis(100));
        assert_eq!(policy.backoff_ceiling(2), Duration::from_millis(200));
        assert_eq!(policy.backoff_ceiling(40), Duration::from_secs(20));
    }

    #[test]
    fn jitter_stays_under_ceiling_and_retry_after_wins() {
        let policy = RetryPolicy::default();
        for attempt in 1..10 {
            assert!(policy.delay(attempt, None) <= policy.backoff_ceiling(attempt));
        }
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(RetryPolicy::none().max_attempts(), 1);
    }
}
