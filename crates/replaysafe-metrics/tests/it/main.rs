//! Integration tests of replaysafe-metrics against a real Pushgateway and real UDP sockets
//! on 127.0.0.1 (`cargo xtask services pushgateway` sets `REPLAYSAFE_TEST_PUSHGATEWAY_URL`).

mod bridge;
mod pushgateway;
mod statsd;
mod support;
