//! Delivery workers: claim due rows, deliver each through its route on the row's own
//! context, complete on the claim token.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::TimeDelta;
use futures_util::StreamExt;
use replaysafe_core::journal::{JournalDecision, JournalRecord, RecordEffect, RecordWindow};
use replaysafe_core::{
    Clock, EffectClient, EffectKind, Guard, Journal, Mode, Reason, RetryPolicy, SystemClock,
    TrustedApprovers,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use crate::flow::{Circuit, Flow, FlowControl, Ticket};
use crate::route::{Attempt, ErasedRoute};
use crate::store::{
    CircuitRecord, ClaimRequest, ClaimedRow, Completion, CompletionResult, OutboxStore,
};
use crate::{OutboxError, Route};

/// The outbox's default retry policy: 8 attempts, full jitter from 1 s doubling to a
/// 10 min cap (a receiver's `Retry-After` wins). The time limit of the policy is not
/// used: attempts are counted across processes, in the row.
pub fn default_retry() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(8)
        .with_base_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(600))
}

/// The default lease: how long a claim holds before another worker may take it over.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// The default number of rows claimed at once.
pub const DEFAULT_BATCH: u32 = 32;
/// How often a delivery waiting for its route's rate looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(200);

/// The default pause when no row is due.
pub const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// Builds a [`Worker`]; see [`Worker::builder`].
pub struct WorkerBuilder {
    flows: Vec<(String, FlowControl)>,
    store: Arc<dyn OutboxStore>,
    routes: Vec<Result<Arc<dyn ErasedRoute>, OutboxError>>,
    lease: Duration,
    batch: u32,
    in_flight: usize,
    poll: Duration,
    retry: RetryPolicy,
    clock: Arc<dyn Clock>,
    trusted: Option<TrustedApprovers>,
    journal: Option<Arc<dyn Journal>>,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("store", &self.store)
            .field("routes", &self.routes.len())
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// Adds a route: rows naming `name` are delivered through `guard`.
    pub fn route<C>(mut self, name: impl Into<String>, guard: Guard<C>) -> Self
    where
        C: EffectClient + fmt::Debug + 'static,
        C::Effect: Serialize + DeserializeOwned,
    {
        self.routes
            .push(Route::new(name, guard).map(|route| Arc::new(route) as Arc<dyn ErasedRoute>));
        self
    }

    /// Adds a route built beforehand (the one used for staging, say).
    pub fn add_route<C>(mut self, route: Route<C>) -> Self
    where
        C: EffectClient + fmt::Debug + 'static,
        C::Effect: Serialize + DeserializeOwned,
    {
        self.routes.push(Ok(Arc::new(route)));
        self
    }

    /// How long a claim holds (default 60 s). Make it much longer than one delivery: a
    /// worker held up past its lease after it checked the lease and before it journaled
    /// its attempt may still deliver after another worker has (the reclaim found no
    /// attempt in the journal), so such a delivery may be made twice.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Rows claimed at once (default 32, at least 1).
    pub fn batch_size(mut self, rows: u32) -> Self {
        self.batch = rows.max(1);
        self
    }

    /// Deliveries in flight at once (default 1, at least 1): a worker whose receivers are
    /// slow keeps this many going, each on its own row, and claims at least as many
    /// rows at a time.
    pub fn in_flight(mut self, deliveries: usize) -> Self {
        self.in_flight = deliveries.max(1);
        self
    }

    /// The longest pause when nothing is due (default 500 ms); a store that hears of
    /// new rows (PostgreSQL) wakes the worker sooner.
    pub fn poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Attempts and backoff across claims (default [`default_retry`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The clock for due times, leases and the delivery gate (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Trusts only approval documents signed by one of these approvers' keys: a row's
    /// opt-in that is unsigned (`opt_in_unsigned`) or signed by another key
    /// (`opt_in_untrusted`) lifts nothing. `replaysafe outbox work` reads them from
    /// `REPLAYSAFE_TRUSTED_APPROVERS`, as `replaysafe send` does. Without them, a row's
    /// opt-in is checked for its scope, expiry and, when signed, its signature.
    pub fn trusted_approvers(mut self, trusted: TrustedApprovers) -> Self {
        self.trusted = Some(trusted);
        self
    }

    /// Where rows refused before any attempt (no such route, an unreadable row, an effect
    /// that does not decode or no longer derives its key) are journaled as `failed`
    /// (default: the journal of the row's route, or of the first route).
    pub fn journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Flow control for the route `name` (see [`FlowControl`]): a cap on its deliveries
    /// in flight in this worker process, a rate of this process or shared by every worker
    /// of the outbox (`rate_scope`), and a circuit breaker recorded in the outbox, which
    /// every worker with a breaker for the route follows.
    pub fn flow(mut self, name: impl Into<String>, control: FlowControl) -> Self {
        self.flows.push((name.into(), control));
        self
    }

    /// Builds the worker; an invalid or repeated route name, or no route at all, is
    /// [`OutboxError::Invalid`] for `route`; flow control for a route the worker does not
    /// have, or out of range, is [`OutboxError::Invalid`] naming the field.
    pub fn build(self) -> Result<Worker, OutboxError> {
        let mut routes = HashMap::new();
        for route in self.routes {
            let route = route?;
            let name = route.name().to_owned();
            if routes.insert(name, route).is_some() {
                return Err(OutboxError::invalid(
                    "route",
                    "each route name is given once",
                ));
            }
        }
        if routes.is_empty() {
            return Err(OutboxError::invalid(
                "route",
                "a worker needs at least one route",
            ));
        }
        let mut route_names: Vec<String> = routes.keys().cloned().collect();
        route_names.sort();
        let mut flows = HashMap::new();
        for (name, control) in &self.flows {
            if !routes.contains_key(name) {
                return Err(OutboxError::invalid(
                    "flow",
                    format!("names no route of the worker: {name}"),
                ));
            }
            control.check()?;
            flows.insert(name.clone(), Arc::new(Flow::new(name, control)));
        }
        Ok(Worker {
            store: self.store,
            routes,
            flows,
            route_names,
            lease: self.lease,
            batch: self
                .batch
                .max(u32::try_from(self.in_flight).unwrap_or(u32::MAX)),
            in_flight: self.in_flight,
            poll: self.poll,
            retry: self.retry,
            clock: self.clock,
            trusted: self.trusted,
            journal: self.journal,
        })
    }
}

/// A delivery worker.
///
/// Each pass claims up to a batch of due rows of its routes (one short transaction:
/// claim token, lease, attempt count), then delivers them, up to
/// [`WorkerBuilder::in_flight`] at a time: it rebuilds the
/// row's own context (only the clock is the worker's), and sends through the route's
/// guard, which runs the gate again and journals; then it completes the row on its
/// claim token. A stale completion (the lease was taken over) is rejected by the store,
/// counted, and changes nothing.
///
/// Transient failures come back after a full-jitter exponential delay (`Retry-After`
/// wins); permanent ones, and the last allowed attempt, dead-letter with the error.
pub struct Worker {
    store: Arc<dyn OutboxStore>,
    routes: HashMap<String, Arc<dyn ErasedRoute>>,
    flows: HashMap<String, Arc<Flow>>,
    route_names: Vec<String>,
    lease: Duration,
    batch: u32,
    in_flight: usize,
    poll: Duration,
    retry: RetryPolicy,
    clock: Arc<dyn Clock>,
    trusted: Option<TrustedApprovers>,
    journal: Option<Arc<dyn Journal>>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("store", &self.store)
            .field("routes", &self.route_names)
            .field("lease", &self.lease)
            .field("batch", &self.batch)
            .field("in_flight", &self.in_flight)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// How one claimed row of a pass ended.
enum Step<'a> {
    Done(WorkerStats),
    NotBegun(&'a ClaimedRow),
    LeaseExpired,
    Failed(OutboxError),
}

/// What a worker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Rows claimed.
    pub claimed: u64,
    /// Rows delivered.
    pub delivered: u64,
    /// Rows the delivery gate suppressed.
    pub suppressed: u64,
    /// Rows put back for a later attempt.
    pub retried: u64,
    /// Rows dead-lettered.
    pub dead: u64,
    /// Completions rejected because the lease had been taken over.
    pub stale_completions: u64,
    /// Claimed rows given back unattempted when stopping.
    pub released: u64,
    /// Claimed rows left unattempted because the lease ran out before their turn.
    pub lease_expired: u64,
    /// Store errors logged and survived.
    pub store_errors: u64,
}

impl WorkerStats {
    fn add(&mut self, other: WorkerStats) {
        self.claimed += other.claimed;
        self.delivered += other.delivered;
        self.suppressed += other.suppressed;
        self.retried += other.retried;
        self.dead += other.dead;
        self.stale_completions += other.stale_completions;
        self.released += other.released;
        self.lease_expired += other.lease_expired;
        self.store_errors += other.store_errors;
    }
}

impl Worker {
    /// Starts a builder over `store`.
    pub fn builder(store: impl OutboxStore + 'static) -> WorkerBuilder {
        WorkerBuilder {
            flows: Vec::new(),
            store: Arc::new(store),
            routes: Vec::new(),
            lease: DEFAULT_LEASE,
            batch: DEFAULT_BATCH,
            in_flight: 1,
            poll: DEFAULT_POLL,
            retry: default_retry(),
            clock: Arc::new(SystemClock),
            trusted: None,
            journal: None,
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn OutboxStore> {
        &self.store
    }

    /// The circuit of every route with a breaker, by route name.
    pub fn circuits(&self) -> Vec<(String, Circuit)> {
        let mut circuits: Vec<(String, Circuit)> = self
            .flows
            .iter()
            .filter_map(|(name, flow)| Some((name.clone(), flow.circuit()?)))
            .collect();
        circuits.sort_by(|a, b| a.0.cmp(&b.0));
        circuits
    }

    /// Claims one batch and works it through; returns what it did (nothing claimed when
    /// nothing was due).
    pub async fn run_once(&self) -> Result<WorkerStats, OutboxError> {
        self.pass(&AtomicBool::new(false)).await
    }

    /// Works until nothing is due, then returns.
    pub async fn drain(&self) -> Result<WorkerStats, OutboxError> {
        let mut total = WorkerStats::default();
        loop {
            let pass = self.run_once().await?;
            total.add(pass);
            if pass.claimed == 0 {
                return Ok(total);
            }
        }
    }

    /// A dry run over every row that is due now: each is decided on its own context in
    /// dry-run mode and journaled as what would have been sent (`suppressed`, reasons
    /// `dry_run` and whatever else the gate found), through its route's guard. Nothing is
    /// delivered, claimed or changed in the table; a row that could not be attempted at
    /// all is logged and counted as `dead`, not journaled (nothing happened to it).
    pub async fn dry_run(&self) -> Result<WorkerStats, OutboxError> {
        const PAGE: u32 = 500;
        let mut stats = WorkerStats::default();
        let now = self.clock.now();
        let mut after: Option<String> = None;
        loop {
            let rows = self
                .store
                .peek_due(&self.route_names, after.as_deref(), PAGE, now)
                .await?;
            let Some(last) = rows.last() else {
                return Ok(stats);
            };
            after = Some(last.key.clone());
            for row in &rows {
                stats.claimed += 1;
                match self.attempt(row, Mode::DryRun).await {
                    Attempt::Suppressed(_) => stats.suppressed += 1,
                    Attempt::Refused { error, .. } | Attempt::Failed { error, .. } => {
                        stats.dead += 1;
                        tracing::warn!(
                            target: "replaysafe::outbox",
                            idempotency_key = row.key.as_str(),
                            "dry run: this row would be dead-lettered: {error}"
                        );
                    }
                    // A dry-run context never delivers.
                    Attempt::Delivered => stats.delivered += 1,
                }
            }
        }
    }

    /// Works until `stop` completes: then it claims nothing more, finishes the delivery
    /// in flight, gives the rest of its batch back, and returns. Store errors are logged
    /// and counted, and the worker carries on after a pause.
    pub async fn run_until<F>(&self, stop: F) -> WorkerStats
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stopped = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Notify::new());
        let watcher = {
            let (stopped, wake) = (Arc::clone(&stopped), Arc::clone(&wake));
            tokio::spawn(async move {
                stop.await;
                stopped.store(true, Ordering::SeqCst);
                wake.notify_waiters();
            })
        };
        let mut total = WorkerStats::default();
        while !stopped.load(Ordering::SeqCst) {
            let idle = match self.pass(&stopped).await {
                Ok(pass) => {
                    total.add(pass);
                    pass.claimed == 0
                }
                Err(error) => {
                    total.store_errors += 1;
                    tracing::warn!(
                        target: "replaysafe::outbox",
                        "worker pass failed: {}",
                        crate::route::short_error(&error)
                    );
                    true
                }
            };
            if idle && !stopped.load(Ordering::SeqCst) {
                tokio::select! {
                    () = self.store.wait_for_work(self.poll) => {}
                    () = wake.notified() => {}
                }
            }
        }
        watcher.abort();
        total
    }

    /// [`Worker::run_until`] SIGINT or SIGTERM (Ctrl-C on other systems).
    pub async fn run_until_signal(&self) -> Result<WorkerStats, OutboxError> {
        #[cfg(unix)]
        let stop = {
            use tokio::signal::unix::{SignalKind, signal};
            let mut interrupt = signal(SignalKind::interrupt()).map_err(OutboxError::Signal)?;
            let mut terminate = signal(SignalKind::terminate()).map_err(OutboxError::Signal)?;
            async move {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            }
        };
        #[cfg(not(unix))]
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        Ok(self.run_until(stop).await)
    }

    async fn pass(&self, stopped: &AtomicBool) -> Result<WorkerStats, OutboxError> {
        let mut stats = WorkerStats::default();
        self.follow_circuits().await?;
        // A route whose circuit is open, or whose rate has no token at hand, has its rows
        // left where they are.
        let now = tokio::time::Instant::now();
        let routes: Vec<String> = self
            .route_names
            .iter()
            .filter(|name| self.flows.get(*name).is_none_or(|flow| flow.claimable(now)))
            .cloned()
            .collect();
        if routes.is_empty() {
            return Ok(stats);
        }
        let request = ClaimRequest {
            routes,
            limit: self.batch,
            lease: self.lease,
            now: self.clock.now(),
        };
        let lease_ends = request
            .now
            .checked_add_signed(TimeDelta::from_std(self.lease).unwrap_or(TimeDelta::MAX))
            .unwrap_or(request.now);
        let rows = self.store.claim(&request).await?;
        stats.claimed = rows.len() as u64;
        // A route's concurrency cap: at most that many of its rows in this pass, so its
        // rows never hold more of the worker's `in_flight` slots; the rest are given back
        // for a later pass.
        let mut taken: HashMap<&str, usize> = HashMap::new();
        let over_cap: Vec<bool> = rows
            .iter()
            .map(|row| {
                let cap = self.flows.get(&row.route).and_then(|flow| flow.cap());
                let count = taken.entry(row.route.as_str()).or_default();
                *count += 1;
                cap.is_some_and(|cap| *count > cap)
            })
            .collect();
        // Up to `in_flight` rows at once; each checks the stop flag and the lease
        // before it begins, and a row not begun is given back.
        let (rows, over_cap) = (&rows, &over_cap);
        let steps: Vec<Step<'_>> = futures_util::stream::iter(0..rows.len())
            .map(|index| async move {
                let row = &rows[index];
                // Let the stop watcher run even when deliveries never wait (an in-process
                // route on a current-thread runtime), so a stop is seen between two rows.
                tokio::task::yield_now().await;
                if over_cap[index] {
                    return Step::NotBegun(row);
                }
                let flow = self.flows.get(&row.route).map(Arc::as_ref);
                let ticket = match flow {
                    Some(flow) => match self.enter(&row.route, flow, lease_ends, stopped).await {
                        Some(ticket) => Some(ticket),
                        None => return Step::NotBegun(row),
                    },
                    None => None,
                };
                // A probe's ticket dropped unsettled leaves the circuit open.
                if stopped.load(Ordering::SeqCst) {
                    return Step::NotBegun(row);
                }
                if self.clock.now() >= lease_ends {
                    // The process was held up past its lease (a pause, a frozen VM): the
                    // row may already be another worker's. Leave it to them.
                    return Step::LeaseExpired;
                }
                let mut stats = WorkerStats::default();
                match self.work(row, &mut stats, ticket).await {
                    Ok(()) => Step::Done(stats),
                    Err(error) => Step::Failed(error),
                }
            })
            .buffer_unordered(self.in_flight)
            .collect()
            .await;
        let mut not_begun = Vec::new();
        let mut failure = None;
        for step in steps {
            match step {
                Step::Done(done) => stats.add(done),
                Step::NotBegun(row) => not_begun.push(row.clone()),
                Step::LeaseExpired => stats.lease_expired += 1,
                Step::Failed(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        if !not_begun.is_empty() {
            self.store.release(&not_begun).await?;
            stats.released += not_begun.len() as u64;
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(stats),
        }
    }

    /// Lets a row of a flow-controlled route in: a token of its rate (waited for, but not
    /// past the lease, and not once the worker stops), then the circuit's admission. `None`
    /// gives the row back unattempted, with its token.
    async fn enter<'f>(
        &self,
        route: &str,
        flow: &'f Flow,
        lease_ends: chrono::DateTime<chrono::Utc>,
        stopped: &AtomicBool,
    ) -> Option<Ticket<'f>> {
        let left = (lease_ends - self.clock.now()).to_std().unwrap_or_default();
        let wait = match flow.shared_rate() {
            Some((per_second, capacity)) => {
                let taken = self
                    .store
                    .take_shared_token(route, per_second, capacity, self.clock.now())
                    .await
                    .map(|tokens| flow.shared_token_wait(tokens, left));
                match taken {
                    Ok(Some(wait)) => wait,
                    Ok(None) => {
                        // Owed too late for this claim's lease: given back with the row.
                        self.give_back_token(route, flow).await;
                        flow.hold_shared_rate(tokio::time::Instant::now() + self.poll);
                        return None;
                    }
                    Err(error) => {
                        flow.hold_shared_rate(tokio::time::Instant::now() + self.poll);
                        // No token without the bucket: the row goes back unattempted.
                        tracing::warn!(
                            target: "replaysafe::outbox",
                            route,
                            "taking a token of the route's shared rate: {}",
                            crate::route::short_error(&error)
                        );
                        return None;
                    }
                }
            }
            None => flow.take_token(left)?,
        };
        let until = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < until {
            if stopped.load(Ordering::SeqCst) {
                self.give_back_token(route, flow).await;
                return None;
            }
            tokio::time::sleep_until(until.min(tokio::time::Instant::now() + STOP_CHECK)).await;
        }
        let ticket = flow.admit(tokio::time::Instant::now());
        let Some(ticket) = ticket else {
            self.give_back_token(route, flow).await;
            return None;
        };
        if ticket.is_probe() && !self.take_probe(route, flow).await {
            // Another worker of the outbox sends this probe (or the database did not
            // say): the circuit stays open here, the row goes back unattempted.
            drop(ticket);
            self.give_back_token(route, flow).await;
            return None;
        }
        Some(ticket)
    }

    /// Gives back the token taken for a row that is then not sent: to the worker's bucket,
    /// or to the outbox's for a shared rate (a failure to is logged; the bucket refills).
    async fn give_back_token(&self, route: &str, flow: &Flow) {
        let Some((_, capacity)) = flow.shared_rate() else {
            flow.give_back_token();
            return;
        };
        if let Err(error) = self.store.give_back_shared_token(route, capacity).await {
            tracing::warn!(
                target: "replaysafe::outbox",
                route,
                "giving back a token of the route's shared rate: {}",
                crate::route::short_error(&error)
            );
        }
    }

    /// Takes an open circuit's due probe in the outbox, so that one worker sends it; the
    /// next probe here is then an interval away. `false` when another worker took it, and
    /// when the database cannot say (no probe rather than many).
    async fn take_probe(&self, route: &str, flow: &Flow) -> bool {
        let Some((_, every)) = flow.breaker() else {
            return true;
        };
        let now = self.clock.now();
        let next = now
            .checked_add_signed(TimeDelta::from_std(every).unwrap_or(TimeDelta::MAX))
            .unwrap_or(now);
        let taken = match self.store.take_probe(route, now, next).await {
            Ok(taken) => taken,
            Err(error) => {
                tracing::warn!(
                    target: "replaysafe::outbox",
                    route,
                    "taking the circuit's probe: {}",
                    crate::route::short_error(&error)
                );
                false
            }
        };
        if !taken {
            flow.defer_probe(tokio::time::Instant::now() + every);
        }
        taken
    }

    /// Shares how a delivery of a route with a breaker ended with the workers of the
    /// outbox: a transient failure is counted in the outbox (the count with it is
    /// returned, so the circuit opens after the breaker's number of consecutive failures
    /// whichever workers saw them); an answer clears the count when this worker knows it
    /// is not zero, so a route that answers costs no write. `None` when the store keeps no
    /// count, or cannot be reached (logged): the worker then counts alone.
    async fn share_outcome(&self, route: &str, flow: &Flow, answered: bool) -> Option<u32> {
        let (failures, _) = flow.breaker()?;
        let shared = if answered {
            if failures == 0 {
                return None;
            }
            self.store.clear_route_failures(route).await.map(|()| None)
        } else {
            self.store
                .count_route_failure(route, self.clock.now())
                .await
        };
        shared.unwrap_or_else(|error| {
            tracing::warn!(
                target: "replaysafe::outbox",
                route,
                "sharing the route's failures with the outbox's other workers: {}; this worker counts its own",
                crate::route::short_error(&error)
            );
            None
        })
    }

    /// Follows the circuits the workers of the outbox recorded, for the routes with a
    /// breaker: one opened elsewhere holds this worker's rows too, one closed elsewhere
    /// lets them flow, and a closed one's count of consecutive failures is taken.
    async fn follow_circuits(&self) -> Result<(), OutboxError> {
        if self.flows.values().all(|flow| flow.breaker().is_none()) {
            return Ok(());
        }
        let recorded = self.store.circuits().await?;
        let wall = self.clock.now();
        let now = tokio::time::Instant::now();
        for (route, flow) in &self.flows {
            let circuit = recorded.iter().find(|circuit| circuit.route == *route);
            if let Some(closed) = circuit.filter(|circuit| !circuit.open) {
                flow.follow_failures(closed.failures);
            }
            let open = circuit.filter(|circuit| circuit.open).map(|circuit| {
                let probe_in = circuit
                    .next_probe_at
                    .and_then(|at| (at - wall).to_std().ok())
                    .unwrap_or_default();
                (circuit.failures, probe_in)
            });
            match flow.follow(open, now) {
                Some(Circuit::Open) => tracing::warn!(
                    target: "replaysafe::outbox",
                    route = route.as_str(),
                    "circuit open, as another worker of the outbox recorded it: the route's rows wait"
                ),
                Some(_) => tracing::info!(
                    target: "replaysafe::outbox",
                    route = route.as_str(),
                    "circuit closed, as another worker of the outbox recorded it: the route's rows flow"
                ),
                None => {}
            }
        }
        Ok(())
    }

    /// Records a change of `row`'s route's circuit in the outbox and journals it on the
    /// row; a probe that failed moves the recorded next probe. A failure to record is
    /// logged: the circuit still holds in this worker.
    async fn circuit_changed(
        &self,
        row: &ClaimedRow,
        flow: &Flow,
        change: Option<Circuit>,
        failed_probe: bool,
    ) {
        let Some((failures, every)) = flow.breaker() else {
            return;
        };
        let now = self.clock.now();
        let next = now
            .checked_add_signed(TimeDelta::from_std(every).unwrap_or(TimeDelta::MAX))
            .unwrap_or(now);
        let (record, journaled) = match change {
            Some(Circuit::Open) => (
                CircuitRecord::opened(&row.route, failures, now, next),
                Some((
                    "circuit_opened",
                    format!(
                        "route {}: circuit opened after {failures} consecutive transient failures; \
                         its rows wait, one probe every {}",
                        row.route,
                        seconds(every)
                    ),
                )),
            ),
            Some(_) => (
                CircuitRecord::closed(&row.route, now),
                Some((
                    "circuit_closed",
                    format!(
                        "route {}: circuit closed: this probe got an answer; the route's rows flow again",
                        row.route
                    ),
                )),
            ),
            None if failed_probe => (CircuitRecord::opened(&row.route, failures, now, next), None),
            None => return,
        };
        if let Err(error) = self.store.record_circuit(&record).await {
            tracing::error!(
                target: "replaysafe::outbox",
                route = row.route.as_str(),
                "recording the circuit in the outbox: {}",
                crate::route::short_error(&error)
            );
        }
        if let Some((reason, note)) = journaled {
            self.journal_row(row, JournalDecision::Circuit, reason, |record| {
                record.with_note(Some(note))
            });
        }
    }

    async fn work(
        &self,
        row: &ClaimedRow,
        stats: &mut WorkerStats,
        ticket: Option<Ticket<'_>>,
    ) -> Result<(), OutboxError> {
        let attempt = self.attempt(row, Mode::Live).await;
        if let Some(ticket) = ticket {
            let answered = match &attempt {
                // The receiver answered: a delivery, or a refusal of this row.
                Attempt::Delivered
                | Attempt::Failed {
                    transient: false, ..
                } => Some(true),
                Attempt::Failed {
                    transient: true, ..
                } => Some(false),
                // Nothing was sent: it says nothing of the route (a probe's ticket
                // dropped unsettled leaves the circuit open).
                Attempt::Suppressed(_) | Attempt::Refused { .. } => None,
            };
            if let (Some(answered), Some(flow)) = (answered, self.flows.get(&row.route)) {
                let probe = ticket.is_probe();
                let counted = self.share_outcome(&row.route, flow, answered).await;
                let change = ticket.record(answered, counted);
                self.circuit_changed(row, flow, change, probe && !answered)
                    .await;
            }
        }
        let now = self.clock.now();
        let completion = match attempt {
            Attempt::Delivered => {
                stats.delivered += 1;
                Completion::Delivered {
                    payload_sha256: row.payload_sha256.clone(),
                }
            }
            // The journal saw it delivered (the claim that delivered it ended before it
            // could complete the row): delivered, and not sent again.
            Attempt::Suppressed(reasons) if reasons == [Reason::AlreadyDelivered] => {
                stats.delivered += 1;
                Completion::Delivered {
                    payload_sha256: row.payload_sha256.clone(),
                }
            }
            Attempt::Suppressed(reasons) => {
                stats.suppressed += 1;
                Completion::Suppressed {
                    reasons: reasons
                        .iter()
                        .map(|r| r.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                }
            }
            Attempt::Failed {
                transient,
                retry_after,
                error,
            } => {
                if transient && row.attempts < self.retry.max_attempts() {
                    stats.retried += 1;
                    let delay = self.retry.delay(row.attempts, retry_after);
                    let delay = TimeDelta::from_std(delay).unwrap_or(TimeDelta::MAX);
                    Completion::Retry {
                        next_attempt_at: now.checked_add_signed(delay).unwrap_or(now),
                        error,
                    }
                } else {
                    stats.dead += 1;
                    tracing::warn!(
                        target: "replaysafe::outbox",
                        idempotency_key = row.key.as_str(),
                        route = row.route.as_str(),
                        attempts = row.attempts,
                        "dead-lettered: {error}"
                    );
                    Completion::Dead { error }
                }
            }
            Attempt::Refused { reason, error } => {
                stats.dead += 1;
                tracing::warn!(
                    target: "replaysafe::outbox",
                    idempotency_key = row.key.as_str(),
                    route = row.route.as_str(),
                    "dead-lettered before any attempt ({reason}): {error}"
                );
                self.journal_refusal(row, reason, &error);
                Completion::Dead { error }
            }
        };
        if self.store.complete(row, completion, now).await? == CompletionResult::Stale {
            stats.stale_completions += 1;
            tracing::warn!(
                target: "replaysafe::outbox",
                idempotency_key = row.key.as_str(),
                "completion rejected: the lease was taken over by another claim"
            );
        }
        Ok(())
    }

    /// Attempts a row on its own context (in dry-run mode when `mode` says so).
    async fn attempt(&self, row: &ClaimedRow, mode: Mode) -> Attempt {
        let Some(route) = self.routes.get(&row.route) else {
            return Attempt::refused("unknown_route", format!("no route named {}", row.route));
        };
        let kind = match EffectKind::from_str(&row.effect_kind) {
            Ok(kind) => kind,
            Err(error) => {
                return Attempt::refused("unreadable_row", crate::route::short_error(&error));
            }
        };
        let cx = match crate::row::row_context(
            &row.context,
            &row.key,
            &kind,
            Arc::clone(&self.clock),
            self.trusted.as_ref(),
        ) {
            Ok(cx) if mode == Mode::DryRun => cx.with_mode(Mode::DryRun),
            Ok(cx) => cx,
            Err(error) => {
                return Attempt::refused("unreadable_row", crate::route::short_error(&error));
            }
        };
        route
            .attempt(
                &cx,
                &row.key,
                &row.effect,
                row.attempts.max(1),
                row.reclaimed,
            )
            .await
    }

    /// Journals a row refused before any attempt as `failed`, from the row's own columns
    /// (the effect may not even decode), so that `report --fail-on failed` sees it. A
    /// journal that cannot take it is logged: the row itself keeps the error.
    fn journal_refusal(&self, row: &ClaimedRow, reason: &'static str, error: &str) {
        self.journal_row(row, JournalDecision::Failed, reason, |record| {
            record
                .with_attempt(row.attempts)
                .with_error(Some(error.to_owned()))
        });
    }

    /// Journals one record of `decision` about `row`, from the row's own columns, to the
    /// worker's journal or else its route's (or else the first route's). A journal that
    /// cannot take it is logged.
    fn journal_row(
        &self,
        row: &ClaimedRow,
        decision: JournalDecision,
        reason: &'static str,
        finish: impl FnOnce(JournalRecord) -> JournalRecord,
    ) {
        let journal = self
            .journal
            .as_ref()
            .or_else(|| self.routes.get(&row.route).map(|route| route.journal()))
            .or_else(|| {
                self.route_names
                    .first()
                    .and_then(|name| self.routes.get(name))
                    .map(|route| route.journal())
            });
        let Some(journal) = journal else { return };
        let context = &row.context;
        let time = |text: &str| {
            chrono::DateTime::parse_from_rfc3339(text)
                .map(|time| time.with_timezone(&chrono::Utc))
                .unwrap_or(chrono::DateTime::<chrono::Utc>::UNIX_EPOCH)
        };
        let effect = RecordEffect::new(
            &row.effect_kind,
            &row.message_type,
            &row.target,
            &row.key,
            &row.payload_sha256,
            u64::try_from(row.payload_bytes).unwrap_or(0),
        )
        .with_summary(row.summary.clone());
        let record = JournalRecord::new(
            self.clock.now(),
            decision,
            &context.pipeline,
            &context.run_id,
            &context.run_kind,
            RecordWindow::new(time(&context.window_start), time(&context.window_end)),
            effect,
        )
        .with_reasons([reason])
        .with_backfill_id(context.backfill_id.clone());
        let record = finish(record);
        let entry = record.entry();
        if let Err(failure) = journal.append(&entry).and_then(|()| journal.flush()) {
            tracing::error!(
                target: "replaysafe::outbox",
                idempotency_key = row.key.as_str(),
                "journaling a {} record: {}",
                decision.as_str(),
                crate::route::short_error(&failure)
            );
        }
    }
}

/// A probe interval as a reader writes it: `30 s`, `0.3 s`.
fn seconds(interval: Duration) -> String {
    format!("{} s", interval.as_secs_f64())
}
