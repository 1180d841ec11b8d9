//! Flow control of a route: a rate and a cap on deliveries in flight within one worker
//! process, and a circuit breaker shared through the database by every worker of the
//! outbox (docs/adr/0017-outbox-flow-control.md).
//!
//! - **Rate** (`"50/s"`, `"300/m"`, `"2/h"`): a token bucket holding at most one second's
//!   tokens (at least one); a delivery takes a token before it starts, waiting for one,
//!   but not past its claim's lease nor once the worker stops (the row is given back);
//!   the worker claims no row of the route while no token is at hand. The bucket is the
//!   worker process's, or with `rate_scope: outbox` one row of the database that every
//!   worker of the outbox takes its tokens from (`OutboxStore::take_shared_token`).
//! - **Concurrency**: at most this many of the route's rows in one pass of the worker (the
//!   rest are given back for the next), so a slow route holds at most its cap of the
//!   worker's `in_flight` slots.
//! - **Breaker**: after `failures` consecutive transient failures (a 5xx, a timeout, no
//!   answer) the route opens: the worker claims none of its rows, which wait with their
//!   attempts unspent; once per `probe_every` it claims them again and lets one row through
//!   as a probe; a probe that gets an answer (delivered, or refused for the row's own
//!   reason) closes the route, a probe that fails keeps it open for another interval.
//!   A rate's token and a circuit's admission are taken once a delivery's turn comes in
//!   the worker's pass, not before: a row admitted has its token, and a row the circuit
//!   holds back is given back with its attempt unspent.
//!   Opening and closing are logged (`replaysafe::outbox`), journaled (a `circuit`
//!   record on the row that changed it) and recorded in the outbox's circuits table: every
//!   worker of the outbox follows the recorded state at the start of each pass, one of
//!   them sends each due probe (`OutboxStore::take_probe`), and `outbox status` shows it.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

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
    /// Whose rate it is: each worker process's (the default) or the whole outbox's, one
    /// bucket in the database shared by every worker.
    #[serde(default)]
    pub rate_scope: RateScope,
}

/// Who shares a route's rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RateScope {
    /// Each worker process has a bucket of its own: W workers send up to W times the rate.
    #[default]
    Worker,
    /// One bucket in the outbox's database (`replaysafe_outbox_rates`), shared by every
    /// worker of the outbox on every machine; each token is one statement.
    Outbox,
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

    /// At most `per_second` deliveries a second across every worker of the outbox: the
    /// bucket is a row of the database.
    pub fn with_shared_rate(mut self, per_second: f64) -> Self {
        self.rate = Some(per_second);
        self.rate_scope = RateScope::Outbox;
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
    /// 0, and a probe interval of 0, naming the field ([`OutboxError::Invalid`]). The
    /// worker's builder checks every route's flow control so; a front end that reads one
    /// (a routes file) can check it where it can also name the route.
    ///
    /// # Errors
    /// [`OutboxError::Invalid`] with the field at fault, such as `flow.concurrency`.
    pub fn check(&self) -> Result<(), OutboxError> {
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(OutboxError::invalid(
                "flow.rate",
                "must be a positive rate such as 50/s",
            ));
        }
        if self.rate_scope == RateScope::Outbox && self.rate.is_none() {
            return Err(OutboxError::invalid(
                "flow.rate_scope",
                "an outbox-wide rate scope needs a rate, such as 50/s",
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

#[derive(Debug)]
struct Breaker {
    config: BreakerConfig,
    state: Circuit,
    failures: u32,
    probe_at: Instant,
}

/// Tokens of the route's rate. `tokens` goes below 0 while deliveries wait for theirs.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    refilled: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let earned = now.saturating_duration_since(self.refilled).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.capacity);
        self.refilled = now;
    }
}

/// The flow state of one route in a worker. Times are Tokio's clock, so a paused test
/// runtime drives them.
#[derive(Debug)]
pub(crate) struct Flow {
    route: String,
    cap: Option<usize>,
    bucket: Option<Mutex<Bucket>>,
    /// The rate and bucket size of a rate shared by the outbox's workers.
    shared_rate: Option<(f64, f64)>,
    /// Until when the worker claims none of the route's rows: the shared bucket had no
    /// token within a lease, or could not be read.
    shared_hold: Mutex<Option<Instant>>,
    breaker: Option<Mutex<Breaker>>,
}

/// A row of the route admitted to delivery. A probe admitted and never settled (the row
/// was given back, the future dropped) leaves the circuit open, as before the probe.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    flow: &'a Flow,
    probe: bool,
    settled: bool,
}

impl Ticket<'_> {
    /// Whether this row goes as an open circuit's probe.
    pub(crate) fn is_probe(&self) -> bool {
        self.probe
    }

    /// Records how the delivery ended: `answered` when the receiver answered (a delivery,
    /// or a refusal of this row), false for a transient failure (a 5xx, a timeout, no
    /// answer). `counted` is the outbox's count of the route's consecutive failures with
    /// this one, when the workers share it; without it the worker counts alone. Returns
    /// the circuit's new state when it changed.
    pub(crate) fn record(mut self, answered: bool, counted: Option<u32>) -> Option<Circuit> {
        self.settled = true;
        self.flow.record(answered, counted, Instant::now())
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.probe && !self.settled {
            self.flow.probe_not_sent();
        }
    }
}

impl Flow {
    pub(crate) fn new(route: &str, control: &FlowControl) -> Flow {
        let now = Instant::now();
        Flow {
            route: route.to_owned(),
            cap: control.concurrency,
            shared_rate: control
                .rate
                .filter(|_| control.rate_scope == RateScope::Outbox)
                .map(|rate| (rate, rate.max(1.0))),
            shared_hold: Mutex::new(None),
            bucket: control
                .rate
                .filter(|_| control.rate_scope == RateScope::Worker)
                .map(|rate| {
                    let capacity = rate.max(1.0);
                    Mutex::new(Bucket {
                        rate,
                        capacity,
                        tokens: capacity,
                        refilled: now,
                    })
                }),
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

    /// The circuit's state, for a route with a breaker.
    pub(crate) fn circuit(&self) -> Option<Circuit> {
        self.breaker.as_ref().map(|breaker| lock(breaker).state)
    }

    /// A rate shared by the outbox's workers: deliveries a second and the bucket's size
    /// (one second's tokens, at least one).
    pub(crate) fn shared_rate(&self) -> Option<(f64, f64)> {
        self.shared_rate
    }

    /// At most this many of the route's rows are delivered in one pass, at once.
    pub(crate) fn cap(&self) -> Option<usize> {
        self.cap
    }

    /// Whether the worker should claim rows of the route now: its circuit closed (or open
    /// with a probe due), and a token of its rate at hand.
    pub(crate) fn claimable(&self, now: Instant) -> bool {
        let circuit = self.breaker.as_ref().is_none_or(|breaker| {
            let breaker = lock(breaker);
            match breaker.state {
                Circuit::Closed => true,
                Circuit::Open => now >= breaker.probe_at,
                Circuit::Probing => false,
            }
        });
        let token = self.bucket.as_ref().is_none_or(|bucket| {
            let mut bucket = lock(bucket);
            bucket.refill(now);
            bucket.tokens >= 1.0
        });
        let held = lock(&self.shared_hold).is_some_and(|until| now < until);
        circuit && token && !held
    }

    /// The wait before a token of the route's shared rate is due, from the bucket's
    /// tokens after the take ([`crate::OutboxStore::take_shared_token`]), or `None` when
    /// it is longer than `within` (the token is then given back).
    pub(crate) fn shared_token_wait(&self, tokens: f64, within: Duration) -> Option<Duration> {
        let (per_second, _) = self.shared_rate?;
        if tokens >= 0.0 {
            return Some(Duration::ZERO);
        }
        let wait = Duration::try_from_secs_f64(-tokens / per_second).unwrap_or(Duration::MAX);
        (wait <= within).then_some(wait)
    }

    /// Claims none of the route's rows until `until`: its shared bucket gave no token in
    /// time (or could not be read), so claiming them again at once would only give them
    /// back again.
    pub(crate) fn hold_shared_rate(&self, until: Instant) {
        *lock(&self.shared_hold) = Some(until);
    }

    /// Takes a token of the route's rate: the wait before it is due, or `None` (nothing
    /// taken) when that wait would be longer than `within`.
    pub(crate) fn take_token(&self, within: Duration) -> Option<Duration> {
        let Some(bucket) = &self.bucket else {
            return Some(Duration::ZERO);
        };
        let mut bucket = lock(bucket);
        bucket.refill(Instant::now());
        let wait = if bucket.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - bucket.tokens) / bucket.rate)
        };
        if wait > within {
            return None;
        }
        bucket.tokens -= 1.0;
        Some(wait)
    }

    /// Gives back a token taken for a row that was then not sent.
    pub(crate) fn give_back_token(&self) {
        if let Some(bucket) = &self.bucket {
            let mut bucket = lock(bucket);
            bucket.tokens = (bucket.tokens + 1.0).min(bucket.capacity);
        }
    }

    /// Admits one row to delivery, or `None` when the circuit holds it back: the first row
    /// of an open circuit whose probe is due goes as the probe, one at a time.
    pub(crate) fn admit(&self, now: Instant) -> Option<Ticket<'_>> {
        let ticket = |probe| Ticket {
            flow: self,
            probe,
            settled: false,
        };
        let Some(breaker) = &self.breaker else {
            return Some(ticket(false));
        };
        let mut breaker = lock(breaker);
        match breaker.state {
            Circuit::Closed => Some(ticket(false)),
            Circuit::Open if now >= breaker.probe_at => {
                breaker.state = Circuit::Probing;
                Some(ticket(true))
            }
            Circuit::Open | Circuit::Probing => None,
        }
    }

    fn record(&self, answered: bool, counted: Option<u32>, now: Instant) -> Option<Circuit> {
        let breaker = self.breaker.as_ref()?;
        let mut breaker = lock(breaker);
        let before = breaker.state;
        if answered {
            breaker.failures = 0;
            breaker.state = Circuit::Closed;
        } else {
            breaker.failures = counted.unwrap_or(breaker.failures.saturating_add(1));
            if breaker.state == Circuit::Probing || breaker.failures >= breaker.config.failures {
                breaker.state = Circuit::Open;
                breaker.probe_at = now + breaker.config.probe_every;
            }
        }
        let after = breaker.state;
        // A probe that fails leaves it open: no change to report.
        let changed = match (before, after) {
            (Circuit::Closed, Circuit::Open) => Some(Circuit::Open),
            (Circuit::Open | Circuit::Probing, Circuit::Closed) => Some(Circuit::Closed),
            _ => None,
        };
        match changed {
            Some(Circuit::Open) => tracing::warn!(
                target: "replaysafe::outbox",
                route = self.route.as_str(),
                failures = breaker.failures,
                "circuit opened: the route's rows wait; one is let through every {:?}",
                breaker.config.probe_every
            ),
            Some(_) => tracing::warn!(
                target: "replaysafe::outbox",
                route = self.route.as_str(),
                "circuit closed: the probe got an answer; the route's rows flow again"
            ),
            None => {}
        }
        changed
    }

    /// The breaker's consecutive failures and probe interval, for a route with one.
    pub(crate) fn breaker(&self) -> Option<(u32, Duration)> {
        let breaker = lock(self.breaker.as_ref()?);
        Some((breaker.failures, breaker.config.probe_every))
    }

    /// Holds an open circuit's next probe back until `until` (another worker of the
    /// outbox took the probe that was due).
    pub(crate) fn defer_probe(&self, until: Instant) {
        if let Some(breaker) = &self.breaker {
            let mut breaker = lock(breaker);
            if breaker.state == Circuit::Open {
                breaker.probe_at = until;
            }
        }
    }

    /// Follows the circuit the workers of the outbox recorded: open (`Some(probe_in)`,
    /// the wait before its next probe, with `failures`) or closed (`None`). A probe of
    /// this worker under way is left alone. Returns the state when it changed.
    pub(crate) fn follow(
        &self,
        recorded: Option<(u32, Duration)>,
        now: Instant,
    ) -> Option<Circuit> {
        let mut breaker = lock(self.breaker.as_ref()?);
        match (breaker.state, recorded) {
            (Circuit::Probing, _) => None,
            (Circuit::Closed, Some((failures, probe_in))) => {
                breaker.state = Circuit::Open;
                breaker.failures = failures;
                breaker.probe_at = now + probe_in;
                Some(Circuit::Open)
            }
            (Circuit::Open, Some((_, probe_in))) => {
                breaker.probe_at = now + probe_in;
                None
            }
            (Circuit::Open, None) => {
                breaker.state = Circuit::Closed;
                breaker.failures = 0;
                Some(Circuit::Closed)
            }
            (Circuit::Closed, None) => None,
        }
    }

    /// Follows the outbox's count of a closed circuit's consecutive failures, which the
    /// other workers' failures and answers move: an answer here clears it only when it is
    /// not zero.
    pub(crate) fn follow_failures(&self, failures: u32) {
        if let Some(breaker) = &self.breaker {
            let mut breaker = lock(breaker);
            if breaker.state == Circuit::Closed {
                breaker.failures = failures;
            }
        }
    }

    /// A probe not sent: the circuit stays open.
    fn probe_not_sent(&self) {
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

    /// A ticket recording a failure, and the circuit after.
    fn fail(flow: &Flow) -> Option<Circuit> {
        flow.admit(Instant::now()).unwrap().record(false, None)
    }

    #[tokio::test(start_paused = true)]
    async fn the_breaker_opens_probes_once_and_closes_on_an_answer() {
        let flow = Flow::new(
            "partner",
            &FlowControl::new().with_breaker(3, Duration::from_secs(30)),
        );
        assert_eq!((fail(&flow), fail(&flow)), (None, None));
        assert_eq!(fail(&flow), Some(Circuit::Open));
        // Open: nothing is claimed or admitted until the probe is due.
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(!flow.claimable(Instant::now()));
        assert!(flow.admit(Instant::now()).is_none());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(flow.claimable(Instant::now()));
        let probe = flow.admit(Instant::now()).unwrap();
        assert!(flow.admit(Instant::now()).is_none(), "one probe at a time");
        assert!(!flow.claimable(Instant::now()));
        // A probe given back unsent (dropped) leaves it open, and due again.
        drop(probe);
        assert_eq!(flow.circuit(), Some(Circuit::Open));
        let probe = flow.admit(Instant::now()).unwrap();
        // A failed probe keeps it open for another interval.
        assert_eq!(probe.record(false, None), None);
        assert!(!flow.claimable(Instant::now()));
        tokio::time::advance(Duration::from_secs(30)).await;
        let probe = flow.admit(Instant::now()).unwrap();
        assert_eq!(probe.record(true, None), Some(Circuit::Closed));
        assert!(flow.admit(Instant::now()).is_some());
    }

    #[test]
    fn a_count_shared_by_the_workers_opens_the_circuit_at_its_threshold() {
        let flow = Flow::new(
            "partner",
            &FlowControl::new().with_breaker(3, Duration::from_secs(30)),
        );
        // This worker's first failure is the outbox's third: the circuit opens.
        let ticket = flow.admit(Instant::now()).unwrap();
        assert_eq!(ticket.record(false, Some(3)), Some(Circuit::Open));
        assert_eq!(flow.breaker(), Some((3, Duration::from_secs(30))));

        // A count followed from the outbox is taken while closed, and an answer clears it.
        let other = Flow::new(
            "partner",
            &FlowControl::new().with_breaker(3, Duration::from_secs(30)),
        );
        other.follow_failures(2);
        assert_eq!(other.breaker().unwrap().0, 2);
        assert_eq!(
            other.admit(Instant::now()).unwrap().record(true, None),
            None
        );
        assert_eq!(other.breaker().unwrap().0, 0);
        // An open circuit keeps the failures that opened it.
        flow.follow_failures(0);
        assert_eq!(flow.breaker().unwrap().0, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_gives_a_seconds_tokens_then_paces_within_the_lease() {
        let flow = Flow::new("partner", &FlowControl::new().with_rate(10.0));
        for _ in 0..10 {
            assert_eq!(flow.take_token(Duration::ZERO), Some(Duration::ZERO));
        }
        assert!(
            !flow.claimable(Instant::now()),
            "no token at hand: nothing claimed"
        );
        // The next token is 100 ms away: taken when the lease leaves time for it.
        assert_eq!(flow.take_token(Duration::from_millis(50)), None);
        assert_eq!(
            flow.take_token(Duration::from_secs(1)),
            Some(Duration::from_millis(100))
        );
        // One given back is there for the next.
        flow.give_back_token();
        assert_eq!(
            flow.take_token(Duration::from_secs(1)),
            Some(Duration::from_millis(100))
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(flow.claimable(Instant::now()));
    }

    #[test]
    fn a_shared_token_owed_later_than_the_lease_is_not_waited_for() {
        let flow = Flow::new("partner", &FlowControl::default().with_shared_rate(2.0));
        let lease = Duration::from_secs(1);
        assert_eq!(flow.shared_token_wait(0.0, lease), Some(Duration::ZERO));
        assert_eq!(
            flow.shared_token_wait(-1.0, lease),
            Some(Duration::from_millis(500))
        );
        assert_eq!(flow.shared_token_wait(-2.0, lease), Some(lease));
        assert_eq!(flow.shared_token_wait(-3.0, lease), None);
        // A worker's own bucket is not asked.
        let own = Flow::new("partner", &FlowControl::default().with_rate(2.0));
        assert_eq!(own.shared_token_wait(-1.0, lease), None);
    }
}
