//! A Prometheus Pushgateway client: one push (or delete) of one group per effect.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE;
use replaysafe_core::{
    Delivery, EffectClient, EffectDescription, EffectKind, Guard, GuardLayer, ReplayContext,
};
use replaysafe_http::{Call, Endpoint, HttpClient, SsrfPolicy, drain};
use reqwest::header::CONTENT_TYPE;
use secrecy::SecretString;
use url::Url;

use crate::Error;
use crate::exposition::{self, Sample};

/// `Content-Type` of the text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How a push changes its group at the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PushMethod {
    /// `PUT`: the group becomes exactly what is pushed. **Idempotent**: a retry or a
    /// repeat leaves the same group, whatever was pushed before. Prefer it.
    Replace,
    /// `POST`: metrics with the pushed names are replaced, other metrics of the group
    /// stay. A repeat of the same body changes nothing, but what the group holds
    /// depends on earlier pushes, so it is not idempotent as a whole.
    Merge,
    /// `DELETE`: the group is removed. Idempotent.
    Delete,
}

impl PushMethod {
    fn http(self) -> reqwest::Method {
        match self {
            PushMethod::Replace => reqwest::Method::PUT,
            PushMethod::Merge => reqwest::Method::POST,
            PushMethod::Delete => reqwest::Method::DELETE,
        }
    }

    /// `PUT`, `POST` or `DELETE`.
    pub fn as_str(self) -> &'static str {
        match self {
            PushMethod::Replace => "PUT",
            PushMethod::Merge => "POST",
            PushMethod::Delete => "DELETE",
        }
    }
}

/// One push to the Pushgateway: a group (job and grouping labels) and its samples.
///
/// The journal target is the job and the grouping label *names*
/// (`nightly_export{instance}`); grouping label values and sample label values never
/// reach the journal, only the payload digest. The summary gives the method and the
/// values (`PUT orders_total=42, lag_seconds=1.5`).
///
/// ```
/// use replaysafe_metrics::{Push, Sample};
/// let push = Push::replace("nightly_export")
///     .with_grouping_label("instance", "batch-01")
///     .with_help("orders_total", "Orders exported")
///     .with_sample(Sample::counter("orders_total", 42.0).with_label("region", "eu"));
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Push {
    method: PushMethod,
    job: String,
    grouping: Vec<(String, String)>,
    samples: Vec<Sample>,
    help: BTreeMap<String, String>,
}

impl Push {
    /// A `PUT` of the group of `job`: replaces the whole group (idempotent).
    pub fn replace(job: impl Into<String>) -> Self {
        Push::new(PushMethod::Replace, job)
    }

    /// A `POST` to the group of `job`: replaces only the metrics it names.
    pub fn merge(job: impl Into<String>) -> Self {
        Push::new(PushMethod::Merge, job)
    }

    /// A `DELETE` of the group of `job`; it takes no samples.
    pub fn delete(job: impl Into<String>) -> Self {
        Push::new(PushMethod::Delete, job)
    }

    fn new(method: PushMethod, job: impl Into<String>) -> Self {
        Push {
            method,
            job: job.into(),
            grouping: Vec::new(),
            samples: Vec::new(),
            help: BTreeMap::new(),
        }
    }

    /// Adds a grouping label (a part of the group's URL, such as `instance`).
    pub fn with_grouping_label(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.grouping.push((name.into(), value.into()));
        self
    }

    /// Adds a sample.
    pub fn with_sample(mut self, sample: Sample) -> Self {
        self.samples.push(sample);
        self
    }

    /// Adds samples.
    pub fn with_samples(mut self, samples: impl IntoIterator<Item = Sample>) -> Self {
        self.samples.extend(samples);
        self
    }

    /// Sets the `# HELP` text of a pushed metric.
    pub fn with_help(mut self, metric: impl Into<String>, text: impl Into<String>) -> Self {
        self.help.insert(metric.into(), text.into());
        self
    }

    /// The method.
    pub fn method(&self) -> PushMethod {
        self.method
    }

    /// The job.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The samples.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Checks the push and renders its body.
    fn render(&self) -> Result<String, Error> {
        if self.job.is_empty() {
            return Err(Error::invalid("job", "must not be empty"));
        }
        let mut reserved = BTreeSet::from(["job"]);
        for (name, _) in &self.grouping {
            exposition::check_label_name(name)?;
            if !reserved.insert(name.as_str()) {
                return Err(Error::invalid(
                    "grouping label",
                    format!("{name:?} is given twice (job is always part of the group)"),
                ));
            }
        }
        if self.method == PushMethod::Delete {
            if !self.samples.is_empty() || !self.help.is_empty() {
                return Err(Error::invalid("sample", "a delete takes no samples"));
            }
            return Ok(String::new());
        }
        if self.samples.is_empty() {
            return Err(Error::invalid(
                "sample",
                "a push needs at least one sample (use Push::delete to remove a group)",
            ));
        }
        exposition::render(&self.samples, &self.help, &reserved)
    }

    /// `job{grouping label names}`, label names sorted: no label value.
    fn target(&self) -> String {
        if self.grouping.is_empty() {
            return self.job.clone();
        }
        let mut names: Vec<&str> = self.grouping.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        format!("{}{{{}}}", self.job, names.join(","))
    }

    fn summary(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut seen = BTreeSet::new();
        for sample in &self.samples {
            if !seen.insert(sample.name()) {
                continue;
            }
            let series = self
                .samples
                .iter()
                .filter(|s| s.name() == sample.name())
                .count();
            parts.push(if series == 1 {
                format!(
                    "{}={}",
                    sample.name(),
                    exposition::format_value(sample.value())
                )
            } else {
                format!("{}: {series} series", sample.name())
            });
        }
        if parts.is_empty() {
            self.method.as_str().to_owned()
        } else {
            format!("{} {}", self.method.as_str(), parts.join(", "))
        }
    }
}

/// A Pushgateway client; [`PushgatewayClient::builder`] makes a guarded one.
///
/// Each effect is one [`Push`] to one group; the receipt is `()`. HTTP 2xx is success;
/// 408, 425, 429 and 5xx are transient (with `Retry-After`); other statuses, redirects
/// included, are permanent. The Pushgateway takes no idempotency key: prefer
/// [`Push::replace`] so that a retry is harmless.
///
/// The Pushgateway usually runs on an internal address, which the SSRF guard refuses
/// unless allowed with [`ssrf_policy`](PushgatewayClientBuilder::ssrf_policy).
#[derive(Debug)]
pub struct PushgatewayClient {
    base: Endpoint,
    http: HttpClient,
}

/// Configures a [`PushgatewayClient`].
#[derive(Debug)]
pub struct PushgatewayClientBuilder {
    base_url: String,
    timeout: Duration,
    basic_auth: Option<(String, SecretString)>,
    ssrf: SsrfPolicy,
}

impl PushgatewayClient {
    /// A builder for a client of the gateway at `base_url` (`http://pushgateway:9091`,
    /// optionally with a path prefix).
    pub fn builder(base_url: impl Into<String>) -> PushgatewayClientBuilder {
        PushgatewayClientBuilder {
            base_url: base_url.into(),
            timeout: Duration::from_secs(10),
            basic_auth: None,
            ssrf: SsrfPolicy::default(),
        }
    }

    /// The URL of a push's group: `/metrics/job/<job>/<label>/<value>...`, a value
    /// holding `/` (or empty, `.` or `..`) in the `<label>@base64/<base64url>` form.
    pub fn group_url(&self, push: &Push) -> Url {
        self.group(push).url().clone()
    }

    fn group(&self, push: &Push) -> Endpoint {
        let mut segments = vec!["metrics".to_owned()];
        for (name, value) in std::iter::once(("job", push.job.as_str()))
            .chain(push.grouping.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        {
            if value.is_empty() || value.contains('/') || value == "." || value == ".." {
                let encoded = URL_SAFE.encode(value);
                segments.push(format!("{name}@base64"));
                segments.push(if encoded.is_empty() {
                    "=".to_owned()
                } else {
                    encoded
                });
            } else {
                segments.push(name.to_owned());
                segments.push(value.to_owned());
            }
        }
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        self.base.join(&segments)
    }
}

impl PushgatewayClientBuilder {
    /// The timeout of one request (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// HTTP basic authentication; the password is a wrapped secret.
    pub fn basic_auth(mut self, user: impl Into<String>, password: SecretString) -> Self {
        self.basic_auth = Some((user.into(), password));
        self
    }

    /// Replaces the SSRF policy (default: internal addresses refused); allow the
    /// Pushgateway's host or network here.
    pub fn ssrf_policy(mut self, policy: SsrfPolicy) -> Self {
        self.ssrf = policy;
        self
    }

    /// Builds the client without a guard; only [`build`](Self::build) is
    /// public, so no push leaves the process without the gate.
    fn build_unguarded(self) -> Result<PushgatewayClient, Error> {
        let base = Endpoint::base("base_url", &self.base_url)?;
        let mut http = HttpClient::builder("replaysafe-metrics")
            .timeout(self.timeout)
            .ssrf_policy(self.ssrf)
            .reserve_headers(&["content-type"]);
        if let Some((user, password)) = self.basic_auth {
            http = http.basic_auth(&user, password);
        }
        Ok(PushgatewayClient {
            base,
            http: http.build()?,
        })
    }

    /// Checks the configuration and builds the client inside a [`Guard`]: give it the
    /// journal (an `Arc<JsonlJournal>`, say) or a [`GuardLayer`] shared with other guards
    /// (`&layer`). The raw client is never handed out.
    pub fn build(self, guard: impl Into<GuardLayer>) -> Result<Guard<PushgatewayClient>, Error> {
        Ok(guard.into().layer(self.build_unguarded()?))
    }
}

#[async_trait]
impl EffectClient for PushgatewayClient {
    type Effect = Push;
    type Receipt = ();
    type Error = Error;

    fn describe(&self, _cx: &ReplayContext, push: &Push) -> Result<EffectDescription, Error> {
        let body = push.render()?;
        let message_type = match push.method {
            PushMethod::Replace => "pushgateway_put",
            PushMethod::Merge => "pushgateway_post",
            PushMethod::Delete => "pushgateway_delete",
        };
        Ok(
            EffectDescription::new(EffectKind::Metric, message_type, push.target())
                .map_err(|e| Error::invalid("job", e))?
                .with_summary(push.summary())
                .with_payload(body.as_bytes()),
        )
    }

    async fn deliver(&self, _delivery: &Delivery<'_>, push: &Push) -> Result<(), Error> {
        let body = push.render()?;
        let action = format!("pushing metrics ({}) to", push.method.as_str());
        let shown = format!(
            "{} group {}",
            self.base.target().trim_end_matches('/'),
            push.target()
        );
        let group = self.group(push);
        let request = self
            .http
            .request(push.method.http(), &group)
            .header(CONTENT_TYPE, TEXT_FORMAT)
            .body(body);
        let call = Call {
            action: &action,
            endpoint: &group,
            target_as_journaled: &shown,
            quote_error_body: false,
        };
        drain(self.http.send(call, request).await?).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_round_trips_through_json() {
        let push = Push::replace("orders")
            .with_grouping_label("instance", "a")
            .with_sample(Sample::counter("orders_total", 42.0));
        let json = serde_json::to_string(&push).unwrap();
        assert!(json.contains(r#""method":"replace""#), "{json}");
        assert_eq!(serde_json::from_str::<Push>(&json).unwrap(), push);
        let metric = crate::StatsdMetric::counter("orders", 3);
        let json = serde_json::to_string(&metric).unwrap();
        assert_eq!(
            serde_json::from_str::<crate::StatsdMetric>(&json).unwrap(),
            metric
        );
    }

    fn client(base: &str) -> PushgatewayClient {
        PushgatewayClient::builder(base).build_unguarded().unwrap()
    }

    #[test]
    fn group_urls_escape_values() {
        let client = client("http://127.0.0.1:9091/prefix/");
        let push = Push::replace("nightly export")
            .with_grouping_label("path", "/var/tmp")
            .with_grouping_label("empty", "")
            .with_grouping_label("instance", "a?b");
        assert_eq!(
            client.group_url(&push).as_str(),
            "http://127.0.0.1:9091/prefix/metrics/job/nightly%20export\
             /path@base64/L3Zhci90bXA=/empty@base64/=/instance/a%3Fb"
        );
        let push = Push::replace("a/b");
        assert_eq!(
            client.group_url(&push).path(),
            "/prefix/metrics/job@base64/YS9i"
        );
    }

    #[test]
    fn targets_hold_names_not_values() {
        let push = Push::replace("nightly_export")
            .with_grouping_label("region", "eu")
            .with_grouping_label("instance", "secret-host")
            .with_sample(Sample::gauge("lag_seconds", 1.5))
            .with_sample(Sample::counter("orders_total", 1.0).with_label("c", "x"))
            .with_sample(Sample::counter("orders_total", 2.0).with_label("c", "y"));
        assert_eq!(push.target(), "nightly_export{instance,region}");
        assert_eq!(
            push.summary(),
            "PUT lag_seconds=1.5, orders_total: 2 series"
        );
        assert_eq!(Push::delete("j").summary(), "DELETE");
    }

    #[test]
    fn invalid_pushes_name_the_field() {
        let cases = [
            (Push::replace(""), "job"),
            (Push::replace("j"), "sample"),
            (
                Push::replace("j")
                    .with_grouping_label("job", "x")
                    .with_sample(Sample::gauge("g", 1.0)),
                "grouping label",
            ),
            (
                Push::replace("j")
                    .with_grouping_label("bad-name", "x")
                    .with_sample(Sample::gauge("g", 1.0)),
                "label name",
            ),
            (
                Push::delete("j").with_sample(Sample::gauge("g", 1.0)),
                "sample",
            ),
        ];
        for (push, field) in cases {
            assert_eq!(push.render().unwrap_err().field(), Some(field));
        }
    }

    #[test]
    fn base_urls_are_checked() {
        for bad in [
            "ftp://host",
            "http://user:pw@host:9091",
            "http://host?x=1",
            "not a url",
        ] {
            let error = PushgatewayClient::builder(bad)
                .build_unguarded()
                .unwrap_err();
            assert_eq!(error.field(), Some("base_url"), "{bad}");
            assert!(!error.to_string().contains("pw@"), "{error}");
        }
    }
}
