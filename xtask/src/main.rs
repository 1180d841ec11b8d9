//! replaysafe's automation, the only entry point of every check.
//!
//! - `cargo xtask ci [--no-airflow]`: format, lints, every test against real loopback
//!   servers, docs, the dependency boundary of replaysafe-core, and `cargo xtask airflow`;
//!   prints the time of each phase.
//! - `cargo xtask airflow`: replaysafe under a real Airflow 3.3.2 (scheduler, backfill,
//!   catch-up, assets, the `replaysafe.airflow` integration), installed from PyPI into
//!   `target/airflow`.
//! - `cargo xtask dagster`: replaysafe under real Dagster Pipes, installed from PyPI into
//!   `target/dagster`.
//! - `cargo xtask demo`: the example pipeline, live window then backfill.
//! - `cargo xtask browser`: the demo's report page in headless Chromium: DOM, counts, no request.
//! - `cargo xtask dist`: the Python wheel in `target/dist/` (`pip install replaysafe`: `import
//!   replaysafe` and the native `replaysafe` command), built with maturin from PyPI.
//! - `cargo xtask bench`: benchmarks; writes `target/bench/summary.json`.
//! - `cargo xtask soak outbox [--kills N] [--backend sqlite|postgres]`: the outbox's crash test with real processes;
//!   merges its figures into `target/bench/summary.json`.
//! - `cargo xtask soak ledger [--kills N] [--processes P] [--effects E] [--journal postgres|jsonl]
//!   [--in-flight F]`: the ledger's crash test on PostgreSQL or on one shared JSON Lines file, the same way.
//! - `cargo xtask services [NAME...]`: starts the test servers and prints their
//!   environment, until interrupted, for running `cargo test` by hand.

#![forbid(unsafe_code)]

mod airflow;
mod bench;
mod browser;
mod ci;
mod dagster;
mod demo;
mod dist;
mod public_api;
mod services;
mod soak;
mod system;
#[cfg(test)]
mod tidy;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => ("help", &[][..]),
    };
    let result = match command {
        "ci" => ci::run(rest),
        "airflow" => airflow::run(rest),
        "dagster" => dagster::run(rest),
        "demo" => demo::run(rest),
        "dist" => dist::run(rest),
        "bench" => bench::run(rest),
        "browser" => browser::run(rest),
        "services" => services::run_foreground(rest),
        "soak" => soak::run(rest),
        "public-api" => public_api::run(rest),
        "package" => ci::package(),
        "help" | "--help" | "-h" => {
            print!("{}", HELP);
            Ok(())
        }
        other => Err(anyhow::anyhow!("unknown xtask command {other:?}\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

const HELP: &str = "\
usage: cargo xtask <command>

commands:
  ci [--no-airflow]  every check CI runs: fmt, clippy, tests against real servers, docs, dependency boundary,
                     and the real-Airflow check below (--no-airflow leaves it out)
  airflow            replaysafe under a real Airflow 3.3.2 (scheduler, backfill, catch-up, assets, the replaysafe.airflow
                     integration with its providers); installs it under target/airflow
  dagster            replaysafe under real Dagster Pipes (PipesSubprocessClient, partitions, backfill tags); installs
                     dagster and dagster-pipes under target/dagster
  demo [--real]      the example pipeline: the current window delivered, a backfill suppressed
  browser            the demo's report page in headless Chromium (installed from Debian): DOM and counts
                     against report --format json, no request leaves the page; screenshot target/demo/report.png
  dist [--profile P] the Python wheel (import replaysafe and the replaysafe command; maturin, release profile by default) in target/dist/;
                     --check builds it twice with the dev profile, installs it into a fresh virtualenv, runs its
                     replaysafe, checks the stubs (mypy.stubtest) and runs the Python tests (pytest)
  bench              benchmarks; writes target/bench/summary.json
  soak outbox [--kills N] [--workers W] [--backend sqlite|postgres]
                     the outbox crash test: SIGKILLed workers, 0 lost, 0 duplicates (default 1000 kills)
  soak ledger [--kills N] [--processes P] [--effects E] [--journal postgres|jsonl] [--in-flight F]
                     the ledger crash test: SIGKILLed senders sharing a journal (PostgreSQL, or one JSON Lines
                     file), F effects in flight each; no email-like key delivered twice, every key delivered or
                     in doubt (default 200 kills, 8 x 1000 effects, postgres, 1 in flight)
  services [NAME..]  start test servers on 127.0.0.1, print their environment, wait for Ctrl-C
  public-api [--bless]
                     the public API of every published crate against crates/*/public-api.txt (rustdoc JSON);
                     --bless writes the snapshots after an intended change
  package            cargo package of every published crate, in dependency order, built from the packages
";
