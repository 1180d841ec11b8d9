//! A recorder for the `metrics` facade that forwards in a live run and, in a replay,
//! records nothing and journals what it would have recorded, aggregated.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use replaysafe_core::adapter::{EffectRecord, Step};
use replaysafe_core::{
    Decision, EffectDescription, EffectKind, IdempotencyKey, Journal, RedactionPolicy,
    ReplayContext,
};

use crate::Error;

/// A [`metrics::Recorder`] that makes the `metrics` facade replay-safe.
///
/// It is built with the run's [`ReplayContext`] and asks the gate once, for effect kind
/// `metric`:
///
/// - **Live** (the window is current, no replay, no opt-in needed): every call goes
///   straight to the inner recorder. Nothing is journaled per increment; the cost is one
///   branch (see the benchmark in `benches/metrics.rs`).
/// - **Replay, backfill, stale, unknown or dry run**: the inner recorder is never
///   called, not even to describe a metric. Increments, gauge values and histogram
///   samples are kept in memory, and on [`flush`](Self::flush) (and when the recorder is
///   dropped) one `suppressed` journal record is written per metric: per metric type,
///   name and label *names*, whatever the label values and however many increments.
///   A 90-window backfill of a hot counter writes 90 lines, not millions.
/// - **Opt-in**: a metric covered by an unexpired opt-in is forwarded and also journaled
///   in aggregate, as `delivered` with the opt-in.
///
/// Records have kind `metric`, message type `counter`, `gauge` or `histogram`, the
/// target `name{label,names}` (sorted; label values never appear), a summary with the
/// value (`+10000 over 10000 increments across 2 series`) and the SHA-256 of the
/// per-series values.
///
/// # One context per recorder, one recorder per process
///
/// The facade's global recorder is set once per process
/// ([`metrics::set_global_recorder`]), and this recorder decides once, with the context
/// it was built with. That fits batch pipelines, which run one context per process.
/// Take a [`FlushHandle`] before installing it globally: a global recorder is never
/// dropped, so flush it yourself before the process exits. To process several windows
/// in one process, build one recorder per window and install it with
/// [`metrics::with_local_recorder`] around that window's work; it flushes when dropped.
///
/// ```
/// use std::sync::Arc;
/// use metrics::{Key, Level, Metadata, Recorder};
/// use replaysafe_core::MemoryJournal;
/// use replaysafe_metrics::ReplaySafeRecorder;
/// # use replaysafe_test::contexts;
///
/// let journal = Arc::new(MemoryJournal::new());
/// let recorder = ReplaySafeRecorder::new(metrics::NoopRecorder, &contexts::backfill(), journal.clone());
/// metrics::with_local_recorder(&recorder, || {
///     for _ in 0..10_000 {
///         metrics::counter!("orders_total", "region" => "eu").increment(1);
///     }
/// });
/// assert_eq!(recorder.flush()?, 1);
/// let record = &journal.records()[0];
/// assert_eq!(record.effect.target, "orders_total{region}");
/// assert_eq!(record.effect.summary.as_deref(), Some("+10000 over 10000 increments"));
/// # Ok::<(), replaysafe_metrics::Error>(())
/// ```
pub struct ReplaySafeRecorder<R> {
    inner: R,
    pass_through: bool,
    shared: Arc<Shared>,
}

impl<R> fmt::Debug for ReplaySafeRecorder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplaySafeRecorder")
            .field("pass_through", &self.pass_through)
            .field("decision", &self.shared.decision)
            .finish_non_exhaustive()
    }
}

/// Flushes a [`ReplaySafeRecorder`] that was moved into [`metrics::set_global_recorder`].
#[derive(Clone)]
pub struct FlushHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for FlushHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlushHandle").finish_non_exhaustive()
    }
}

impl FlushHandle {
    /// Journals what was held back since the last flush; see [`ReplaySafeRecorder::flush`].
    pub fn flush(&self) -> Result<usize, Error> {
        self.shared.flush()
    }
}

impl<R: Recorder> ReplaySafeRecorder<R> {
    /// Wraps `inner` for the run described by `cx`, journaling to `journal`.
    pub fn new(inner: R, cx: &ReplayContext, journal: impl Journal + 'static) -> Self {
        let decision = cx.decide(&EffectKind::Metric, "");
        let pass_through = decision.delivers() && decision.opt_in().is_none();
        ReplaySafeRecorder {
            inner,
            pass_through,
            shared: Arc::new(Shared {
                cx: cx.clone(),
                journal: Arc::new(journal),
                redaction: Mutex::new(RedactionPolicy::default()),
                decision,
                counters: Mutex::default(),
                gauges: Mutex::default(),
                histograms: Mutex::default(),
            }),
        }
    }

    /// Shows journal targets through `redaction` (default: in full, since targets hold
    /// no label value).
    pub fn with_redaction(self, redaction: RedactionPolicy) -> Self {
        *self
            .shared
            .redaction
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = redaction;
        self
    }

    /// Whether every call goes straight to the inner recorder (a live, current run).
    pub fn is_pass_through(&self) -> bool {
        self.pass_through
    }

    /// The gate's decision for metrics of this run.
    pub fn decision(&self) -> &Decision {
        &self.shared.decision
    }

    /// The inner recorder.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// A handle that flushes this recorder from elsewhere.
    pub fn flush_handle(&self) -> FlushHandle {
        FlushHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Journals one record per metric that changed since the last flush and returns how
    /// many were written; a live pass-through recorder writes none.
    pub fn flush(&self) -> Result<usize, Error> {
        self.shared.flush()
    }
}

impl<R> Drop for ReplaySafeRecorder<R> {
    fn drop(&mut self) {
        if let Err(error) = self.shared.flush() {
            tracing::warn!(target: "replaysafe::metrics", "{error}");
        }
    }
}

impl<R: Recorder> Recorder for ReplaySafeRecorder<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if self.pass_through {
            self.inner.describe_counter(key, unit, description);
        }
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if self.pass_through {
            self.inner.describe_gauge(key, unit, description);
        }
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if self.pass_through {
            self.inner.describe_histogram(key, unit, description);
        }
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if self.pass_through {
            return self.inner.register_counter(key, metadata);
        }
        let series = self
            .shared
            .series(&self.shared.counters, key, "counter", |deliver| {
                CounterState {
                    forward: deliver.then(|| self.inner.register_counter(key, metadata)),
                    increments: AtomicU64::new(0),
                    absolute: AtomicU64::new(0),
                    has_absolute: AtomicBool::new(false),
                }
            });
        Counter::from_arc(series)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if self.pass_through {
            return self.inner.register_gauge(key, metadata);
        }
        let series = self
            .shared
            .series(&self.shared.gauges, key, "gauge", |deliver| GaugeState {
                forward: deliver.then(|| self.inner.register_gauge(key, metadata)),
                bits: AtomicU64::new(0f64.to_bits()),
            });
        Gauge::from_arc(series)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if self.pass_through {
            return self.inner.register_histogram(key, metadata);
        }
        let series = self
            .shared
            .series(&self.shared.histograms, key, "histogram", |deliver| {
                HistogramState {
                    forward: deliver.then(|| self.inner.register_histogram(key, metadata)),
                    count: AtomicU64::new(0),
                    sum_bits: AtomicU64::new(0f64.to_bits()),
                }
            });
        Histogram::from_arc(series)
    }
}

/// Hashes a [`Key`] by the hash it already carries.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

#[allow(
    clippy::mutable_key_type,
    reason = "Key hashes by a precomputed u64; its interior atomics never change the hash"
)]
type SeriesMap<S> = Mutex<HashMap<Key, Arc<Series<S>>, BuildHasherDefault<KeyHasher>>>;

struct Shared {
    cx: ReplayContext,
    journal: Arc<dyn Journal>,
    redaction: Mutex<RedactionPolicy>,
    decision: Decision,
    counters: SeriesMap<CounterState>,
    gauges: SeriesMap<GaugeState>,
    histograms: SeriesMap<HistogramState>,
}

/// One series (name and label values) held back or forwarded under an opt-in.
struct Series<S> {
    key: Key,
    message_type: &'static str,
    target: String,
    decision: Decision,
    updates: AtomicU64,
    state: S,
}

struct CounterState {
    forward: Option<Counter>,
    increments: AtomicU64,
    absolute: AtomicU64,
    has_absolute: AtomicBool,
}

struct GaugeState {
    forward: Option<Gauge>,
    bits: AtomicU64,
}

struct HistogramState {
    forward: Option<Histogram>,
    count: AtomicU64,
    sum_bits: AtomicU64,
}

fn add_f64(cell: &AtomicU64, delta: f64) {
    let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
        Some((f64::from_bits(bits) + delta).to_bits())
    });
}

impl CounterFn for Series<CounterState> {
    fn increment(&self, value: u64) {
        self.state.increments.fetch_add(value, Ordering::Relaxed);
        self.updates.fetch_add(1, Ordering::Relaxed);
        if let Some(forward) = &self.state.forward {
            forward.increment(value);
        }
    }

    fn absolute(&self, value: u64) {
        self.state.absolute.store(value, Ordering::Relaxed);
        self.state.has_absolute.store(true, Ordering::Relaxed);
        self.updates.fetch_add(1, Ordering::Relaxed);
        if let Some(forward) = &self.state.forward {
            forward.absolute(value);
        }
    }
}

impl GaugeFn for Series<GaugeState> {
    fn increment(&self, value: f64) {
        add_f64(&self.state.bits, value);
        self.updates.fetch_add(1, Ordering::Relaxed);
        if let Some(forward) = &self.state.forward {
            forward.increment(value);
        }
    }

    fn decrement(&self, value: f64) {
        add_f64(&self.state.bits, -value);
        self.updates.fetch_add(1, Ordering::Relaxed);
        if let Some(forward) = &self.state.forward {
            forward.decrement(value);
        }
    }

    fn set(&self, value: f64) {
        self.state.bits.store(value.to_bits(), Ordering::Relaxed);
        self.updates.fetch_add(1, Ordering::Relaxed);
        if let Some(forward) = &self.state.forward {
            forward.set(value);
        }
    }
}

impl HistogramFn for Series<HistogramState> {
    fn record(&self, value: f64) {
        self.state.count.fetch_add(1, Ordering::Relaxed);
        add_f64(&self.state.sum_bits, value);
        self.updates.fetch_add(1, Ordering::Relaxed);
        if let Some(forward) = &self.state.forward {
            forward.record(value);
        }
    }
}

/// `name{label,names}`, names sorted and deduplicated; control characters replaced.
fn target_of(key: &Key) -> String {
    let mut names: Vec<&str> = key.labels().map(|label| label.key()).collect();
    names.sort_unstable();
    names.dedup();
    let name = if key.name().trim().is_empty() {
        "(unnamed)"
    } else {
        key.name()
    };
    let target = if names.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{}}}", names.join(","))
    };
    target
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// `name{label="value",...}` with labels sorted: a payload line, digested, never shown.
fn series_text(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|label| format!("{}={:?}", label.key(), label.value()))
        .collect();
    labels.sort_unstable();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

/// What one flush found for one metric (type and target).
#[derive(Default)]
struct Group {
    decision: Option<Decision>,
    series: usize,
    updates: u64,
    increments: u128,
    absolutes: Vec<u64>,
    values: Vec<f64>,
    count: u64,
    sum: f64,
    payload: Vec<String>,
}

impl Shared {
    fn series<S>(
        &self,
        map: &SeriesMap<S>,
        key: &Key,
        message_type: &'static str,
        state: impl FnOnce(bool) -> S,
    ) -> Arc<Series<S>> {
        let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(series) = map.get(key) {
            return Arc::clone(series);
        }
        let target = target_of(key);
        let decision = self.cx.decide(&EffectKind::Metric, &target);
        let series = Arc::new(Series {
            key: key.clone(),
            message_type,
            target,
            state: state(decision.delivers()),
            decision,
            updates: AtomicU64::new(0),
        });
        map.insert(key.clone(), Arc::clone(&series));
        series
    }

    fn flush(&self) -> Result<usize, Error> {
        let mut groups: BTreeMap<(&'static str, String), Group> = BTreeMap::new();
        fn group<'a, S>(
            groups: &'a mut BTreeMap<(&'static str, String), Group>,
            series: &Series<S>,
            updates: u64,
        ) -> &'a mut Group {
            let group = groups
                .entry((series.message_type, series.target.clone()))
                .or_default();
            group
                .decision
                .get_or_insert_with(|| series.decision.clone());
            group.series += 1;
            group.updates += updates;
            group
        }

        for series in self
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            let updates = series.updates.swap(0, Ordering::Relaxed);
            if updates == 0 {
                continue;
            }
            let increments = series.state.increments.swap(0, Ordering::Relaxed);
            let absolute = series
                .state
                .has_absolute
                .swap(false, Ordering::Relaxed)
                .then(|| series.state.absolute.load(Ordering::Relaxed));
            let group = group(&mut groups, series, updates);
            group.increments += u128::from(increments);
            group.absolutes.extend(absolute);
            group.payload.push(format!(
                "{} +{increments}{}",
                series_text(&series.key),
                absolute.map(|a| format!(" ={a}")).unwrap_or_default()
            ));
        }
        for series in self
            .gauges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            let updates = series.updates.swap(0, Ordering::Relaxed);
            if updates == 0 {
                continue;
            }
            let value = f64::from_bits(series.state.bits.load(Ordering::Relaxed));
            let group = group(&mut groups, series, updates);
            group.values.push(value);
            group
                .payload
                .push(format!("{} ={value}", series_text(&series.key)));
        }
        for series in self
            .histograms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            let updates = series.updates.swap(0, Ordering::Relaxed);
            if updates == 0 {
                continue;
            }
            let count = series.state.count.swap(0, Ordering::Relaxed);
            let sum = f64::from_bits(
                series
                    .state
                    .sum_bits
                    .swap(0f64.to_bits(), Ordering::Relaxed),
            );
            let group = group(&mut groups, series, updates);
            group.count += count;
            group.sum += sum;
            group
                .payload
                .push(format!("{} n={count} sum={sum}", series_text(&series.key)));
        }

        let redaction = *self
            .redaction
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut written = 0;
        for ((message_type, target), mut group) in groups {
            let decision = group
                .decision
                .take()
                .unwrap_or_else(|| self.decision.clone());
            group.payload.sort_unstable();
            let payload = group.payload.join("\n");
            let summary = summary(message_type, &group);
            let description = EffectDescription::new(EffectKind::Metric, message_type, &target)
                .map_err(|e| Error::invalid("metric name", e))?
                .with_summary(summary)
                .with_payload(payload.as_bytes());
            let key = IdempotencyKey::derive(
                self.cx.pipeline(),
                description.kind(),
                message_type,
                &target,
                self.cx.window(),
            );
            let step = if decision.delivers() {
                Step::Delivered(1)
            } else {
                Step::Suppressed
            };
            EffectRecord::new(&self.cx, &description, &key, &decision, redaction)
                .write(&*self.journal, step)
                .map_err(Error::journal)?;
            written += 1;
        }
        if written > 0 {
            self.journal.flush().map_err(Error::journal)?;
        }
        Ok(written)
    }
}

fn summary(message_type: &str, group: &Group) -> String {
    let across = if group.series > 1 {
        format!(" across {} series", group.series)
    } else {
        String::new()
    };
    match message_type {
        "counter" => {
            let increments = group.updates - group.absolutes.len() as u64;
            let mut text = format!(
                "+{} over {}",
                group.increments,
                plural(increments, "increment")
            );
            match group.absolutes.as_slice() {
                [] => {}
                [one] => text.push_str(&format!(", absolute {one}")),
                many => text.push_str(&format!(", {} absolute values", many.len())),
            }
            text + &across
        }
        "gauge" => match group.values.as_slice() {
            [one] => format!("= {one} after {}", plural(group.updates, "update")),
            values => {
                let min = values.iter().copied().fold(f64::INFINITY, f64::min);
                let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!("last values {min} to {max}{across}")
            }
        },
        _ => format!("{} values, sum {}{across}", group.count, group.sum),
    }
}

fn plural(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_label_names_only() {
        let key = Key::from_parts(
            "orders_total",
            vec![
                metrics::Label::new("region", "eu"),
                metrics::Label::new("customer", "c-42"),
            ],
        );
        assert_eq!(target_of(&key), "orders_total{customer,region}");
        assert_eq!(target_of(&Key::from_name("x\ny")), "x?y");
        assert_eq!(target_of(&Key::from_name("")), "(unnamed)");
        assert!(series_text(&key).contains("c-42"));
    }
}
