//! `docs/reference/clients.md` lists exactly the fields of every client configuration.

use std::collections::BTreeSet;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The fields the page documents under `## kind`.
fn documented(kind: &str) -> BTreeSet<String> {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/reference/clients.md"
    ))
    .unwrap();
    let section = page
        .split("\n## ")
        .find(|section| section.starts_with(&format!("{kind}\n")))
        .unwrap_or_else(|| panic!("docs/reference/clients.md has no section {kind}"));
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect()
}

/// The fields of `T`, as it serializes a configuration read from `example`.
fn fields<T: Serialize + DeserializeOwned>(example: Value) -> BTreeSet<String> {
    let config: T = serde_json::from_value(example).unwrap();
    match serde_json::to_value(config).unwrap() {
        Value::Object(map) => map.keys().cloned().collect(),
        other => panic!("not an object: {other}"),
    }
}

fn check<T: Serialize + DeserializeOwned>(kind: &str, example: Value) {
    let documented = documented(kind);
    let fields = fields::<T>(example);
    assert_eq!(documented, fields, "{kind}: the page and the type differ");
    // And each documented field is one the type reads (it refuses unknown fields).
    for field in &documented {
        let mut probe = serde_json::Map::new();
        probe.insert(field.clone(), Value::Null);
        if let Err(error) = serde_json::from_value::<T>(Value::Object(probe)) {
            assert!(
                !error.to_string().contains("unknown field"),
                "{kind}.{field}: {error}"
            );
        }
    }
}

#[test]
fn the_client_reference_lists_every_field_of_every_configuration() {
    use replaysafe::{alert, email, metrics, sftp, webhook};
    check::<webhook::WebhookConfig>("webhook", json!({"url": "https://h.example/x"}));
    check::<webhook::TriggerConfig>("trigger", json!({"airflow": "https://h.example"}));
    check::<email::EmailConfig>("email", json!({"smtp": "smtp://127.0.0.1:25"}));
    check::<sftp::SftpConfig>(
        "sftp",
        json!({"host": "h", "user": "u", "key": "k", "known_hosts": "kh", "dir": "/in"}),
    );
    check::<alert::AlertmanagerConfig>("alertmanager", json!({"url": "http://h:9093"}));
    check::<alert::PagerDutyConfig>("pagerduty", json!({"routing_key_env": "PD_KEY"}));
    check::<alert::SlackConfig>("slack", json!({"url_env": "SLACK_URL"}));
    check::<metrics::PushgatewayConfig>("pushgateway", json!({"url": "http://h:9091"}));
    check::<metrics::StatsdConfig>("statsd", json!({"host": "h", "port": 8125}));
}
