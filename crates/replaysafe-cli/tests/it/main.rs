//! Integration tests of the `replaysafe` command line.

mod cli;
mod durable;
mod outbox;
mod review;
mod send;
mod snapshots;
mod sources;
mod support;
