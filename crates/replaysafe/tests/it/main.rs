//! Integration tests of the facade: properties that hold across adapters.

mod clients;
mod ssrf;
