//! A partner file drop into a local folder: how to write your own [`EffectClient`].
//!
//! The default mode of the demo has no SFTP server, so the partner's inbox is a folder.
//! The client follows the same rules as `replaysafe-sftp`: `describe` does no I/O, a
//! drop is atomic (written to a temporary name in the same folder, then renamed), and a
//! drop is idempotent at the boundary (the same bytes already under the name is a
//! success; different bytes is a conflict, never a silent overwrite).

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use replaysafe::{Classify, Delivery, EffectClient, EffectDescription, EffectKind, ReplayContext};

/// One file for the partner: a message type, a plain file name and its content.
#[derive(Clone, Debug)]
pub(crate) struct PartnerFile {
    /// What kind of file this is, such as `orders_export`.
    pub(crate) message_type: String,
    /// The file name, without directories.
    pub(crate) name: String,
    /// The bytes to drop.
    pub(crate) content: Vec<u8>,
}

/// Drops [`PartnerFile`]s into a folder; reach it only through a [`replaysafe::Guard`].
///
/// The journal target is `file://<folder>/<name>`, shown in full (the default redaction):
/// a local path holds no secret.
#[derive(Debug)]
pub(crate) struct FolderDropClient {
    folder: PathBuf,
}

/// Where a delivered drop landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// The final path.
    pub(crate) path: PathBuf,
    /// Whether the same file was already there, so nothing was written.
    pub(crate) already_present: bool,
}

/// Why a drop failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FolderDropError {
    /// The file name would leave the folder or is not a plain name.
    #[error("invalid file drop name {0:?}: must be a plain file name")]
    InvalidName(String),
    /// Another file already has the name.
    #[error("dropping {0}: a different file already has this name")]
    Conflict(PathBuf),
    /// Writing failed.
    #[error("dropping {path}: {source}")]
    Io {
        /// The final path.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
}

impl Classify for FolderDropError {
    fn is_transient(&self) -> bool {
        // A full or busy disk may recover; a bad name or a conflict will not.
        matches!(self, FolderDropError::Io { .. })
    }
}

impl FolderDropClient {
    /// A client dropping into `folder`, which is created if needed.
    pub(crate) fn new(folder: impl Into<PathBuf>) -> std::io::Result<Self> {
        let folder = folder.into();
        std::fs::create_dir_all(&folder)?;
        Ok(FolderDropClient { folder })
    }
}

fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
}

#[async_trait]
impl EffectClient for FolderDropClient {
    type Effect = PartnerFile;
    type Receipt = Dropped;
    type Error = FolderDropError;

    fn describe(
        &self,
        _cx: &ReplayContext,
        file: &PartnerFile,
    ) -> Result<EffectDescription, FolderDropError> {
        if !is_plain_name(&file.name) {
            return Err(FolderDropError::InvalidName(file.name.clone()));
        }
        let target = format!("file://{}/{}", self.folder.display(), file.name);
        let description = EffectDescription::new(EffectKind::FileDrop, &file.message_type, target)
            .map_err(|_| FolderDropError::InvalidName(file.name.clone()))?;
        Ok(description
            .with_payload(&file.content)
            .with_summary(format!("{} ({} bytes)", file.name, file.content.len())))
    }

    async fn deliver(
        &self,
        delivery: &Delivery<'_>,
        file: &PartnerFile,
    ) -> Result<Dropped, FolderDropError> {
        let path = self.folder.join(&file.name);
        // Unique per logical effect and attempt, so a retry never reuses a half-written file.
        let temporary = self.folder.join(format!(
            ".{}.{}-{}.tmp",
            file.name,
            delivery.key(),
            delivery.attempt()
        ));
        let content = file.content.clone();
        let final_path = path.clone();
        tokio::task::spawn_blocking(move || drop_atomically(&final_path, &temporary, &content))
            .await
            .map_err(|join| FolderDropError::Io {
                path: path.clone(),
                source: std::io::Error::other(join),
            })?
    }
}

/// Writes `content` to `temporary`, syncs it, and renames it to `path`, unless `path`
/// already holds exactly `content`.
fn drop_atomically(
    path: &Path,
    temporary: &Path,
    content: &[u8],
) -> Result<Dropped, FolderDropError> {
    let io = |source| FolderDropError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::read(path) {
        Ok(existing) if existing == content => {
            return Ok(Dropped {
                path: path.to_path_buf(),
                already_present: true,
            });
        }
        Ok(_) => return Err(FolderDropError::Conflict(path.to_path_buf())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(io(error)),
    }
    let written = std::fs::File::create(temporary).and_then(|mut file| {
        file.write_all(content)?;
        file.sync_all()
    });
    if let Err(error) = written.and_then(|()| std::fs::rename(temporary, path)) {
        let _ = std::fs::remove_file(temporary);
        return Err(io(error));
    }
    Ok(Dropped {
        path: path.to_path_buf(),
        already_present: false,
    })
}
