//! How an HTTP response is classified: success, worth retrying, or final.
//!
//! Every HTTP adapter classifies this way, through [`crate::HttpClient`].

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};

/// What an HTTP response means to a sender that follows the Standard Webhooks delivery rules.
///
/// | status | class |
/// |---|---|
/// | 2xx | [`Success`](ResponseClass::Success) |
/// | 408, 425, 429, 5xx | [`Transient`](ResponseClass::Transient), with the `Retry-After` the receiver sent |
/// | 410 | [`Gone`](ResponseClass::Gone): the endpoint was removed; stop sending to it |
/// | 3xx | [`Redirect`](ResponseClass::Redirect): a failure; redirects are never followed |
/// | other 4xx, anything else | [`Rejected`](ResponseClass::Rejected) |
///
/// Only `Transient` is worth retrying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResponseClass {
    /// The receiver accepted the request.
    Success,
    /// Trying again later may succeed.
    Transient {
        /// How long the receiver asked us to wait, from `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// 410 Gone: the endpoint no longer exists.
    Gone,
    /// A 3xx answer, which is a failure: it is not followed.
    Redirect,
    /// The receiver refused the request for good.
    Rejected,
}

impl ResponseClass {
    /// Whether the request was accepted.
    pub fn is_success(self) -> bool {
        self == ResponseClass::Success
    }

    /// Whether trying again later may succeed.
    pub fn is_transient(self) -> bool {
        matches!(self, ResponseClass::Transient { .. })
    }

    /// Whether trying again cannot succeed.
    pub fn is_permanent(self) -> bool {
        !self.is_success() && !self.is_transient()
    }

    /// The wait the receiver asked for, on a transient answer.
    pub fn retry_after(self) -> Option<Duration> {
        match self {
            ResponseClass::Transient { retry_after } => retry_after,
            _ => None,
        }
    }
}

/// Classifies a response by its status and headers; an HTTP-date `Retry-After` is
/// measured from the system clock.
///
/// ```
/// use reqwest::StatusCode;
/// use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
/// use replaysafe_http::{classify_status, ResponseClass};
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
/// let class = classify_status(StatusCode::TOO_MANY_REQUESTS, &headers);
/// assert_eq!(class.retry_after(), Some(Duration::from_secs(7)));
/// assert_eq!(classify_status(StatusCode::GONE, &HeaderMap::new()), ResponseClass::Gone);
/// assert!(classify_status(StatusCode::FOUND, &HeaderMap::new()).is_permanent());
/// ```
pub fn classify_status(status: StatusCode, headers: &HeaderMap) -> ResponseClass {
    classify(status, headers, SystemTime::now)
}

/// [`classify_status`] with the current time given, for an HTTP-date `Retry-After`.
pub fn classify_status_at(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
) -> ResponseClass {
    classify(status, headers, || now)
}

/// The rule itself; the clock is read only for a transient answer's `Retry-After`.
fn classify(
    status: StatusCode,
    headers: &HeaderMap,
    now: impl FnOnce() -> SystemTime,
) -> ResponseClass {
    match status.as_u16() {
        200..=299 => ResponseClass::Success,
        300..=399 => ResponseClass::Redirect,
        408 | 425 | 429 | 500..=599 => ResponseClass::Transient {
            retry_after: headers
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| parse_retry_after(value, now())),
        },
        410 => ResponseClass::Gone,
        _ => ResponseClass::Rejected,
    }
}

/// Parses a `Retry-After` value (RFC 9110, section 10.2.3): delta-seconds (`120`) or an
/// HTTP-date (`Wed, 21 Oct 2026 07:28:00 GMT`), measured from `now`. A date in the past is
/// zero; anything else unparsable is `None`.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use replaysafe_http::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
/// let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
/// assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(30)));
/// assert_eq!(parse_retry_after("soon", now), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits to fit is still "a very long time".
        let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use reqwest::header::HeaderValue;

    use super::*;

    fn class(status: u16) -> ResponseClass {
        classify_status(StatusCode::from_u16(status).unwrap(), &HeaderMap::new())
    }

    #[test]
    fn statuses_are_classified_as_the_delivery_rules_say() {
        for status in [200, 201, 202, 204, 299] {
            assert!(class(status).is_success(), "{status}");
        }
        for status in [408, 425, 429, 500, 502, 503, 504, 599] {
            assert!(class(status).is_transient(), "{status}");
        }
        for status in [300, 301, 302, 303, 304, 307, 308] {
            assert_eq!(class(status), ResponseClass::Redirect, "{status}");
            assert!(class(status).is_permanent());
        }
        assert_eq!(class(410), ResponseClass::Gone);
        for status in [400, 401, 403, 404, 405, 409, 413, 422, 451, 600] {
            assert_eq!(class(status), ResponseClass::Rejected, "{status}");
        }
    }

    #[test]
    fn retry_after_in_both_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(parse_retry_after(" 5 ", now), Some(Duration::from_secs(5)));
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        let in_a_minute = httpdate::fmt_http_date(now + Duration::from_secs(60));
        assert_eq!(
            parse_retry_after(&in_a_minute, now),
            Some(Duration::from_secs(60))
        );
        let an_hour_ago = httpdate::fmt_http_date(now - Duration::from_secs(3600));
        assert_eq!(parse_retry_after(&an_hour_ago, now), Some(Duration::ZERO));
        // The obsolete RFC 850 form is accepted too.
        assert_eq!(
            parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", UNIX_EPOCH),
            Some(Duration::from_secs(784_111_777))
        );
        for bad in ["", "-5", "1.5", "tomorrow", "5 s"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn retry_after_only_on_transient_answers() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("9"));
        let now = SystemTime::now();
        assert_eq!(
            classify_status_at(StatusCode::SERVICE_UNAVAILABLE, &headers, now).retry_after(),
            Some(Duration::from_secs(9))
        );
        assert_eq!(
            classify_status_at(StatusCode::MOVED_PERMANENTLY, &headers, now).retry_after(),
            None
        );
        headers.insert(RETRY_AFTER, HeaderValue::from_static("later"));
        assert_eq!(
            classify_status_at(StatusCode::TOO_MANY_REQUESTS, &headers, now),
            ResponseClass::Transient { retry_after: None }
        );
    }
}
