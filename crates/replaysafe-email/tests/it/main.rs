//! Integration tests of replaysafe-email against real aiosmtpd servers on 127.0.0.1.
//!
//! Start them with `cargo xtask services smtp` and export the variables it prints.

mod classification;
mod delivery;
mod folder;
mod gate;
mod injection;
mod secrets;
mod support;
