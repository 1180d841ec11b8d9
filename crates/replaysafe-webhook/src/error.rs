//! The one error type of this crate.

use std::fmt;
use std::time::Duration;

use replaysafe_core::Classify;
use reqwest::StatusCode;

use crate::{ResponseClass, SsrfRefusal};

/// Why configuring, describing or delivering a webhook or trigger failed.
///
/// Opaque: ask it questions ([`is_transient`](Classify::is_transient),
/// [`is_ssrf_refused`](Error::is_ssrf_refused), [`status`](Error::status), ...). The
/// backend's error, when there is one, is reachable through `source()`.
///
/// Messages say what was being done and to which endpoint (scheme, host and path only):
/// `sending webhook to https://partner.example/hooks: 503 service unavailable`. They never
/// hold a header value, a query string, a credential or a signing secret.
///
/// | what happened | transient? |
/// |---|---|
/// | connection failed, timed out, or broke | yes |
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
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
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
        action: Action,
        target: String,
    },
    Timeout {
        action: Action,
        target: String,
    },
    Connect {
        action: Action,
        target: String,
    },
    Transport {
        action: Action,
        target: String,
    },
    Status {
        action: Action,
        target: String,
        status: StatusCode,
        class: ResponseClass,
    },
}

/// What was being done, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Webhook,
    Trigger,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Webhook => "sending webhook to",
            Action::Trigger => "sending trigger to",
        })
    }
}

struct Display<'a>(&'a Error);

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = self.0;
        match &error.kind {
            Kind::Config { field, problem } => {
                write!(f, "invalid configuration {field}: {problem}")
            }
            Kind::Invalid { field, problem } => write!(f, "invalid {field}: {problem}"),
            Kind::Refused { action, target } => {
                write!(f, "{action} {target}: refused before connecting: ")?;
                match &error.source {
                    Some(source) => write!(f, "{source}"),
                    None => f.write_str("the SSRF policy refuses the address"),
                }
            }
            Kind::Timeout { action, target } => write!(f, "{action} {target}: timed out"),
            Kind::Connect { action, target } => {
                write!(f, "{action} {target}: connection failed")?;
                write_root_cause(f, error.source.as_deref())
            }
            Kind::Transport { action, target } => {
                write!(f, "{action} {target}: request failed before a response")?;
                write_root_cause(f, error.source.as_deref())
            }
            Kind::Status {
                action,
                target,
                status,
                class,
            } => {
                write!(f, "{action} {target}: {}", status.as_u16())?;
                if let Some(reason) = status.canonical_reason() {
                    write!(f, " {}", reason.to_ascii_lowercase())?;
                }
                match class {
                    ResponseClass::Gone => {
                        f.write_str(": the endpoint is gone; stop sending to it")
                    }
                    ResponseClass::Redirect => f.write_str(": redirects are not followed"),
                    ResponseClass::Transient {
                        retry_after: Some(wait),
                    } => write!(f, " (retry after {})", seconds(*wait)),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Appends the innermost cause (`connection refused`, say): the outer layers of a reqwest
/// error only repeat that a request failed. reqwest's URL was removed beforehand.
fn write_root_cause(
    f: &mut fmt::Formatter<'_>,
    source: Option<&(dyn std::error::Error + Send + Sync + 'static)>,
) -> fmt::Result {
    let Some(mut cause) = source.map(|source| source as &(dyn std::error::Error + 'static)) else {
        return Ok(());
    };
    while let Some(deeper) = cause.source() {
        cause = deeper;
    }
    write!(f, ": {cause}")
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

    pub(crate) fn config(field: &'static str, problem: impl Into<String>) -> Self {
        Error::new(Kind::Config {
            field,
            problem: problem.into(),
        })
    }

    pub(crate) fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        Error::new(Kind::Invalid {
            field,
            problem: problem.into(),
        })
    }

    pub(crate) fn refused(action: Action, target: &str, refusal: SsrfRefusal) -> Self {
        Error {
            kind: Kind::Refused {
                action,
                target: target.to_owned(),
            },
            source: Some(Box::new(refusal)),
        }
    }

    pub(crate) fn from_status(
        action: Action,
        target: &str,
        status: StatusCode,
        class: ResponseClass,
    ) -> Self {
        Error::new(Kind::Status {
            action,
            target: target.to_owned(),
            status,
            class,
        })
    }

    /// A reqwest failure, with the URL (which may hold a query string) removed.
    pub(crate) fn transport(action: Action, target: &str, error: reqwest::Error) -> Self {
        let error = error.without_url();
        let target = target.to_owned();
        if let Some(refusal) = SsrfRefusal::find_in(&error) {
            return Error::refused(action, &target, refusal.clone());
        }
        let kind = if error.is_timeout() {
            Kind::Timeout { action, target }
        } else if error.is_connect() {
            Kind::Connect { action, target }
        } else {
            Kind::Transport { action, target }
        };
        Error {
            kind,
            source: Some(Box::new(error)),
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
        matches!(
            self.kind,
            Kind::Status {
                class: ResponseClass::Gone,
                ..
            }
        )
    }

    /// Whether the receiver answered with a redirect, which is not followed.
    pub fn is_redirect(&self) -> bool {
        matches!(
            self.kind,
            Kind::Status {
                class: ResponseClass::Redirect,
                ..
            }
        )
    }

    /// The status the receiver answered with, when it answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self.kind {
            Kind::Status { status, .. } => Some(status),
            _ => None,
        }
    }
}

impl Classify for Error {
    fn is_transient(&self) -> bool {
        match &self.kind {
            Kind::Timeout { .. } | Kind::Connect { .. } | Kind::Transport { .. } => true,
            Kind::Status { class, .. } => class.is_transient(),
            Kind::Config { .. } | Kind::Invalid { .. } | Kind::Refused { .. } => false,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match &self.kind {
            Kind::Status { class, .. } => class.retry_after(),
            _ => None,
        }
    }
}

impl From<replaysafe_core::Error> for Error {
    fn from(error: replaysafe_core::Error) -> Self {
        Error {
            kind: Kind::Invalid {
                field: "effect",
                problem: error.to_string(),
            },
            source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_was_done() {
        let target = "https://partner.example/hooks";
        let unavailable = Error::from_status(
            Action::Webhook,
            target,
            StatusCode::SERVICE_UNAVAILABLE,
            ResponseClass::Transient { retry_after: None },
        );
        assert_eq!(
            unavailable.to_string(),
            "sending webhook to https://partner.example/hooks: 503 service unavailable"
        );
        assert!(unavailable.is_transient());

        let limited = Error::from_status(
            Action::Trigger,
            target,
            StatusCode::TOO_MANY_REQUESTS,
            ResponseClass::Transient {
                retry_after: Some(Duration::from_secs(7)),
            },
        );
        assert_eq!(
            limited.to_string(),
            "sending trigger to https://partner.example/hooks: 429 too many requests (retry after 7s)"
        );
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(7)));

        let gone = Error::from_status(
            Action::Webhook,
            target,
            StatusCode::GONE,
            ResponseClass::Gone,
        );
        assert!(gone.is_permanent() && gone.is_endpoint_gone());
        assert!(
            gone.to_string()
                .ends_with("410 gone: the endpoint is gone; stop sending to it")
        );

        let moved = Error::from_status(
            Action::Webhook,
            target,
            StatusCode::FOUND,
            ResponseClass::Redirect,
        );
        assert!(moved.is_permanent() && moved.is_redirect());
        assert!(
            moved
                .to_string()
                .ends_with("302 found: redirects are not followed")
        );

        let config = Error::config("timeout", "must be positive");
        assert_eq!(
            config.to_string(),
            "invalid configuration timeout: must be positive"
        );
        assert!(config.is_invalid() && config.is_permanent());
        assert_eq!(config.field(), Some("timeout"));
    }
}
