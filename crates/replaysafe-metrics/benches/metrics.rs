//! The `metrics` bridge: its cost in a live run against the inner recorder alone, and
//! its cost per suppressed increment in a backfill.
//!
//! Run with `cargo bench -p replaysafe-metrics`; figures go to `target/bench/metrics.json`.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Level, Metadata, Recorder, SharedString,
    Unit,
};
use replaysafe_bench::{Report, best_of, per_second};
use replaysafe_core::MemoryJournal;
use replaysafe_metrics::ReplaySafeRecorder;
use replaysafe_test::contexts;

const INCREMENTS: usize = 1_000_000;
const ROUNDS: usize = 7;

/// A minimal inner recorder: every counter adds to one shared atomic.
#[derive(Clone, Default)]
struct AtomicRecorder(Arc<Total>);

#[derive(Default)]
struct Total(AtomicU64);

impl CounterFn for Total {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl Recorder for AtomicRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::clone(&self.0))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// What `metrics::counter!("orders_total", "region" => "eu").increment(1)` does, `INCREMENTS` times.
fn macro_loop(recorder: &dyn Recorder) {
    metrics::with_local_recorder(recorder, || {
        for _ in 0..INCREMENTS {
            metrics::counter!("orders_total", "region" => "eu").increment(black_box(1));
        }
    });
}

/// A handle registered once, incremented `INCREMENTS` times.
fn handle_loop(recorder: &dyn Recorder) {
    static LABELS: [metrics::Label; 1] = [metrics::Label::from_static_parts("region", "eu")];
    let key = Key::from_static_parts("orders_total", &LABELS);
    let metadata = Metadata::new("bench", Level::INFO, None);
    let counter = recorder.register_counter(&key, &metadata);
    for _ in 0..INCREMENTS {
        counter.increment(black_box(1));
    }
}

fn main() {
    let mut report = Report::new("metrics");

    let inner = AtomicRecorder::default();
    let live = ReplaySafeRecorder::new(
        AtomicRecorder::default(),
        &contexts::live(),
        MemoryJournal::new(),
    );
    assert!(live.is_pass_through());
    // Interleaved rounds, the fastest of each kept.
    let (mut inner_best, mut live_best) = (Duration::MAX, Duration::MAX);
    for _ in 0..ROUNDS {
        inner_best = inner_best.min(best_of(1, || macro_loop(&inner)));
        live_best = live_best.min(best_of(1, || macro_loop(&live)));
    }
    assert_eq!(
        live.inner().0.0.load(Ordering::Relaxed),
        (ROUNDS * INCREMENTS) as u64,
        "every live increment reaches the inner recorder"
    );
    report.figure(
        "metrics.inner.counter_macro_per_second",
        per_second(INCREMENTS, inner_best),
        "increments/s",
    );
    report.figure(
        "metrics.bridge.live.counter_macro_per_second",
        per_second(INCREMENTS, live_best),
        "increments/s",
    );
    report.ratio(
        "metrics.bridge.live.vs_inner",
        inner_best.as_secs_f64() / live_best.as_secs_f64(),
        "the inner recorder alone, counter! macro, same process, interleaved",
    );

    let journal = Arc::new(MemoryJournal::new());
    let suppressed = ReplaySafeRecorder::new(
        AtomicRecorder::default(),
        &contexts::backfill(),
        journal.clone(),
    );
    assert!(!suppressed.is_pass_through());
    let macro_best = best_of(ROUNDS, || macro_loop(&suppressed));
    let handle_best = best_of(ROUNDS, || handle_loop(&suppressed));
    let inner_handle_best = best_of(ROUNDS, || handle_loop(&inner));
    report.figure(
        "metrics.bridge.suppressed.counter_macro_ns_per_increment",
        macro_best.as_nanos() as f64 / INCREMENTS as f64,
        "ns",
    );
    report.figure(
        "metrics.bridge.suppressed.handle_ns_per_increment",
        handle_best.as_nanos() as f64 / INCREMENTS as f64,
        "ns",
    );
    report.figure(
        "metrics.inner.handle_ns_per_increment",
        inner_handle_best.as_nanos() as f64 / INCREMENTS as f64,
        "ns",
    );
    assert_eq!(suppressed.inner().0.0.load(Ordering::Relaxed), 0);
    let lines = suppressed.flush().expect("journal in memory");
    report.figure(
        "metrics.bridge.suppressed.journal_lines",
        lines as f64,
        "lines",
    );
    assert_eq!(
        lines,
        1,
        "one line for {} increments",
        2 * ROUNDS * INCREMENTS
    );

    match report.write() {
        Ok(path) => println!("report: {}", path.display()),
        Err(error) => eprintln!("writing the report: {error}"),
    }
}
