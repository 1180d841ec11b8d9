//! Sessions kept for reuse between drops, shared by the clones of a client.

use std::collections::HashMap;
use std::sync::Mutex;

use replaysafe_core::adapter::{Held, PerProcess};

use crate::Error;
use crate::config::Config;
use crate::error::breaks_session;
use crate::session::{Connection, connect};

/// What clones of a client share: the configuration, idle sessions, and the temporary
/// files that could not be removed yet.
pub(crate) struct Shared {
    pub(crate) config: Config,
    /// Sessions kept for reuse by the process that opened them. A session is one SSH
    /// stream with its keys and sequence numbers: a child of `fork` neither uses nor closes
    /// (which sends a channel close) its parent's, which would break them, and opens its own.
    pub(crate) idle: PerProcess<Vec<Connection>>,
    /// Final remote path → temporary files left behind by failed uploads to it.
    pub(crate) leftovers: Mutex<HashMap<String, Vec<String>>>,
}

impl Shared {
    /// This process's idle sessions.
    pub(crate) fn idle(&self) -> Held<'_, Vec<Connection>> {
        self.idle.lock_or_default()
    }

    /// An idle session if there is one (`true`), else a new one (`false`).
    pub(crate) fn checkout(&self) -> Result<(Connection, bool), Error> {
        let idle = self.idle().pop();
        match idle {
            Some(connection) => {
                tracing::trace!(
                    target: "replaysafe_sftp",
                    host = %self.config.host,
                    port = self.config.port,
                    "reusing an idle session"
                );
                Ok((connection, true))
            }
            None => Ok((connect(&self.config)?, false)),
        }
    }

    /// Keeps `connection` for a later drop, unless enough are kept already.
    pub(crate) fn checkin(&self, connection: Connection) {
        let mut idle = self.idle();
        if idle.len() < self.config.max_idle_sessions {
            idle.push(connection);
        }
    }

    /// Runs `operation` on a session: an idle one when there is one, retried once on a
    /// fresh session when the idle one turns out to be dead. Healthy sessions go back to
    /// the idle list.
    pub(crate) fn with_session<T>(
        &self,
        mut operation: impl FnMut(&Connection) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let (connection, reused) = self.checkout()?;
        let result = operation(&connection);
        match result {
            Err(error) if reused && breaks_session(error.kind()) => {
                tracing::debug!(
                    target: "replaysafe_sftp",
                    host = %self.config.host,
                    port = self.config.port,
                    "an idle session had gone ({error}); reconnecting"
                );
                drop(connection);
                let connection = connect(&self.config)?;
                let result = operation(&connection);
                self.release(connection, &result);
                result
            }
            result => {
                self.release(connection, &result);
                result
            }
        }
    }

    fn release<T>(&self, connection: Connection, result: &Result<T, Error>) {
        match result {
            Err(error) if breaks_session(error.kind()) => drop(connection),
            _ => self.checkin(connection),
        }
    }
}
