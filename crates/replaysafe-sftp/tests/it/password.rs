//! Password login, for partners that issue passwords only: the host key is still checked
//! first, a wrong password is a permanent authentication failure, and the password is in
//! no journal record, error or `Debug`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use replaysafe_core::{Classify, MemoryJournal, RetryPolicy, SendError};
use replaysafe_sftp::{FileDrop, SftpClient, SftpClientBuilder};
use replaysafe_test::contexts;
use replaysafe_test::services::require;
use secrecy::SecretString;

use crate::support::{server, unique};

fn password_builder(password: &str) -> (SftpClientBuilder, PathBuf) {
    let server = server();
    let upload = PathBuf::from(require("REPLAYSAFE_TEST_SSHD_PASSWORD_UPLOAD"));
    let builder = SftpClient::builder("127.0.0.1", require("REPLAYSAFE_TEST_SSHD_PASSWORD_USER"))
        .port(server.port)
        .password(SecretString::from(password.to_owned()))
        .known_hosts(&server.known_hosts)
        .remote_dir(upload.display().to_string())
        .timeout(Duration::from_secs(20));
    (builder, upload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_login_drops_the_file_and_a_wrong_one_fails_for_good() {
    let password = require("REPLAYSAFE_TEST_SSHD_PASSWORD");
    let journal = Arc::new(MemoryJournal::new());
    let (builder, upload) = password_builder(&password);
    let client = builder.build(journal.clone()).unwrap();
    let name = format!("{}.csv", unique("password"));
    let drop = FileDrop::from_bytes("orders_export", &name, "id,total\n1,42\n");
    assert!(
        client
            .send(&contexts::live(), &drop)
            .await
            .unwrap()
            .is_delivered()
    );
    assert_eq!(
        std::fs::read(upload.join(&name)).unwrap(),
        b"id,total\n1,42\n",
        "the bytes landed under the final name in the password user's directory"
    );
    // A backfill logs in nowhere and drops nothing.
    let backfill_name = format!("{}.csv", unique("password-backfill"));
    let backfill_drop = FileDrop::from_bytes("orders_export", &backfill_name, "x");
    assert!(
        client
            .send(&contexts::backfill(), &backfill_drop)
            .await
            .unwrap()
            .is_suppressed()
    );
    assert!(!upload.join(&backfill_name).exists());

    let canary = "wrong-password-canary-3f9a";
    let (builder, _) = password_builder(canary);
    let bad = builder
        .build(journal.clone())
        .unwrap()
        .with_retry(RetryPolicy::default().with_max_attempts(3));
    let other = FileDrop::from_bytes("orders_export", format!("{}.csv", unique("bad")), "x");
    let error = bad.send(&contexts::live(), &other).await.unwrap_err();
    let SendError::Failed { attempts, source } = &error else {
        panic!("expected a failed delivery, got {error:?}");
    };
    assert_eq!(*attempts, 1, "a refused password is not retried");
    assert!(
        source.is_permanent() && source.is_authentication(),
        "{source}"
    );
    let shown = format!(
        "{} {error:?} {bad:?} {client:?} {:?}",
        replaysafe_core::error_chain(&error),
        journal.records()
    );
    assert!(shown.contains("with a password"), "{shown}");
    for secret in [canary, password.as_str()] {
        assert!(!shown.contains(secret), "a password leaked: {shown}");
    }
}

#[test]
fn a_key_and_a_password_together_are_refused_naming_the_field() {
    let server = server();
    let error = server
        .builder()
        .password(SecretString::from("p"))
        .build(MemoryJournal::new())
        .unwrap_err();
    assert_eq!(error.field(), Some("password"), "{error}");
    let error = SftpClient::builder("127.0.0.1", "u")
        .password(SecretString::from("p"))
        .passphrase(SecretString::from("q"))
        .known_hosts(&server.known_hosts)
        .remote_dir("/upload")
        .build(MemoryJournal::new())
        .unwrap_err();
    assert_eq!(error.field(), Some("passphrase"), "{error}");
}
