//! Classification of real failures, and configuration errors naming their field.

use replaysafe_core::journal::NoopJournal;
use replaysafe_core::{Classify, RetryPolicy, SendError};
use replaysafe_sftp::{FileDrop, SftpClient};
use replaysafe_test::contexts;

use crate::support::{guard_from, server, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_transient_and_retried() {
    let server = server();
    let closed_port = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.local_addr().unwrap().port()
    };
    let (guard, journal) = guard_from(server.builder_on_port(closed_port));
    let guard = guard.with_retry(
        RetryPolicy::default()
            .with_max_attempts(2)
            .with_base_delay(std::time::Duration::from_millis(1)),
    );
    let drop = FileDrop::from_bytes("orders_export", "refused.csv", "x");

    let error = guard.send(&contexts::live(), &drop).await.unwrap_err();

    let SendError::Failed { attempts, source } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*attempts, 2, "transient errors are retried");
    assert!(source.is_transient() && source.is_connection(), "{source}");
    assert_eq!(source.error_type(), "connect");
    let message = source.to_string();
    assert!(
        message.starts_with(&format!("dropping sftp://127.0.0.1:{closed_port}/"))
            && message.contains("connecting to 127.0.0.1:"),
        "{message}"
    );
    assert_eq!(journal.len(), 4, "attempting and failed for each attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_remote_directory_is_permanent() {
    let server = server();
    let missing = server.upload.join(unique("missing_dir"));
    let (guard, _journal) = guard_from(server.builder().remote_dir(missing.display().to_string()));
    let drop = FileDrop::from_bytes("orders_export", "x.csv", "x");

    let error = guard.send(&contexts::live(), &drop).await.unwrap_err();

    let SendError::Failed { attempts, source } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*attempts, 1);
    assert!(source.is_permanent(), "{source}");
    assert!(!missing.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_passphrase_is_a_permanent_authentication_error() {
    let server = server();
    let (guard, journal) = guard_from(
        server
            .builder()
            .private_key(&server.passphrased_key)
            .passphrase(secrecy::SecretString::from("not-the-passphrase".to_owned())),
    );
    let drop = FileDrop::from_bytes("orders_export", format!("{}.csv", unique("auth")), "x");

    let error = guard.send(&contexts::live(), &drop).await.unwrap_err();

    let SendError::Failed { attempts, source } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*attempts, 1);
    assert!(
        source.is_authentication() && source.is_permanent(),
        "{source}"
    );
    assert_eq!(journal.len(), 2, "attempting and failed");
    // The right passphrase works (the key is authorized on the server).
    let (guard, _) = guard_from(
        server
            .builder()
            .private_key(&server.passphrased_key)
            .passphrase(server.passphrase()),
    );
    assert!(
        guard
            .send(&contexts::live(), &drop)
            .await
            .unwrap()
            .is_delivered()
    );
}

#[test]
fn invalid_settings_name_their_field() {
    let server = server();
    let cases: Vec<(&str, replaysafe_sftp::SftpClientBuilder)> = vec![
        ("host", SftpClient::builder("", "root")),
        ("host", SftpClient::builder("user@host", "root")),
        ("user", SftpClient::builder("127.0.0.1", "")),
        (
            "private_key",
            SftpClient::builder("127.0.0.1", "root")
                .known_hosts(&server.known_hosts)
                .remote_dir("/x"),
        ),
        (
            "private_key",
            server
                .builder()
                .private_key(server.upload.join("no-such-key")),
        ),
        ("remote_dir", server.builder().remote_dir("")),
        ("remote_dir", server.builder().remote_dir("in\0box")),
        ("port", server.builder().port(0)),
        (
            "timeout",
            server.builder().timeout(std::time::Duration::ZERO),
        ),
    ];
    for (field, builder) in cases {
        let error = builder.build(NoopJournal).unwrap_err();
        assert_eq!(error.field(), Some(field), "{error}");
        assert!(error.is_invalid() && error.is_permanent());
    }
}
