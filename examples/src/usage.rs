//! The billed-usage meter: what each customer is billed for, per window.
//!
//! Usage is additive: a backfill that counted last month's orders again would bill them
//! twice. Two ways out, both gated as effect kind `metric`:
//!
//! - default mode: the `metrics` facade (`counter!`) through replaysafe's
//!   [`ReplaySafeRecorder`] bridge, over [`CountingRecorder`], a small in-process
//!   recorder standing in for a metrics backend. One bridge per window, installed
//!   locally around that window's increments, as the bridge's docs advise.
//! - `--real`: one Pushgateway group per window, replaced (`PUT`), so a repeat of the
//!   same window leaves the same group.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use replaysafe::metrics::{Push, PushgatewayClient, ReplaySafeRecorder, Sample};
use replaysafe::{Guard, Journal, ReplayContext};

use crate::orders::CustomerTotal;

/// Counter of orders billed, per customer.
const BILLED_ORDERS: &str = "billed_orders_total";
/// Counter of amounts billed, in cents, per customer.
const BILLED_CENTS: &str = "billed_amount_cents_total";
/// The Pushgateway job of the usage groups.
const PUSH_JOB: &str = "daily_orders_billing";

/// A `metrics` recorder that adds up counters in memory, keyed `name{label="value",...}`.
/// Gauges and histograms are ignored.
#[derive(Debug, Default)]
pub(crate) struct CountingRecorder {
    counters: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
}

#[derive(Debug)]
struct CountingCounter(Arc<AtomicU64>);

impl CounterFn for CountingCounter {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl CountingRecorder {
    /// Every counter and its value.
    pub(crate) fn counters(&self) -> BTreeMap<String, u64> {
        let counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters
            .iter()
            .map(|(name, value)| (name.clone(), value.load(Ordering::Relaxed)))
            .collect()
    }
}

impl Recorder for CountingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={:?}", label.key(), label.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        Counter::from_arc(Arc::new(CountingCounter(Arc::clone(
            counters.entry(name).or_default(),
        ))))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Where billed usage goes.
#[derive(Debug)]
pub(crate) enum UsageMeter {
    /// The `metrics` facade through the replay-safe bridge into an in-process recorder.
    InProcess {
        /// The stand-in backend.
        recorder: Arc<CountingRecorder>,
        /// Where the bridge journals what it held back.
        journal: Arc<dyn Journal>,
    },
    /// A Pushgateway.
    Pushgateway {
        /// The guarded client.
        gateway: Box<Guard<PushgatewayClient>>,
        /// Its base URL, for printing where a push landed.
        base_url: String,
    },
}

impl UsageMeter {
    /// Records the window's billed usage; returns where it landed when it was delivered.
    pub(crate) async fn record(
        &self,
        cx: &ReplayContext,
        totals: &[CustomerTotal],
    ) -> anyhow::Result<Option<String>> {
        match self {
            UsageMeter::InProcess { recorder, journal } => {
                let bridge = ReplaySafeRecorder::new(Arc::clone(recorder), cx, Arc::clone(journal));
                metrics::with_local_recorder(&bridge, || {
                    for total in totals {
                        let customer = total.customer.clone();
                        metrics::counter!(BILLED_ORDERS, "customer" => customer.clone())
                            .increment(total.orders);
                        metrics::counter!(BILLED_CENTS, "customer" => customer)
                            .increment(total.amount_cents.max(0) as u64);
                    }
                });
                // Journals one `suppressed` record per metric when the run is a replay.
                bridge.flush()?;
                Ok(bridge.is_pass_through().then(|| {
                    format!(
                        "in-process recorder: {BILLED_ORDERS}, {BILLED_CENTS} for {} customers",
                        totals.len()
                    )
                }))
            }
            UsageMeter::Pushgateway { gateway, base_url } => {
                let date = cx.window().start().format("%Y-%m-%d").to_string();
                let samples = totals.iter().flat_map(|total| {
                    [
                        Sample::counter(BILLED_ORDERS, total.orders as f64)
                            .with_label("customer", &total.customer),
                        Sample::counter(BILLED_CENTS, total.amount_cents as f64)
                            .with_label("customer", &total.customer),
                    ]
                });
                let push = Push::replace(PUSH_JOB)
                    .with_grouping_label("window", &date)
                    .with_samples(samples);
                let outcome = gateway.send(cx, &push).await?;
                Ok(outcome.is_delivered().then(|| {
                    format!(
                        "PUT {}/metrics/job/{PUSH_JOB}/window/{date}",
                        base_url.trim_end_matches('/')
                    )
                }))
            }
        }
    }
}
