//! Shared test support: journals, contexts, a counting recorder.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use replaysafe_core::{Mode, ReplayContext};
use replaysafe_test::contexts;

/// A JSON Lines journal in a fresh temporary folder.
pub(crate) use replaysafe_test::TempJournal as FileJournal;

/// Every context in which the gate must suppress, with a name for messages.
pub(crate) fn suppressing_contexts() -> Vec<(&'static str, ReplayContext)> {
    vec![
        ("backfill", contexts::backfill()),
        ("replay", contexts::replay()),
        ("stale", contexts::stale()),
        ("unknown", contexts::unknown()),
        ("dry-run", contexts::live().with_mode(Mode::DryRun)),
    ]
}

/// A name unique to this test process and `test`, for shared servers.
pub(crate) fn unique(test: &str) -> String {
    format!("rs_{test}_{}", std::process::id())
}

/// An inner recorder that counts every call reaching it.
#[derive(Clone, Debug, Default)]
pub(crate) struct CountingRecorder {
    /// Registrations and descriptions.
    pub(crate) calls: Arc<AtomicU64>,
    /// Sum of counter increments.
    pub(crate) increments: Arc<AtomicU64>,
    /// Gauge and histogram updates.
    pub(crate) updates: Arc<AtomicU64>,
}

impl CountingRecorder {
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub(crate) fn increments(&self) -> u64 {
        self.increments.load(Ordering::Relaxed)
    }

    pub(crate) fn updates(&self) -> u64 {
        self.updates.load(Ordering::Relaxed)
    }
}

struct Cell(Arc<AtomicU64>);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn decrement(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn set(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl HistogramFn for Cell {
    fn record(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl Recorder for CountingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Counter::from_arc(Arc::new(Cell(Arc::clone(&self.increments))))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Gauge::from_arc(Arc::new(Cell(Arc::clone(&self.updates))))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Histogram::from_arc(Arc::new(Cell(Arc::clone(&self.updates))))
    }
}
