//! Integration tests of the `replaysafe` command line.

mod cli;
mod send;
mod snapshots;
mod sources;
mod support;
