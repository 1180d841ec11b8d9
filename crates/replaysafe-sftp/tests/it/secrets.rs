//! The key passphrase never reaches the journal, a log line, `Debug` or an error.

use replaysafe_core::{Guard, JsonlJournal, RetryPolicy};
use replaysafe_sftp::{FileDrop, SftpClient};
use replaysafe_test::contexts;
use secrecy::SecretString;

use crate::support::{payload, quick_retries, server, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_passphrase_appears_in_no_journal_log_or_error() {
    let server = server();
    // The only test that installs a global subscriber: the upload runs on blocking-pool
    // threads, which a thread-local subscriber would not see.
    let logs = replaysafe_test::logs::CapturedLogs::capture_global()
        .expect("no other test installs a global subscriber");

    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.jsonl");
    let wrong_passphrase = "wrong-passphrase-canary-5b2e";
    let build = |passphrase: &str| -> Guard<SftpClient> {
        server
            .builder()
            .private_key(&server.passphrased_key)
            .passphrase(SecretString::from(passphrase.to_owned()))
            .build(JsonlJournal::open(&journal_path).unwrap())
            .unwrap()
            .with_retry(quick_retries())
    };

    let good = build(&server.passphrase);
    let name = format!("{}.csv", unique("passphrase"));
    let drop = FileDrop::from_bytes("orders_export", &name, payload(&name, 20_000));
    let delivered = good.send(&contexts::live(), &drop).await.unwrap();
    assert!(
        delivered.is_delivered(),
        "the passphrased key authenticates"
    );
    assert_eq!(server.read(&name).map(|b| b.len()), Some(20_000));
    assert!(
        good.send(&contexts::backfill(), &drop)
            .await
            .unwrap()
            .is_suppressed()
    );
    let debug = format!("{good:?}");

    let bad = build(wrong_passphrase).with_retry(RetryPolicy::none());
    let other = FileDrop::from_bytes("orders_export", format!("{}.csv", unique("wrong")), "x");
    let error = bad.send(&contexts::live(), &other).await.unwrap_err();
    let shown = format!(
        "{} / {error:?} / {bad:?}",
        replaysafe_core::error_chain(&error)
    );

    good.journal().flush().unwrap();
    bad.journal().flush().unwrap();
    let journal = std::fs::read_to_string(&journal_path).unwrap();
    let logs = logs.text();
    // delivered, suppressed, failed, and an attempting line before each of the 2 attempts.
    assert_eq!(journal.lines().count(), 5, "{journal}");
    assert!(journal.contains("\"failed\""), "{journal}");
    assert!(
        !logs.is_empty(),
        "the test captured the crate's and the guard's logs"
    );
    for canary in [server.passphrase.as_str(), wrong_passphrase] {
        assert!(!journal.contains(canary), "journal leaks {canary}");
        assert!(!logs.contains(canary), "logs leak {canary}");
        assert!(!debug.contains(canary), "Debug leaks {canary}");
        assert!(!shown.contains(canary), "errors leak {canary}");
    }
}
