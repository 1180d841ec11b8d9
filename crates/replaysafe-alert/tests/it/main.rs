//! Integration tests of replaysafe-alert: a real Alertmanager on 127.0.0.1
//! (`cargo xtask services alertmanager` sets `REPLAYSAFE_TEST_ALERTMANAGER_URL`), and
//! local HTTP receivers that speak PagerDuty's and Slack's documented contracts.

mod alertmanager;
mod pagerduty;
mod secrets;
mod silence;
mod slack;
mod support;
