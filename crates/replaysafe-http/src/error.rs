//! The one error shape of every HTTP adapter.

use std::fmt;
use std::time::Duration;

use replaysafe_core::Classify;

use crate::{ResponseClass, SsrfRefusal};

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why configuring, describing or delivering an effect over HTTP failed.
///
/// The webhook, trigger, alert and metrics adapters all answer with this one shape.
/// Opaque: ask it questions ([`is_transient`](Classify::is_transient),
/// [`is_ssrf_refused`](Error::is_ssrf_refused), [`status`](Error::status), ...).
///
/// The message says what was being done and to which endpoint, shown as the journal shows
/// it (scheme, host, port and path at most; never a query, a credential, a header value
/// or a secret): `sending webhook to https://partner.example/hooks: 503 service
/// unavailable`. The cause, when there is one (the SSRF refusal, the network failure), is
/// the [`source`](std::error::Error::source), not repeated in the message.
///
/// | what happened | transient? |
/// |---|---|
/// | connection failed, timed out, or broke; the answer could not be read | yes |
/// | 408, 425, 429, 5xx (with `Retry-After` when sent) | yes |
/// | 410 Gone | no: the endpoint is gone ([`is_endpoint_gone`](Error::is_endpoint_gone)) |
/// | 3xx | no: redirects are not followed ([`is_redirect`](Error::is_redirect)) |
/// | other 4xx | no |
/// | refused by the SSRF policy | no, and nothing was sent ([`is_ssrf_refused`](Error::is_ssrf_refused)) |
/// | invalid configuration or effect | no, and nothing was sent ([`is_invalid`](Error::is_invalid)) |
#[derive(Debug, thiserror::Error)]
#[error("{}", Display(self))]
pub struct Error {
    kind: Kind,
    #[source]
    source: Option<BoxError>,
}

#[derive(Debug)]
enum Kind {
    Config {
        field: &'static str,
        problem: String,
    },
    Invalid {
        field: &'static str,
        problem: String,
    },
    Refused {
        doing: Doing,
    },
    Timeout {
        doing: Doing,
    },
    Connect {
        doing: Doing,
    },
    Transport {
        doing: Doing,
    },
    Status {
        doing: Doing,
        status: u16,
        class: ResponseClass,
        detail: Option<String>,
    },
    Unreadable {
        doing: Doing,
    },
}

/// What was being done, and to which target (already redacted): `sending webhook to`
/// `https://partner.example/hooks`.
#[derive(Debug)]
struct Doing {
    action: String,
    target: String,
}

impl fmt::Display for Doing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.action, self.target)
    }
}

struct Display<'a>(&'a Error);

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.kind {
            Kind::Config { field, problem } => {
                write!(f, "invalid configuration {field}: {problem}")
            }
            Kind::Invalid { field, problem } => write!(f, "invalid {field}: {problem}"),
            Kind::Refused { doing } => write!(f, "{doing}: refused before connecting"),
            Kind::Timeout { doing } => write!(f, "{doing}: timed out"),
            Kind::Connect { doing } => write!(f, "{doing}: connection failed"),
            Kind::Transport { doing } => write!(f, "{doing}: request failed before an answer"),
            Kind::Unreadable { doing } => write!(f, "{doing}: the answer could not be read"),
            Kind::Status {
                doing,
                status,
                class,
                detail,
            } => {
                write!(f, "{doing}: {status}")?;
                if let Some(reason) = reqwest::StatusCode::from_u16(*status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                {
                    write!(f, " {}", reason.to_ascii_lowercase())?;
                }
                match class {
                    ResponseClass::Gone => {
                        f.write_str(": the endpoint is gone; stop sending to it")?
                    }
                    ResponseClass::Redirect => f.write_str(": redirects are not followed")?,
                    ResponseClass::Transient {
                        retry_after: Some(wait),
                    } => write!(f, " (retry after {})", seconds(*wait))?,
                    _ => {}
                }
                match detail {
                    Some(detail) => write!(f, ": {detail}"),
                    None => Ok(()),
                }
            }
        }
    }
}

fn seconds(wait: Duration) -> String {
    if wait.subsec_nanos() == 0 {
        format!("{}s", wait.as_secs())
    } else {
        format!("{:.3}s", wait.as_secs_f64())
    }
}

impl Error {
    fn new(kind: Kind) -> Self {
        Error { kind, source: None }
    }

    fn doing(action: &str, target: &str) -> Doing {
        Doing {
            action: action.to_owned(),
            target: target.to_owned(),
        }
    }

    /// A configuration value is wrong (`timeout`, `header`, `base_url`); nothing was sent.
    /// `problem` must not quote a secret.
    pub fn config(field: &'static str, problem: impl Into<String>) -> Self {
        Error::new(Kind::Config {
            field,
            problem: problem.into(),
        })
    }

    /// An effect's field is wrong (`event type`, `alert name`); nothing was sent.
    /// `problem` must not quote a secret.
    pub fn invalid(field: &'static str, problem: impl fmt::Display) -> Self {
        Error::new(Kind::Invalid {
            field,
            problem: problem.to_string(),
        })
    }

    /// The SSRF policy refused the address; nothing was sent.
    pub fn refused(action: &str, target: &str, refusal: SsrfRefusal) -> Self {
        Error {
            kind: Kind::Refused {
                doing: Error::doing(action, target),
            },
            source: Some(Box::new(refusal)),
        }
    }

    /// The receiver answered with a status that is not a success. `detail` (a short,
    /// cleaned excerpt of the answer) is added to the message; leave it out for receivers
    /// that might echo a secret.
    pub fn from_status(
        action: &str,
        target: &str,
        status: u16,
        class: ResponseClass,
        detail: Option<String>,
    ) -> Self {
        Error::new(Kind::Status {
            doing: Error::doing(action, target),
            status,
            class,
            detail,
        })
    }

    /// A request that got no answer. reqwest's URL (which may hold a query or a path that
    /// is a secret) is removed from the error kept as the source.
    pub fn transport(action: &str, target: &str, error: reqwest::Error) -> Self {
        let error = error.without_url();
        if let Some(refusal) = SsrfRefusal::find_in(&error) {
            return Error::refused(action, target, refusal.clone());
        }
        let doing = Error::doing(action, target);
        let kind = if error.is_timeout() {
            Kind::Timeout { doing }
        } else if error.is_connect() {
            Kind::Connect { doing }
        } else {
            Kind::Transport { doing }
        };
        Error {
            kind,
            source: Some(Box::new(error)),
        }
    }

    /// A network failure outside HTTP (a UDP datagram that could not be sent, an address
    /// that did not resolve): transient.
    pub fn network(action: &str, target: &str, error: std::io::Error) -> Self {
        Error {
            kind: Kind::Transport {
                doing: Error::doing(action, target),
            },
            source: Some(Box::new(error)),
        }
    }

    /// A success answer whose body could not be read or parsed: transient.
    pub fn unreadable(
        action: &str,
        target: &str,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error {
            kind: Kind::Unreadable {
                doing: Error::doing(action, target),
            },
            source: Some(Box::new(error)),
        }
    }

    /// The same error, reported against the configuration field `field` (a client
    /// configuration's own name for what a builder calls otherwise: `url` for the
    /// builder's `endpoint`). An error that is not about configuration becomes one, its
    /// message kept.
    pub fn at_field(self, field: &'static str) -> Self {
        match self.kind {
            Kind::Config { problem, .. } | Kind::Invalid { problem, .. } => {
                Error::config(field, problem)
            }
            _ => Error::config(field, self.to_string()),
        }
    }

    /// Whether the configuration or the effect was invalid; nothing was sent.
    pub fn is_invalid(&self) -> bool {
        matches!(self.kind, Kind::Config { .. } | Kind::Invalid { .. })
    }

    /// The configuration field or effect field at fault, when invalid.
    pub fn field(&self) -> Option<&'static str> {
        match &self.kind {
            Kind::Config { field, .. } | Kind::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Whether the SSRF policy refused the endpoint's address; no connection was made.
    pub fn is_ssrf_refused(&self) -> bool {
        matches!(self.kind, Kind::Refused { .. })
    }

    /// The refusal, when the SSRF policy refused the endpoint's address.
    pub fn ssrf_refusal(&self) -> Option<&SsrfRefusal> {
        match self.kind {
            Kind::Refused { .. } => self
                .source
                .as_deref()
                .and_then(|source| source.downcast_ref()),
            _ => None,
        }
    }

    /// Whether the request timed out.
    pub fn is_timeout(&self) -> bool {
        matches!(self.kind, Kind::Timeout { .. })
    }

    /// Whether the connection could not be made (refused, unreachable, DNS failure).
    pub fn is_connect(&self) -> bool {
        matches!(self.kind, Kind::Connect { .. })
    }

    /// Whether the receiver answered 410 Gone: stop sending to this endpoint.
    pub fn is_endpoint_gone(&self) -> bool {
        self.class() == Some(ResponseClass::Gone)
    }

    /// Whether the receiver answered with a redirect, which is not followed.
    pub fn is_redirect(&self) -> bool {
        self.class() == Some(ResponseClass::Redirect)
    }

    /// The HTTP status the receiver answered with, when it answered.
    pub fn status(&self) -> Option<u16> {
        match self.kind {
            Kind::Status { status, .. } => Some(status),
            _ => None,
        }
    }

    fn class(&self) -> Option<ResponseClass> {
        match self.kind {
            Kind::Status { class, .. } => Some(class),
            _ => None,
        }
    }
}

impl Classify for Error {
    fn is_transient(&self) -> bool {
        match &self.kind {
            Kind::Timeout { .. }
            | Kind::Connect { .. }
            | Kind::Transport { .. }
            | Kind::Unreadable { .. } => true,
            Kind::Status { class, .. } => class.is_transient(),
            Kind::Config { .. } | Kind::Invalid { .. } | Kind::Refused { .. } => false,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        self.class().and_then(ResponseClass::retry_after)
    }

    /// The status code when the receiver answered (`503`), `timeout` and `connect` when
    /// it did not, `ssrf_refused` when nothing was sent, `invalid` for refused input,
    /// else `_OTHER`.
    fn error_type(&self) -> std::borrow::Cow<'static, str> {
        match &self.kind {
            Kind::Status { status, .. } => status.to_string().into(),
            Kind::Timeout { .. } => "timeout".into(),
            Kind::Connect { .. } => "connect".into(),
            Kind::Refused { .. } => "ssrf_refused".into(),
            Kind::Config { .. } | Kind::Invalid { .. } => "invalid".into(),
            Kind::Transport { .. } | Kind::Unreadable { .. } => {
                replaysafe_core::ERROR_TYPE_OTHER.into()
            }
        }
    }
}

impl From<replaysafe_core::Error> for Error {
    fn from(error: replaysafe_core::Error) -> Self {
        Error::invalid("effect", error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: &str = "https://partner.example/hooks";

    #[test]
    fn messages_say_what_was_done_and_leave_the_cause_to_source() {
        let unavailable = Error::from_status(
            "sending webhook to",
            TARGET,
            503,
            ResponseClass::Transient { retry_after: None },
            None,
        );
        assert_eq!(
            unavailable.to_string(),
            "sending webhook to https://partner.example/hooks: 503 service unavailable"
        );
        assert!(unavailable.is_transient());
        assert_eq!(unavailable.status(), Some(503));
        assert_eq!(unavailable.error_type(), "503");

        let limited = Error::from_status(
            "sending trigger to",
            TARGET,
            429,
            ResponseClass::Transient {
                retry_after: Some(Duration::from_secs(7)),
            },
            Some("slow down".into()),
        );
        assert_eq!(
            limited.to_string(),
            "sending trigger to https://partner.example/hooks: 429 too many requests (retry after 7s): slow down"
        );
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(7)));

        let gone = Error::from_status("sending webhook to", TARGET, 410, ResponseClass::Gone, None);
        assert!(gone.is_permanent() && gone.is_endpoint_gone());
        assert!(
            gone.to_string()
                .ends_with("410 gone: the endpoint is gone; stop sending to it")
        );
        let moved = Error::from_status(
            "sending webhook to",
            TARGET,
            302,
            ResponseClass::Redirect,
            None,
        );
        assert!(moved.is_permanent() && moved.is_redirect());
        assert!(
            moved
                .to_string()
                .ends_with("302 found: redirects are not followed")
        );

        assert_eq!(moved.error_type(), "302");
        assert_eq!(
            Error::network(
                "sending webhook to",
                TARGET,
                std::io::Error::from(std::io::ErrorKind::BrokenPipe)
            )
            .error_type(),
            replaysafe_core::ERROR_TYPE_OTHER
        );

        let config = Error::config("timeout", "must be positive");
        assert_eq!(
            config.to_string(),
            "invalid configuration timeout: must be positive"
        );
        assert!(config.is_invalid() && config.is_permanent());
        assert_eq!(config.field(), Some("timeout"));
        assert_eq!(config.error_type(), "invalid");

        let io = std::io::Error::other("network is unreachable");
        let network = Error::network("sending datagram to", "udp://127.0.0.1:8125", io);
        assert!(network.is_transient());
        assert_eq!(
            network.to_string(),
            "sending datagram to udp://127.0.0.1:8125: request failed before an answer"
        );
        assert_eq!(
            replaysafe_core::error_chain(&network),
            "sending datagram to udp://127.0.0.1:8125: request failed before an answer: network is unreachable"
        );
    }
}
