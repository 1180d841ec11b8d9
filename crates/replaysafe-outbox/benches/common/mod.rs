//! What both outbox benchmarks deliver: a small effect and an in-process route that
//! describes like an adapter and delivers nowhere.

use async_trait::async_trait;
use replaysafe_core::{
    Classify, Delivery, EffectClient, EffectDescription, EffectKind, ReplayContext,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Message {
    pub(crate) message_type: String,
    pub(crate) body: String,
}

#[derive(Debug, thiserror::Error)]
#[error("never fails")]
pub(crate) struct Never;

impl Classify for Never {
    fn is_transient(&self) -> bool {
        false
    }
}

/// Describes like an adapter and delivers nowhere.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inert;

#[async_trait]
impl EffectClient for Inert {
    type Effect = Message;
    type Receipt = ();
    type Error = Never;

    fn describe(&self, _cx: &ReplayContext, m: &Message) -> Result<EffectDescription, Never> {
        Ok(EffectDescription::new(
            EffectKind::Webhook,
            &m.message_type,
            "https://partner.example/hooks",
        )
        .map_err(|_| Never)?
        .with_payload(m.body.as_bytes()))
    }

    async fn deliver(&self, _delivery: &Delivery<'_>, _m: &Message) -> Result<(), Never> {
        Ok(())
    }
}

pub(crate) fn message(chunk: usize, i: usize) -> Message {
    Message {
        message_type: format!("bench.{chunk}.{i}"),
        body: format!(
            "{{\"orders\":{i},\"chunk\":{chunk},\"note\":\"{}\"}}",
            "x".repeat(200)
        ),
    }
}
