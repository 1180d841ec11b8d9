//! One drop, on the blocking pool: check the final name, upload to a temporary name in
//! the same directory, rename into place.

use std::io::{self, Read, Write};
use std::path::Path;

use replaysafe_core::PayloadDigest;
use sha2::{Digest, Sha256};
use ssh2::{OpenFlags, OpenType, RenameFlags};

use crate::Error;
use crate::effect::{Content, DropStatus, FileDropReceipt};
use crate::error::{Kind, breaks_session, is_not_found};
use crate::pool::Shared;
use crate::session::Connection;

/// Block size for streaming local files and reading remote files back; libssh2 pipelines
/// the SFTP requests of one call (and reads ahead four times the buffer).
const BLOCK: usize = 1024 * 1024;
/// The smallest read-back buffer, for small files (whose read-ahead stays small too).
const SMALL_BLOCK: usize = 32 * 1024;

/// Everything a drop needs, owned, to move onto the blocking pool.
pub(crate) struct Job {
    pub(crate) name: String,
    pub(crate) remote_path: String,
    pub(crate) target: String,
    /// The first 16 characters of the idempotency key: part of the temporary name.
    pub(crate) key_prefix: String,
    pub(crate) content: Content,
    pub(crate) digest: PayloadDigest,
}

impl Job {
    /// `.name.replaysafe-<key>-<random>.tmp`, next to the final name.
    fn temporary_path(&self) -> String {
        let temporary = format!(
            ".{}.replaysafe-{}-{:016x}.tmp",
            self.name,
            self.key_prefix,
            fastrand::u64(..)
        );
        match self.remote_path.rsplit_once('/') {
            Some(("", _)) => format!("/{temporary}"),
            Some((dir, _)) => format!("{dir}/{temporary}"),
            None => temporary,
        }
    }
}

impl Shared {
    /// Drops `job`'s file: already there with the same content → `AlreadyPresent`;
    /// a different file there → conflict (or replace, when overwriting); else upload.
    pub(crate) fn drop_file(&self, job: &Job) -> Result<FileDropReceipt, Error> {
        self.with_session(|connection| self.drop_on(connection, job))
            .map_err(|error| error.while_doing(format_args!("dropping {}", job.target)))
    }

    fn drop_on(&self, connection: &Connection, job: &Job) -> Result<FileDropReceipt, Error> {
        self.remove_leftovers(connection, &job.remote_path)?;
        let final_path = Path::new(&job.remote_path);

        let mut replace = false;
        match connection.sftp.stat(final_path) {
            Ok(stat) => match self.compare(connection, job, &stat)? {
                Existing::Same => return Ok(already_present(job)),
                Existing::Different(why) if self.config.overwrite => {
                    tracing::debug!(
                        target: "replaysafe_sftp",
                        path = %job.remote_path,
                        "replacing a different file ({why})"
                    );
                    replace = true;
                }
                Existing::Different(why) => return Err(conflict(job, &why)),
            },
            Err(error) if is_not_found(&error) => {}
            Err(error) => {
                return Err(Error::from_ssh(
                    format!("checking for {}", job.remote_path),
                    error,
                ));
            }
        }

        let temporary = job.temporary_path();
        if let Err(error) = upload(connection, job, &temporary) {
            self.discard(
                connection,
                &job.remote_path,
                temporary,
                breaks_session(error.kind()),
            );
            return Err(error);
        }
        match self.rename_into_place(connection, job, &temporary, replace) {
            Ok(status) => {
                if status == DropStatus::AlreadyPresent {
                    self.discard(connection, &job.remote_path, temporary, false);
                    return Ok(already_present(job));
                }
                tracing::debug!(
                    target: "replaysafe_sftp",
                    path = %job.remote_path,
                    bytes = job.digest.bytes(),
                    "uploaded and renamed into place"
                );
                Ok(FileDropReceipt {
                    status: DropStatus::Uploaded,
                    remote_path: job.remote_path.clone(),
                    bytes: job.digest.bytes(),
                })
            }
            Err(error) => {
                self.discard(
                    connection,
                    &job.remote_path,
                    temporary,
                    breaks_session(error.kind()),
                );
                Err(error)
            }
        }
    }

    /// Moves the finished temporary file to the final name. Without `replace` the rename
    /// never replaces a file; if one appeared meanwhile, its content decides.
    fn rename_into_place(
        &self,
        connection: &Connection,
        job: &Job,
        temporary: &str,
        replace: bool,
    ) -> Result<DropStatus, Error> {
        let sftp = &connection.sftp;
        let (from, to) = (Path::new(temporary), Path::new(&job.remote_path));
        let rename_error = |error| {
            Error::from_ssh(
                format!("renaming {temporary} to {}", job.remote_path),
                error,
            )
        };
        if replace {
            return match sftp.rename(from, to, Some(RenameFlags::ATOMIC | RenameFlags::OVERWRITE)) {
                Ok(()) => Ok(DropStatus::Uploaded),
                // SFTP version 3 (OpenSSH) ignores the flags and never replaces: remove the
                // old file, then rename. A reader sees the old file, no file, or the new
                // one; never a partial one.
                Err(first) => match sftp.stat(to) {
                    Ok(_) => {
                        sftp.unlink(to).map_err(|error| {
                            Error::from_ssh(
                                format!("removing the replaced {}", job.remote_path),
                                error,
                            )
                        })?;
                        sftp.rename(from, to, Some(RenameFlags::empty()))
                            .map_err(rename_error)?;
                        Ok(DropStatus::Uploaded)
                    }
                    Err(_) => Err(rename_error(first)),
                },
            };
        }
        match sftp.rename(from, to, Some(RenameFlags::empty())) {
            Ok(()) => Ok(DropStatus::Uploaded),
            Err(first) => match sftp.stat(to) {
                // Someone else put a file there since we looked.
                Ok(stat) => match self.compare(connection, job, &stat)? {
                    Existing::Same => Ok(DropStatus::AlreadyPresent),
                    Existing::Different(_) if self.config.overwrite => {
                        self.rename_into_place(connection, job, temporary, true)
                    }
                    Existing::Different(why) => Err(conflict(job, &why)),
                },
                Err(_) => Err(rename_error(first)),
            },
        }
    }

    /// Whether the existing file `stat` describes has the job's size and SHA-256; the
    /// content is read back only when the sizes agree.
    fn compare(
        &self,
        connection: &Connection,
        job: &Job,
        stat: &ssh2::FileStat,
    ) -> Result<Existing, Error> {
        if !stat.is_file() {
            return Ok(Existing::Different("it is not a regular file".to_owned()));
        }
        let expected = job.digest.bytes();
        match stat.size {
            Some(size) if size != expected => {
                return Ok(Existing::Different(format!(
                    "it has {size} bytes, the drop {expected}"
                )));
            }
            _ => {}
        }
        let context = || format!("reading back {}", job.remote_path);
        let mut file = connection
            .sftp
            .open(Path::new(&job.remote_path))
            .map_err(|error| Error::from_ssh(context(), error))?;
        let mut hasher = Sha256::new();
        let size_hint = usize::try_from(expected).unwrap_or(BLOCK).saturating_add(1);
        let mut buffer = vec![0; size_hint.clamp(SMALL_BLOCK, BLOCK)];
        let mut total = 0u64;
        loop {
            let read = file
                .read(&mut buffer)
                .map_err(|error| from_file_io(connection, context(), error))?;
            if read == 0 {
                break;
            }
            hasher.update(&buffer[..read]);
            total += read as u64;
        }
        let found = PayloadDigest::from_parts(hasher.finalize().into(), total);
        Ok(if found == job.digest {
            Existing::Same
        } else {
            Existing::Different(format!(
                "it has sha256 {} ({total} bytes), the drop {}",
                found.sha256_hex(),
                job.digest.sha256_hex()
            ))
        })
    }

    /// Removes a temporary file that will not be renamed, or remembers it for the next
    /// drop to the same name when the connection is gone.
    fn discard(
        &self,
        connection: &Connection,
        final_path: &str,
        temporary: String,
        connection_broken: bool,
    ) {
        if !connection_broken {
            match connection.sftp.unlink(Path::new(&temporary)) {
                Ok(()) => return,
                Err(error) if is_not_found(&error) => return,
                Err(error) => tracing::debug!(
                    target: "replaysafe_sftp",
                    path = %temporary,
                    "removing a temporary file failed ({error}); retrying with the next drop"
                ),
            }
        }
        self.leftovers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(final_path.to_owned())
            .or_default()
            .push(temporary);
    }

    /// Removes temporary files that earlier failed drops to `final_path` left behind.
    fn remove_leftovers(&self, connection: &Connection, final_path: &str) -> Result<(), Error> {
        let Some(mut leftovers) = self
            .leftovers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(final_path)
        else {
            return Ok(());
        };
        while let Some(temporary) = leftovers.pop() {
            match connection.sftp.unlink(Path::new(&temporary)) {
                Ok(()) => tracing::debug!(
                    target: "replaysafe_sftp",
                    path = %temporary,
                    "removed the temporary file of an interrupted upload"
                ),
                Err(error) if is_not_found(&error) => {}
                Err(error) => {
                    let error = Error::from_ssh(format!("removing {temporary}"), error);
                    if breaks_session(error.kind()) {
                        leftovers.push(temporary);
                        self.leftovers
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .entry(final_path.to_owned())
                            .or_default()
                            .extend(leftovers);
                        return Err(error);
                    }
                    tracing::warn!(
                        target: "replaysafe_sftp",
                        path = %temporary,
                        "cannot remove the temporary file of an interrupted upload: {error}"
                    );
                }
            }
        }
        Ok(())
    }
}

enum Existing {
    Same,
    Different(String),
}

fn already_present(job: &Job) -> FileDropReceipt {
    tracing::debug!(
        target: "replaysafe_sftp",
        path = %job.remote_path,
        "the same file is already in place; nothing uploaded"
    );
    FileDropReceipt {
        status: DropStatus::AlreadyPresent,
        remote_path: job.remote_path.clone(),
        bytes: job.digest.bytes(),
    }
}

fn conflict(job: &Job, why: &str) -> Error {
    Error::new(
        Kind::Conflict,
        "conflicting file",
        format!(
            "{} already exists with different content ({why}); \
             nothing was replaced (enable overwrite to replace it)",
            job.remote_path
        ),
    )
}

/// Writes the job's content to `temporary`, created exclusively.
fn upload(connection: &Connection, job: &Job, temporary: &str) -> Result<(), Error> {
    let context = || format!("writing {temporary}");
    let mut file = connection
        .sftp
        .open_mode(
            Path::new(temporary),
            OpenFlags::WRITE | OpenFlags::EXCLUSIVE,
            0o644,
            OpenType::File,
        )
        .map_err(|error| Error::from_ssh(format!("creating {temporary}"), error))?;
    match &job.content {
        Content::Bytes(bytes) => file
            .write_all(bytes)
            .map_err(|error| from_file_io(connection, context(), error))?,
        Content::File(path) => {
            let local = |error: io::Error| {
                Error::new(
                    Kind::LocalFile,
                    format!("reading local file {}", path.display()),
                    error.to_string(),
                )
                .with_source(error)
            };
            let mut source = std::fs::File::open(path.as_path()).map_err(local)?;
            let mut hasher = Sha256::new();
            let mut buffer = vec![0; BLOCK];
            let mut total = 0u64;
            loop {
                let read = source.read(&mut buffer).map_err(local)?;
                if read == 0 {
                    break;
                }
                hasher.update(&buffer[..read]);
                total += read as u64;
                file.write_all(&buffer[..read])
                    .map_err(|error| from_file_io(connection, context(), error))?;
            }
            if PayloadDigest::from_parts(hasher.finalize().into(), total) != job.digest {
                return Err(Error::new(
                    Kind::LocalFile,
                    format!("uploading local file {}", path.display()),
                    "it changed after the drop was made; make a new drop",
                ));
            }
        }
    }
    file.close()
        .map_err(|error| Error::from_ssh(format!("closing {temporary}"), error))
}

/// Classifies an I/O error of an SFTP file handle through the session's last error,
/// which keeps the libssh2 code that the `io::Error` lost.
fn from_file_io(connection: &Connection, context: String, error: io::Error) -> Error {
    if error.kind() == io::ErrorKind::TimedOut {
        return Error::from_io(context, error);
    }
    match ssh2::Error::last_session_error(&connection.session) {
        Some(ssh) => {
            let classified = Error::from_ssh(context.clone(), ssh);
            if classified.kind() == (Kind::Remote { transient: false }) {
                // An SFTP status (permission denied, disk full): its text is in the io::Error.
                let text = error.to_string();
                let transient =
                    text.contains("no space on filesystem") || text.contains("lock conflict");
                Error::new(Kind::Remote { transient }, context, text).with_source(error)
            } else {
                classified
            }
        }
        None => Error::from_io(context, error),
    }
}
