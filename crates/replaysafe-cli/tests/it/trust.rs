//! Trust at the boundaries: what an operator types or writes in a file is checked before it
//! is believed. Secrets pasted where a variable's name belongs, credentials given inline,
//! approvals and allow-lists that cover too much.

use std::path::Path;

use crate::send::{clean_command, environments};

/// Runs the binary with `args` and the scheduled environment plus `env`, journaling to
/// `journal`; returns the exit code, stdout and stderr.
fn run(args: &[String], env: &[(&str, &str)], journal: &Path) -> (Option<i32>, String, String) {
    let (_, context) = environments().into_iter().next().unwrap();
    let output = clean_command()
        .args(args)
        .envs(context)
        .envs(env.iter().copied())
        .env("REPLAYSAFE_JOURNAL", journal)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

/// Every `send` flag that names an environment variable, with the rest of a command line
/// that would otherwise be accepted: `@VAR@` marks where the variable's name goes.
fn env_flags(dir: &Path) -> Vec<(&'static str, Vec<String>)> {
    let file = dir.join("drop.csv");
    std::fs::write(&file, "id\n1\n").unwrap();
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, "").unwrap();
    let key = dir.join("id_ed25519");
    std::fs::write(&key, "").unwrap();
    let webhook = ["send", "webhook", "--event-type", "e", "--data", "{}"];
    let with = |base: &[&str], extra: &[&str]| -> Vec<String> {
        strings(base).into_iter().chain(strings(extra)).collect()
    };
    let sftp = [
        "send",
        "sftp",
        "--host",
        "127.0.0.1",
        "--user",
        "u",
        "--known-hosts",
        known_hosts.to_str().unwrap(),
        "--dir",
        "/in",
        "--name",
        "n.csv",
        "--file",
        file.to_str().unwrap(),
    ];
    vec![
        (
            "--secret-env",
            with(
                &webhook,
                &["--url", "http://127.0.0.1:9/x", "--secret-env", "@VAR@"],
            ),
        ),
        ("--url-env", with(&webhook, &["--url-env", "@VAR@"])),
        (
            "--secret-header-env",
            with(
                &webhook,
                &[
                    "--url",
                    "http://127.0.0.1:9/x",
                    "--secret-header-env",
                    "Authorization=@VAR@",
                ],
            ),
        ),
        (
            "--password-env",
            strings(&[
                "send",
                "email",
                "--smtp",
                "smtp://127.0.0.1:9",
                "--user",
                "reports",
                "--password-env",
                "@VAR@",
                "--from",
                "reports@shop.example",
                "--to",
                "ana@shop.example",
                "--subject",
                "s",
                "--body",
                "b",
            ]),
        ),
        (
            "--passphrase-env",
            with(
                &sftp,
                &["--key", key.to_str().unwrap(), "--passphrase-env", "@VAR@"],
            ),
        ),
        ("--password-env", with(&sftp, &["--password-env", "@VAR@"])),
        (
            "--password-env",
            strings(&[
                "send",
                "trigger",
                "--airflow",
                "http://127.0.0.1:9",
                "--dag-id",
                "d",
                "--user",
                "pipeline",
                "--password-env",
                "@VAR@",
            ]),
        ),
        (
            "--token-env",
            strings(&[
                "send",
                "trigger",
                "--url",
                "http://127.0.0.1:9/t",
                "--data",
                "{}",
                "--token-env",
                "@VAR@",
            ]),
        ),
        (
            "--pagerduty-routing-key-env",
            strings(&[
                "send",
                "alert",
                "--pagerduty-routing-key-env",
                "@VAR@",
                "--alertname",
                "a",
                "--summary",
                "s",
            ]),
        ),
        (
            "--slack-url-env",
            strings(&["send", "alert", "--slack-url-env", "@VAR@", "--text", "t"]),
        ),
    ]
}

/// Secrets as people paste them: none is a variable name.
const PASTED: [&str; 4] = [
    "whsec_Y2FuYXJ5LXBhc3RlZA+/c2VjcmV0==",
    "https://hooks.slack.example/services/T0/B0/canaryPasted1",
    "canary-pasted-password-5c1e",
    "R0ut1ng.canary.key",
];

#[test]
fn a_secret_given_for_a_variable_name_is_refused_without_being_repeated() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, args) in env_flags(dir.path()) {
        for canary in PASTED {
            let args: Vec<String> = args.iter().map(|a| a.replace("@VAR@", canary)).collect();
            let journal = dir.path().join("pasted.jsonl");
            let (code, stdout, stderr) = run(&args, &[], &journal);
            assert_eq!(code, Some(2), "{flag} {canary}: {stderr}");
            assert!(
                stderr.contains(&format!("{flag}: not a variable name")),
                "{flag}: {stderr}"
            );
            for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
                assert!(
                    !text.contains(canary),
                    "{flag}: {what} shows the secret: {text}"
                );
            }
            let journaled = std::fs::read_to_string(&journal).unwrap_or_default();
            assert!(journaled.is_empty(), "{flag}: journaled {journaled}");
        }
    }
}

#[test]
fn an_unset_variable_is_named_only_when_its_name_may_be_shown() {
    let dir = tempfile::tempdir().unwrap();
    // A base64 secret without + / = is a valid name: it is refused as unset, not shown.
    const SECRET_SHAPED: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2La";
    for (flag, args) in env_flags(dir.path()) {
        let journal = dir.path().join("unset.jsonl");
        let shaped: Vec<String> = args
            .iter()
            .map(|a| a.replace("@VAR@", SECRET_SHAPED))
            .collect();
        let (code, stdout, stderr) = run(&shaped, &[], &journal);
        assert_eq!(code, Some(2), "{flag}: {stderr}");
        assert!(stderr.contains("is not set"), "{flag}: {stderr}");
        assert!(
            !stderr.contains("MfKQ9r8") && !stdout.contains("MfKQ9r8"),
            "{flag}: {stderr}"
        );
        let named: Vec<String> = args
            .iter()
            .map(|a| a.replace("@VAR@", "REPLAYSAFE_TEST_UNSET"))
            .collect();
        let (code, _, stderr) = run(&named, &[], &journal);
        assert_eq!(code, Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{flag}: environment variable REPLAYSAFE_TEST_UNSET is not set"
            )),
            "{flag}: {stderr}"
        );
        assert!(
            std::fs::read_to_string(&journal)
                .unwrap_or_default()
                .is_empty()
        );
    }
}

#[test]
fn credentials_given_inline_are_refused_with_a_pointer_to_the_env_form() {
    let dir = tempfile::tempdir().unwrap();
    const CANARY: &str = "canary-inline-credential-9d2b";
    for header in [
        "Authorization",
        "authorization",
        "AUTHORIZATION",
        "Proxy-Authorization",
        " proxy-authorization",
        "Cookie",
        "X-Api-Key",
    ] {
        let args = strings(&[
            "send",
            "webhook",
            "--url",
            "http://127.0.0.1:9/x",
            "--event-type",
            "e",
            "--data",
            "{}",
            "--header",
            &format!("{header}: Bearer {CANARY}"),
        ]);
        let journal = dir.path().join("inline.jsonl");
        let (code, stdout, stderr) = run(&args, &[], &journal);
        let canonical = header.trim().to_ascii_lowercase();
        assert_eq!(code, Some(2), "{header}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "--header: {canonical} carries credentials and is never given inline"
            )) && stderr.contains(&format!("--secret-header-env {canonical}=VARIABLE")),
            "{header}: {stderr}"
        );
        assert!(!stderr.contains(CANARY) && !stdout.contains(CANARY));
        assert!(
            std::fs::read_to_string(&journal)
                .unwrap_or_default()
                .is_empty()
        );
    }
}

/// `replaysafe outbox work` on a fresh SQLite outbox with `routes`; returns the exit code,
/// stdout and stderr, and what the journal holds.
fn work_with_routes(dir: &Path, routes: &serde_json::Value) -> (Option<i32>, String, String) {
    let database = dir.join("outbox.db");
    replaysafe_outbox::sqlite::SqliteOutbox::open(&database).unwrap();
    let path = dir.join("routes.json");
    std::fs::write(&path, routes.to_string()).unwrap();
    let journal = dir.join("worker.jsonl");
    let args = strings(&[
        "outbox",
        "work",
        "--drain",
        "--routes",
        path.to_str().unwrap(),
        "--database",
        &format!("sqlite:{}", database.display()),
    ]);
    let (code, stdout, stderr) = run(&args, &[], &journal);
    let journaled = std::fs::read_to_string(&journal).unwrap_or_default();
    assert!(journaled.is_empty(), "journaled {journaled}");
    (code, stdout, stderr)
}

/// A route's `flow` with a value out of range or of the wrong type is refused before any
/// row is claimed, naming the file, the route and the field.
#[test]
fn a_routes_files_flow_is_refused_naming_the_route_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let url = "http://127.0.0.1:9/x";
    for (flow, said) in [
        (
            serde_json::json!({"concurrency": 0}),
            "route partner: flow.concurrency: must be at least 1",
        ),
        (
            serde_json::json!({"breaker": {"failures": 3, "probe_every": "0s"}}),
            "route partner: flow.breaker.probe_every: must be longer than 0",
        ),
        (
            serde_json::json!({"rate": 50}),
            "route partner: flow.rate: a value of the wrong type, expected a string",
        ),
        (
            serde_json::json!({"rate_scope": "outbox"}),
            "route partner: flow.rate_scope: an outbox-wide rate scope needs a rate",
        ),
    ] {
        let routes = serde_json::json!({"routes": {"partner": {"kind": "webhook", "url": url, "flow": flow}}});
        let (code, _, stderr) = work_with_routes(dir.path(), &routes);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(&format!("routes.json: {said}")), "{stderr}");
    }
}

#[test]
fn a_routes_file_refuses_secrets_in_every_env_field_and_inline_credentials() {
    let dir = tempfile::tempdir().unwrap();
    const CANARY: &str = "canary+routes/secret=";
    let url = "http://127.0.0.1:9/x";
    let cases = [
        (
            "secret_env",
            serde_json::json!({"kind": "webhook", "url": url, "secret_env": CANARY}),
        ),
        (
            "secret_headers_env.Authorization",
            serde_json::json!({"kind": "webhook", "url": url, "secret_headers_env": {"Authorization": CANARY}}),
        ),
        (
            "token_env",
            serde_json::json!({"kind": "trigger", "url": url, "token_env": CANARY}),
        ),
        (
            "password_env",
            serde_json::json!({"kind": "trigger", "airflow": url, "user": "u", "password_env": CANARY}),
        ),
        (
            "password_env",
            serde_json::json!({"kind": "email", "smtp": "smtp://127.0.0.1:9", "user": "u", "password_env": CANARY}),
        ),
        (
            "passphrase_env",
            serde_json::json!({"kind": "sftp", "host": "127.0.0.1", "user": "u", "key": "k", "passphrase_env": CANARY, "known_hosts": "kh", "dir": "/in"}),
        ),
        (
            "routing_key_env",
            serde_json::json!({"kind": "pagerduty", "routing_key_env": CANARY}),
        ),
        (
            "url_env",
            serde_json::json!({"kind": "slack", "url_env": CANARY}),
        ),
        (
            "password_env",
            serde_json::json!({"kind": "pushgateway", "url": url, "user": "u", "password_env": CANARY}),
        ),
    ];
    for (field, route) in cases {
        let routes = serde_json::json!({"routes": {"partner": route}});
        let (code, stdout, stderr) = work_with_routes(dir.path(), &routes);
        assert_eq!(code, Some(2), "{field}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "routes.json: route partner: {field}: not a variable name"
            )),
            "{field}: {stderr}"
        );
        assert!(
            !stderr.contains("canary") && !stdout.contains("canary"),
            "{field}: {stderr}"
        );
    }

    for header in ["Authorization", "proxy-authorization"] {
        let routes = serde_json::json!({"routes": {"partner": {
            "kind": "webhook", "url": url, "headers": {"X-Team": "data", header: format!("Bearer {CANARY}")}
        }}});
        let (code, stdout, stderr) = work_with_routes(dir.path(), &routes);
        let canonical = header.to_ascii_lowercase();
        assert_eq!(code, Some(2), "{header}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "routes.json: route partner: headers: {canonical} carries credentials"
            )) && stderr.contains("secret_headers_env"),
            "{header}: {stderr}"
        );
        assert!(
            !stderr.contains("canary") && !stdout.contains("canary"),
            "{header}: {stderr}"
        );
    }

    // A valid name that is not set is named (it is upper case), and nothing is journaled.
    let routes = serde_json::json!({"routes": {"partner": {
        "kind": "webhook", "url": url, "secret_env": "REPLAYSAFE_TEST_UNSET"
    }}});
    let (code, _, stderr) = work_with_routes(dir.path(), &routes);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "routes.json: route partner: secret_env: environment variable REPLAYSAFE_TEST_UNSET is not set"
        ),
        "{stderr}"
    );
}

#[test]
fn credentials_in_a_url_query_are_sent_but_never_shown() {
    const KEY: &str = "canary-query-key-61aa";
    const SIGNATURE: &str = "canary-query-sig-0b9f";
    let (address, received) = crate::send::receiver();
    let dir = tempfile::tempdir().unwrap();
    let url =
        format!("http://{address}/hooks/orders?api_key={KEY}&sig={SIGNATURE}&access_token={KEY}");
    let commands = [
        strings(&[
            "send",
            "webhook",
            "--url",
            &url,
            "--event-type",
            "e",
            "--data",
            "{}",
            "--allow-host",
            "127.0.0.1",
        ]),
        strings(&[
            "send",
            "trigger",
            "--url",
            &url,
            "--data",
            "{}",
            "--allow-host",
            "127.0.0.1",
        ]),
    ];
    for (name, context) in environments().into_iter().take(2) {
        for args in &commands {
            let journal = dir.path().join(format!("{name}-{}.jsonl", args[1]));
            let before = received.lock().unwrap().len();
            let output = clean_command()
                .args(args)
                .envs(context.iter().cloned())
                .env("REPLAYSAFE_JOURNAL", &journal)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            let journaled = std::fs::read_to_string(&journal).unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "{name} {}: {stderr}",
                args[1]
            );
            let arrived = received.lock().unwrap().len() - before;
            let expected = if name == "scheduled" { 1 } else { 0 };
            assert_eq!(arrived, expected, "{name} {}: {stderr}", args[1]);
            assert!(
                stderr.contains(&format!("to http://{address}/hooks/orders")),
                "{name}: {stderr}"
            );
            assert!(!journaled.is_empty());
            for text in [&*stdout, &*stderr, &journaled] {
                assert!(
                    !text.contains(KEY) && !text.contains(SIGNATURE) && !text.contains("api_key"),
                    "{name} {}: the query shows in {text}",
                    args[1]
                );
            }
        }
    }
}

// ---- approvals that cover too much, and the files around them

/// `replaysafe approve` for webhooks of `daily_orders` with `runs` and `extra` flags,
/// writing `out`; returns the exit code, stdout and stderr.
fn approve(out: &Path, runs: &[&str], extra: &[&str]) -> (Option<i32>, String, String) {
    let output = clean_command()
        .args(["approve", "--pipeline", "daily_orders"])
        .args(runs)
        .args([
            "--kind",
            "webhook",
            "--reason",
            "partner lost July's events",
        ])
        .args(["--approved-by", "jane@ops", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_broad_approval_is_shown_and_refused_unless_broad_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("approval.json");
    let in_sixty_days = replaysafe_core::rfc3339(chrono::Utc::now() + chrono::TimeDelta::days(60));
    let backfill = ["--backfill-id", "bf-2026-07"];
    // (runs, expiry, what stderr must name)
    let broad: [(&[&str], &str, &str); 5] = [
        (
            &["--run-id-pattern", "*"],
            "1d",
            "--run-id-pattern \"*\" matches every run",
        ),
        (
            &["--run-id-pattern", "***"],
            "1d",
            "--run-id-pattern \"***\" matches every run",
        ),
        (&backfill, "31d", "days from now, more than 30d"),
        (&backfill, "5w", "days from now, more than 30d"),
        (&backfill, &in_sixty_days, "days from now, more than 30d"),
    ];
    for (runs, expires, names) in broad {
        let (code, stdout, stderr) = approve(&out, runs, &["--expires", expires]);
        assert_eq!(code, Some(2), "{runs:?} {expires}: {stderr}");
        assert!(
            stderr.contains("this approval is broad: ")
                && stderr.contains(names)
                && stderr.contains("pass --broad"),
            "{runs:?} {expires}: {stderr}"
        );
        // The scope is shown before the refusal.
        assert!(
            stderr.contains("pipeline     daily_orders") && stderr.contains("kinds        webhook"),
            "{stderr}"
        );
        assert!(stdout.is_empty(), "{stdout}");
        assert!(!out.exists(), "{runs:?} {expires}: written");

        let (code, stdout, stderr) = approve(&out, runs, &["--expires", expires, "--broad"]);
        assert_eq!(code, Some(0), "{runs:?} {expires} --broad: {stderr}");
        assert!(
            stdout.contains("broad ") && stdout.contains(names),
            "{stdout}"
        );
        assert!(replaysafe_core::OptIn::read_file(&out).is_ok());
        std::fs::remove_file(&out).unwrap();
    }
    // Narrow ones need no --broad: a backfill or a pattern with text, for 30 days at most,
    // and as many kinds as are named one by one.
    for (runs, expires) in [
        (&backfill[..], "30d"),
        (&["--run-id-pattern", "backfill__2026-07-*"][..], "720h"),
        (&["--run-id-pattern", "*__*"][..], "1d"),
    ] {
        let (code, stdout, stderr) =
            approve(&out, runs, &["--expires", expires, "--kind", "email"]);
        assert_eq!(code, Some(0), "{runs:?} {expires}: {stderr}");
        assert!(!stdout.contains("broad"), "{stdout}");
        std::fs::remove_file(&out).unwrap();
    }
}

#[test]
fn an_expiry_beyond_the_clock_is_an_error_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("approval.json");
    for expires in [
        "99999999999d",
        "9999999999999s",
        "15250000000w",
        "99999999999999999999d",
    ] {
        let (code, _, stderr) = approve(&out, &["--backfill-id", "bf"], &["--expires", expires]);
        assert_eq!(code, Some(2), "{expires}: {stderr}");
        assert!(stderr.contains("--expires: "), "{expires}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let (code, _, stderr) = approve(
        &out,
        &["--backfill-id", "bf"],
        &["--expires", "2026-12-31T23:59:60Z"],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--expires") && stderr.contains("leap second"),
        "{stderr}"
    );
    assert!(!out.exists());
}

#[test]
fn approve_out_and_keygen_never_overwrite_without_force() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("approval.json");
    std::fs::write(&out, "an earlier approval\n").unwrap();
    let runs = ["--backfill-id", "bf-2026-07"];
    let (code, _, stderr) = approve(&out, &runs, &["--expires", "1d"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--out: ") && stderr.contains("already exists; pass --force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "an earlier approval\n"
    );
    let (code, _, stderr) = approve(&out, &runs, &["--expires", "1d", "--force"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(replaysafe_core::OptIn::read_file(&out).is_ok());

    let keygen = |force: bool| {
        let mut command = clean_command();
        command
            .args(["approve", "keygen", "--name", "jane", "--out"])
            .arg(dir.path());
        if force {
            command.arg("--force");
        }
        command.output().unwrap()
    };
    assert_eq!(keygen(false).status.code(), Some(0));
    let secret = dir.path().join("jane.key");
    let public = dir.path().join("jane.pub");
    let first = std::fs::read(&secret).unwrap();
    // Only the public file left behind still blocks a new pair.
    std::fs::remove_file(&secret).unwrap();
    let again = keygen(false);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert!(!secret.exists());
    std::fs::write(&secret, &first).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let replaced = keygen(true);
    assert_eq!(
        replaced.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );
    assert_ne!(std::fs::read(&secret).unwrap(), first);
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "a replaced key is private again");
    let key = replaysafe_core::ApproverKey::read_file(&secret).unwrap();
    assert_eq!(std::fs::read_to_string(&public).unwrap(), key.public_line());
}

#[test]
fn keygen_takes_a_plain_name_only() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    for name in [
        "../escaped",
        "a/b",
        "a\\b",
        "..",
        ".hidden",
        "jane..doe",
        "ja\u{1b}ne",
        "",
    ] {
        let output = clean_command()
            .args(["approve", "keygen", "--name", name, "--out"])
            .arg(&keys)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name:?}: {stderr}");
        assert!(
            stderr.contains("--name: not a plain name"),
            "{name:?}: {stderr}"
        );
    }
    assert_eq!(std::fs::read_dir(&keys).unwrap().count(), 0);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing beside keys/"
    );
}

#[test]
fn a_secret_key_open_to_others_signs_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let output = clean_command()
        .args(["approve", "keygen", "--name", "jane", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let secret = dir.path().join("jane.key");
    let out = dir.path().join("approval.json");
    let key_flag = ["--key", secret.to_str().unwrap(), "--expires", "1d"];
    for mode in [0o644, 0o640, 0o660] {
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, _, stderr) = approve(&out, &["--backfill-id", "bf"], &key_flag);
        assert_eq!(code, Some(2), "{mode:o}: {stderr}");
        assert!(
            stderr.contains(&secret.display().to_string())
                && stderr.contains(&format!("chmod 600 {}", secret.display())),
            "{stderr}"
        );
        assert!(!out.exists());
    }
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, _, stderr) = approve(&out, &["--backfill-id", "bf"], &key_flag);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(replaysafe_core::OptIn::read_file(&out).unwrap().is_signed());
}

#[test]
fn trusted_approvers_set_but_blank_fails_every_command_that_reads_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    for blank in ["", "  "] {
        let (code, _, stderr) = run(
            &strings(&["context"]),
            &[("REPLAYSAFE_TRUSTED_APPROVERS", blank)],
            &journal,
        );
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains("REPLAYSAFE_TRUSTED_APPROVERS"), "{stderr}");
        let (code, _, stderr) = run(
            &strings(&[
                "send",
                "webhook",
                "--url",
                "http://127.0.0.1:9/x",
                "--event-type",
                "e",
                "--data",
                "{}",
            ]),
            &[("REPLAYSAFE_TRUSTED_APPROVERS", blank)],
            &journal,
        );
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains("REPLAYSAFE_TRUSTED_APPROVERS") && stderr.contains("blank"),
            "{stderr}"
        );
    }
    assert!(
        std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .is_empty()
    );
}

// ---- allow-lists that cover too much

#[test]
fn catch_all_networks_are_refused_in_allow_host_and_allow_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let (address, received) = crate::send::receiver();
    let url = format!("http://{address}/hooks/orders");
    let journal = dir.path().join("allow.jsonl");
    let webhook = |allow: &str| {
        strings(&[
            "send",
            "webhook",
            "--url",
            &url,
            "--event-type",
            "e",
            "--data",
            "{}",
            "--allow-host",
            allow,
        ])
    };
    let alert = |allow: &str| {
        strings(&[
            "send",
            "alert",
            "--alertmanager",
            &format!("http://{address}"),
            "--alertname",
            "a",
            "--allow-host",
            allow,
        ])
    };
    for entry in [
        "0.0.0.0/0",
        "::/0",
        "0.0.0.0/1",
        "64.0.0.0/2",
        "::ffff:0:0/96",
        "fd00::/16",
    ] {
        for args in [webhook(entry), alert(entry)] {
            let (code, _, stderr) = run(&args, &[], &journal);
            assert_eq!(code, Some(2), "{entry}: {stderr}");
            assert!(
                stderr.contains(&format!(
                    "--allow-host: invalid allow-list entry {entry:?}: a catch-all network"
                )),
                "{entry}: {stderr}"
            );
        }
        let routes = serde_json::json!({"routes": {"partner": {
            "kind": "webhook", "url": url, "allow_hosts": ["127.0.0.1", entry]
        }}});
        let (code, _, stderr) = work_with_routes(dir.path(), &routes);
        assert_eq!(code, Some(2), "{entry}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "routes.json: route partner: allow_hosts: invalid allow-list entry {entry:?}: a catch-all network"
            )),
            "{entry}: {stderr}"
        );
    }
    assert_eq!(received.lock().unwrap().len(), 0, "nothing was sent");
    assert!(
        std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .is_empty()
    );
    // The positive control: the narrowest broad-enough network still lets the send through.
    let (code, _, stderr) = run(&webhook("127.0.0.0/8"), &[], &journal);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(received.lock().unwrap().len(), 1);
}

// ---- what Alertmanager users write

/// An HTTP receiver on 127.0.0.1 that keeps every JSON body it is sent and answers 202.
fn json_receiver() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    use axum::extract::State;
    let bodies: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Default::default();
    let app = axum::Router::new()
        .fallback(
            |State(bodies): State<std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>>,
             body: String| async move {
                bodies
                    .lock()
                    .unwrap()
                    .push(serde_json::from_str(&body).unwrap_or_default());
                (
                    axum::http::StatusCode::ACCEPTED,
                    r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#,
                )
            },
        )
        .with_state(bodies.clone());
    (crate::send::serve(app), bodies)
}

#[test]
fn a_severity_label_is_the_severity_for_alertmanager_and_pagerduty() {
    let alertmanager = replaysafe_test::services::require("REPLAYSAFE_TEST_ALERTMANAGER_URL");
    let api = replaysafe_alert::AlertmanagerApi::new(
        &alertmanager,
        replaysafe_alert::SsrfPolicy::default()
            .allow("127.0.0.1")
            .unwrap(),
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("alerts.jsonl");
    let unique = format!(
        "severity_label_{}_{}",
        std::process::id(),
        chrono::Utc::now().timestamp_micros()
    );
    let alertmanager_args = |name: &str, extra: &[&str]| {
        let mut args = strings(&[
            "send",
            "alert",
            "--alertmanager",
            &alertmanager,
            "--alertname",
            name,
            "--summary",
            "late",
            "--label",
            "table=orders",
            "--allow-host",
            "127.0.0.1",
        ]);
        args.extend(strings(extra));
        args
    };
    // (extra flags, the severity Alertmanager must hold)
    for (index, (extra, expected)) in [
        (&["--label", "severity=critical"][..], "critical"),
        (
            &["--label", "severity=info", "--severity", "info"][..],
            "info",
        ),
        (&["--severity", "warning"][..], "warning"),
        (&[][..], "error"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("{unique}_{index}");
        let (code, _, stderr) = run(&alertmanager_args(&name, extra), &[], &journal);
        assert_eq!(code, Some(0), "{extra:?}: {stderr}");
        assert!(stderr.contains("replaysafe: delivered alert"), "{stderr}");
        let held = runtime
            .block_on(api.alerts(&[replaysafe_alert::Matcher::equal("alertname", &name)]))
            .unwrap();
        assert_eq!(held.len(), 1, "{extra:?}: {held:?}");
        assert_eq!(held[0].labels["severity"], expected, "{extra:?}");
        assert_eq!(held[0].labels["table"], "orders");
    }

    // PagerDuty: the label is the event's severity, not a custom detail.
    let (address, bodies) = json_receiver();
    let (code, _, stderr) = run(
        &strings(&[
            "send",
            "alert",
            "--pagerduty-routing-key-env",
            "PD_KEY",
            "--pagerduty-url",
            &format!("http://{address}"),
            "--alertname",
            "orders_late",
            "--summary",
            "late",
            "--label",
            "severity=warning",
            "--label",
            "team=data",
            "--allow-host",
            "127.0.0.1",
        ]),
        &[("PD_KEY", "routing-key-for-the-test")],
        &journal,
    );
    assert_eq!(code, Some(0), "{stderr}");
    let sent = bodies.lock().unwrap().last().cloned().unwrap();
    assert_eq!(sent["payload"]["severity"], "warning", "{sent}");
    assert!(
        sent["payload"]["custom_details"].get("severity").is_none(),
        "{sent}"
    );

    // Given twice and different, it is an error naming both; a value outside the four, too.
    let before = std::fs::read_to_string(&journal).unwrap();
    for (extra, says) in [
        (
            &["--label", "severity=critical", "--severity", "info"][..],
            "--severity info and --label severity=critical disagree",
        ),
        (
            &["--label", "severity=critical", "--label", "severity=info"][..],
            "--label: severity is given twice",
        ),
        (
            &["--label", "severity=page"][..],
            "--label: severity must be critical, error, warning or info",
        ),
    ] {
        let (code, _, stderr) = run(
            &alertmanager_args(&format!("{unique}_bad"), extra),
            &[],
            &journal,
        );
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    }
    // A Slack message has no severity, labels or annotations: they are refused, not dropped.
    for extra in [
        ["--severity", "critical"],
        ["--label", "severity=critical"],
        ["--annotation", "a=b"],
    ] {
        let mut args = strings(&[
            "send",
            "alert",
            "--slack-url-env",
            "SLACK_URL",
            "--text",
            "t",
        ]);
        args.extend(strings(&extra));
        let (code, _, stderr) = run(&args, &[("SLACK_URL", "http://127.0.0.1:9/s")], &journal);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("cannot be used with"),
            "{extra:?}: {stderr}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap(),
        before,
        "refusals journal nothing"
    );
}
