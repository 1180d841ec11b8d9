//! The daily summary of a window, published through replaysafe's guarded clients.
//!
//! This is the "we told people" half of the pipeline. Every client was wrapped once, when
//! it was built (`setup.rs`); this code is the same for a scheduled run, a retry and a
//! backfill. Whether anything leaves the process is the gate's call, made from the
//! [`ReplayContext`]; what it decided, delivered or suppressed, is in the journal.

use chrono::TimeDelta;
use replaysafe::alert::{Alert, AlertCategory, AlertmanagerClient, Severity};
use replaysafe::email::{Attachment, Email, EmailClient, EmailGuardExt, Mailbox};
use replaysafe::outbox::{Route, Status};
use replaysafe::sftp::{FileDrop, SftpClient};
use replaysafe::webhook::{Trigger, TriggerClient, Webhook, WebhookClient};
use replaysafe::{Guard, Outcome, ReplayContext, Window};
use serde_json::json;

use crate::folder_drop::{FolderDropClient, PartnerFile};
use crate::orders::{CUSTOMERS, CustomerTotal, OrdersDb, euros};
use crate::usage::UsageMeter;

/// The DAG started downstream once the day's orders are in.
pub(crate) const DOWNSTREAM_DAG: &str = "orders_reporting";

/// The freshness promise: a day's curated orders are due when the day closes (the
/// dashboards refresh at midnight UTC). A window whose load finishes more than this
/// after the window's end is late, and raises the freshness alert.
///
/// Zero makes the demo deterministic: the current window is loaded after midnight, so
/// it is always late and its alert always fires (into the receiver or Alertmanager).
/// Every backfilled window is late too, by days; those alerts are suppressed and
/// journaled, which is the point. A production pipeline would allow an hour or two.
pub(crate) const FRESHNESS_GRACE: TimeDelta = TimeDelta::zero();

/// The freshness alert's name.
pub(crate) const FRESHNESS_ALERT: &str = "orders_freshness";
/// The table the freshness alert is about (its `table` label).
pub(crate) const FRESHNESS_TABLE: &str = "curated_orders";

/// What the pipeline publishes for one window.
#[derive(Debug)]
pub(crate) struct DailySummary {
    /// The window.
    pub(crate) window: Window,
    /// Totals per customer.
    pub(crate) totals: Vec<CustomerTotal>,
    /// The window's curated orders as CSV, one per customer (for their email).
    pub(crate) customer_csv: Vec<String>,
    /// The window's curated orders as CSV, all customers (for the partner).
    pub(crate) csv: String,
    /// How long after the window's end the load finished.
    pub(crate) loaded_after_window_end: TimeDelta,
}

/// One delivered effect and where it landed.
#[derive(Clone, Debug)]
pub(crate) struct Landing {
    /// Effect kind.
    pub(crate) kind: &'static str,
    /// Where it landed: a file, a URL, a server.
    pub(crate) place: String,
}

/// The partner's file drop: SFTP with `--real`, a local folder otherwise.
#[derive(Debug)]
pub(crate) enum PartnerDrop {
    /// A folder standing in for the partner's inbox.
    Folder(Guard<FolderDropClient>),
    /// The partner's SFTP server.
    Sftp {
        /// The guarded client.
        client: Guard<SftpClient>,
        /// `sftp://host:port`, for printing.
        server: String,
    },
}

/// Every client the pipeline publishes through, each wrapped once.
#[derive(Debug)]
pub(crate) struct Publishers {
    /// One email per customer.
    pub(crate) mail: Guard<EmailClient>,
    /// The partner's webhook, delivered through the outbox.
    pub(crate) partner_webhook: Route<WebhookClient>,
    /// Its endpoint, for printing.
    pub(crate) partner_endpoint: String,
    /// The partner's file drop.
    pub(crate) partner_drop: PartnerDrop,
    /// The downstream Airflow DAG.
    pub(crate) downstream: Guard<TriggerClient>,
    /// Billed usage.
    pub(crate) usage: UsageMeter,
    /// The freshness alert.
    pub(crate) alerts: Guard<AlertmanagerClient>,
    /// Alertmanager's base URL, for printing.
    pub(crate) alertmanager_url: String,
}

/// The partner's file name for a window: `daily_orders_20260805.csv`.
pub(crate) fn drop_name(window: &Window) -> String {
    format!("daily_orders_{}.csv", window.start().format("%Y%m%d"))
}

fn landed<R>(
    outcome: &Outcome<R>,
    kind: &'static str,
    place: impl FnOnce(&R) -> String,
) -> Option<Landing> {
    outcome.receipt().map(|receipt| Landing {
        kind,
        place: place(receipt),
    })
}

impl Publishers {
    /// Publishes the window's summary through every client; returns what was delivered
    /// and where. A failed delivery is an error (after the guard's retries).
    pub(crate) async fn publish(
        &self,
        db: &OrdersDb,
        cx: &ReplayContext,
        summary: &DailySummary,
    ) -> anyhow::Result<Vec<Landing>> {
        let mut landings = Vec::new();
        landings.extend(self.email_customers(cx, summary).await?);
        landings.extend(self.notify_partner(db, cx, summary)?);
        landings.extend(self.drop_for_partner(cx, summary).await?);
        landings.extend(self.trigger_downstream(cx, summary).await?);
        if let Some(place) = self.usage.record(cx, &summary.totals).await? {
            landings.push(Landing {
                kind: "metric",
                place,
            });
        }
        landings.extend(self.alert_if_late(cx, summary).await?);
        Ok(landings)
    }

    /// One statement per customer, with their orders of the window attached as CSV.
    async fn email_customers(
        &self,
        cx: &ReplayContext,
        summary: &DailySummary,
    ) -> anyhow::Result<Vec<Landing>> {
        let date = summary.window.start().format("%Y-%m-%d");
        let mut landings = Vec::new();
        for ((customer, total), csv) in CUSTOMERS
            .iter()
            .zip(&summary.totals)
            .zip(&summary.customer_csv)
        {
            let email = Email::builder("daily_orders_statement")
                .from("Shop reports <reports@shop.example>")
                .to(Mailbox::named(customer.name, customer.email))
                .subject(format!("Your orders for {date}"))
                .text(format!(
                    "Hello {},\n\n{} orders on {date}, {} EUR in total. The orders are attached.\n",
                    customer.name,
                    total.orders,
                    euros(total.amount_cents)
                ))
                .attachment(Attachment::csv(
                    format!("orders_{date}.csv"),
                    csv.as_bytes(),
                ))
                .build();
            for outcome in self.mail.send_email(cx, &email).await?.into_result()? {
                landings.extend(landed(&outcome, "email", |receipt| match receipt.file() {
                    Some(path) => format!("{} → {}", customer.email, path.display()),
                    None => format!(
                        "{} → SMTP {} {}, Message-ID {}",
                        customer.email,
                        receipt.smtp_code().unwrap_or_default(),
                        receipt.smtp_reply().unwrap_or_default().trim(),
                        receipt.message_id()
                    ),
                }));
            }
        }
        Ok(landings)
    }

    /// The partner's signed webhook with the day's totals, staged in the outbox in the
    /// same transaction as the `daily_totals` rows it reports; a worker delivers it.
    fn notify_partner(
        &self,
        db: &OrdersDb,
        cx: &ReplayContext,
        summary: &DailySummary,
    ) -> anyhow::Result<Option<Landing>> {
        let customers: Vec<_> = summary
            .totals
            .iter()
            .map(|t| json!({"customer": t.customer, "orders": t.orders, "amount_eur": euros(t.amount_cents)}))
            .collect();
        let data = json!({
            "window": {"start": replaysafe::rfc3339(summary.window.start()), "end": replaysafe::rfc3339(summary.window.end())},
            "orders": summary.totals.iter().map(|t| t.orders).sum::<u64>(),
            "customers": customers,
        });
        let webhook = Webhook::event("orders.daily_summary", summary.window.end(), data);
        let staged =
            db.commit_totals_and_stage(cx, &self.partner_webhook, &webhook, &summary.totals)?;
        let endpoint = &self.partner_endpoint;
        Ok((staged.status == Status::Pending).then(|| Landing {
            kind: "webhook",
            place: format!(
                "outbox row {}…, committed with the totals; a worker sends it to {endpoint}",
                &staged.key[..12]
            ),
        }))
    }

    /// The window's CSV in the partner's inbox.
    async fn drop_for_partner(
        &self,
        cx: &ReplayContext,
        summary: &DailySummary,
    ) -> anyhow::Result<Option<Landing>> {
        let name = drop_name(&summary.window);
        match &self.partner_drop {
            PartnerDrop::Folder(client) => {
                let file = PartnerFile {
                    message_type: "orders_export".into(),
                    name,
                    content: summary.csv.clone().into_bytes(),
                };
                let outcome = client.send(cx, &file).await?;
                Ok(landed(&outcome, "file_drop", |dropped| {
                    let how = if dropped.already_present {
                        "already present"
                    } else {
                        "written"
                    };
                    format!("{} ({how})", dropped.path.display())
                }))
            }
            PartnerDrop::Sftp { client, server } => {
                // A name without `{...}` is a template that renders to itself.
                let file = FileDrop::from_bytes("orders_export", name, summary.csv.clone());
                let outcome = client.send(cx, &file).await?;
                Ok(landed(&outcome, "file_drop", |receipt| {
                    let how = if receipt.is_already_present() {
                        "already present"
                    } else {
                        "uploaded"
                    };
                    format!("{server}{} ({how})", receipt.remote_path)
                }))
            }
        }
    }

    /// Starts the reporting DAG for the same data interval.
    async fn trigger_downstream(
        &self,
        cx: &ReplayContext,
        summary: &DailySummary,
    ) -> anyhow::Result<Option<Landing>> {
        let trigger = Trigger::new(DOWNSTREAM_DAG).with_conf(json!({
            "source_pipeline": cx.pipeline(),
            "orders": summary.totals.iter().map(|t| t.orders).sum::<u64>(),
        }));
        let outcome = self.downstream.send(cx, &trigger).await?;
        Ok(landed(&outcome, "trigger", |receipt| {
            let run = receipt.run_id.as_deref().unwrap_or("?");
            let how = if receipt.already_triggered {
                ", already triggered"
            } else {
                ""
            };
            format!(
                "Airflow DAG {DOWNSTREAM_DAG}, run {run} ({}{how})",
                receipt.status
            )
        }))
    }

    /// The freshness alert, when the window's load finished later than promised.
    async fn alert_if_late(
        &self,
        cx: &ReplayContext,
        summary: &DailySummary,
    ) -> anyhow::Result<Option<Landing>> {
        let late_by = summary.loaded_after_window_end - FRESHNESS_GRACE;
        if late_by <= TimeDelta::zero() {
            return Ok(None);
        }
        let alert = Alert::trigger(
            FRESHNESS_ALERT,
            format!(
                "curated orders for {} complete {} late",
                summary.window.start().format("%Y-%m-%d"),
                human(late_by)
            ),
        )
        .with_severity(Severity::Warning)
        .with_category(AlertCategory::Freshness)
        .with_label("table", FRESHNESS_TABLE)
        .with_detail("late_by_seconds", late_by.num_seconds().to_string());
        let outcome = self.alerts.send(cx, &alert).await?;
        let url = &self.alertmanager_url;
        Ok(landed(&outcome, "alert", |()| {
            format!("POST {url}/api/v2/alerts ({FRESHNESS_ALERT}, warning)")
        }))
    }
}

/// `3 h 12 min`, `12 min`, `4 days`.
fn human(delta: TimeDelta) -> String {
    match (
        delta.num_days(),
        delta.num_hours() % 24,
        delta.num_minutes() % 60,
    ) {
        (0, 0, minutes) => format!("{minutes} min"),
        (0, hours, minutes) => format!("{hours} h {minutes} min"),
        (days, _, _) => format!("{days} days"),
    }
}
