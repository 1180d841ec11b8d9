//! `replaysafe send sftp | alert | trigger | metric` end to end through the real binary:
//! the sshd, Alertmanager and Pushgateway that `cargo xtask ci` starts, a StatsD socket
//! and local HTTP receivers (PagerDuty-, Slack- and Airflow-like), under a current run,
//! an Airflow backfill and an unknown run.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use replaysafe_core::journal::{JournalDecision, JournalReader, JournalRecord};
use replaysafe_test::services;

use crate::send::{clean_command, environments, serve};

/// One request a receiver saw.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: String,
}

impl Seen {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Vec<Seen>>,
    replies: Mutex<VecDeque<(u16, String)>>,
}

/// An HTTP receiver on 127.0.0.1:0 that records every request and answers the queued
/// replies in order, then 200 `{}`.
#[derive(Clone)]
struct Receiver {
    address: SocketAddr,
    shared: Arc<Shared>,
}

impl Receiver {
    fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let state = shared.clone();
        let app = axum::Router::new()
            .fallback(
                |State(shared): State<Arc<Shared>>,
                 method: Method,
                 uri: Uri,
                 headers: HeaderMap,
                 body: String| async move {
                    shared.seen.lock().unwrap().push(Seen {
                        method,
                        path: uri.path().to_owned(),
                        headers,
                        body,
                    });
                    let (status, body) = shared
                        .replies
                        .lock()
                        .unwrap()
                        .pop_front()
                        .unwrap_or((200, "{}".to_owned()));
                    (StatusCode::from_u16(status).unwrap(), body)
                },
            )
            .with_state(state);
        Receiver {
            address: serve(app),
            shared,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    fn reply(&self, status: u16, body: &str) {
        self.shared
            .replies
            .lock()
            .unwrap()
            .push_back((status, body.to_owned()));
    }

    fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }
}

/// What one `replaysafe send` run gave.
struct Ran {
    code: Option<i32>,
    stderr: String,
    journal: String,
    records: Vec<JournalRecord>,
}

impl Ran {
    fn decisions(&self) -> Vec<JournalDecision> {
        self.records.iter().map(|r| r.decision).collect()
    }

    /// Asserts that none of `secrets` is on stderr or in the journal.
    fn keeps_secret(&self, secrets: &[&str]) {
        for secret in secrets {
            assert!(
                !self.stderr.contains(secret),
                "{secret} on stderr: {}",
                self.stderr
            );
            assert!(!self.journal.contains(secret), "{secret} in the journal");
        }
    }

    /// Asserts the outcome a run under `env` must have: delivered when scheduled,
    /// suppressed with the reason otherwise; one stderr line per effect saying `what`.
    fn is_expected(&self, env: &str, what: &str, kind: &str) {
        assert_eq!(self.code, Some(0), "{env}: {}", self.stderr);
        for line in self.stderr.lines() {
            let verb = if env == "scheduled" {
                "delivered"
            } else {
                "suppressed"
            };
            assert!(
                line.starts_with(&format!("replaysafe: {verb} {what}")),
                "{env}: {}",
                self.stderr
            );
        }
        let outcomes: Vec<_> = self
            .records
            .iter()
            .filter(|r| r.decision != JournalDecision::Attempting)
            .collect();
        assert!(!outcomes.is_empty(), "{env}: no outcome journaled");
        for record in outcomes {
            assert_eq!(record.effect.kind.as_str(), kind, "{env}");
            match env {
                "scheduled" => assert_eq!(record.decision, JournalDecision::Delivered),
                _ => {
                    assert_eq!(record.decision, JournalDecision::Suppressed, "{env}");
                    let reason = if env == "backfill" {
                        "replay_run"
                    } else {
                        "unknown_context"
                    };
                    assert!(
                        record.reasons.iter().any(|r| r.as_str() == reason),
                        "{env}: {:?}",
                        record.reasons
                    );
                    assert!(self.stderr.contains(reason), "{}", self.stderr);
                }
            }
        }
    }
}

/// Runs `replaysafe send ARGS` under `env` plus `extra` variables, journaling to a new
/// file in `dir`.
fn send(dir: &Path, args: &[String], env: &[(String, String)], extra: &[(&str, &str)]) -> Ran {
    let journal = dir.join(format!("{}.jsonl", uniq("journal")));
    let output = clean_command()
        .arg("send")
        .args(args)
        .envs(env.iter().cloned())
        .envs(extra.iter().copied())
        .env("REPLAYSAFE_JOURNAL", &journal)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&journal).unwrap_or_default();
    let records = if text.is_empty() {
        Vec::new()
    } else {
        JournalReader::open(&journal)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    Ran {
        code: output.status.code(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        journal: text,
        records,
    }
}

/// A name no other run of these tests uses.
fn uniq(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|arg| (*arg).to_owned()).collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn sftp_drops_the_file_only_for_a_current_run() {
    let port = services::require("REPLAYSAFE_TEST_SSHD_PORT");
    let user = services::require("REPLAYSAFE_TEST_SSHD_USER");
    let upload = services::require("REPLAYSAFE_TEST_SSHD_UPLOAD");
    let key = services::require("REPLAYSAFE_TEST_SSHD_KEY_PASSPHRASED");
    let passphrase = services::require("REPLAYSAFE_TEST_SSHD_KEY_PASSPHRASE");
    let known_hosts = services::require("REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS");
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("orders.csv");
    std::fs::write(&local, "id,total\n1,9.50\n").unwrap();

    for (env_name, env) in environments() {
        let name = format!("{}.csv", uniq(&format!("cli_{env_name}")));
        let ran = send(
            dir.path(),
            &args(&[
                "sftp",
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--user",
                &user,
                "--key",
                &key,
                "--passphrase-env",
                "KEY_PASSPHRASE",
                "--known-hosts",
                &known_hosts,
                "--dir",
                &upload,
                "--name",
                &name,
                "--file",
                local.to_str().unwrap(),
                "--message-type",
                "orders_csv",
            ]),
            &env,
            &[("KEY_PASSPHRASE", &passphrase)],
        );
        ran.is_expected(
            env_name,
            "file drop orders_csv to sftp://127.0.0.1",
            "file_drop",
        );
        ran.keeps_secret(&[&passphrase]);
        let dropped = std::fs::read(Path::new(&upload).join(&name)).ok();
        if env_name == "scheduled" {
            assert_eq!(dropped.as_deref(), Some(&b"id,total\n1,9.50\n"[..]));
            assert_eq!(
                ran.decisions(),
                [JournalDecision::Attempting, JournalDecision::Delivered]
            );
        } else {
            assert_eq!(dropped, None, "{env_name}: a file arrived");
        }
    }
}

#[test]
fn sftp_logs_in_with_a_password_from_the_environment() {
    let port = services::require("REPLAYSAFE_TEST_SSHD_PORT");
    let user = services::require("REPLAYSAFE_TEST_SSHD_PASSWORD_USER");
    let password = services::require("REPLAYSAFE_TEST_SSHD_PASSWORD");
    let upload = services::require("REPLAYSAFE_TEST_SSHD_PASSWORD_UPLOAD");
    let known_hosts = services::require("REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS");
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("orders.csv");
    std::fs::write(&local, "id,total\n2,19.00\n").unwrap();
    let wrong = "wrong-sftp-password-canary-81c2";

    for (env_name, env) in environments() {
        for (label, secret) in [("right", password.as_str()), ("wrong", wrong)] {
            let name = format!("{}.csv", uniq(&format!("cli_password_{env_name}_{label}")));
            let ran = send(
                dir.path(),
                &args(&[
                    "sftp",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    &port,
                    "--user",
                    &user,
                    "--password-env",
                    "SFTP_PASSWORD",
                    "--known-hosts",
                    &known_hosts,
                    "--dir",
                    &upload,
                    "--name",
                    &name,
                    "--file",
                    local.to_str().unwrap(),
                ]),
                &env,
                &[("SFTP_PASSWORD", secret)],
            );
            ran.keeps_secret(&[&password, wrong]);
            let dropped = std::fs::read(Path::new(&upload).join(&name)).ok();
            match (env_name, label) {
                ("scheduled", "right") => {
                    assert_eq!(ran.code, Some(0));
                    assert_eq!(dropped.as_deref(), Some(&b"id,total\n2,19.00\n"[..]));
                }
                ("scheduled", "wrong") => {
                    assert_eq!(ran.code, Some(1), "a refused password fails the send");
                    assert_eq!(dropped, None);
                }
                _ => {
                    // Suppressed: no login at all, so even a wrong password succeeds.
                    assert_eq!(ran.code, Some(0), "{env_name}");
                    assert_eq!(dropped, None, "{env_name}: a file arrived");
                }
            }
        }
    }
    // A key and a password together are refused before anything, naming the flags.
    let ran = send(
        dir.path(),
        &args(&[
            "sftp",
            "--host",
            "127.0.0.1",
            "--user",
            &user,
            "--key",
            "id_ed25519",
            "--password-env",
            "SFTP_PASSWORD",
            "--known-hosts",
            &known_hosts,
            "--dir",
            &upload,
            "--name",
            "x.csv",
            "--file",
            local.to_str().unwrap(),
        ]),
        &environments()[0].1,
        &[("SFTP_PASSWORD", &password)],
    );
    assert_eq!(ran.code, Some(2));
    assert!(ran.stderr.contains("--password-env") || ran.stderr.contains("--key"));
}

#[test]
fn alerts_reach_alertmanager_pagerduty_and_slack_only_for_a_current_run() {
    const ROUTING_KEY: &str = "canary-routing-key-5d1e";
    const SLACK_SECRET: &str = "canarySlackPath77b2";
    let alertmanager = services::require("REPLAYSAFE_TEST_ALERTMANAGER_URL");
    let receiver = Receiver::start();
    let slack_url = receiver.url(&format!("/services/T0/B0/{SLACK_SECRET}"));
    let dir = tempfile::tempdir().unwrap();
    let api = replaysafe_alert::AlertmanagerApi::new(
        &alertmanager,
        replaysafe_alert::SsrfPolicy::default()
            .allow("127.0.0.1")
            .unwrap(),
    )
    .unwrap();

    for (env_name, env) in environments() {
        // Alertmanager: the real server, asked afterwards which alerts it holds.
        let alertname = uniq(&format!("cli_{env_name}"));
        let ran = send(
            dir.path(),
            &args(&[
                "alert",
                "--alertmanager",
                &alertmanager,
                "--alertname",
                &alertname,
                "--summary",
                "orders are 3 h late",
                "--severity",
                "warning",
                "--label",
                "table=orders",
                "--annotation",
                "runbook=https://wiki.example/orders",
                "--allow-host",
                "127.0.0.1",
            ]),
            &env,
            &[],
        );
        ran.is_expected(env_name, &format!("alert {alertname}"), "alert");
        let held = runtime()
            .block_on(api.alerts(&[replaysafe_alert::Matcher::equal("alertname", &alertname)]))
            .unwrap();
        if env_name == "scheduled" {
            assert_eq!(held.len(), 1, "{held:?}");
            assert_eq!(held[0].labels["table"], "orders");
            assert_eq!(held[0].labels["severity"], "warning");
            assert_eq!(
                held[0].annotations["runbook"],
                "https://wiki.example/orders"
            );
        } else {
            assert!(held.is_empty(), "{env_name}: {held:?}");
        }

        // PagerDuty and Slack: local receivers; the routing key and the URL come from the
        // environment and appear nowhere else.
        let before = receiver.seen().len();
        let ran = send(
            dir.path(),
            &args(&[
                "alert",
                "--pagerduty-routing-key-env",
                "PD_KEY",
                "--pagerduty-url",
                &receiver.url(""),
                "--service",
                "data-oncall",
                "--alertname",
                "orders_late",
                "--summary",
                "orders are 3 h late",
                "--allow-host",
                "127.0.0.1",
            ]),
            &env,
            &[("PD_KEY", ROUTING_KEY)],
        );
        ran.is_expected(
            env_name,
            "alert orders_late to pagerduty:data-oncall",
            "alert",
        );
        ran.keeps_secret(&[ROUTING_KEY]);
        let ran_slack = send(
            dir.path(),
            &args(&[
                "alert",
                "--slack-url-env",
                "SLACK_URL",
                "--channel",
                "data-alerts",
                "--text",
                "orders are 3 h late",
                "--allow-host",
                "127.0.0.1",
            ]),
            &env,
            &[("SLACK_URL", &slack_url)],
        );
        ran_slack.is_expected(
            env_name,
            "slack message notification to slack:data-alerts",
            "alert",
        );
        ran_slack.keeps_secret(&[SLACK_SECRET]);
        let seen = receiver.seen()[before..].to_vec();
        if env_name == "scheduled" {
            assert_eq!(seen.len(), 2, "{seen:?}");
            assert_eq!(seen[0].path, "/v2/enqueue");
            let event = seen[0].json();
            assert_eq!(event["routing_key"], ROUTING_KEY);
            assert_eq!(
                event["dedup_key"],
                ran.records[0].effect.idempotency_key.as_str()
            );
            assert_eq!(seen[1].path, format!("/services/T0/B0/{SLACK_SECRET}"));
            assert_eq!(seen[1].json()["text"], "orders are 3 h late");
        } else {
            assert!(seen.is_empty(), "{env_name}: {seen:?}");
        }
    }
}

#[test]
fn triggers_start_downstream_runs_only_for_a_current_run() {
    const PASSWORD: &str = "canary-airflow-pw-61f0";
    const TOKEN: &str = "canary.jwt.c4d2";
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    for (env_name, env) in environments() {
        let before = receiver.seen().len();
        if env_name == "scheduled" {
            receiver.reply(201, &format!(r#"{{"access_token": "{TOKEN}"}}"#));
        }
        let airflow = send(
            dir.path(),
            &args(&[
                "trigger",
                "--airflow",
                &receiver.url("/airflow"),
                "--dag-id",
                "daily_reports",
                "--conf",
                r#"{"source": "orders"}"#,
                "--user",
                "pipeline",
                "--password-env",
                "AIRFLOW_PASSWORD",
                "--allow-host",
                "127.0.0.1",
            ]),
            &env,
            &[("AIRFLOW_PASSWORD", PASSWORD)],
        );
        airflow.is_expected(env_name, "trigger daily_reports", "trigger");
        airflow.keeps_secret(&[PASSWORD, TOKEN]);
        let url = send(
            dir.path(),
            &args(&[
                "trigger",
                "--url",
                &receiver.url("/ci/rebuild"),
                "--data",
                r#"{"full": true}"#,
                "--message-type",
                "rebuild_reports",
                "--allow-host",
                "127.0.0.1",
            ]),
            &env,
            &[],
        );
        url.is_expected(env_name, "trigger rebuild_reports", "trigger");
        let seen = receiver.seen()[before..].to_vec();
        if env_name == "scheduled" {
            let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
            assert_eq!(
                paths,
                [
                    "/airflow/auth/token",
                    "/airflow/api/v2/dags/daily_reports/dagRuns",
                    "/ci/rebuild"
                ]
            );
            assert_eq!(
                seen[0].json(),
                serde_json::json!({"username": "pipeline", "password": PASSWORD})
            );
            assert_eq!(
                seen[1].headers["authorization"],
                format!("Bearer {TOKEN}").as_str()
            );
            // The conf as given, and this run as the downstream run's cause.
            let conf = seen[1].json()["conf"].clone();
            assert_eq!(conf["source"], "orders");
            assert_eq!(
                conf["replaysafe"]["upstream"][0]["pipeline"],
                "daily_orders"
            );
            assert_eq!(conf["replaysafe"]["upstream"][0]["run_kind"], "scheduled");
            assert_eq!(seen[2].method, Method::POST);
            assert_eq!(seen[2].json()["conf"]["full"], true);
            assert!(seen[2].json()["conf"]["replaysafe"]["upstream"].is_array());
            assert_eq!(seen[2].json()["pipeline"], "daily_orders");
        } else {
            assert!(seen.is_empty(), "{env_name}: {seen:?}");
        }
    }
}

#[test]
fn a_trigger_whose_logical_date_another_run_holds_fails() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (_, env) = environments().into_iter().next().unwrap();
    // 409 on the trigger; the lookup of this trigger's run answers 404.
    receiver.reply(
        409,
        r#"{"detail": {"reason": "Unique constraint violation"}}"#,
    );
    receiver.reply(404, "{}");
    let ran = send(
        dir.path(),
        &args(&[
            "trigger",
            "--airflow",
            &receiver.url(""),
            "--dag-id",
            "daily_reports",
            "--token-env",
            "AIRFLOW_TOKEN",
            "--allow-host",
            "127.0.0.1",
        ]),
        &env,
        &[("AIRFLOW_TOKEN", "canary-token-0e9a")],
    );
    assert_eq!(ran.code, Some(1), "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("replaysafe: failed trigger daily_reports")
            && ran
                .stderr
                .contains("a different run of daily_reports already holds logical date"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        ran.decisions(),
        [JournalDecision::Attempting, JournalDecision::Failed]
    );
    ran.keeps_secret(&["canary-token-0e9a"]);
    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].method, Method::GET);
    assert!(
        seen[1]
            .path
            .starts_with("/api/v2/dags/daily_reports/dagRuns/manual__")
    );
}

/// The gateway's `/metrics` lines of `job`.
fn gateway_lines(gateway: &str, job: &str) -> Vec<String> {
    let text = runtime().block_on(async {
        reqwest::get(format!("{gateway}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    let needle = format!("job=\"{job}\"");
    text.lines()
        .filter(|line| !line.starts_with('#') && line.contains(&needle))
        .filter(|line| !line.starts_with("push_"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn metrics_reach_pushgateway_and_statsd_only_for_a_current_run() {
    let gateway = services::require("REPLAYSAFE_TEST_PUSHGATEWAY_URL");
    let statsd = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let statsd_address = statsd.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    for (env_name, env) in environments() {
        let job = uniq(&format!("cli_{env_name}"));
        let ran = send(
            dir.path(),
            &args(&[
                "metric",
                "--pushgateway",
                &gateway,
                "--job",
                &job,
                "--metric",
                "orders_exported=1204",
                "--type",
                "gauge",
                "--allow-host",
                "127.0.0.1",
            ]),
            &env,
            &[],
        );
        ran.is_expected(env_name, &format!("metric push {job}"), "metric");
        let lines = gateway_lines(&gateway, &job);
        if env_name == "scheduled" {
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].starts_with("orders_exported{") && lines[0].ends_with(" 1204"));
        } else {
            assert!(lines.is_empty(), "{env_name}: {lines:?}");
        }

        let value = match env_name {
            "scheduled" => "7",
            "backfill" => "8",
            _ => "9",
        };
        let ran = send(
            dir.path(),
            &args(&[
                "metric",
                "--statsd",
                &statsd_address,
                "--metric",
                &format!("orders.sent:{value}|c"),
                "--metric",
                "export.lag:250|ms",
            ]),
            &env,
            &[],
        );
        ran.is_expected(env_name, "metric ", "metric");
        assert_eq!(
            ran.stderr.lines().count(),
            2,
            "one line per metric: {}",
            ran.stderr
        );
    }
    // Only the scheduled run's two lines arrived, in order.
    statsd
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut buffer = [0u8; 512];
    let mut datagrams = Vec::new();
    for _ in 0..2 {
        let (len, _) = statsd.recv_from(&mut buffer).unwrap();
        datagrams.push(String::from_utf8_lossy(&buffer[..len]).into_owned());
    }
    assert_eq!(datagrams, ["orders.sent:7|c", "export.lag:250|ms"]);
    statsd.set_nonblocking(true).unwrap();
    assert!(
        statsd.recv_from(&mut buffer).is_err(),
        "nothing else arrived"
    );
}

type BadInput = (Vec<String>, Vec<(&'static str, &'static str)>, &'static str);

#[test]
fn bad_input_exits_two_naming_the_flag_and_journals_nothing() {
    let (_, env) = environments().into_iter().next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("f.csv");
    std::fs::write(&local, "x").unwrap();
    let local = local.to_str().unwrap();
    let sftp = |extra: &[&str]| {
        let mut list = args(&[
            "sftp",
            "--host",
            "127.0.0.1",
            "--user",
            "u",
            "--key",
            local,
            "--known-hosts",
            local,
            "--dir",
            "/in",
            "--file",
            local,
        ]);
        list.extend(args(extra));
        list
    };
    // (arguments, extra environment, what stderr must say)
    let cases: Vec<BadInput> = vec![
        (sftp(&["--name", "../escape.csv"]), vec![], "--name"),
        (
            sftp(&["--name", "a.csv", "--passphrase-env", "UNSET_PASSPHRASE"]),
            vec![],
            "--passphrase-env: environment variable UNSET_PASSPHRASE is not set",
        ),
        (
            args(&[
                "alert",
                "--alertmanager",
                "http://127.0.0.1:9",
                "--summary",
                "s",
            ]),
            vec![],
            "--alertname is required",
        ),
        (
            args(&[
                "alert",
                "--pagerduty-routing-key-env",
                "PD_KEY",
                "--alertname",
                "a",
            ]),
            vec![("PD_KEY", "k")],
            "--summary is required",
        ),
        (
            args(&[
                "alert",
                "--alertmanager",
                "http://127.0.0.1:9",
                "--alertname",
                "bad name",
                "--summary",
                "s",
            ]),
            vec![],
            "--alertname",
        ),
        (
            args(&[
                "alert",
                "--pagerduty-routing-key-env",
                "UNSET_PD_KEY",
                "--alertname",
                "a",
                "--summary",
                "s",
            ]),
            vec![],
            "--pagerduty-routing-key-env: environment variable UNSET_PD_KEY is not set",
        ),
        (
            args(&[
                "alert",
                "--alertmanager",
                "http://127.0.0.1:9",
                "--alertname",
                "a",
                "--summary",
                "s",
                "--label",
                "severity=x",
            ]),
            vec![],
            "--label",
        ),
        (
            args(&[
                "trigger",
                "--airflow",
                "http://127.0.0.1:9",
                "--dag-id",
                "../x",
            ]),
            vec![],
            "--dag-id",
        ),
        (
            args(&[
                "trigger",
                "--airflow",
                "http://127.0.0.1:9",
                "--dag-id",
                "d",
                "--conf",
                "[1]",
            ]),
            vec![],
            "--conf",
        ),
        (
            args(&[
                "trigger",
                "--url",
                "http://127.0.0.1:9/t",
                "--data",
                "{nope",
            ]),
            vec![],
            "--data: not valid JSON",
        ),
        (
            args(&["trigger", "--airflow", "http://127.0.0.1:9"]),
            vec![],
            "--dag-id",
        ),
        (
            args(&[
                "metric",
                "--statsd",
                "127.0.0.1:9",
                "--metric",
                "orders:x|c",
            ]),
            vec![],
            "--metric",
        ),
        (
            args(&[
                "metric",
                "--pushgateway",
                "http://127.0.0.1:9",
                "--job",
                "j",
                "--metric",
                "bad name=1",
            ]),
            vec![],
            "--metric",
        ),
        (
            args(&["metric", "--statsd", "127.0.0.1", "--metric", "a:1|c"]),
            vec![],
            "--statsd",
        ),
        (
            args(&[
                "metric",
                "--statsd",
                "127.0.0.1:9",
                "--metric",
                "a:1|c",
                "--max-age",
                "metric=soon",
            ]),
            vec![],
            "--max-age",
        ),
        (
            args(&["metric", "--statsd", "127.0.0.1:9", "--metric", "a:1|c"]),
            vec![("REPLAYSAFE_MAX_AGE", "metric")],
            "REPLAYSAFE_MAX_AGE",
        ),
    ];
    for (list, extra, expected) in cases {
        let ran = send(dir.path(), &list, &env, &extra);
        assert_eq!(ran.code, Some(2), "{list:?}: {}", ran.stderr);
        assert!(ran.stderr.contains(expected), "{list:?}: {}", ran.stderr);
        assert_eq!(ran.journal, "", "{list:?}: bad input journals nothing");
    }
}

#[test]
fn max_age_from_the_flag_or_the_environment_makes_a_window_stale() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    // The scheduled run's window ended ten minutes ago.
    let (_, env) = environments().into_iter().next().unwrap();
    let trigger = args(&[
        "trigger",
        "--url",
        &receiver.url("/t"),
        "--data",
        "{}",
        "--allow-host",
        "127.0.0.1",
    ]);
    let mut with_flag = trigger.clone();
    with_flag.extend(args(&["--max-age", "trigger=5m"]));
    for (list, extra) in [
        (with_flag, vec![]),
        (
            trigger.clone(),
            vec![("REPLAYSAFE_MAX_AGE", "email=2h,trigger=5m")],
        ),
    ] {
        let ran = send(dir.path(), &list, &env, &extra);
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        assert!(ran.stderr.contains("suppressed trigger") && ran.stderr.contains("stale_window"));
        assert_eq!(ran.decisions(), [JournalDecision::Suppressed]);
    }
    assert!(receiver.seen().is_empty());
    // Positive control: the flag overrides the environment, and 1h lets it through.
    let mut generous = trigger;
    generous.extend(args(&["--max-age", "trigger=1h"]));
    let ran = send(
        dir.path(),
        &generous,
        &env,
        &[("REPLAYSAFE_MAX_AGE", "trigger=5m")],
    );
    assert!(ran.stderr.contains("delivered trigger"), "{}", ran.stderr);
    assert_eq!(receiver.seen().len(), 1);

    // `replaysafe context` shows the max ages in force.
    let output = clean_command()
        .args(["context", "--json"])
        .envs(env)
        .env("REPLAYSAFE_MAX_AGE", "email=2h,alert=30m")
        .output()
        .unwrap();
    let context: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let age = |kind: &str| {
        context["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["kind"] == kind)
            .unwrap()["max_age"]
            .clone()
    };
    assert_eq!(
        (age("email"), age("alert"), age("webhook")),
        ("2h".into(), "30m".into(), "6h".into())
    );
}

#[test]
fn version_names_the_journal_schema() {
    let output = clean_command().arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        text.trim(),
        format!(
            "replaysafe {} (journal schema {})",
            env!("CARGO_PKG_VERSION"),
            replaysafe_core::journal::SCHEMA_VERSION
        )
    );
}
