//! The folder backend: same gate, same journal, same Message-ID, `.eml` files.

use std::sync::Arc;

use replaysafe_core::MemoryJournal;
use replaysafe_core::journal::JournalDecision;
use replaysafe_email::{Attachment, EmailClient, EmailGuardExt};
use replaysafe_test::contexts;

use crate::support::{self, expected_key, mails_containing};

fn eml_files(folder: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(folder)
        .expect("folder")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "eml"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn folder_backend_writes_an_eml_with_the_same_message_id_as_smtp() {
    let folder = tempfile::tempdir().expect("temp dir");
    let drop_folder = folder.path().join("outbox");
    let journal = Arc::new(MemoryJournal::new());
    let files = EmailClient::folder(&drop_folder)
        .build(journal.clone())
        .expect("folder created");
    let domain = support::unique_domain("folder");
    let ana = format!("ana@{domain}");
    let email = support::simple_email(&domain, &[ana.as_str()])
        .attachment(Attachment::csv("orders.csv", "order,amount\n1,9.90\n"))
        .build();

    // A backfill writes nothing.
    let suppressed = files
        .send_email(&contexts::backfill(), &email)
        .await
        .expect("valid");
    assert_eq!(suppressed.suppressed(), 1);
    assert!(eml_files(&drop_folder).is_empty());

    // A live run writes one .eml.
    let outcome = files
        .send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect("written");
    let written = eml_files(&drop_folder);
    assert_eq!(written.len(), 1);
    let receipt = outcome.receipt().expect("delivered");
    assert_eq!(receipt.file(), Some(written[0].as_path()));
    let key = expected_key("daily_summary", &ana);
    let message_id = format!("<{}@{domain}>", key.as_str());
    assert_eq!(receipt.message_id(), message_id);
    let eml = std::fs::read_to_string(&written[0]).expect("eml");
    assert!(
        eml.contains(&format!("Message-ID: {message_id}\r\n")),
        "{eml}"
    );
    assert!(eml.contains(&format!("To: {ana}\r\n")), "{eml}");
    assert!(eml.contains("filename=\"orders.csv\""), "{eml}");

    let decisions: Vec<_> = journal.records().iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [
            JournalDecision::Suppressed,
            JournalDecision::Attempting,
            JournalDecision::Delivered
        ]
    );

    // The same effect sent over SMTP carries the same Message-ID.
    let (port, maildir) = support::plain_server();
    let smtp = support::plain_client(port, MemoryJournal::new());
    smtp.send(&contexts::live(), &crate::support::only_copy(&email))
        .await
        .expect("sent");
    let mails = mails_containing(&maildir, &domain);
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].header("Message-ID"), Some(message_id.as_str()));
}

#[tokio::test]
async fn folder_backend_refuses_a_path_it_cannot_create() {
    let folder = tempfile::tempdir().expect("temp dir");
    let file = folder.path().join("a-file");
    std::fs::write(&file, "not a folder").expect("write");
    let error = EmailClient::folder(file.join("outbox"))
        .build(MemoryJournal::new())
        .expect_err("a file is in the way");
    assert!(
        error.is_config() && error.field() == Some("folder"),
        "{error}"
    );
}
