//! The effect (a file to drop) and what a drop returns.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use replaysafe_core::PayloadDigest;
use sha2::{Digest, Sha256};

use crate::Error;
use crate::error::Kind;

/// A file to drop into the remote directory: its name template, its content and its
/// message type.
///
/// The name is a template rendered from the run's context when the drop is described:
/// `{pipeline}`, `{window_start}`, `{window_end}`, `{window_start:FORMAT}` and
/// `{window_end:FORMAT}` (chrono strftime formats); `{{` and `}}` are literal braces.
/// Without a format, times render as `%Y%m%dT%H%M%SZ`. The rendered name must be one
/// file name of at most 200 bytes: no `/`, `\`, NUL or control character, not `.` or `..`.
///
/// The content's SHA-256 and size are computed once, when the drop is made, so that
/// describing it for the gate does no I/O.
///
/// ```
/// use replaysafe_sftp::FileDrop;
///
/// let csv = "id,total\n1,9.50\n";
/// let drop = FileDrop::from_bytes("orders_export", "orders_{window_start:%Y%m%d}.csv", csv);
/// assert_eq!(drop.len(), 16);
/// assert_eq!(drop.message_type(), "orders_export");
/// ```
///
/// It serializes so that an outbox row can hold it: `{"message_type", "name_template",
/// "content_base64"}` for a drop of bytes, `{"message_type", "name_template", "path"}` for
/// a drop of a local file, which is read again (and digested again) when the row is read
/// back, so the file must still be there for the worker; stage bytes for a row that
/// stands on its own.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(into = "FileDropData", try_from = "FileDropData")]
pub struct FileDrop {
    message_type: String,
    name_template: String,
    content: Content,
    digest: PayloadDigest,
}

#[derive(Clone)]
pub(crate) enum Content {
    Bytes(Arc<Vec<u8>>),
    File(Arc<PathBuf>),
}

impl FileDrop {
    /// A drop of `bytes`, named by `name_template`.
    pub fn from_bytes(
        message_type: impl Into<String>,
        name_template: impl Into<String>,
        bytes: impl Into<Vec<u8>>,
    ) -> Self {
        let bytes = bytes.into();
        let digest = PayloadDigest::of(&bytes);
        FileDrop {
            message_type: message_type.into(),
            name_template: name_template.into(),
            content: Content::Bytes(Arc::new(bytes)),
            digest,
        }
    }

    /// A drop of the local file at `path`, streamed when delivered.
    ///
    /// The file is read once now to compute its digest; if it changes before the upload
    /// ends, the upload fails (permanently) and nothing appears under the final name. A
    /// relative `path` is held as the absolute path it names now, so that a drop staged in
    /// an outbox is found by a worker running in another folder.
    ///
    /// # Errors
    ///
    /// When the file cannot be read ([`Error::is_local_file`]).
    pub fn from_file(
        message_type: impl Into<String>,
        name_template: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> Result<Self, Error> {
        let path = path.into();
        let digest = digest_file(&path)?;
        // After the digest, so that a path that cannot be made absolute (an empty one)
        // is told as the file that cannot be read.
        let path = std::path::absolute(&path).unwrap_or(path);
        Ok(FileDrop {
            message_type: message_type.into(),
            name_template: name_template.into(),
            content: Content::File(Arc::new(path)),
            digest,
        })
    }

    /// The message type, such as `orders_export`.
    pub fn message_type(&self) -> &str {
        &self.message_type
    }

    /// The name template, before rendering.
    pub fn name_template(&self) -> &str {
        &self.name_template
    }

    /// The local file, for drops made with [`FileDrop::from_file`].
    pub fn path(&self) -> Option<&Path> {
        match &self.content {
            Content::File(path) => Some(path),
            Content::Bytes(_) => None,
        }
    }

    /// Size of the content in bytes.
    pub fn len(&self) -> u64 {
        self.digest.bytes()
    }

    /// Whether the content is empty (an empty file is a valid drop).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SHA-256 and size of the content.
    pub fn digest(&self) -> PayloadDigest {
        self.digest
    }

    pub(crate) fn content(&self) -> &Content {
        &self.content
    }
}

impl fmt::Debug for FileDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("FileDrop");
        debug
            .field("message_type", &self.message_type)
            .field("name_template", &self.name_template);
        if let Content::File(path) = &self.content {
            debug.field("path", path);
        }
        debug.field("digest", &self.digest).finish()
    }
}

/// The serialized form of a [`FileDrop`].
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct FileDropData {
    message_type: String,
    name_template: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
}

impl From<FileDrop> for FileDropData {
    fn from(drop: FileDrop) -> Self {
        use base64::Engine as _;
        let (content_base64, path) = match &drop.content {
            Content::Bytes(bytes) => (
                Some(base64::engine::general_purpose::STANDARD.encode(bytes.as_slice())),
                None,
            ),
            Content::File(path) => (None, Some(path.as_ref().clone())),
        };
        FileDropData {
            message_type: drop.message_type,
            name_template: drop.name_template,
            content_base64,
            path,
        }
    }
}

impl TryFrom<FileDropData> for FileDrop {
    type Error = String;

    fn try_from(data: FileDropData) -> Result<Self, String> {
        use base64::Engine as _;
        match (data.content_base64, data.path) {
            (Some(encoded), None) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|_| "content_base64: not valid base64".to_owned())?;
                Ok(FileDrop::from_bytes(
                    data.message_type,
                    data.name_template,
                    bytes,
                ))
            }
            (None, Some(path)) => FileDrop::from_file(data.message_type, data.name_template, path)
                .map_err(|error| replaysafe_core::error_chain(&error)),
            _ => Err("a file drop has exactly one of content_base64 and path".to_owned()),
        }
    }
}

/// Reads `path` through SHA-256, in blocks.
pub(crate) fn digest_file(path: &Path) -> Result<PayloadDigest, Error> {
    let local = |error: std::io::Error| {
        Error::new(
            Kind::LocalFile,
            format!("reading local file {}", path.display()),
            error.to_string(),
        )
        .with_source(error)
    };
    let mut file = std::fs::File::open(path).map_err(local)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 256 * 1024];
    let mut total = 0u64;
    loop {
        let read = file.read(&mut buffer).map_err(local)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        total += read as u64;
    }
    Ok(PayloadDigest::from_parts(hasher.finalize().into(), total))
}

/// What a delivered drop did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileDropReceipt {
    /// Whether the file was uploaded now or was already there.
    pub status: DropStatus,
    /// The remote path of the file (the configured directory and the rendered name).
    pub remote_path: String,
    /// Size of the file in bytes.
    pub bytes: u64,
}

impl FileDropReceipt {
    /// Whether this drop uploaded the file.
    pub fn is_uploaded(&self) -> bool {
        self.status == DropStatus::Uploaded
    }

    /// Whether the same file was already there, so nothing was uploaded.
    pub fn is_already_present(&self) -> bool {
        self.status == DropStatus::AlreadyPresent
    }
}

/// How a delivered drop reached its final name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropStatus {
    /// The content was uploaded to a temporary name and renamed into place.
    Uploaded,
    /// A file with the same size and SHA-256 already had the final name; nothing was uploaded.
    AlreadyPresent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_drop_round_trips_through_json_as_bytes_or_as_a_path() {
        let drop = FileDrop::from_bytes(
            "orders_export",
            "orders_{window_start:%Y%m%d}.csv",
            "id\n1\n",
        );
        let json = serde_json::to_string(&drop).unwrap();
        assert_eq!(
            json,
            r#"{"message_type":"orders_export","name_template":"orders_{window_start:%Y%m%d}.csv","content_base64":"aWQKMQo="}"#
        );
        let back: FileDrop = serde_json::from_str(&json).unwrap();
        assert_eq!(back.digest(), drop.digest());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orders.csv");
        std::fs::write(&path, "id\n1\n").unwrap();
        let from_file = FileDrop::from_file("orders_export", "orders.csv", &path).unwrap();
        let json = serde_json::to_string(&from_file).unwrap();
        let back: FileDrop = serde_json::from_str(&json).unwrap();
        assert_eq!(back.path(), Some(path.as_path()));
        assert_eq!(back.digest(), drop.digest());

        std::fs::remove_file(&path).unwrap();
        let error = serde_json::from_str::<FileDrop>(&json).unwrap_err();
        assert!(!error.to_string().is_empty());
    }

    /// A relative path is held, and staged, as the absolute path it names: a worker in
    /// another folder reads the same file.
    #[test]
    fn a_relative_path_is_held_as_the_absolute_one() {
        let here = std::env::current_dir().unwrap();
        let file = tempfile::Builder::new()
            .prefix("file-drop-relative")
            .tempfile_in(&here)
            .unwrap();
        let name = file.path().file_name().unwrap();
        let drop = FileDrop::from_file("orders_export", "orders.csv", name).unwrap();
        assert_eq!(drop.path(), Some(here.join(name).as_path()));
        let json = serde_json::to_string(&drop).unwrap();
        assert!(json.contains(&*here.to_string_lossy()), "{json}");
    }
}
