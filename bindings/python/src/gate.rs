//! `replaysafe.Gate`: the gate around a call the Python side makes itself, for effects no
//! replaysafe client sends (an Airflow operator's `execute`, a notifier). The core decides,
//! keys, journals and consults the ledger exactly as for its own clients; the call runs
//! only when the decision is to deliver, and its exception comes back unchanged.

use std::fmt;

use async_trait::async_trait;
use replaysafe_core::{
    Classify, Delivery, EffectClient, EffectDescription, RedactionPolicy, TargetRedaction,
};

use super::*;

/// The effect a [`CallClient`] delivers: its description (checked when built) and the call.
struct Call {
    description: EffectDescription,
    call: Py<PyAny>,
}

/// An [`EffectClient`] whose delivery is a Python callable, called with the key.
struct CallClient {
    redaction: RedactionPolicy,
}

/// A call that raised: the journal keeps only the exception's type (its message may hold
/// anything, a secret too); Python gets the exception itself back. Its `Debug` shows the
/// type only, as its `Display` does.
struct CallFailed {
    type_name: String,
    exception: PyErr,
}

impl fmt::Debug for CallFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallFailed")
            .field("type_name", &self.type_name)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for CallFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the call raised {}", self.type_name)
    }
}

impl std::error::Error for CallFailed {}

impl Classify for CallFailed {
    /// Never retried here: the caller (Airflow's task retries) owns retrying, and a second
    /// call inside one try could send twice.
    fn is_transient(&self) -> bool {
        false
    }
}

#[async_trait]
impl EffectClient for CallClient {
    type Effect = Call;
    type Receipt = ();
    type Error = CallFailed;

    fn describe(&self, _cx: &ReplayContext, call: &Call) -> Result<EffectDescription, CallFailed> {
        Ok(call.description.clone())
    }

    async fn deliver(&self, delivery: &Delivery<'_>, call: &Call) -> Result<(), CallFailed> {
        let key = delivery.key().to_string();
        Python::attach(|py| {
            call.call.call1(py, (key,)).map(drop).map_err(|exception| {
                let type_name = exception
                    .get_type(py)
                    .name()
                    .map(|name| name.to_string())
                    .unwrap_or_else(|_| "an exception".to_owned());
                CallFailed {
                    type_name,
                    exception,
                }
            })
        })
    }

    fn redaction(&self) -> RedactionPolicy {
        self.redaction
    }
}

/// The gate around a call of your own, for one effect kind: `send` decides for the run's
/// context, runs `call(idempotency_key)` only when the effect is to be delivered (once per
/// key with the ledger on), and journals the decision and the outcome. A call that raises
/// is journaled as failed (naming only the exception's type) and the exception is raised
/// again, unchanged.
#[pyclass(frozen, module = "replaysafe", name = "Gate")]
pub(crate) struct PyGate {
    guard: Guard<CallClient>,
    kind: EffectKind,
}

#[pymethods]
impl PyGate {
    /// `kind`: `email`, `webhook`, `file_drop`, `metric`, `alert`, `trigger` or a custom
    /// kind; `redact`: how targets appear in the journal (`domain`: `*@domain` for
    /// addresses and the origin for URLs, the default; `full`; `hashed`).
    #[new]
    #[pyo3(signature = (kind, *, redact = "domain", journal = None, ledger = true))]
    fn new(kind: &str, redact: &str, journal: Option<PathBuf>, ledger: bool) -> PyResult<Self> {
        let kind: EffectKind = kind
            .parse()
            .map_err(|e| ConfigError::new_err(format!("Gate: kind: {}", chain(&e))))?;
        let target = match redact {
            "domain" => TargetRedaction::DomainOnly,
            "full" => TargetRedaction::Full,
            "hashed" => TargetRedaction::Hashed,
            other => {
                return Err(ConfigError::new_err(format!(
                    "Gate: redact: expected domain, full or hashed, not {other:?}"
                )));
            }
        };
        let client = CallClient {
            redaction: RedactionPolicy::new(target),
        };
        let guard = GuardLayer::new(open_journal(journal)?)
            .with_ledger(ledger)
            .layer(client);
        Ok(PyGate { guard, kind })
    }

    /// The effect kind this gate journals.
    #[getter]
    fn kind(&self) -> &str {
        self.kind.as_str()
    }

    /// Decides for `cx` and, when the effect is to be delivered, calls `call(key)`;
    /// returns the Outcome (`delivered`, `suppressed`, or `failed` when the call raised,
    /// after which the call's exception is raised again).
    ///
    /// `message_type` names what is sent (an Airflow task id), `target` whom to (addresses
    /// joined by commas, a URL, a DAG id): with the window and the pipeline they make the
    /// idempotency key. `payload` is digested, never journaled; `summary` is shown.
    #[pyo3(signature = (cx, *, message_type, target, call, payload = None, summary = None))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one parameter each
    fn send(
        &self,
        py: Python<'_>,
        cx: &Context,
        message_type: String,
        target: String,
        call: Py<PyAny>,
        payload: Option<Vec<u8>>,
        summary: Option<String>,
    ) -> PyResult<Outcome> {
        if !call.bind(py).is_callable() {
            return Err(ConfigError::new_err("Gate.send: call: not callable"));
        }
        let mut description = EffectDescription::new(self.kind.clone(), message_type, target)
            .map_err(|e| ConfigError::new_err(format!("Gate.send: {}", chain(&e))))?
            .with_payload(payload.as_deref().unwrap_or_default());
        if let Some(summary) = summary {
            description = description.with_summary(summary);
        }
        let call = Call { description, call };
        let result = py.detach(|| runtime().block_on(self.guard.send(&cx.inner, &call)));
        // The call's own exception goes back to the caller as it was raised (the journal
        // holds the failure already).
        if let Err(SendError::Failed { source, .. }) = &result {
            return Err(source.exception.clone_ref(py));
        }
        outcome(&result, None, false)
    }

    fn __repr__(&self) -> String {
        format!("Gate(kind={:?})", self.kind.as_str())
    }
}
