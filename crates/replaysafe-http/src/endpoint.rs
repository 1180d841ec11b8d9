//! Endpoints: parsed once, shown only in their redacted form.

use std::fmt;

use replaysafe_core::RedactionPolicy;
use secrecy::{ExposeSecret, SecretString};
use url::Url;

use crate::Error;

/// An `http` or `https` URL with a host and without credentials, and the form the journal
/// shows: scheme, host, port when not the default, and path — never a query string, a
/// fragment or a credential.
///
/// `Debug` and `Display` show that form only. Parse errors name the field and never quote
/// the URL, whose query may hold a token.
///
/// ```
/// use replaysafe_http::Endpoint;
///
/// let hooks = Endpoint::parse("endpoint", "https://hooks.example:8443/orders?token=s3cret")?;
/// assert_eq!(hooks.to_string(), "https://hooks.example:8443/orders");
/// assert_eq!(hooks.url().query(), Some("token=s3cret"));
/// let err = Endpoint::parse("endpoint", "https://ana:s3cret@hooks.example/").unwrap_err();
/// assert!(!err.to_string().contains("s3cret"));
/// # Ok::<(), replaysafe_http::Error>(())
/// ```
#[derive(Clone)]
pub struct Endpoint {
    url: Url,
    target: String,
    /// The whole URL is a secret: the target is the origin only, whatever is joined to it.
    secret: bool,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.target)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.target)
    }
}

impl Endpoint {
    /// Parses an `http` or `https` URL with a host and no credentials; a fragment is
    /// dropped, a query kept (it is sent, never shown). Errors name `field`.
    pub fn parse(field: &'static str, text: &str) -> Result<Self, Error> {
        let mut url = parse_url(field, text)?;
        url.set_fragment(None);
        Ok(Endpoint::from_url(url))
    }

    /// Like [`Endpoint::parse`], for a base URL that paths are joined to: a query string
    /// or a fragment is refused.
    pub fn base(field: &'static str, text: &str) -> Result<Self, Error> {
        let url = parse_url(field, text)?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(Error::invalid(field, "must not have a query or fragment"));
        }
        Ok(Endpoint::from_url(url))
    }

    /// An endpoint whose whole URL is a secret (a Slack incoming-webhook URL): it shows
    /// as its origin only (scheme, host and port).
    pub fn secret(field: &'static str, url: &SecretString) -> Result<Self, Error> {
        let mut url = parse_url(field, url.expose_secret())?;
        url.set_fragment(None);
        let target = url.origin().ascii_serialization();
        Ok(Endpoint {
            url,
            target,
            secret: true,
        })
    }

    fn from_url(url: Url) -> Self {
        let target = url[..url::Position::AfterPath].to_owned();
        Endpoint {
            url,
            target,
            secret: false,
        }
    }

    /// This endpoint with `segments` appended to its path, each percent-encoded as one
    /// segment (so a `/` in a segment cannot climb out of it).
    pub fn join(&self, segments: &[&str]) -> Endpoint {
        let mut url = self.url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if self.secret {
            return Endpoint {
                url,
                target: self.target.clone(),
                secret: true,
            };
        }
        Endpoint::from_url(url)
    }

    /// The whole URL, to send to. Never print it.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// Scheme, host, port and path: what the journal shows under the default policy.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The target as `policy` shows it (the journal, log lines and errors all use this).
    pub fn shown(&self, policy: RedactionPolicy) -> String {
        policy.target().apply(&self.target).into_owned()
    }
}

fn parse_url(field: &'static str, text: &str) -> Result<Url, Error> {
    let url = Url::parse(text.trim())
        .map_err(|error| Error::invalid(field, format!("not an absolute URL ({error})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::invalid(
            field,
            format!("scheme {} is not http or https", url.scheme()),
        ));
    }
    if url.host().is_none() {
        return Err(Error::invalid(field, "has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Error::invalid(
            field,
            "carries credentials; configure them as a bearer token, basic auth or a secret header",
        ));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_keep_scheme_host_and_path_only() {
        let endpoint = Endpoint::parse(
            "endpoint",
            "https://hooks.example:8443/a/b?token=s3cret#frag",
        )
        .unwrap();
        assert_eq!(endpoint.target(), "https://hooks.example:8443/a/b");
        assert_eq!(endpoint.url().query(), Some("token=s3cret"));
        assert_eq!(endpoint.url().fragment(), None);
        assert_eq!(format!("{endpoint:?}"), "https://hooks.example:8443/a/b");
        let default_port = Endpoint::parse("endpoint", "HTTPS://Hooks.Example:443").unwrap();
        assert_eq!(default_port.target(), "https://hooks.example/");
    }

    #[test]
    fn bad_endpoints_are_named_and_not_quoted() {
        for bad in [
            "hooks.example/x?token=s3cret",
            "ftp://hooks.example/x?token=s3cret",
            "https://user:s3cret@hooks.example/x",
            "https://?token=s3cret",
        ] {
            let error = Endpoint::parse("endpoint", bad).unwrap_err();
            assert_eq!(error.field(), Some("endpoint"), "{bad}");
            assert!(!error.to_string().contains("s3cret"), "{error}");
        }
        let error = Endpoint::base("base_url", "http://am:9093/?x=s3cret").unwrap_err();
        assert_eq!(error.field(), Some("base_url"));
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }

    #[test]
    fn joined_paths_are_segments() {
        let base = Endpoint::base("base_url", "http://am:9093/prefix/").unwrap();
        let alerts = base.join(&["api", "v2", "alerts"]);
        assert_eq!(alerts.target(), "http://am:9093/prefix/api/v2/alerts");
        let sneaky = base.join(&["dags", "a/../../b"]);
        assert_eq!(
            sneaky.target(),
            "http://am:9093/prefix/dags/a%2F..%2F..%2Fb"
        );
    }

    #[test]
    fn a_secret_endpoint_shows_its_origin_only() {
        let url = SecretString::from("https://hooks.slack.example/services/T000/B000/s3cret");
        let slack = Endpoint::secret("webhook_url", &url).unwrap();
        assert_eq!(slack.to_string(), "https://hooks.slack.example");
        assert_eq!(format!("{slack:?}"), "https://hooks.slack.example");
        assert!(slack.url().path().ends_with("s3cret"));
        let bad = SecretString::from("hooks.slack.example/services/s3cret");
        let error = Endpoint::secret("webhook_url", &bad).unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }
}
