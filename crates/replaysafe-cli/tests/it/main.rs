//! Integration tests of the `replaysafe` command line.

mod cli;
mod snapshots;
mod support;
