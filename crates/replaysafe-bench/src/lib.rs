//! The benchmark harness of replaysafe's own benchmarks: figures written as JSON for
//! `cargo xtask bench` to gather (`docs/adr/0002-benchmark-harness.md`).
//!
//! Speed is reported as ratios against a raw baseline measured in the same process,
//! never asserted in tests. Not published: it serves this workspace's benches only.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The figures of one benchmark binary, written to `$REPLAYSAFE_BENCH_OUT/<name>.json`
/// (default `target/bench/`).
#[derive(Debug)]
pub struct Report {
    name: String,
    figures: BTreeMap<String, Figure>,
}

#[derive(Debug)]
struct Figure {
    value: f64,
    unit: String,
    baseline: Option<String>,
}

impl Report {
    /// An empty report named after the benchmark binary.
    pub fn new(name: impl Into<String>) -> Self {
        Report {
            name: name.into(),
            figures: BTreeMap::new(),
        }
    }

    /// Records a figure such as `"core.gate.decision" = 85.2 ns`, and prints it.
    pub fn figure(
        &mut self,
        name: impl Into<String>,
        value: f64,
        unit: impl Into<String>,
    ) -> &mut Self {
        let (name, unit) = (name.into(), unit.into());
        println!("{name:<52} {value:>14.3} {unit}");
        self.figures.insert(
            name,
            Figure {
                value,
                unit,
                baseline: None,
            },
        );
        self
    }

    /// Records a ratio against a baseline measured in the same run, and prints it.
    pub fn ratio(
        &mut self,
        name: impl Into<String>,
        value: f64,
        baseline: impl Into<String>,
    ) -> &mut Self {
        let (name, baseline) = (name.into(), baseline.into());
        println!("{name:<52} {value:>14.3} x (baseline: {baseline})");
        self.figures.insert(
            name,
            Figure {
                value,
                unit: "ratio".into(),
                baseline: Some(baseline),
            },
        );
        self
    }

    /// Writes the JSON file and returns its path.
    pub fn write(&self) -> std::io::Result<PathBuf> {
        let dir = std::env::var_os("REPLAYSAFE_BENCH_OUT").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench"),
            PathBuf::from,
        );
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{}.json", self.name));
        let mut out = String::from("{\n");
        let last = self.figures.len().saturating_sub(1);
        for (index, (name, figure)) in self.figures.iter().enumerate() {
            let baseline = figure
                .baseline
                .as_deref()
                .map(|b| format!(", \"baseline\": {}", json_string(b)))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {}: {{\"value\": {}, \"unit\": {}{}}}{}\n",
                json_string(name),
                if figure.value.is_finite() {
                    figure.value.to_string()
                } else {
                    "null".into()
                },
                json_string(&figure.unit),
                baseline,
                if index == last { "" } else { "," }
            ));
        }
        out.push_str("}\n");
        std::fs::write(&path, out)?;
        Ok(path)
    }
}

fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Runs `body` `rounds` times and returns the fastest round's time: the least disturbed
/// by other work on the machine. Interleave subject and baseline rounds by calling this
/// alternately when comparing.
pub fn best_of(rounds: usize, mut body: impl FnMut()) -> Duration {
    fastest((0..rounds.max(1)).map(|_| {
        let started = Instant::now();
        body();
        started.elapsed()
    }))
}

/// Times a subject against a baseline over `chunks` chunks of work, `repeats` times each,
/// interleaved: in every repeat each chunk runs once per side, and the side that goes first
/// alternates, so neither always follows the other. The fastest time of each chunk counts
/// (the least disturbed by other work on the machine); returns the sums of those, subject
/// first. `subject(chunk)` and `baseline(chunk)` run the chunk with index `chunk`.
pub fn interleaved_chunks(
    chunks: usize,
    repeats: usize,
    mut subject: impl FnMut(usize),
    mut baseline: impl FnMut(usize),
) -> (Duration, Duration) {
    let mut subject_best = vec![Duration::MAX; chunks];
    let mut baseline_best = vec![Duration::MAX; chunks];
    for repeat in 0..repeats.max(1) {
        for chunk in 0..chunks {
            let mut subject_turn = || {
                let took = best_of(1, || subject(chunk));
                subject_best[chunk] = subject_best[chunk].min(took);
            };
            let subject_first = (chunk + repeat) % 2 == 0;
            if subject_first {
                subject_turn();
            }
            let took = best_of(1, || baseline(chunk));
            baseline_best[chunk] = baseline_best[chunk].min(took);
            if !subject_first {
                subject_turn();
            }
        }
    }
    (subject_best.iter().sum(), baseline_best.iter().sum())
}

/// The shortest of `rounds` (zero when there is none).
fn fastest(rounds: impl Iterator<Item = Duration>) -> Duration {
    rounds.min().unwrap_or_default()
}

/// The CPU time (user and system) the calling thread has used so far, as the kernel
/// counts it. On a current-thread runtime every task of a race runs on the thread that
/// blocks on it, so this tells what a side cost where its throughput is made.
///
/// # Panics
/// When the system has no CPU clock for threads (Linux has had one since 2.6.12).
pub fn thread_cpu() -> Duration {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("the calling thread's CPU clock");
    Duration::new(
        u64::try_from(now.tv_sec()).unwrap_or_default(),
        u32::try_from(now.tv_nsec()).unwrap_or_default(),
    )
}

/// What the runs of one side of a race cost the thread that ran them: its CPU time and
/// the time that passed, summed over every run (not only the fastest).
#[derive(Debug, Default)]
pub struct ThreadCpu {
    cpu: Cell<Duration>,
    wall: Cell<Duration>,
    runs: Cell<usize>,
}

impl ThreadCpu {
    /// `side`, counting each of its runs here.
    pub fn count<'a>(&'a self, mut side: impl FnMut(usize) + 'a) -> impl FnMut(usize) + 'a {
        move |chunk| {
            let (cpu, started) = (thread_cpu(), Instant::now());
            side(chunk);
            self.wall.set(self.wall.get() + started.elapsed());
            self.cpu
                .set(self.cpu.get() + thread_cpu().saturating_sub(cpu));
            self.runs.set(self.runs.get() + 1);
        }
    }

    /// Mean CPU time of one operation, for runs of `per_run` operations each (zero
    /// before any run).
    pub fn per_operation(&self, per_run: usize) -> Duration {
        let operations = self.runs.get() * per_run;
        if operations == 0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(self.cpu.get().as_secs_f64() / operations as f64)
    }

    /// The share of the time that passed during the runs in which the thread was on a
    /// CPU: 1.0 when it never waited, so that its own work set the pace.
    pub fn busy(&self) -> f64 {
        let wall = self.wall.get().as_secs_f64();
        if wall > 0.0 {
            self.cpu.get().as_secs_f64() / wall
        } else {
            0.0
        }
    }
}

/// Rate in operations per second.
pub fn per_second(operations: usize, took: Duration) -> f64 {
    operations as f64 / took.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("raw \"client\""), "\"raw \\\"client\\\"\"");
        assert_eq!(json_string("a\nb"), "\"a\\u000ab\"");
    }

    #[test]
    fn the_fastest_round_counts_and_every_round_runs() {
        let rounds = [30, 4, 12].map(Duration::from_millis);
        assert_eq!(fastest(rounds.into_iter()), Duration::from_millis(4));
        assert_eq!(fastest(std::iter::empty()), Duration::ZERO);
        let mut runs = 0;
        best_of(0, || runs += 1);
        best_of(3, || runs += 1);
        assert_eq!(runs, 4, "zero rounds still runs once");
        assert_eq!(per_second(10, Duration::from_secs(2)), 5.0);
    }

    #[test]
    fn thread_cpu_counts_work_and_not_sleep() {
        let spent = ThreadCpu::default();
        let mut working = spent.count(|_| {
            let started = Instant::now();
            let mut sum = 0u64;
            while started.elapsed() < Duration::from_millis(20) {
                sum = std::hint::black_box(sum.wrapping_add(1));
            }
        });
        working(0);
        working(1);
        assert!(spent.per_operation(1) >= Duration::from_millis(10));
        assert!(spent.busy() > 0.5, "a thread that only computed was busy");
        let idle = ThreadCpu::default();
        idle.count(|_| std::thread::sleep(Duration::from_millis(50)))(0);
        assert!(idle.per_operation(1) < Duration::from_millis(10));
        assert!(idle.busy() < 0.2, "a thread that slept was not busy");
        assert_eq!(ThreadCpu::default().per_operation(10), Duration::ZERO);
    }

    #[test]
    fn interleaved_chunks_run_every_chunk_on_both_sides_alternating() {
        let order = std::cell::RefCell::new(Vec::new());
        let (subject, baseline) = interleaved_chunks(
            2,
            2,
            |chunk| order.borrow_mut().push(("s", chunk)),
            |chunk| order.borrow_mut().push(("b", chunk)),
        );
        assert_eq!(
            order.into_inner(),
            [
                ("s", 0),
                ("b", 0),
                ("b", 1),
                ("s", 1),
                ("b", 0),
                ("s", 0),
                ("s", 1),
                ("b", 1),
            ]
        );
        assert!(subject < Duration::from_secs(1) && baseline < Duration::from_secs(1));
    }
}
