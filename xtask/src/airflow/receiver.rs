//! A loopback HTTP receiver that answers 200 to every request and records each one as a
//! JSON line (method, path, headers, body), so a check can count what arrived.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};

/// The largest body the receiver accepts.
const MAX_BODY: usize = 1 << 20;

/// A running receiver; dropping it stops it.
#[derive(Debug)]
pub(crate) struct Receiver {
    port: u16,
    log: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// One recorded request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) path: String,
    /// Header names are lower case.
    pub(crate) headers: serde_json::Value,
    pub(crate) body: String,
}

impl Receiver {
    /// Listens on 127.0.0.1 (a free port) and appends every request to `log`.
    pub(crate) fn start(log: &Path) -> anyhow::Result<Self> {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding the receiver")?;
        let port = listener.local_addr()?.port();
        std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            let log = log.to_path_buf();
            move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(stream) = stream
                        && let Err(error) = serve(stream, &log)
                    {
                        eprintln!("xtask airflow: receiver: {error:#}");
                    }
                }
            }
        });
        Ok(Receiver {
            port,
            log: log.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    /// The receiver's base URL.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request recorded so far, read back from the log.
    pub(crate) fn requests(&self) -> anyhow::Result<Vec<Request>> {
        let text = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))?;
        text.lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line)
                    .with_context(|| format!("{}: not JSON: {line}", self.log.display()))?;
                Ok(Request {
                    path: value["path"].as_str().unwrap_or_default().to_owned(),
                    headers: value["headers"].clone(),
                    body: value["body"].as_str().unwrap_or_default().to_owned(),
                })
            })
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept so the thread sees the flag.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one request, records it, answers 200 and closes the connection.
fn serve(stream: TcpStream, log: &Path) -> anyhow::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        // A bare connect (the wake-up on drop) or garbage: nothing to record.
        return Ok(());
    };
    let mut headers = serde_json::Map::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            bail!("connection closed inside the headers");
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            bail!("malformed header line {line:?}");
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "content-length" {
            length = value.parse().context("content-length")?;
        }
        if name == "transfer-encoding" {
            bail!("transfer-encoding {value:?} is not supported; send a content-length");
        }
        headers.insert(name, value.into());
    }
    if length > MAX_BODY {
        bail!("body of {length} bytes is over the {MAX_BODY}-byte cap");
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let record = serde_json::json!({
        "method": method,
        "path": path,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    let mut file = std::fs::OpenOptions::new().append(true).open(log)?;
    file.write_all(format!("{record}\n").as_bytes())?;
    let mut stream = reader.into_inner();
    stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_each_request_and_answers_200() {
        let dir = std::env::temp_dir().join(format!("xtask-receiver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let receiver = Receiver::start(&dir.join("received.jsonl")).unwrap();
        let address = receiver.url().trim_start_matches("http://").to_owned();
        for body in [r#"{"run_id":"a"}"#, r#"{"run_id":"b"}"#] {
            let mut stream = TcpStream::connect(&address).unwrap();
            let request = format!(
                "POST /hooks/x HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(request.as_bytes()).unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        }
        let requests = receiver.requests().unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].path, "/hooks/x");
        assert_eq!(requests[0].headers["content-length"], "14");
        assert_eq!(requests[1].body, r#"{"run_id":"b"}"#);
        drop(receiver);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
