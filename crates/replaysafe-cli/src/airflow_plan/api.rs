//! Airflow 3's API server, read for `plan --airflow`: a client that reaches the host
//! `--airflow` names and nothing else, logged in as `send trigger --airflow` logs in.

use anyhow::{Context, anyhow, bail};
use chrono::{DateTime, TimeDelta, Utc};
use replaysafe_http::{Call, Endpoint, HttpClient, Method, SsrfPolicy};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;

use super::graph::{
    AssetJson, AssetPage, DagJson, DependencyGraph, DryRun, Source, TaskJson, TaskPage,
};
use super::{Auth, Reprocess};

/// Assets asked for per page (Airflow's default maximum page size).
const PAGE: usize = 100;

/// A logged-in client for the API server at `--airflow`.
#[derive(Debug)]
pub(crate) struct Airflow {
    runtime: tokio::runtime::Runtime,
    client: HttpClient,
    base: Endpoint,
    auth: Auth,
    token: Option<SecretString>,
}

/// A request that did not get a 2xx answer, or whose answer was not what Airflow sends.
#[derive(Debug)]
pub(crate) enum Failed {
    /// No answer, or an answer that is not a 2xx (its [`status`](replaysafe_http::Error::status)).
    Http(replaysafe_http::Error),
    /// A 2xx answer that is not the JSON expected.
    Other(anyhow::Error),
}

impl Failed {
    fn status(&self) -> Option<u16> {
        match self {
            Failed::Http(error) => error.status(),
            Failed::Other(_) => None,
        }
    }
}

impl From<Failed> for anyhow::Error {
    fn from(failed: Failed) -> Self {
        match failed {
            Failed::Http(error) => error.into(),
            Failed::Other(error) => error,
        }
    }
}

/// The flags an error about reaching or logging in to Airflow is about.
fn blame(auth: &Auth, error: &replaysafe_http::Error) -> Option<&'static str> {
    match (error.status(), auth) {
        (None, _) if error.is_connect() || error.is_timeout() || error.is_ssrf_refused() => {
            Some("--airflow")
        }
        (Some(401 | 403), Auth::Token(_)) => Some("--token-env"),
        (Some(401 | 403), Auth::Login { .. }) => Some("--user and --password-env"),
        (Some(401 | 403), Auth::None) => {
            Some("Airflow asks for a login (--user and --password-env, or --token-env)")
        }
        _ => None,
    }
}

impl Airflow {
    /// A client for `base_url`, logged in with `auth` (a JWT from `POST /auth/token` for a
    /// user and password, as [`replaysafe_webhook::airflow_token`] gets it for triggers).
    ///
    /// The SSRF guard is the one every HTTP client of replaysafe has: an internal address
    /// (loopback, private, link-local, a cloud's metadata address) is refused unless
    /// `allow_hosts` (`--allow-host`) lets it through; redirects are not followed.
    pub(crate) fn connect(
        base_url: &str,
        allow_hosts: &[String],
        auth: Auth,
    ) -> anyhow::Result<Self> {
        let base = Endpoint::base("--airflow", base_url).map_err(|e| anyhow!("{e}"))?;
        let ssrf = SsrfPolicy::allowing(allow_hosts).map_err(|e| anyhow!("--allow-host: {e}"))?;
        let client = HttpClient::builder("replaysafe-plan")
            .ssrf_policy(ssrf)
            .build()
            .context("--airflow")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let token = match &auth {
            Auth::None => None,
            Auth::Token(token) => Some(token.clone()),
            Auth::Login { user, password } => Some(
                runtime
                    .block_on(replaysafe_webhook::airflow_token(
                        &client, &base, user, password,
                    ))
                    .map_err(|error| {
                        let flag = match blame(&auth, &error) {
                            Some("--airflow") => "--airflow",
                            _ => "--user and --password-env",
                        };
                        anyhow::Error::from(error).context(flag)
                    })?,
            ),
        };
        Ok(Airflow {
            runtime,
            client,
            base,
            auth,
            token,
        })
    }

    /// The DAG to backfill: an error naming the flag at fault when Airflow has no such
    /// DAG, cannot be reached, or refuses the login.
    pub(crate) fn backfilled_dag(&self, dag_id: &str) -> anyhow::Result<DagJson> {
        match self.call(Method::GET, &["api", "v2", "dags", dag_id], &[], None) {
            Ok(dag) => Ok(dag),
            Err(failed) if failed.status() == Some(404) => {
                bail!("--dag-id: Airflow has no DAG {dag_id}")
            }
            Err(Failed::Http(error)) => {
                let flag = blame(&self.auth, &error);
                let error = anyhow::Error::from(error);
                Err(match flag {
                    Some(flag) => error.context(flag),
                    None => error.context(format!("reading DAG {dag_id}")),
                })
            }
            Err(Failed::Other(error)) => Err(error.context(format!("reading DAG {dag_id}"))),
        }
    }

    /// The base URL as errors and the output show it.
    pub(crate) fn shown(&self) -> String {
        self.base.to_string()
    }

    /// One request; the answer's JSON read as `T`.
    fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &[&str],
        query: &[(&str, String)],
        body: Option<serde_json::Value>,
    ) -> Result<T, Failed> {
        self.call_quoting(method, path, query, body, false)
    }

    /// [`call`](Self::call); with `quote_error_body`, an error answer's text is part of the
    /// error (Airflow's 422 says why a dry run cannot be made). Only for calls whose answer
    /// cannot echo the request's credentials back.
    fn call_quoting<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &[&str],
        query: &[(&str, String)],
        body: Option<serde_json::Value>,
        quote_error_body: bool,
    ) -> Result<T, Failed> {
        let endpoint = self.base.join(path);
        let shown = endpoint.to_string();
        let action = if method == Method::GET {
            "reading"
        } else {
            "asking"
        };
        let mut request = self
            .client
            .request(method, &endpoint)
            .header("accept", "application/json");
        if !query.is_empty() {
            request = request.query(query);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token.expose_secret().trim());
        }
        let call = Call {
            action,
            endpoint: &endpoint,
            target_as_journaled: &shown,
            quote_error_body,
        };
        let bytes = self.runtime.block_on(async {
            let response = self
                .client
                .send(call, request)
                .await
                .map_err(Failed::Http)?;
            response.bytes().await.map_err(|error| {
                Failed::Other(anyhow!("{action} {shown}: {}", error.without_url()))
            })
        })?;
        serde_json::from_slice(&bytes).map_err(|error| {
            Failed::Other(anyhow!(
                "{action} {shown}: the answer is not what Airflow 3 sends: {error}"
            ))
        })
    }

    /// The runs a backfill of `dag_id` over `[start, end)` would create, as Airflow's own
    /// dry run lists them. Airflow's `to_date` is inclusive, so `end` is sent less 1 µs.
    pub(crate) fn dry_run(
        &self,
        dag_id: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        reprocess: Reprocess,
    ) -> anyhow::Result<DryRun> {
        // Airflow reads times to the microsecond: [start, end) is every microsecond from
        // start rounded up to end rounded up, less one.
        let (from, to) = (ceil_micros(start), ceil_micros(end));
        if to <= from {
            return Ok(DryRun::default());
        }
        let inclusive_end = to - TimeDelta::microseconds(1);
        let body = serde_json::json!({
            "dag_id": dag_id,
            "from_date": rfc3339_micros(from),
            "to_date": rfc3339_micros(inclusive_end),
            "reprocess_behavior": reprocess.as_str(),
        });
        // The dry run's answer is not about the login: its detail (why no backfill of this
        // DAG can be planned) is worth showing.
        self.call_quoting(
            Method::POST,
            &["api", "v2", "backfills", "dry_run"],
            &[],
            Some(body),
            true,
        )
        .map_err(anyhow::Error::from)
        .with_context(|| {
            format!(
                "asking Airflow which runs a backfill of {dag_id} would create (without --every)"
            )
        })
    }

    /// The UI's dependency graph, for the DAGs TriggerDagRunOperators start.
    pub(crate) fn dependencies(&self) -> Result<DependencyGraph, Failed> {
        self.call(Method::GET, &["ui", "dependencies"], &[], None)
    }
}

/// `time` rounded up to the microsecond.
fn ceil_micros(time: DateTime<Utc>) -> DateTime<Utc> {
    let below = i64::from(time.timestamp_subsec_nanos() % 1_000);
    if below == 0 {
        time
    } else {
        time + TimeDelta::nanoseconds(1_000 - below)
    }
}

/// RFC 3339 with microseconds, `Z`: what Airflow's API parses.
fn rfc3339_micros(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl Source for Airflow {
    fn dag(&mut self, dag_id: &str) -> anyhow::Result<Option<DagJson>> {
        match self.call(Method::GET, &["api", "v2", "dags", dag_id], &[], None) {
            Ok(dag) => Ok(Some(dag)),
            Err(failed) if failed.status() == Some(404) => Ok(None),
            Err(failed) => {
                Err(anyhow::Error::from(failed).context(format!("reading DAG {dag_id}")))
            }
        }
    }

    fn assets(&mut self, dag_id: &str) -> anyhow::Result<Vec<AssetJson>> {
        let mut assets = Vec::new();
        loop {
            let query = [
                ("dag_ids", dag_id.to_owned()),
                ("limit", PAGE.to_string()),
                ("offset", assets.len().to_string()),
            ];
            let page: AssetPage = self
                .call(Method::GET, &["api", "v2", "assets"], &query, None)
                .map_err(anyhow::Error::from)
                .with_context(|| format!("reading the assets of {dag_id}"))?;
            let done = page.assets.is_empty();
            assets.extend(page.assets);
            if done || assets.len() >= page.total_entries {
                return Ok(assets);
            }
        }
    }

    fn tasks(&mut self, dag_id: &str) -> anyhow::Result<Vec<TaskJson>> {
        let page: TaskPage = self
            .call(
                Method::GET,
                &["api", "v2", "dags", dag_id, "tasks"],
                &[],
                None,
            )
            .map_err(anyhow::Error::from)
            .with_context(|| format!("reading the tasks of {dag_id}"))?;
        Ok(page.tasks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_up_to_the_microsecond() {
        let at = |text: &str| DateTime::parse_from_rfc3339(text).unwrap().to_utc();
        assert_eq!(
            ceil_micros(at("2026-08-04T00:00:00Z")),
            at("2026-08-04T00:00:00Z")
        );
        assert_eq!(
            ceil_micros(at("2026-08-04T00:00:00.0000001Z")),
            at("2026-08-04T00:00:00.000001Z")
        );
        assert_eq!(
            ceil_micros(at("2026-08-04T00:00:00.000001Z")),
            at("2026-08-04T00:00:00.000001Z")
        );
    }
}
