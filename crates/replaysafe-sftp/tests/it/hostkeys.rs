//! Host keys are verified before authentication; no key is accepted unseen.

use replaysafe_core::{Classify, RetryPolicy, SendError};
use replaysafe_sftp::FileDrop;
use replaysafe_test::contexts;

use crate::support::{guard_from, payload, server, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_key_or_an_empty_known_hosts_is_refused_and_nothing_is_uploaded() {
    let server = server();
    for (label, known_hosts) in [
        ("other key", &server.bad_known_hosts),
        ("empty", &server.empty_known_hosts),
    ] {
        let (guard, journal) = guard_from(server.builder().known_hosts(known_hosts));
        let name = format!("{}.csv", unique("hostkey"));
        let drop = FileDrop::from_bytes("orders_export", &name, payload(&name, 1000));

        let error = guard.send(&contexts::live(), &drop).await.unwrap_err();

        let SendError::Failed { attempts, source } = &error else {
            panic!("{label}: {error:?}");
        };
        assert!(source.is_host_key(), "{label}: {source}");
        assert!(
            source.is_permanent(),
            "{label}: a host key problem is not retried"
        );
        assert_eq!(*attempts, 1, "{label}");
        let message = source.to_string();
        assert!(
            message.contains("SHA256:"),
            "{label}: shows the fingerprint: {message}"
        );
        assert!(
            message.contains(&format!("[127.0.0.1]:{}", server.port)),
            "{label}: {message}"
        );
        assert!(server.entries_containing(&name).is_empty(), "{label}");
        assert_eq!(
            journal.len(),
            2,
            "{label}: the attempt and its failure are journaled"
        );
        assert_eq!(guard.unguarded_ref().idle_sessions(), 0, "{label}");
    }
}

/// The host key check comes before authentication: with a key that cannot even be
/// loaded (a passphrased key without its passphrase), the error is still the host key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_key_is_checked_before_authentication() {
    let server = server();
    let unusable_key = server.builder().private_key(&server.passphrased_key);

    let (guard, _) = guard_from(unusable_key.known_hosts(&server.bad_known_hosts));
    let drop = FileDrop::from_bytes("orders_export", format!("{}.csv", unique("order")), "x");
    let error = guard.send(&contexts::live(), &drop).await.unwrap_err();
    let SendError::Failed { source, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(source.is_host_key(), "{source}");
    assert_eq!(source.error_type(), "host_key");

    // With the right known_hosts the same key fails at authentication instead.
    let (guard, _) = guard_from(
        server
            .builder()
            .private_key(&server.passphrased_key)
            .known_hosts(&server.known_hosts),
    );
    let guard = guard.with_retry(RetryPolicy::none());
    let error = guard.send(&contexts::live(), &drop).await.unwrap_err();
    let SendError::Failed { source, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(
        source.is_authentication() && source.is_permanent(),
        "{source}"
    );
    assert_eq!(source.error_type(), "authentication");
}

#[tokio::test]
async fn known_hosts_is_required() {
    let server = server();
    let error = replaysafe_sftp::SftpClient::builder("127.0.0.1", "root")
        .private_key(&server.key)
        .remote_dir("/x")
        .build(replaysafe_core::journal::NoopJournal)
        .unwrap_err();
    assert_eq!(error.field(), Some("known_hosts"));
    let error = server
        .builder()
        .known_hosts(server.upload.join("no-such-known-hosts"))
        .build(replaysafe_core::journal::NoopJournal)
        .unwrap_err();
    assert_eq!(error.field(), Some("known_hosts"), "{error}");
}
