//! Sending JSON and classifying answers, the same way the webhook adapter does
//! ([`replaysafe_webhook::classify_status`]).

use std::time::Duration;

use replaysafe_webhook::{ResponseClass, classify_status, transport_failure};
use url::Url;

use crate::Error;

/// A reqwest client that never follows redirects.
pub(crate) fn client(timeout: Duration) -> Result<reqwest::Client, Error> {
    reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| Error::invalid("http client", e.without_url()))
}

/// An http(s) URL with a host and without credentials, query or fragment.
pub(crate) fn base_url(field: &'static str, text: &str) -> Result<Url, Error> {
    let url = Url::parse(text).map_err(|e| Error::invalid(field, e))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(Error::invalid(
            field,
            "must be an http or https URL with a host",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Error::invalid(field, "must not hold credentials"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(Error::invalid(field, "must not have a query or fragment"));
    }
    Ok(url)
}

/// `base` with `segments` appended to its path.
pub(crate) fn join(base: &Url, segments: &[&str]) -> Url {
    let mut url = base.clone();
    url.path_segments_mut()
        .expect("an http(s) URL has path segments")
        .pop_if_empty()
        .extend(segments);
    url
}

/// Sends `request`; a 2xx answer is returned, anything else is a classified error
/// saying `what` was being done. With `detail`, up to 200 characters of an error
/// answer's body are added to the message (never for receivers that might echo a secret).
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    what: &str,
    detail: bool,
) -> Result<reqwest::Response, Error> {
    let response = request.send().await.map_err(|e| transport(what, e))?;
    let status = response.status();
    let class = classify_status(status, response.headers());
    if class.is_success() {
        return Ok(response);
    }
    let mut message = format!(
        "{what}: {} {}",
        status.as_u16(),
        status
            .canonical_reason()
            .unwrap_or("unknown status")
            .to_lowercase()
    );
    if detail {
        let body = response.text().await.unwrap_or_default();
        let body: String = body
            .trim()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(200)
            .collect();
        if !body.is_empty() {
            message.push_str(": ");
            message.push_str(&body);
        }
    }
    let code = Some(status.as_u16());
    Err(match class {
        ResponseClass::Transient { retry_after } => {
            Error::transient(message, code, retry_after, None)
        }
        _ => Error::permanent(message, code, None),
    })
}

/// A failure without an answer, described and classified as the webhook adapter does.
/// The URL is stripped, as it may be a secret.
pub(crate) fn transport(what: &str, error: reqwest::Error) -> Error {
    let failure = transport_failure(error);
    let message = format!("{what}: {}", failure.cause);
    if failure.transient {
        Error::transient(message, None, None, Some(Box::new(failure.error)))
    } else {
        Error::permanent(message, None, Some(Box::new(failure.error)))
    }
}
