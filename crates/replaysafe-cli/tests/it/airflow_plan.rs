//! `plan --airflow` through the real binary, where no Airflow is needed: the flags it
//! refuses, and the errors that name the flag at fault without printing a secret. The walk
//! itself is tested against fixtures saved from a real Airflow 3.3.2 (the crate's unit
//! tests) and against a running deployment (`cargo xtask airflow`, case plan).

use crate::send::clean_command;

const RANGE: [&str; 4] = [
    "--start",
    "2026-08-01T00:00:00Z",
    "--end",
    "2026-08-04T00:00:00Z",
];

/// Nothing listens on port 9 (discard), so a request that goes out fails to connect.
const NOBODY: &str = "http://127.0.0.1:9";

fn plan(args: &[&str]) -> std::process::Output {
    clean_command()
        .arg("plan")
        .args(RANGE)
        .args(args)
        .output()
        .unwrap()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The error itself, without the usage lines clap prints after it (which name every flag).
fn error(output: &std::process::Output) -> String {
    let text = stderr(output);
    text.split("\nUsage:").next().unwrap_or_default().to_owned()
}

#[test]
fn flags_that_make_no_sense_with_airflow_are_refused() {
    let airflow = [
        "--airflow",
        NOBODY,
        "--dag-id",
        "daily",
        "--allow-host",
        "127.0.0.1",
    ];
    let cases: [(&[&str], &str); 9] = [
        (&["--pipeline", "p"], "--pipeline"),
        (&["--kind", "scheduled"], "--kind"),
        (&["--instants"], "--instants"),
        (&["--now", "2026-08-05T00:00:00Z"], "--now"),
        (&["--max-age", "email=2h"], "--max-age"),
        (&["--effect", "email"], "--effect"),
        (
            &["--every", "1d", "--reprocess-behavior", "failed"],
            "--reprocess-behavior",
        ),
        (
            &["--token-env", "T", "--user", "u", "--password-env", "P"],
            "--token-env",
        ),
        (&["--user", "u"], "--password-env"),
    ];
    for (extra, flag) in cases {
        let output = plan(&[&airflow[..], extra].concat());
        assert_eq!(output.status.code(), Some(2), "{extra:?}");
        let said = error(&output);
        assert!(said.contains(flag), "{extra:?}: {said}");
        assert!(
            said.contains("cannot be used with") || said.contains("required arguments"),
            "{extra:?}: {said}"
        );
    }
    // --dag-id belongs to --airflow, and plan without it is the plan it always was.
    let output = plan(&["--dag-id", "daily"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        error(&output).contains("--airflow <BASE_URL>"),
        "{}",
        stderr(&output)
    );
    let output = plan(&["--pipeline", "p"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        error(&output).contains("--every <EVERY>"),
        "{}",
        stderr(&output)
    );
    let output = plan(&["--pipeline", "p", "--every", "1d", "--effect", "email"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("over 3 windows of 1d"));
}

#[test]
fn errors_name_the_flag_and_never_the_secret() {
    let canary = "canary-password-7c1e";
    let login = ["--user", "planner", "--password-env", "PLAN_PASSWORD"];
    let output = clean_command()
        .arg("plan")
        .args(RANGE)
        .args([
            "--airflow",
            NOBODY,
            "--dag-id",
            "daily",
            "--allow-host",
            "127.0.0.1",
        ])
        .args(login)
        .env("PLAN_PASSWORD", canary)
        .output()
        .unwrap();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.starts_with(
            "replaysafe: error: --airflow: logging in to http://127.0.0.1:9/auth/token: connection failed"
        ),
        "{text}"
    );
    assert!(!text.contains(canary) && output.stdout.is_empty(), "{text}");

    let output = clean_command()
        .arg("plan")
        .args(RANGE)
        .args([
            "--airflow",
            NOBODY,
            "--dag-id",
            "daily",
            "--allow-host",
            "127.0.0.1",
        ])
        .args(["--token-env", "PLAN_TOKEN"])
        .env("PLAN_TOKEN", canary)
        .output()
        .unwrap();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.starts_with(
            "replaysafe: error: --airflow: reading http://127.0.0.1:9/api/v2/dags/daily: connection failed"
        ),
        "{text}"
    );
    assert!(!text.contains(canary), "{text}");

    let output = clean_command()
        .arg("plan")
        .args(RANGE)
        .args(["--airflow", NOBODY, "--dag-id", "daily"])
        .args(login)
        .env_remove("PLAN_PASSWORD")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--password-env: environment variable PLAN_PASSWORD is not set"),
        "{}",
        stderr(&output)
    );

    let output = plan(&["--airflow", "airflow.internal:8080", "--dag-id", "daily"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--airflow"), "{}", stderr(&output));

    // An internal address is refused before anything is sent unless --allow-host lets it
    // through (a cloud's metadata address included), as for send trigger.
    let output = clean_command()
        .arg("plan")
        .args(RANGE)
        .args(["--airflow", "http://169.254.169.254:9", "--dag-id", "daily"])
        .args(login)
        .env("PLAN_PASSWORD", canary)
        .output()
        .unwrap();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("--airflow") && text.contains("refused before connecting"),
        "{text}"
    );
    assert!(!text.contains(canary), "{text}");

    // A token no header can hold is refused naming the flag, before any request.
    let output = clean_command()
        .arg("plan")
        .args(RANGE)
        .args([
            "--airflow",
            NOBODY,
            "--dag-id",
            "daily",
            "--allow-host",
            "127.0.0.1",
        ])
        .args(["--token-env", "PLAN_TOKEN"])
        .env("PLAN_TOKEN", "tok\nen")
        .output()
        .unwrap();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("--token-env: PLAN_TOKEN holds no usable token"),
        "{text}"
    );
}
