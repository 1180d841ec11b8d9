//! HTTP status classification for the Pushgateway client: the webhook adapter's rules
//! ([`replaysafe_webhook::classify_status`]), so every HTTP adapter retries alike.
//!
//! 2xx is success; 408, 425, 429 and 5xx are transient (with `Retry-After`, in seconds or
//! as an HTTP date); every other status, redirects included, is a permanent failure: a
//! redirect is never followed, since it would send the effect somewhere not configured.

use replaysafe_webhook::{ResponseClass, classify_status, transport_failure};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use crate::Error;

/// Turns a response status into `Ok` or the classified error, `what` saying what was being done.
pub(crate) fn check(status: StatusCode, headers: &HeaderMap, what: &str) -> Result<(), Error> {
    let class = classify_status(status, headers);
    if class.is_success() {
        return Ok(());
    }
    let code = status.as_u16();
    let message = format!(
        "{what}: {code} {}",
        status
            .canonical_reason()
            .unwrap_or("unknown status")
            .to_lowercase()
    );
    match class {
        ResponseClass::Transient { retry_after } => {
            Err(Error::transient(message, Some(code), retry_after, None))
        }
        _ => Err(Error::permanent(message, Some(code), None)),
    }
}

/// A network-level failure (no status), described and classified as the webhook adapter
/// does; the URL is stripped from the source, as it may be a secret.
pub(crate) fn transport(what: &str, error: reqwest::Error) -> Error {
    let failure = transport_failure(error);
    let message = format!("{what}: {}", failure.cause);
    if failure.transient {
        Error::transient(message, None, None, Some(Box::new(failure.error)))
    } else {
        Error::permanent(message, None, Some(Box::new(failure.error)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replaysafe_core::Classify;
    use reqwest::header::{HeaderValue, RETRY_AFTER};

    #[test]
    fn statuses_are_classified() {
        for code in [408, 425, 429, 500, 502, 503, 504] {
            let error =
                check(StatusCode::from_u16(code).unwrap(), &HeaderMap::new(), "x").unwrap_err();
            assert!(error.is_transient(), "{code}");
        }
        for code in [301, 302, 400, 401, 403, 404, 410, 422] {
            let error =
                check(StatusCode::from_u16(code).unwrap(), &HeaderMap::new(), "x").unwrap_err();
            assert!(error.is_permanent(), "{code}");
            assert_eq!(error.status(), Some(code));
        }
        assert!(check(StatusCode::ACCEPTED, &HeaderMap::new(), "x").is_ok());
        let error = check(
            StatusCode::SERVICE_UNAVAILABLE,
            &HeaderMap::new(),
            "pushing to x",
        )
        .unwrap_err();
        assert_eq!(error.to_string(), "pushing to x: 503 service unavailable");
    }

    #[test]
    fn retry_after_reaches_the_error() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        let error = check(StatusCode::TOO_MANY_REQUESTS, &headers, "x").unwrap_err();
        assert_eq!(error.retry_after(), Some(std::time::Duration::from_secs(7)));
    }
}
