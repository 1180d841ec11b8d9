//! The Pushgateway client against a real Pushgateway.

use replaysafe_core::journal::JournalDecision;
use replaysafe_core::{Classify, RetryPolicy, SendError};
use replaysafe_metrics::{Push, PushgatewayClient, Sample};
use replaysafe_test::{contexts, services};
use secrecy::SecretString;

use crate::support::{FileJournal, suppressing_contexts, unique};

fn gateway_url() -> String {
    services::require("REPLAYSAFE_TEST_PUSHGATEWAY_URL")
}

/// The gateway's `/metrics` lines that belong to `job`.
async fn gateway_lines(job: &str) -> Vec<String> {
    let text = reqwest::get(format!("{}/metrics", gateway_url()))
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .text()
        .await
        .unwrap();
    let needle = format!("job=\"{job}\"");
    text.lines()
        .filter(|line| !line.starts_with('#') && line.contains(&needle))
        .filter(|line| {
            !line.starts_with("push_time_seconds") && !line.starts_with("push_failure_time_seconds")
        })
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_live_push_appears_in_the_gateways_metrics() {
    let job = unique("live_push");
    let journal = FileJournal::new();
    let gateway = PushgatewayClient::builder(gateway_url())
        .ssrf_policy(
            replaysafe_metrics::SsrfPolicy::default()
                .allow("127.0.0.0/8")
                .unwrap(),
        )
        .build(journal.journal.clone())
        .unwrap();
    let push = Push::replace(&job)
        .with_grouping_label("instance", "batch/01")
        .with_help("orders_exported_total", "Orders exported")
        .with_sample(Sample::counter("orders_exported_total", 42.0).with_label("region", "eu"))
        .with_sample(Sample::gauge("export_lag_seconds", 1.5));

    let outcome = gateway.send(&contexts::live(), &push).await.unwrap();

    assert!(outcome.is_delivered());
    let mut lines = gateway_lines(&job).await;
    lines.sort();
    assert_eq!(
        lines,
        [
            format!("export_lag_seconds{{instance=\"batch/01\",job=\"{job}\"}} 1.5"),
            format!(
                "orders_exported_total{{instance=\"batch/01\",job=\"{job}\",region=\"eu\"}} 42"
            ),
        ]
    );
    let records = journal.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].decision, JournalDecision::Attempting);
    let record = &records[1];
    assert_eq!(record.decision, JournalDecision::Delivered);
    assert_eq!(record.effect.kind, "metric");
    assert_eq!(record.effect.message_type, "pushgateway_put");
    assert_eq!(record.effect.target, format!("{job}{{instance}}"));
    assert_eq!(
        record.effect.summary.as_deref(),
        Some("PUT orders_exported_total=42, export_lag_seconds=1.5")
    );
    assert!(
        !journal.lines()[0].contains("batch/01"),
        "a label value reached the journal"
    );
}

#[tokio::test]
async fn a_backfill_push_is_not_pushed_and_the_journal_says_what_would_have_been() {
    for (name, cx) in suppressing_contexts() {
        let job = unique(&format!("suppressed_push_{}", name.replace('-', "_")));
        let journal = FileJournal::new();
        let gateway = PushgatewayClient::builder(gateway_url())
            .ssrf_policy(
                replaysafe_metrics::SsrfPolicy::default()
                    .allow("127.0.0.0/8")
                    .unwrap(),
            )
            .build(journal.journal.clone())
            .unwrap();
        let push = Push::replace(&job)
            .with_grouping_label("instance", "batch-01")
            .with_sample(Sample::counter("orders_exported_total", 42.0));

        let outcome = gateway.send(&cx, &push).await.unwrap();

        assert!(outcome.is_suppressed(), "{name}");
        assert!(
            gateway_lines(&job).await.is_empty(),
            "{name}: pushed anyway"
        );
        let records = journal.records();
        assert_eq!(records.len(), 1, "{name}");
        let record = &records[0];
        assert_eq!(record.decision, JournalDecision::Suppressed, "{name}");
        assert_eq!(record.effect.target, format!("{job}{{instance}}"));
        assert_eq!(
            record.effect.summary.as_deref(),
            Some("PUT orders_exported_total=42"),
            "{name}"
        );
        assert_eq!(record.attempt, 0);
        assert!(!record.reasons.is_empty());
    }
}

#[tokio::test]
async fn put_replaces_the_group_post_merges_and_delete_removes_it() {
    let job = unique("put_post");
    let journal = FileJournal::new();
    let gateway = PushgatewayClient::builder(gateway_url())
        .ssrf_policy(
            replaysafe_metrics::SsrfPolicy::default()
                .allow("127.0.0.0/8")
                .unwrap(),
        )
        .build(journal.journal.clone())
        .unwrap();
    let cx = contexts::live();
    let names = |lines: Vec<String>| {
        let mut names: Vec<String> = lines
            .iter()
            .map(|line| line.split('{').next().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };

    let first = Push::replace(&job)
        .with_sample(Sample::gauge("a", 1.0))
        .with_sample(Sample::gauge("b", 2.0));
    gateway.send(&cx, &first).await.unwrap();
    let again = gateway.send(&cx, &first).await.unwrap();
    assert!(
        again.is_suppressed(),
        "the same push of one window is remembered"
    );
    assert_eq!(names(gateway_lines(&job).await), ["a", "b"]);

    gateway
        .send(&cx, &Push::merge(&job).with_sample(Sample::gauge("c", 3.0)))
        .await
        .unwrap();
    assert_eq!(names(gateway_lines(&job).await), ["a", "b", "c"]);

    gateway
        .send(
            &contexts::live_hour(),
            &Push::replace(&job).with_sample(Sample::gauge("d", 4.0)),
        )
        .await
        .unwrap();
    assert_eq!(names(gateway_lines(&job).await), ["d"]);

    gateway.send(&cx, &Push::delete(&job)).await.unwrap();
    assert!(gateway_lines(&job).await.is_empty());
    assert_eq!(
        journal.records().len(),
        9,
        "attempting and delivered for each of 4 pushes, and the suppressed repeat"
    );
}

#[tokio::test]
async fn an_invalid_push_is_refused_before_anything_is_sent_or_journaled() {
    let job = unique("invalid_push");
    let journal = FileJournal::new();
    let gateway = PushgatewayClient::builder(gateway_url())
        .ssrf_policy(
            replaysafe_metrics::SsrfPolicy::default()
                .allow("127.0.0.0/8")
                .unwrap(),
        )
        .build(journal.journal.clone())
        .unwrap();
    let push = Push::replace(&job).with_sample(Sample::counter("orders_total", -1.0));

    for cx in [contexts::live(), contexts::backfill()] {
        let error = gateway.send(&cx, &push).await.unwrap_err();
        let SendError::Invalid(inner) = &error else {
            panic!("expected an invalid effect, got {error}");
        };
        assert_eq!(inner.field(), Some("sample"));
    }
    assert!(journal.lines().is_empty());
    assert!(gateway_lines(&job).await.is_empty());
}

#[tokio::test]
async fn a_push_the_gateway_refuses_fails_permanently_after_one_attempt() {
    let job = unique("refused_push");
    let journal = FileJournal::new();
    let gateway = PushgatewayClient::builder(gateway_url())
        .ssrf_policy(
            replaysafe_metrics::SsrfPolicy::default()
                .allow("127.0.0.0/8")
                .unwrap(),
        )
        .build(journal.journal.clone())
        .unwrap()
        .with_retry(RetryPolicy::default().with_max_attempts(3));
    // The gateway answers 400 to a metric whose type disagrees with another group's.
    let metric = format!("{job}_conflict");
    let other_group =
        Push::replace(format!("{job}_other")).with_sample(Sample::counter(&metric, 1.0));
    gateway.send(&contexts::live(), &other_group).await.unwrap();
    let push = Push::replace(&job).with_sample(Sample::gauge(&metric, 1.0));

    let error = gateway.send(&contexts::live(), &push).await.unwrap_err();
    gateway
        .send(&contexts::live(), &Push::delete(format!("{job}_other")))
        .await
        .unwrap();

    let SendError::Failed { attempts, source } = &error else {
        panic!("expected a failed delivery, got {error}");
    };
    assert_eq!(*attempts, 1);
    assert_eq!(source.status(), Some(400));
    assert!(source.is_permanent());
    assert!(
        source
            .to_string()
            .starts_with("pushing metrics (PUT) to http://127.0.0.1:"),
        "{source}"
    );
    let records = journal.records();
    let decisions: Vec<_> = records.iter().map(|r| (r.decision, r.attempt)).collect();
    use JournalDecision::*;
    assert_eq!(
        decisions,
        [
            (Attempting, 1),
            (Delivered, 1),
            (Attempting, 1),
            (Failed, 1),
            (Attempting, 1),
            (Delivered, 1)
        ]
    );
}

#[test]
fn the_basic_auth_password_stays_out_of_debug_output() {
    let canary = "pgw-canary-5d1c09";
    let guard = PushgatewayClient::builder("http://127.0.0.1:9")
        .ssrf_policy(
            replaysafe_metrics::SsrfPolicy::default()
                .allow("127.0.0.0/8")
                .unwrap(),
        )
        .basic_auth("pusher", SecretString::from(canary))
        .build(replaysafe_core::MemoryJournal::new())
        .unwrap();
    assert!(!format!("{guard:?}").contains(canary));
}
