//! What the crash tests (`outbox_soak`, `ledger_soak`) share: one binary is both the
//! controller and its worker processes, flags are read the same way, and each run gets a
//! fresh PostgreSQL database.

use std::sync::{Mutex, MutexGuard, PoisonError};

use anyhow::Context;
use replaysafe::outbox::tokio_postgres::{self, NoTls};

/// Runs `worker` when the first argument is `worker` (with the rest), else `controller`,
/// on a two-thread runtime.
pub(crate) fn main_of<W, C>(
    worker: impl FnOnce(Vec<String>) -> W,
    controller: impl FnOnce(Vec<String>) -> C,
) -> anyhow::Result<()>
where
    W: std::future::Future<Output = anyhow::Result<()>>,
    C: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if args.first().map(String::as_str) == Some("worker") {
        args.remove(0);
        runtime.block_on(worker(args))
    } else {
        runtime.block_on(controller(args))
    }
}

/// The value after `name` in `args`.
pub(crate) fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// Locks `mutex`, whether or not a thread panicked holding it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fresh database named `prefix_…` on the server at `admin`; returns its URL.
pub(crate) async fn fresh_postgres(admin: &str, prefix: &str) -> anyhow::Result<String> {
    let (client, connection) = tokio_postgres::connect(admin, NoTls).await?;
    tokio::spawn(connection);
    let name = format!("{prefix}_{:016x}", fastrand::u64(..));
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let base = admin
        .rsplit_once('/')
        .context("--postgres-url: expected postgres://USER:PASSWORD@HOST:PORT/DB")?
        .0;
    Ok(format!("{base}/{name}"))
}
