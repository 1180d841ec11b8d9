//! Integration tests of the `replaysafe` command line.

mod approve;
mod cli;
mod durable;
mod lists;
mod outbox;
mod review;
mod send;
mod send_kinds;
mod snapshots;
mod sources;
mod support;
