//! Finding the real test servers that `cargo xtask` starts.

/// The value of `variable`, set by `cargo xtask ci` (or `cargo xtask services`) to tell
/// a test where its server is.
///
/// # Panics
///
/// When the variable is missing: a test that needs a real server never passes without
/// one. The message says how to start the servers.
pub fn require(variable: &str) -> String {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "{variable} is not set: this test needs a real server on 127.0.0.1. \
             Run `cargo xtask ci`, or start the servers with `cargo xtask services` \
             and export the variables it prints"
        ),
    }
}
