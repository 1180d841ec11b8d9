//! Airflow's REST API (`/api/v2`) on 127.0.0.1, spoken as HTTP/1.0 over a plain socket:
//! one request per connection, the body read to the end.
//!
//! The API server runs SimpleAuthManager (Airflow 3's default) with one admin user whose
//! password xtask writes: requests carry a JWT from `POST /auth/token`, fetched once.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

/// A client for the API server on `127.0.0.1:port`, logged in as `user`.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    pub(crate) port: u16,
    pub(crate) user: String,
    password: String,
    token: Arc<Mutex<Option<String>>>,
}

impl Api {
    pub(crate) fn new(port: u16, user: &str, password: &str) -> Self {
        Api {
            port,
            user: user.to_owned(),
            password: password.to_owned(),
            token: Arc::default(),
        }
    }

    /// The admin's password, for checks that log in themselves.
    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// A JWT for the admin user, fetched on first use.
    fn token(&self) -> anyhow::Result<String> {
        let mut token = self.token.lock().expect("the token lock is not poisoned");
        if let Some(token) = token.as_ref() {
            return Ok(token.clone());
        }
        let body = serde_json::json!({"username": self.user, "password": self.password});
        let (status, text) = self.exchange("POST", "/auth/token", Some(&body), None)?;
        if status != 201 && status != 200 {
            bail!("POST /auth/token: status {status}: {text}");
        }
        let answer: Value = serde_json::from_str(&text).context("POST /auth/token: not JSON")?;
        let fresh = answer["access_token"]
            .as_str()
            .context("POST /auth/token: no access_token")?
            .to_owned();
        *token = Some(fresh.clone());
        Ok(fresh)
    }

    /// `GET path`, expecting 200 and a JSON body.
    pub(crate) fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.json("GET", path, None)
    }

    /// `PATCH path` with a JSON body, expecting 200 and a JSON body.
    pub(crate) fn patch(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.json("PATCH", path, Some(body))
    }

    fn json(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let (status, text) = self
            .request(method, path, body)
            .with_context(|| format!("{method} {path}"))?;
        if status != 200 {
            bail!("{method} {path}: status {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {path}: not JSON: {text}"))
    }

    /// Sends one request as the admin user and returns the status and the body.
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, String)> {
        let authorization = format!("Bearer {}", self.token()?);
        self.exchange(method, path, body, Some(&authorization))
    }

    /// Sends one request with the given `Authorization` header (or none).
    pub(crate) fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        authorization: Option<&str>,
    ) -> anyhow::Result<(u16, String)> {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let authorization = authorization
            .map(|value| format!("Authorization: {value}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\nAccept: application/json\r\n\
             {authorization}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream.write_all(request.as_bytes())?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        let answer = String::from_utf8_lossy(&answer);
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .context("answer without a header end")?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .with_context(|| format!("no status in {head:?}"))?;
        Ok((status, body.to_owned()))
    }
}

/// Escapes a path segment (run ids hold `:` and `+`).
pub(crate) fn segment(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            escaped.push(char::from(byte));
        } else {
            escaped.push_str(&format!("%{byte:02X}"));
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_escaped_as_one_segment() {
        assert_eq!(
            segment("backfill__2026-12-01T02:30:00+00:00"),
            "backfill__2026-12-01T02%3A30%3A00%2B00%3A00"
        );
    }
}
