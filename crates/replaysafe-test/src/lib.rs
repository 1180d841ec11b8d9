//! Test support for replaysafe, for its users and for its own tests.
//!
//! - [`MockEffectClient`]: a mockall mock of [`EffectClient`] over [`TestEffect`], for
//!   unit tests of logic around a [`Guard`](replaysafe_core::Guard).
//! - [`RecordingClient`]: an inert client that delivers nowhere and keeps what it was
//!   asked to deliver, for a test to read back.
//! - [`contexts`]: ready-made live, backfill, stale and unknown contexts on a fixed clock.
//!
//! ```
//! use replaysafe_core::{Guard, MemoryJournal};
//! use replaysafe_test::{contexts, RecordingClient, TestEffect};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = RecordingClient::new();
//! let guard = Guard::new(client.clone(), MemoryJournal::new());
//! guard.send(&contexts::backfill(), &TestEffect::email("ana@shop.example")).await?;
//! assert!(client.delivered().is_empty());
//! guard.send(&contexts::live(), &TestEffect::email("ana@shop.example")).await?;
//! assert_eq!(client.delivered().len(), 1);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use journal::TempJournal;

use async_trait::async_trait;
use replaysafe_core::{
    Classify, Delivery, EffectClient, EffectDescription, EffectKind, IdempotencyKey, ReplayContext,
};

pub mod contexts;
mod journal;
pub mod logs;
pub mod services;

/// A generic effect for tests: any kind, message type, target and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestEffect {
    /// Effect kind.
    pub kind: EffectKind,
    /// Message type.
    pub message_type: String,
    /// Target (recipient, endpoint).
    pub target: String,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// Summary for the journal.
    pub summary: Option<String>,
    /// The action, when one key names several (an alert's trigger and resolve).
    pub action: Option<String>,
}

impl TestEffect {
    /// An effect of `kind` to `target` with message type `test` and an empty payload.
    pub fn new(kind: EffectKind, target: impl Into<String>) -> Self {
        TestEffect {
            kind,
            message_type: "test".into(),
            target: target.into(),
            payload: Vec::new(),
            summary: None,
            action: None,
        }
    }

    /// An email effect to `recipient` with message type `daily_summary`.
    pub fn email(recipient: impl Into<String>) -> Self {
        TestEffect {
            message_type: "daily_summary".into(),
            ..TestEffect::new(EffectKind::Email, recipient)
        }
    }

    /// Sets the payload.
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// Sets the message type.
    pub fn with_message_type(mut self, message_type: impl Into<String>) -> Self {
        self.message_type = message_type.into();
        self
    }

    /// Sets the summary.
    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = Some(summary.into());
        self
    }

    /// Sets the action.
    pub fn with_action(mut self, action: impl Into<String>) -> Self {
        self.action = Some(action.into());
        self
    }

    /// The description the test clients give this effect.
    pub fn describe(&self) -> Result<EffectDescription, TestError> {
        let description =
            EffectDescription::new(self.kind.clone(), &self.message_type, &self.target)
                .map_err(|e| TestError::Invalid(e.to_string()))?
                .with_payload(&self.payload);
        let description = match &self.summary {
            Some(summary) => description.with_summary(summary),
            None => description,
        };
        match &self.action {
            Some(action) => description
                .with_action(action)
                .map_err(|e| TestError::Invalid(e.to_string())),
            None => Ok(description),
        }
    }
}

/// Errors of the test clients, with every classification a test may need.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TestError {
    /// The effect was invalid.
    #[error("invalid test effect: {0}")]
    Invalid(String),
    /// A transient failure, optionally with a `Retry-After`.
    #[error("transient test failure")]
    Transient {
        /// What the receiver asked us to wait.
        retry_after: Option<Duration>,
    },
    /// A permanent failure.
    #[error("permanent test failure")]
    Permanent,
}

impl Classify for TestError {
    fn is_transient(&self) -> bool {
        matches!(self, TestError::Transient { .. })
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            TestError::Transient { retry_after } => *retry_after,
            _ => None,
        }
    }
}

/// What a test client received with an effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The effect.
    pub effect: TestEffect,
    /// The idempotency key it was delivered with.
    pub key: IdempotencyKey,
    /// The attempt number.
    pub attempt: u32,
}

/// An inert client: "delivers" by remembering. Clones share the record.
#[derive(Clone, Debug, Default)]
pub struct RecordingClient {
    received: Arc<Mutex<Vec<Received>>>,
    dedupes: bool,
    /// How long each delivery takes, so that deliveries overlap.
    delay: Option<std::time::Duration>,
}

impl RecordingClient {
    /// An empty recorder, standing for a receiver that does not de-duplicate by key (an
    /// SMTP server): an effect in doubt is not sent to it again.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty recorder standing for a receiver that drops repeats by idempotency key (a
    /// webhook receiver honouring `Idempotency-Key`): an effect in doubt is sent again.
    pub fn deduplicating() -> Self {
        RecordingClient {
            dedupes: true,
            ..Self::default()
        }
    }

    /// The same recorder, taking `delay` over each delivery (the receiver's answer), so
    /// that deliveries sent together are in flight together.
    pub fn answering_after(mut self, delay: std::time::Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Everything delivered so far.
    pub fn delivered(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

#[async_trait]
impl EffectClient for RecordingClient {
    type Effect = TestEffect;
    type Receipt = IdempotencyKey;
    type Error = TestError;

    fn describe(
        &self,
        _cx: &ReplayContext,
        effect: &TestEffect,
    ) -> Result<EffectDescription, TestError> {
        effect.describe()
    }

    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        effect: &TestEffect,
    ) -> Result<IdempotencyKey, TestError> {
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        self.received
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(Received {
                effect: effect.clone(),
                key: delivery.key().clone(),
                attempt: delivery.attempt(),
            });
        Ok(delivery.key().clone())
    }

    fn dedupes_by_key(&self) -> bool {
        self.dedupes
    }
}

/// A client that describes like the other test clients and delivers nowhere, keeping
/// nothing: for benchmarks and for tests that only look at the journal.
#[derive(Clone, Copy, Debug, Default)]
pub struct InertClient;

#[async_trait]
impl EffectClient for InertClient {
    type Effect = TestEffect;
    type Receipt = ();
    type Error = TestError;

    fn describe(
        &self,
        _cx: &ReplayContext,
        effect: &TestEffect,
    ) -> Result<EffectDescription, TestError> {
        effect.describe()
    }

    async fn deliver(
        &self,
        _delivery: &Delivery<'_>,
        _effect: &TestEffect,
    ) -> Result<(), TestError> {
        Ok(())
    }
}

mockall::mock! {
    /// A mockall mock of [`EffectClient`] over [`TestEffect`]; set expectations on
    /// `describe` and `deliver` (whose arguments are the key and the attempt number).
    pub EffectClient {
        /// Mocked [`EffectClient::describe`].
        pub fn describe_effect(&self, effect: &TestEffect) -> Result<EffectDescription, TestError>;
        /// Mocked delivery: receives the key and the attempt number.
        pub fn deliver_effect(&self, key: &IdempotencyKey, attempt: u32, effect: &TestEffect) -> Result<(), TestError>;
    }
}

#[async_trait]
impl EffectClient for MockEffectClient {
    type Effect = TestEffect;
    type Receipt = ();
    type Error = TestError;

    fn describe(
        &self,
        _cx: &ReplayContext,
        effect: &TestEffect,
    ) -> Result<EffectDescription, TestError> {
        self.describe_effect(effect)
    }

    async fn deliver(&self, delivery: &Delivery<'_>, effect: &TestEffect) -> Result<(), TestError> {
        self.deliver_effect(delivery.key(), delivery.attempt(), effect)
    }
}

impl MockEffectClient {
    /// A mock whose `describe` answers with [`TestEffect::describe`], any number of times.
    pub fn describing() -> Self {
        let mut mock = MockEffectClient::new();
        mock.expect_describe_effect()
            .returning(TestEffect::describe);
        mock
    }
}
