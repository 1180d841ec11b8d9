//! Flow control of a route, within one worker process: a rate, a cap on deliveries in
//! flight, and a circuit breaker (docs/adr/0017-outbox-flow-control.md).
//!
//! - **Rate** (`"50/s"`, `"300/m"`, `"2/h"`): a token bucket holding at most one second's
//!   tokens (at least one); a delivery takes a token before it starts, waiting for one.
//! - **Concurrency**: at most this many deliveries of the route at once, so a slow route
//!   holds at most its cap of the worker's `in_flight` slots.
//! - **Breaker**: after `failures` consecutive transient failures (a 5xx, a timeout, no
//!   answer) the route opens: the worker claims none of its rows, which wait with their
//!   attempts unspent; once per `probe_every` it claims them again and lets one row through
//!   as a probe; a probe that gets an answer (delivered, or refused for the row's own
//!   reason) closes the route, a probe that fails keeps it open for another interval.
//!   Opening and closing are logged (`replaysafe::outbox`) and counted; `outbox work
//!   --metrics-addr` shows the state.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::OutboxError;

/// A route's flow control, as a routes file's `flow` object gives it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FlowControl {
    /// Deliveries per unit of time, `N/s`, `N/m` or `N/h`.
    #[serde(default, deserialize_with = "rate")]
    pub rate: Option<f64>,
    /// Deliveries of the route in flight at once.
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// The circuit breaker.
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
}

/// When a route's circuit opens and how often it is probed.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Consecutive transient failures that open the circuit.
    pub failures: u32,
    /// How long the circuit stays open before one row is let through as a probe.
    #[serde(deserialize_with = "duration")]
    pub probe_every: Duration,
}

impl FlowControl {
    /// No limit.
    pub fn new() -> Self {
        FlowControl::default()
    }

    /// At most `per_second` deliveries a second (a fraction for fewer).
    pub fn with_rate(mut self, per_second: f64) -> Self {
        self.rate = Some(per_second);
        self
    }

    /// At most `deliveries` in flight at once.
    pub fn with_concurrency(mut self, deliveries: usize) -> Self {
        self.concurrency = Some(deliveries);
        self
    }

    /// Opens after `failures` consecutive transient failures, probing every `probe_every`.
    pub fn with_breaker(mut self, failures: u32, probe_every: Duration) -> Self {
        self.breaker = Some(BreakerConfig {
            failures,
            probe_every,
        });
        self
    }

    /// Refuses a rate that is not positive and finite, a concurrency or failure count of
    /// 0, and a probe interval of 0, naming the field.
    pub(crate) fn check(&self) -> Result<(), OutboxError> {
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(OutboxError::invalid(
                "flow.rate",
                "must be a positive rate such as 50/s",
            ));
        }
        if self.concurrency == Some(0) {
            return Err(OutboxError::invalid(
                "flow.concurrency",
                "must be at least 1",
            ));
        }
        if let Some(breaker) = &self.breaker {
            if breaker.failures == 0 {
                return Err(OutboxError::invalid(
                    "flow.breaker.failures",
                    "must be at least 1",
                ));
            }
            if breaker.probe_every.is_zero() {
                return Err(OutboxError::invalid(
                    "flow.breaker.probe_every",
                    "must be longer than 0",
                ));
            }
        }
        Ok(())
    }
}

/// Parses `N/s`, `N/m` or `N/h` into deliveries per second.
pub fn parse_rate(text: &str) -> Option<f64> {
    let (count, unit) = text.trim().split_once('/')?;
    let count: f64 = count.trim().parse().ok()?;
    let seconds = match unit.trim() {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    let rate = count / seconds;
    (rate.is_finite() && rate > 0.0).then_some(rate)
}

fn rate<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_rate(&text)
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom("rate: expected N/s, N/m or N/h, such as 50/s"))
}

fn duration<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    replaysafe_core::parse_duration(&text)
        .and_then(|delta| delta.to_std().ok())
        .ok_or_else(|| {
            serde::de::Error::custom("probe_every: expected a duration such as 30s, 5m or 1h")
        })
}

/// Whether a circuit lets rows through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Circuit {
    /// Rows flow.
    Closed,
    /// Rows wait until the next probe.
    Open,
    /// One row is out as a probe.
    Probing,
}

/// What the worker may do with one claimed row of the route.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Deliver it.
    Go,
    /// Deliver it as the probe of an open circuit.
    Probe,
    /// Give it back unattempted: the circuit is open.
    Wait,
}

#[derive(Debug)]
struct Breaker {
    config: BreakerConfig,
    state: Circuit,
    failures: u32,
    probe_at: Instant,
}

/// Tokio's clock, so a paused test runtime paces it too.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    refilled: tokio::time::Instant,
}

/// The flow state of one route in a worker.
#[derive(Debug)]
pub(crate) struct Flow {
    route: String,
    bucket: Option<Mutex<Bucket>>,
    slots: Option<tokio::sync::Semaphore>,
    breaker: Option<Mutex<Breaker>>,
}

impl Flow {
    pub(crate) fn new(route: &str, control: &FlowControl) -> Flow {
        let now = Instant::now();
        Flow {
            route: route.to_owned(),
            bucket: control.rate.map(|rate| {
                let capacity = rate.max(1.0);
                Mutex::new(Bucket {
                    rate,
                    capacity,
                    tokens: capacity,
                    refilled: tokio::time::Instant::now(),
                })
            }),
            slots: control.concurrency.map(tokio::sync::Semaphore::new),
            breaker: control.breaker.clone().map(|config| {
                Mutex::new(Breaker {
                    config,
                    state: Circuit::Closed,
                    failures: 0,
                    probe_at: now,
                })
            }),
        }
    }

    /// The circuit's state.
    pub(crate) fn circuit(&self) -> Circuit {
        self.breaker
            .as_ref()
            .map_or(Circuit::Closed, |b| lock(b).state)
    }

    /// Whether the worker should claim rows of the route now: closed, or open with a
    /// probe due.
    pub(crate) fn claimable(&self, now: Instant) -> bool {
        self.breaker.as_ref().is_none_or(|breaker| {
            let breaker = lock(breaker);
            match breaker.state {
                Circuit::Closed => true,
                Circuit::Open => now >= breaker.probe_at,
                Circuit::Probing => false,
            }
        })
    }

    /// Admits one claimed row: the first row of an open circuit whose probe is due goes
    /// as the probe; the others wait.
    pub(crate) fn admit(&self, now: Instant) -> Admission {
        let Some(breaker) = &self.breaker else {
            return Admission::Go;
        };
        let mut breaker = lock(breaker);
        match breaker.state {
            Circuit::Closed => Admission::Go,
            Circuit::Open if now >= breaker.probe_at => {
                breaker.state = Circuit::Probing;
                Admission::Probe
            }
            Circuit::Open | Circuit::Probing => Admission::Wait,
        }
    }

    /// Waits for a delivery slot and a token; the slot is held until the guard drops.
    pub(crate) async fn enter(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let permit = match &self.slots {
            Some(slots) => slots.acquire().await.ok(),
            None => None,
        };
        if let Some(bucket) = &self.bucket {
            loop {
                let wait = {
                    let mut bucket = lock(bucket);
                    let now = tokio::time::Instant::now();
                    let earned = now.duration_since(bucket.refilled).as_secs_f64() * bucket.rate;
                    bucket.tokens = (bucket.tokens + earned).min(bucket.capacity);
                    bucket.refilled = now;
                    if bucket.tokens >= 1.0 {
                        bucket.tokens -= 1.0;
                        None
                    } else {
                        Some(Duration::from_secs_f64((1.0 - bucket.tokens) / bucket.rate))
                    }
                };
                match wait {
                    None => break,
                    Some(wait) => tokio::time::sleep(wait).await,
                }
            }
        }
        permit
    }

    /// Records how a delivery of the route ended: `answered` when the receiver answered
    /// (delivered, or refused for the row's own reason), false for a transient failure.
    /// Returns the circuit's new state when it changed.
    pub(crate) fn record(&self, answered: bool, now: Instant) -> Option<Circuit> {
        let breaker = self.breaker.as_ref()?;
        let mut breaker = lock(breaker);
        let before = breaker.state;
        if answered {
            breaker.failures = 0;
            breaker.state = Circuit::Closed;
        } else {
            breaker.failures = breaker.failures.saturating_add(1);
            if breaker.state == Circuit::Probing || breaker.failures >= breaker.config.failures {
                breaker.state = Circuit::Open;
                breaker.probe_at = now + breaker.config.probe_every;
            }
        }
        let after = breaker.state;
        // A probe that fails leaves it open: that is no change to report.
        let changed = match (before, after) {
            (Circuit::Closed, Circuit::Open) => Some(Circuit::Open),
            (Circuit::Open | Circuit::Probing, Circuit::Closed) => Some(Circuit::Closed),
            _ => None,
        };
        if let Some(state) = changed {
            match state {
                Circuit::Open => tracing::warn!(
                    target: "replaysafe::outbox",
                    route = self.route.as_str(),
                    failures = breaker.failures,
                    "circuit opened: the route's rows wait; one is let through every {:?}",
                    breaker.config.probe_every
                ),
                _ => tracing::warn!(
                    target: "replaysafe::outbox",
                    route = self.route.as_str(),
                    "circuit closed: the probe got an answer; the route's rows flow again"
                ),
            }
        }
        changed
    }

    /// A probe given back unattempted (the worker stopped): the circuit stays open.
    pub(crate) fn probe_not_sent(&self) {
        if let Some(breaker) = &self.breaker {
            let mut breaker = lock(breaker);
            if breaker.state == Circuit::Probing {
                breaker.state = Circuit::Open;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_per_second_minute_and_hour() {
        assert_eq!(parse_rate("50/s"), Some(50.0));
        assert_eq!(parse_rate("120/m"), Some(2.0));
        assert_eq!(parse_rate("36/h"), Some(0.01));
        for bad in ["", "50", "50/d", "0/s", "-1/s", "x/s", "inf/s"] {
            assert_eq!(parse_rate(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_routes_flow_object_is_read_and_checked() {
        let flow: FlowControl = serde_json::from_str(
            r#"{"rate": "50/s", "concurrency": 4, "breaker": {"failures": 5, "probe_every": "30s"}}"#,
        )
        .unwrap();
        assert_eq!(
            flow,
            FlowControl::new()
                .with_rate(50.0)
                .with_concurrency(4)
                .with_breaker(5, Duration::from_secs(30))
        );
        assert!(serde_json::from_str::<FlowControl>(r#"{"rate": "fast"}"#).is_err());
        assert!(serde_json::from_str::<FlowControl>(r#"{"burst": 3}"#).is_err());
        let zero = FlowControl::new().with_concurrency(0).check().unwrap_err();
        assert!(zero.to_string().contains("flow.concurrency"), "{zero}");
        let never = FlowControl::new().with_breaker(0, Duration::from_secs(1));
        assert!(
            never
                .check()
                .unwrap_err()
                .to_string()
                .contains("flow.breaker.failures")
        );
    }

    #[test]
    fn the_breaker_opens_probes_once_and_closes_on_an_answer() {
        let flow = Flow::new(
            "partner",
            &FlowControl::new().with_breaker(3, Duration::from_secs(30)),
        );
        let start = Instant::now();
        assert_eq!(flow.record(false, start), None);
        assert_eq!(flow.record(false, start), None);
        assert_eq!(flow.admit(start), Admission::Go);
        assert_eq!(flow.record(false, start), Some(Circuit::Open));
        // Open: nothing is claimed or admitted until the probe is due.
        assert!(!flow.claimable(start + Duration::from_secs(29)));
        assert_eq!(flow.admit(start + Duration::from_secs(29)), Admission::Wait);
        let due = start + Duration::from_secs(30);
        assert!(flow.claimable(due));
        assert_eq!(flow.admit(due), Admission::Probe);
        assert_eq!(flow.admit(due), Admission::Wait, "one probe at a time");
        assert!(!flow.claimable(due));
        // A failed probe keeps it open for another interval.
        assert_eq!(flow.record(false, due), None);
        assert_eq!(flow.circuit(), Circuit::Open);
        assert!(!flow.claimable(due + Duration::from_secs(29)));
        let next = due + Duration::from_secs(30);
        assert_eq!(flow.admit(next), Admission::Probe);
        assert_eq!(flow.record(true, next), Some(Circuit::Closed));
        assert_eq!(flow.admit(next), Admission::Go);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_lets_a_seconds_tokens_through_then_paces() {
        let flow = Flow::new("partner", &FlowControl::new().with_rate(10.0));
        let start = tokio::time::Instant::now();
        for _ in 0..10 {
            flow.enter().await;
        }
        assert_eq!(
            tokio::time::Instant::now(),
            start,
            "a second's tokens at once"
        );
        for _ in 0..5 {
            flow.enter().await;
        }
        let waited = tokio::time::Instant::now() - start;
        assert!(waited >= Duration::from_millis(490), "{waited:?}");
    }
}
