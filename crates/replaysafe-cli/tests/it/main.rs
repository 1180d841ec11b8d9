//! Integration tests of the `replaysafe` command line.

mod airflow_plan;
mod approve;
mod cli;
mod cli_reference;
mod durable;
mod lineage;
mod lists;
mod memory;
mod otel;
mod outbox;
mod outbox_boundaries;
mod outbox_metrics;
mod review;
mod send;
mod send_kinds;
mod sources;
// The review library's journals: the same fixtures its own tests read.
#[path = "../../../replaysafe-review/tests/it/support.rs"]
mod support;
mod trust;
