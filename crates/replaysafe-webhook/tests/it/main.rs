//! Integration tests of replaysafe-webhook against a real HTTP receiver on 127.0.0.1.

mod delivery;
mod responses;
mod secrets;
mod ssrf;
mod support;
mod suppression;
mod trigger;
