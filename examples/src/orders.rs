//! The daily orders pipeline, on SQLite: source orders with late
//! and corrected records, a curated table loaded with a guarded upsert, a run ledger,
//! and chunked loading with a checkpoint committed in the same transaction as its chunk.
//!
//! Nothing here knows about replaysafe's gate: this is the "we recomputed the numbers"
//! half of the pipeline, idempotent by construction. The "we told people" half is in
//! `publish.rs`; its partner webhook is staged here, in the outbox table of this same
//! database, in the transaction that writes the day's totals.

use std::path::Path;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use replaysafe::outbox::{self, Route, Staged};
use replaysafe::webhook::{Webhook, WebhookClient};
use replaysafe::{ReplayContext, Window, rfc3339};
use rusqlite::{Connection, OptionalExtension, params};

/// Rows per chunk; each chunk and its checkpoint commit together.
pub(crate) const CHUNK_ROWS: usize = 3;

/// Orders placed per day by the seeded shop.
const ORDERS_PER_DAY: i64 = 5;

/// A customer of the demo shop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Customer {
    /// Business key.
    pub(crate) id: &'static str,
    /// Display name.
    pub(crate) name: &'static str,
    /// Where the daily statement goes.
    pub(crate) email: &'static str,
}

/// The customers of the demo shop (reserved `.example` domains).
pub(crate) const CUSTOMERS: [Customer; 4] = [
    Customer {
        id: "acme",
        name: "Acme Corp",
        email: "orders@acme.example",
    },
    Customer {
        id: "globex",
        name: "Globex",
        email: "finance@globex.example",
    },
    Customer {
        id: "initech",
        name: "Initech",
        email: "reports@initech.example",
    },
    Customer {
        id: "umbrella",
        name: "Umbrella",
        email: "ops@umbrella.example",
    },
];

/// The pipeline's database.
#[derive(Debug)]
pub(crate) struct OrdersDb {
    connection: Connection,
}

/// What the outbox table holds after the runs.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub(crate) struct OutboxFacts {
    /// Rows in all.
    pub(crate) rows: u64,
    /// Rows by status.
    pub(crate) by_status: std::collections::BTreeMap<String, u64>,
    /// Suppressed rows staged by the backfill (its id, or a later replay of its windows).
    pub(crate) suppressed_windows: u64,
    /// Distinct windows among the suppressed rows.
    pub(crate) distinct_suppressed_windows: u64,
    /// The current window's partner webhook row: its key, status and attempts.
    pub(crate) current_row: Option<(String, String, u64)>,
}

/// What [`OrdersDb::seed`] inserted.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub(crate) struct Seeded {
    /// Distinct orders.
    pub(crate) orders: u64,
    /// Orders the source saw only after their day had closed.
    pub(crate) late: u64,
    /// Orders with a corrected second version.
    pub(crate) corrected: u64,
}

/// One customer's totals for a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CustomerTotal {
    /// Customer id.
    pub(crate) customer: String,
    /// Orders in the window.
    pub(crate) orders: u64,
    /// Amount in cents.
    pub(crate) amount_cents: i64,
}

/// What one load of a window did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Load {
    /// Rows upserted by this attempt.
    pub(crate) rows: u64,
    /// The checkpoint this attempt resumed after, if it resumed.
    pub(crate) resumed_after: Option<String>,
    /// The last committed key once the window is complete.
    pub(crate) checkpoint: String,
}

/// The deliberate failure: the worker stopped after committing the first chunk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "simulated worker failure after the first chunk of {batch_key} ({rows} rows committed, checkpoint {checkpoint})"
)]
pub(crate) struct Interrupted {
    /// The batch.
    pub(crate) batch_key: String,
    /// Rows committed before the failure.
    pub(crate) rows: u64,
    /// The checkpoint committed with them.
    pub(crate) checkpoint: String,
}

/// A window's checkpoint row.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Checkpoint {
    /// `daily_orders__2026-08-05`.
    pub(crate) batch_key: String,
    /// The resume position: the last order id committed.
    pub(crate) last_committed_key: String,
    /// The frozen source boundary.
    pub(crate) source_high_watermark: String,
    /// `running` or `complete`.
    pub(crate) status: String,
}

/// What verification found; the acceptance checks.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Verification {
    /// Rows in the curated table.
    pub(crate) curated_rows: u64,
    /// Distinct orders in the source.
    pub(crate) source_orders: u64,
    /// Sum of curated amounts, in cents.
    pub(crate) curated_amount_cents: i64,
    /// Sum of the latest source version of every order, in cents.
    pub(crate) source_amount_cents: i64,
    /// Business keys present more than once in the curated table.
    pub(crate) duplicate_business_keys: u64,
    /// Curated rows older than their latest source version (an old replay overwrote a correction).
    pub(crate) stale_rows: u64,
    /// Runs in the ledger.
    pub(crate) ledger_runs: u64,
    /// Runs that ended `succeeded`.
    pub(crate) ledger_succeeded: u64,
    /// Runs that ended `failed`.
    pub(crate) ledger_failed: u64,
    /// Runs whose status is not terminal (`succeeded` or `failed`).
    pub(crate) ledger_runs_without_terminal_status: u64,
}

/// A source row: the latest version of an order as of a watermark.
type SourceRow = (String, String, String, i64, String);

/// Times as stored: RFC 3339 with a fixed six-digit fraction, so that comparing the text
/// compares the instants (`…00Z` would sort after `…00.5Z`).
fn db_time(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The batch key of a window, for example `daily_orders__2026-08-05`.
pub(crate) fn batch_key(cx: &ReplayContext) -> String {
    format!(
        "{}__{}",
        cx.pipeline(),
        cx.window().start().format("%Y-%m-%d")
    )
}

impl OrdersDb {
    /// Records the window's daily totals and stages `webhook` for `route` in one
    /// transaction: both commit, or neither does.
    pub(crate) fn commit_totals_and_stage(
        &self,
        cx: &ReplayContext,
        route: &Route<WebhookClient>,
        webhook: &Webhook,
        totals: &[CustomerTotal],
    ) -> anyhow::Result<Staged> {
        let tx = self.connection.unchecked_transaction()?;
        let window_start = rfc3339(cx.window().start());
        for total in totals {
            tx.execute(
                "INSERT INTO daily_totals (window_start, customer_id, orders, amount_cents) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (window_start, customer_id) DO UPDATE SET orders = excluded.orders, amount_cents = excluded.amount_cents",
                params![window_start, total.customer, i64::try_from(total.orders)?, total.amount_cents],
            )?;
        }
        let staged = outbox::sqlite::stage(&tx, cx, route, webhook)?;
        tx.commit()?;
        Ok(staged)
    }

    /// What the outbox table holds; `current` is the current window.
    pub(crate) fn outbox_facts(&self, current: &Window) -> anyhow::Result<OutboxFacts> {
        let count = |sql: &str| -> anyhow::Result<u64> {
            Ok(self.connection.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64)
        };
        let mut by_status = std::collections::BTreeMap::new();
        let mut statement = self
            .connection
            .prepare("SELECT status, COUNT(*) FROM replaysafe_outbox GROUP BY status")?;
        for row in statement.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (status, rows) = row?;
            by_status.insert(status, rows as u64);
        }
        let current_row = self
            .connection
            .query_row(
                "SELECT idempotency_key, status, attempts FROM replaysafe_outbox WHERE window_start = ?1",
                [rfc3339(current.start())],
                |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64)),
            )
            .optional()?;
        Ok(OutboxFacts {
            rows: count("SELECT COUNT(*) FROM replaysafe_outbox")?,
            by_status,
            suppressed_windows: count(
                "SELECT COUNT(*) FROM replaysafe_outbox WHERE status = 'suppressed'",
            )?,
            distinct_suppressed_windows: count(
                "SELECT COUNT(DISTINCT window_start) FROM replaysafe_outbox WHERE status = 'suppressed'",
            )?,
            current_row,
        })
    }

    /// Opens (creating) the database and its tables.
    pub(crate) fn open(path: &Path) -> anyhow::Result<Self> {
        let mut connection =
            Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
        connection.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS source_orders (
                 order_id TEXT NOT NULL, order_date TEXT NOT NULL, customer_id TEXT NOT NULL,
                 amount_cents INTEGER NOT NULL, source_updated_at TEXT NOT NULL,
                 PRIMARY KEY (order_id, source_updated_at));
             CREATE TABLE IF NOT EXISTS curated_orders (
                 order_id TEXT PRIMARY KEY, order_date TEXT NOT NULL, customer_id TEXT NOT NULL,
                 amount_cents INTEGER NOT NULL, source_updated_at TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS run_ledger (
                 run_id TEXT PRIMARY KEY, pipeline TEXT NOT NULL, run_kind TEXT NOT NULL,
                 backfill_id TEXT, window_start TEXT NOT NULL, window_end TEXT NOT NULL,
                 status TEXT NOT NULL, rows_loaded INTEGER NOT NULL DEFAULT 0,
                 started_at TEXT NOT NULL, finished_at TEXT, error TEXT);
             CREATE TABLE IF NOT EXISTS checkpoints (
                 batch_key TEXT PRIMARY KEY, last_committed_key TEXT NOT NULL,
                 source_high_watermark TEXT NOT NULL, status TEXT NOT NULL, updated_at TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS daily_totals (
                 window_start TEXT NOT NULL, customer_id TEXT NOT NULL, orders INTEGER NOT NULL,
                 amount_cents INTEGER NOT NULL, PRIMARY KEY (window_start, customer_id));",
        )?;
        // The outbox lives in the same database, so effects commit with the data.
        outbox::sqlite::configure(&connection)?;
        outbox::sqlite::migrate(&mut connection)?;
        Ok(OrdersDb { connection })
    }

    /// Seeds the `days` days before `end` with source orders: five orders a day, the last
    /// one late (placed at 18:00, seen by the source only at midnight, after its day
    /// closed), and every third day's first order corrected three hours later with a
    /// lower amount. The data depends on the dates only, not on the time of day.
    pub(crate) fn seed(&self, end: DateTime<Utc>, days: i64) -> anyhow::Result<Seeded> {
        let transaction = self.connection.unchecked_transaction()?;
        let mut seeded = Seeded::default();
        {
            let mut insert = transaction.prepare(
                "INSERT OR IGNORE INTO source_orders (order_id, order_date, customer_id, amount_cents, source_updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for day in 0..days {
                let date = end - TimeDelta::days(days - day);
                for n in 0..ORDERS_PER_DAY {
                    let order_id = format!("O-{}-{n}", date.format("%Y%m%d"));
                    let customer = CUSTOMERS[((day + n) % CUSTOMERS.len() as i64) as usize].id;
                    let ordered_at = date + TimeDelta::hours(2 + 4 * n);
                    let amount = 1_000 + (day * 37 + n * 113) % 9_000;
                    let late = n == ORDERS_PER_DAY - 1;
                    let seen_at = if late {
                        date + TimeDelta::days(1)
                    } else {
                        ordered_at + TimeDelta::minutes(5)
                    };
                    let (ordered, seen) = (db_time(ordered_at), db_time(seen_at));
                    insert.execute(params![order_id, ordered, customer, amount, seen])?;
                    seeded.orders += 1;
                    seeded.late += u64::from(late);
                    if n == 0 && day % 3 == 0 {
                        let corrected_at = db_time(seen_at + TimeDelta::hours(3));
                        insert.execute(params![
                            order_id,
                            ordered,
                            customer,
                            amount - 250,
                            corrected_at
                        ])?;
                        seeded.corrected += 1;
                    }
                }
            }
        }
        transaction.commit()?;
        Ok(seeded)
    }

    /// A correction arriving from the source at `now`: a newer version of the first
    /// order of each window, 1.00 lower. Returns how many orders were corrected.
    pub(crate) fn correct(&self, windows: &[Window], now: DateTime<Utc>) -> anyhow::Result<u64> {
        let mut corrected = 0;
        for window in windows {
            corrected += self.connection.execute(
                "INSERT INTO source_orders (order_id, order_date, customer_id, amount_cents, source_updated_at)
                 SELECT order_id, order_date, customer_id, amount_cents - 100, ?3 FROM source_orders s
                 WHERE order_date >= ?1 AND order_date < ?2
                   AND source_updated_at = (SELECT MAX(source_updated_at) FROM source_orders WHERE order_id = s.order_id)
                 ORDER BY order_id LIMIT 1",
                params![db_time(window.start()), db_time(window.end()), db_time(now)],
            )? as u64;
        }
        Ok(corrected)
    }

    /// Records the run in the ledger as `running`.
    pub(crate) fn start_run(&self, cx: &ReplayContext) -> anyhow::Result<()> {
        self.connection.execute(
            "INSERT INTO run_ledger (run_id, pipeline, run_kind, backfill_id, window_start, window_end, status, started_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
            params![
                cx.run_id().as_str(),
                cx.pipeline(),
                cx.run_kind().as_str(),
                cx.backfill_id(),
                db_time(cx.window().start()),
                db_time(cx.window().end()),
                db_time(cx.now()),
            ],
        )?;
        Ok(())
    }

    /// Gives the run its terminal status: `succeeded`, or `failed` with the error.
    pub(crate) fn finish_run(
        &self,
        cx: &ReplayContext,
        rows: u64,
        error: Option<&str>,
    ) -> anyhow::Result<()> {
        let status = if error.is_some() {
            "failed"
        } else {
            "succeeded"
        };
        self.connection.execute(
            "UPDATE run_ledger SET status = ?2, rows_loaded = ?3, finished_at = ?4, error = ?5 WHERE run_id = ?1",
            params![cx.run_id().as_str(), status, rows as i64, db_time(cx.now()), error],
        )?;
        Ok(())
    }

    /// Loads the window into the curated table in chunks of [`CHUNK_ROWS`], each chunk
    /// committed with its checkpoint, resuming after the last committed chunk of an
    /// unfinished earlier attempt. With `fail_after_first_chunk` it stops with an error
    /// once the first chunk is committed: a deliberate failure.
    pub(crate) fn load_window(
        &self,
        cx: &ReplayContext,
        fail_after_first_chunk: bool,
    ) -> anyhow::Result<Load> {
        let batch_key = batch_key(cx);
        let window = cx.window();
        let (start, end) = (db_time(window.start()), db_time(window.end()));
        let now = db_time(cx.now());
        // A running checkpoint means an earlier attempt stopped part-way: resume after it,
        // reading the source as of the same frozen watermark. Otherwise start afresh.
        let (resumed_after, watermark) = match self.checkpoint(&batch_key)? {
            Some(checkpoint) if checkpoint.status == "running" => (
                Some(checkpoint.last_committed_key),
                checkpoint.source_high_watermark,
            ),
            _ => (None, now.clone()),
        };
        let rows = self.source_rows(
            &start,
            &end,
            resumed_after.as_deref().unwrap_or(""),
            &watermark,
        )?;
        let mut loaded = 0;
        let mut last = resumed_after.clone().unwrap_or_default();
        for (index, chunk) in rows.chunks(CHUNK_ROWS).enumerate() {
            let transaction = self.connection.unchecked_transaction()?;
            for (order_id, order_date, customer, amount, updated) in chunk {
                transaction.execute(
                    "INSERT INTO curated_orders (order_id, order_date, customer_id, amount_cents, source_updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT(order_id) DO UPDATE SET
                         order_date = excluded.order_date,
                         customer_id = excluded.customer_id,
                         amount_cents = excluded.amount_cents,
                         source_updated_at = excluded.source_updated_at
                     WHERE excluded.source_updated_at >= curated_orders.source_updated_at",
                    params![order_id, order_date, customer, amount, updated],
                )?;
            }
            last.clone_from(&chunk[chunk.len() - 1].0);
            transaction.execute(
                "INSERT INTO checkpoints (batch_key, last_committed_key, source_high_watermark, status, updated_at)
                 VALUES (?1, ?2, ?3, 'running', ?4)
                 ON CONFLICT(batch_key) DO UPDATE SET last_committed_key = excluded.last_committed_key,
                     source_high_watermark = excluded.source_high_watermark, status = 'running',
                     updated_at = excluded.updated_at",
                params![batch_key, last, watermark, now],
            )?;
            transaction.commit()?;
            loaded += chunk.len() as u64;
            if fail_after_first_chunk && index == 0 && rows.len() > CHUNK_ROWS {
                return Err(Interrupted {
                    batch_key,
                    rows: loaded,
                    checkpoint: last,
                }
                .into());
            }
        }
        self.connection.execute(
            "INSERT INTO checkpoints (batch_key, last_committed_key, source_high_watermark, status, updated_at)
             VALUES (?1, ?2, ?3, 'complete', ?4)
             ON CONFLICT(batch_key) DO UPDATE SET status = 'complete', updated_at = excluded.updated_at",
            params![batch_key, last, watermark, now],
        )?;
        Ok(Load {
            rows: loaded,
            resumed_after,
            checkpoint: last,
        })
    }

    /// The latest version (as of `watermark`) of each order of `[start, end)` after `after`, in key order.
    fn source_rows(
        &self,
        start: &str,
        end: &str,
        after: &str,
        watermark: &str,
    ) -> anyhow::Result<Vec<SourceRow>> {
        let mut select = self.connection.prepare(
            "SELECT s.order_id, s.order_date, s.customer_id, s.amount_cents, s.source_updated_at
             FROM source_orders s
             WHERE s.order_date >= ?1 AND s.order_date < ?2 AND s.order_id > ?3 AND s.source_updated_at <= ?4
               AND s.source_updated_at = (SELECT MAX(source_updated_at) FROM source_orders
                                          WHERE order_id = s.order_id AND source_updated_at <= ?4)
             ORDER BY s.order_id",
        )?;
        let rows = select
            .query_map(params![start, end, after, watermark], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// The checkpoint of a batch, if it has one.
    pub(crate) fn checkpoint(&self, batch_key: &str) -> anyhow::Result<Option<Checkpoint>> {
        let checkpoint = self
            .connection
            .query_row(
                "SELECT last_committed_key, source_high_watermark, status FROM checkpoints WHERE batch_key = ?1",
                params![batch_key],
                |row| {
                    Ok(Checkpoint {
                        batch_key: batch_key.to_owned(),
                        last_committed_key: row.get(0)?,
                        source_high_watermark: row.get(1)?,
                        status: row.get(2)?,
                    })
                },
            )
            .optional()?;
        Ok(checkpoint)
    }

    /// The window's totals for every customer (zero when they ordered nothing), from the curated table.
    pub(crate) fn totals(&self, window: &Window) -> anyhow::Result<Vec<CustomerTotal>> {
        let mut select = self.connection.prepare(
            "SELECT COUNT(*), COALESCE(SUM(amount_cents), 0) FROM curated_orders
             WHERE order_date >= ?1 AND order_date < ?2 AND customer_id = ?3",
        )?;
        let (start, end) = (db_time(window.start()), db_time(window.end()));
        CUSTOMERS
            .iter()
            .map(|customer| {
                let (orders, amount_cents) = select
                    .query_row(params![start, end, customer.id], |row| {
                        Ok((row.get::<_, i64>(0)?, row.get(1)?))
                    })?;
                Ok(CustomerTotal {
                    customer: customer.id.to_owned(),
                    orders: orders as u64,
                    amount_cents,
                })
            })
            .collect()
    }

    /// The window's curated orders as CSV, all of them or one customer's.
    pub(crate) fn csv(&self, window: &Window, customer: Option<&str>) -> anyhow::Result<String> {
        let mut select = self.connection.prepare(
            "SELECT order_id, order_date, customer_id, amount_cents FROM curated_orders
             WHERE order_date >= ?1 AND order_date < ?2 AND (?3 IS NULL OR customer_id = ?3)
             ORDER BY order_id",
        )?;
        let mut csv = String::from("order_id,order_date,customer_id,amount_eur\n");
        let rows = select.query_map(
            params![db_time(window.start()), db_time(window.end()), customer],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            },
        )?;
        for row in rows {
            let (id, date, customer, cents) = row?;
            let date = DateTime::parse_from_rfc3339(&date)?.format("%Y-%m-%dT%H:%M:%SZ");
            csv.push_str(&format!("{id},{date},{customer},{}\n", euros(cents)));
        }
        Ok(csv)
    }

    /// The acceptance checks: uniqueness, freshness of every row against its
    /// source, reconciliation of counts and sums, and one terminal status per run.
    pub(crate) fn verify(&self) -> anyhow::Result<Verification> {
        let count = |sql: &str| -> anyhow::Result<i64> {
            Ok(self.connection.query_row(sql, [], |row| row.get(0))?)
        };
        Ok(Verification {
            curated_rows: count("SELECT COUNT(*) FROM curated_orders")? as u64,
            source_orders: count("SELECT COUNT(DISTINCT order_id) FROM source_orders")? as u64,
            curated_amount_cents: count("SELECT COALESCE(SUM(amount_cents), 0) FROM curated_orders")?,
            source_amount_cents: count(
                "SELECT COALESCE(SUM(amount_cents), 0) FROM source_orders s WHERE source_updated_at =
                     (SELECT MAX(source_updated_at) FROM source_orders WHERE order_id = s.order_id)",
            )?,
            duplicate_business_keys: count(
                "SELECT COUNT(*) FROM (SELECT order_id FROM curated_orders GROUP BY order_id HAVING COUNT(*) > 1)",
            )? as u64,
            stale_rows: count(
                "SELECT COUNT(*) FROM curated_orders c WHERE c.source_updated_at <
                     (SELECT MAX(source_updated_at) FROM source_orders s WHERE s.order_id = c.order_id)",
            )? as u64,
            ledger_runs: count("SELECT COUNT(*) FROM run_ledger")? as u64,
            ledger_succeeded: count("SELECT COUNT(*) FROM run_ledger WHERE status = 'succeeded'")? as u64,
            ledger_failed: count("SELECT COUNT(*) FROM run_ledger WHERE status = 'failed'")? as u64,
            ledger_runs_without_terminal_status: count(
                "SELECT COUNT(*) FROM run_ledger WHERE status NOT IN ('succeeded', 'failed')",
            )? as u64,
        })
    }

    /// The ledger's failed runs: run id and error.
    pub(crate) fn failed_runs(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut select =
            self.connection.prepare("SELECT run_id, COALESCE(error, '') FROM run_ledger WHERE status = 'failed' ORDER BY run_id")?;
        let runs = select
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(runs)
    }
}

/// Cents as euros with two decimals: `1234` → `12.34`.
pub(crate) fn euros(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
}
