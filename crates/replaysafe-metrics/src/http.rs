//! HTTP status classification shared by the HTTP clients of this crate.
//!
//! 2xx is success; 408, 425, 429 and 5xx are transient (with `Retry-After`, in seconds or
//! as an HTTP date); every other status, redirects included, is a permanent failure: a
//! redirect is never followed, since it would send the effect somewhere not configured.

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};

use crate::Error;

/// Turns a response status into `Ok` or the classified error, `what` saying what was being done.
pub(crate) fn check(status: StatusCode, headers: &HeaderMap, what: &str) -> Result<(), Error> {
    if status.is_success() {
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
    if is_transient(status) {
        Err(Error::transient(
            message,
            Some(code),
            retry_after(headers, SystemTime::now()),
            None,
        ))
    } else {
        Err(Error::permanent(message, Some(code), None))
    }
}

/// 408, 425, 429 and 5xx.
pub(crate) fn is_transient(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 425 | 429) || status.is_server_error()
}

/// `Retry-After` as delta-seconds or an HTTP date (RFC 9110, section 10.2.3).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A network-level failure (no status): connection and timeout errors are transient,
/// errors building the request permanent. The URL is stripped from the source, as it
/// may be a secret.
pub(crate) fn transport(what: &str, error: reqwest::Error) -> Error {
    let error = error.without_url();
    let cause = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        format!("connection failed: {}", root_cause(&error))
    } else {
        root_cause(&error)
    };
    let message = format!("{what}: {cause}");
    if error.is_builder() {
        Error::permanent(message, None, Some(Box::new(error)))
    } else {
        Error::transient(message, None, None, Some(Box::new(error)))
    }
}

fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use replaysafe_core::Classify;
    use reqwest::header::HeaderValue;

    fn headers(retry_after: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(retry_after).unwrap());
        headers
    }

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
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(
            retry_after(&headers("7"), now),
            Some(Duration::from_secs(7))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&later), now),
            Some(Duration::from_secs(30))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after(&headers(&earlier), now), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers("soon"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }
}
