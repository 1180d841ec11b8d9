//! Integration tests of replaysafe-core: one binary, one module per area.

mod approval;
mod env;
mod fragments;
mod gate;
mod group;
mod guard;
mod journal;
mod keys;
mod memory;
mod sources;
mod support;
