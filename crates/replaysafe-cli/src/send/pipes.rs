//! Dagster Pipes: what a `send` did, reported back to Dagster as a custom message, so the
//! Dagster UI shows what a run delivered and what it would have sent.
//!
//! When `DAGSTER_PIPES_MESSAGES` is set (Dagster's Pipes clients set it), `send` writes one
//! `report_custom_message` with the counts of its effects, `{"replaysafe": {"delivered",
//! "suppressed", "failed", "in_doubt"}}`, to the channel it names: a file (`path`) or a
//! standard stream (`stdio`, `buffered_stdio`). `send` only reports into the process's
//! Pipes session; opening and closing it are the process's own (a `dagster_pipes` script
//! around the command, or none).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable Dagster's Pipes clients name the message channel in.
const MESSAGES: &str = "DAGSTER_PIPES_MESSAGES";

/// What became of one effect, counted for the report.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counted {
    Delivered,
    Suppressed,
    Failed,
    InDoubt,
}

static COUNTS: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// Counts one effect's outcome.
pub(crate) fn count(outcome: Counted) {
    COUNTS[outcome as usize].fetch_add(1, Ordering::Relaxed);
}

/// Reports the counts to Dagster when the process runs under Pipes and counted anything.
/// A channel that cannot be written to is said on stderr; the send's exit code stands.
pub fn report() {
    let Some(value) = std::env::var_os(MESSAGES) else {
        return;
    };
    let [delivered, suppressed, failed, in_doubt] =
        COUNTS.each_ref().map(|count| count.load(Ordering::Relaxed));
    if delivered + suppressed + failed + in_doubt == 0 {
        return;
    }
    let message = serde_json::json!({
        "__dagster_pipes_version": "0.1",
        "method": "report_custom_message",
        "params": {"payload": {"replaysafe": {
            "delivered": delivered,
            "suppressed": suppressed,
            "failed": failed,
            "in_doubt": in_doubt,
        }}},
    });
    if let Err(error) = write(&value.to_string_lossy(), &message) {
        eprintln!("replaysafe: the counts were not reported to Dagster Pipes: {error:#}");
    }
}

fn write(value: &str, message: &serde_json::Value) -> anyhow::Result<()> {
    let params = replaysafe_core::dagster::decode_params(MESSAGES, value)?;
    let line = format!("{message}\n");
    let stream = |key: &str| params.get(key).and_then(serde_json::Value::as_str);
    if let Some(path) = stream("path") {
        // One write of the whole line, appended: other writers of the session interleave
        // by lines.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| anyhow::anyhow!("{MESSAGES} names the file {path}: {e}"))?;
        file.write_all(line.as_bytes())?;
        return Ok(());
    }
    match stream("stdio").or_else(|| stream("buffered_stdio")) {
        Some("stderr") => std::io::stderr().write_all(line.as_bytes())?,
        Some("stdout") => std::io::stdout().write_all(line.as_bytes())?,
        _ => anyhow::bail!(
            "{MESSAGES} names a channel replaysafe does not write to (a file `path` or `stdio` stderr/stdout)"
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use base64::Engine as _;

    use super::*;

    /// A Pipes parameter as Dagster encodes it: base64 of zlib of JSON.
    fn encode(params: &serde_json::Value) -> String {
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(params.to_string().as_bytes()).unwrap();
        base64::engine::general_purpose::STANDARD.encode(encoder.finish().unwrap())
    }

    #[test]
    fn a_message_is_appended_to_the_file_the_channel_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        std::fs::write(&path, "{\"method\": \"opened\"}\n").unwrap();
        let message = serde_json::json!({"method": "report_custom_message"});
        let channel = encode(&serde_json::json!({"path": path}));
        write(&channel, &message).unwrap();
        write(&channel, &message).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1], message.to_string());
    }

    #[test]
    fn a_channel_it_cannot_write_to_is_an_error_naming_the_variable() {
        let message = serde_json::json!({});
        let unknown = write(&encode(&serde_json::json!({"s3": "bucket"})), &message);
        assert!(unknown.unwrap_err().to_string().contains(MESSAGES));
        let garbled = write("not base64!", &message);
        assert!(format!("{:#}", garbled.unwrap_err()).contains(MESSAGES));
    }
}
