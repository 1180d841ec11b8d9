//! Integration tests of the review library: reports, diffs and plans of journals written
//! by the real guard or line by line, and every output format as a snapshot.

mod plan_and_context;
mod reader;
mod report;
mod snapshots;
mod support;
