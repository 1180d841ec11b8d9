//! replaysafe's automation, the only entry point of every check.
//!
//! - `cargo xtask ci [--airflow]`: format, lints, every test against real loopback servers,
//!   docs, the dependency boundary of replaysafe-core; prints the time of each phase.
//!   `--airflow` adds `cargo xtask airflow`.
//! - `cargo xtask airflow`: replaysafe under a real Airflow 3.3.2 (scheduler, backfill,
//!   catch-up), installed from PyPI into `target/airflow`.
//! - `cargo xtask demo`: the example pipeline, live window then backfill.
//! - `cargo xtask bench`: benchmarks; writes `target/bench/summary.json`.
//! - `cargo xtask soak outbox [--kills N] [--backend sqlite|postgres]`: the outbox's crash test with real processes;
//!   merges its figures into `target/bench/summary.json`.
//! - `cargo xtask services [NAME...]`: starts the test servers and prints their
//!   environment, until interrupted, for running `cargo test` by hand.

#![forbid(unsafe_code)]

mod airflow;
mod bench;
mod ci;
mod demo;
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
        "demo" => demo::run(rest),
        "bench" => bench::run(rest),
        "services" => services::run_foreground(rest),
        "soak" => soak::run(rest),
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
  ci [--airflow]     every check CI runs: fmt, clippy, tests against real servers, docs, dependency boundary;
                     --airflow adds the real-Airflow check below
  airflow            replaysafe under a real Airflow 3.3.2 (scheduler, backfill, catch-up); installs it under target/airflow
  demo [--real]      the example pipeline: the current window delivered, a backfill suppressed
  bench              benchmarks; writes target/bench/summary.json
  soak outbox [--kills N] [--workers W] [--backend sqlite|postgres]
                     the outbox crash test: SIGKILLed workers, 0 lost, 0 duplicates (default 1000 kills)
  services [NAME..]  start test servers on 127.0.0.1, print their environment, wait for Ctrl-C
";
