//! [`Report::write_html`]: one self-contained page for a reviewer.
//!
//! The page is built from the same [`Report`] as the other formats (one streaming pass
//! over the journals), plus, when given one, the [`Diff`] against the original journal.
//! It holds no script and loads nothing: its styles are inline, its overview strip is
//! inline SVG, and a Content-Security-Policy meta tag forbids every fetch, so it opens
//! from disk and from a CI artifact viewer alike.
//!
//! Every text from a journal goes through [`escape`](crate::escape) (control
//! characters and bidirectional overrides shown as `\u{..}`) and then through maud's
//! HTML escaping, so markup in a journal shows as text.
//!
//! Elements a browser check reads carry `data-` attributes: the grid's rows
//! (`data-row`, `data-windows`) and cells (`data-kind` and one count per outcome).

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{Datelike, NaiveDate, TimeDelta};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::diff::{self, Changed, Diff};
use crate::render::{Format, escape, time_text, window_text};
use crate::report::{Cell, FailedEffect, InDoubt, Report, WindowKey, kind_order, plural};
use crate::spill::Rows;

/// The most rows the grid shows before it folds windows into weeks, then months.
const MAX_ROWS: usize = 120;

/// The policy of the page: nothing may be fetched; only its own inline styles apply.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'";

/// What one grid row stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fold {
    /// One data window.
    Window,
    /// The windows starting in one ISO week (Monday to Sunday, UTC).
    Week,
    /// The windows starting in one calendar month (UTC).
    Month,
}

impl Fold {
    fn as_str(self) -> &'static str {
        match self {
            Fold::Window => "window",
            Fold::Week => "week",
            Fold::Month => "month",
        }
    }
}

/// One row of the grid: a window, or the windows of a week or a month.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    /// The window, `week of 2026-05-04`, or `2026-05`.
    label: String,
    /// Windows in the row.
    windows: u64,
    /// Per effect kind, what happened.
    cells: BTreeMap<String, Cell>,
}

impl Row {
    /// Every kind's counts added up.
    fn total(&self) -> Cell {
        let mut total = Cell::default();
        for cell in self.cells.values() {
            total.add(cell);
        }
        total
    }
}

/// The grid's rows, in time order: one per window, or folded into weeks or months so
/// there are at most [`MAX_ROWS`] (unless the months alone are more).
fn rows(grid: &BTreeMap<WindowKey, BTreeMap<String, Cell>>) -> (Fold, Vec<Row>) {
    if grid.len() <= MAX_ROWS {
        let rows = grid
            .iter()
            .map(|((start, end), cells)| Row {
                label: window_text(*start, *end),
                windows: 1,
                cells: cells.clone(),
            })
            .collect();
        return (Fold::Window, rows);
    }
    let week = |start: NaiveDate| {
        start - TimeDelta::days(i64::from(start.weekday().num_days_from_monday()))
    };
    let weeks = folded(grid, |start| {
        let monday = week(start);
        (monday, format!("week of {}", monday.format("%Y-%m-%d")))
    });
    if weeks.len() <= MAX_ROWS {
        return (Fold::Week, weeks);
    }
    let months = folded(grid, |start| {
        let first = start.with_day(1).unwrap_or(start);
        (first, first.format("%Y-%m").to_string())
    });
    (Fold::Month, months)
}

/// Rows of windows folded by the (sort key, label) `bucket` gives their start date.
fn folded(
    grid: &BTreeMap<WindowKey, BTreeMap<String, Cell>>,
    bucket: impl Fn(NaiveDate) -> (NaiveDate, String),
) -> Vec<Row> {
    let mut rows: BTreeMap<NaiveDate, Row> = BTreeMap::new();
    for ((start, _), cells) in grid {
        let (key, label) = bucket(start.date_naive());
        let row = rows.entry(key).or_insert_with(|| Row {
            label,
            windows: 0,
            cells: BTreeMap::new(),
        });
        row.windows += 1;
        for (kind, cell) in cells {
            row.cells.entry(kind.clone()).or_default().add(cell);
        }
    }
    rows.into_values().collect()
}

/// The outcomes a cell can show, most pressing first: the first one a cell counts
/// colours it.
const OUTCOMES: [(&str, &str); 6] = [
    ("in-doubt", "in doubt"),
    ("failed", "failed"),
    ("opt-in", "delivered by opt-in"),
    ("delivered", "delivered"),
    ("unknown", "unknown decision"),
    ("suppressed", "suppressed"),
];

fn counts(cell: &Cell) -> [u64; 6] {
    [
        cell.in_doubt,
        cell.failed,
        cell.opt_in,
        cell.delivered,
        cell.unknown,
        cell.suppressed,
    ]
}

/// The class of the outcome that colours a cell, `none` when it counts nothing.
fn outcome_class(cell: &Cell) -> &'static str {
    counts(cell)
        .iter()
        .zip(OUTCOMES)
        .find(|(count, _)| **count > 0)
        .map_or("none", |(_, (class, _))| class)
}

/// `2 delivered, 88 suppressed`.
fn cell_words(cell: &Cell) -> String {
    let words: Vec<String> = counts(cell)
        .iter()
        .zip(OUTCOMES)
        .filter(|(count, _)| **count > 0)
        .map(|(count, (_, words))| format!("{count} {words}"))
        .collect();
    if words.is_empty() {
        "nothing".to_owned()
    } else {
        words.join(", ")
    }
}

/// Journal text as the page shows it: control characters and bidirectional overrides
/// as visible escapes. maud escapes the markup.
fn text(value: &str) -> Cow<'_, str> {
    escape(value, Format::Table)
}

const STYLE: &str = r#"
:root { --in-doubt: #7c3aed; --failed: #dc2626; --opt-in: #d97706; --delivered: #2563eb;
  --unknown: #475569; --suppressed: #9ca3af; --ink: #1f2937; --rule: #e5e7eb; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: var(--ink); margin: 0; padding: 24px 32px 48px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 8px; border-bottom: 1px solid var(--rule); padding-bottom: 4px; }
p.meta { color: #6b7280; margin: 0 0 16px; }
code, .key, .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
ul.headlines { padding-left: 20px; margin: 8px 0; }
ul.headlines li { margin: 4px 0; }
.group-kind { font-weight: 600; }
.totals { display: flex; flex-wrap: wrap; gap: 8px; margin: 12px 0; }
.total { border: 1px solid var(--rule); border-left-width: 6px; border-radius: 6px; padding: 6px 12px; min-width: 120px; }
.total b { display: block; font-size: 20px; }
.total.in-doubt { border-left-color: var(--in-doubt); } .total.failed { border-left-color: var(--failed); }
.total.opt-in { border-left-color: var(--opt-in); } .total.delivered { border-left-color: var(--delivered); }
.total.suppressed { border-left-color: var(--suppressed); } .total.unknown { border-left-color: var(--unknown); }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin: 8px 0; color: #374151; }
.legend span::before { content: ""; display: inline-block; width: 12px; height: 12px; border-radius: 3px;
  margin-right: 5px; vertical-align: -1px; background: var(--c); }
svg.strip { display: block; width: 100%; height: 18px; margin: 6px 0 12px; border: 1px solid var(--rule); }
svg.strip rect.in-doubt { fill: var(--in-doubt); } svg.strip rect.failed { fill: var(--failed); }
svg.strip rect.opt-in { fill: var(--opt-in); } svg.strip rect.delivered { fill: var(--delivered); }
svg.strip rect.unknown { fill: var(--unknown); } svg.strip rect.suppressed { fill: var(--suppressed); }
svg.strip rect.none { fill: #fff; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid var(--rule); padding: 3px 8px; text-align: left; vertical-align: top; }
thead th { background: #f9fafb; position: sticky; top: 0; z-index: 1; }
table.grid td.cell { min-width: 110px; }
table.grid th[scope=row] { white-space: nowrap; font-weight: 500; }
table.grid tfoot th, table.grid tfoot td { border-top: 2px solid #9ca3af; }
td.cell.in-doubt { background: #ede9fe; } td.cell.failed { background: #fee2e2; }
td.cell.opt-in { background: #fef3c7; } td.cell.delivered { background: #dbeafe; }
td.cell.unknown { background: #e2e8f0; } td.cell.suppressed { background: #f3f4f6; }
.n { display: inline-block; min-width: 22px; padding: 0 5px; margin: 1px 3px 1px 0; border-radius: 9px;
  color: #fff; font-size: 12px; text-align: center; font-variant-numeric: tabular-nums; }
.n.in-doubt { background: var(--in-doubt); } .n.failed { background: var(--failed); }
.n.opt-in { background: var(--opt-in); } .n.delivered { background: var(--delivered); }
.n.unknown { background: var(--unknown); } .n.suppressed { background: #6b7280; }
tr.only-in-new td { background: #dcfce7; } tr.only-in-base td { background: #fee2e2; }
tr.changed td { background: #fef3c7; } tr.flip td { background: #ede9fe; }
tr.flip.to-delivered td { background: #fecaca; font-weight: 600; }
.none-here { color: #6b7280; font-style: italic; }
.wrap { overflow-x: auto; }
"#;

/// Where the rows of the lists that grow with the journals go in the page, written one
/// at a time from the report's temporary files. Journal text cannot hold a marker: maud
/// escapes its `<`.
const IN_DOUBT_ROWS: &str = "<!--replaysafe:in-doubt-rows-->";
const FAILED_ROWS: &str = "<!--replaysafe:failed-rows-->";
const ONLY_IN_NEW_ROWS: &str = "<!--replaysafe:only-in-new-rows-->";
const ONLY_IN_BASE_ROWS: &str = "<!--replaysafe:only-in-base-rows-->";
const CHANGED_ROWS: &str = "<!--replaysafe:changed-rows-->";
const CHANGED_DECISION_ROWS: &str = "<!--replaysafe:changed-decision-rows-->";

/// Writes the whole page to `out`, the rows of effects in doubt and failed read back from
/// disk one at a time, so the page is never held in memory whole.
pub(crate) fn write(
    report: &Report,
    diff: Option<&Diff>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let page = one_element_a_line(page(report, diff).into_string());
    // The markers, in the order the page holds them, and how to write each one's rows.
    type WriteRows<'a> = Box<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + 'a>;
    let mut lists: Vec<(&str, WriteRows<'_>)> = vec![
        (
            IN_DOUBT_ROWS,
            Box::new(|out| write_rows(out, &report.in_doubt, in_doubt_row)),
        ),
        (
            FAILED_ROWS,
            Box::new(|out| write_rows(out, &report.failed_effects, failed_row)),
        ),
    ];
    if let Some(diff) = diff {
        lists.push((
            ONLY_IN_NEW_ROWS,
            Box::new(|out| {
                write_rows(out, &diff.only_in_new, |effect| {
                    effect_row(effect, "only-in-new")
                })
            }),
        ));
        lists.push((
            ONLY_IN_BASE_ROWS,
            Box::new(|out| {
                write_rows(out, &diff.only_in_base, |effect| {
                    effect_row(effect, "only-in-base")
                })
            }),
        ));
        lists.push((
            CHANGED_ROWS,
            Box::new(|out| write_rows(out, &diff.changed, changed_row)),
        ));
        lists.push((
            CHANGED_DECISION_ROWS,
            Box::new(|out| write_rows(out, &diff.changed_decision, changed_decision_row)),
        ));
    }
    let mut rest = page.as_str();
    for (marker, rows) in lists {
        if let Some(index) = rest.find(marker) {
            out.write_all(&rest.as_bytes()[..index])?;
            rows(out)?;
            rest = &rest[index + marker.len()..];
        }
    }
    out.write_all(rest.as_bytes())
}

/// Writes each row of `rows` as `row` renders it, one at a time.
fn write_rows<T: serde::Serialize + serde::de::DeserializeOwned>(
    out: &mut dyn std::io::Write,
    rows: &Rows<T>,
    row: impl Fn(&T) -> Markup,
) -> std::io::Result<()> {
    for item in rows.iter() {
        out.write_all(one_element_a_line(row(&item?).into_string()).as_bytes())?;
    }
    Ok(())
}

fn page(report: &Report, diff: Option<&Diff>) -> Markup {
    let (fold, rows) = rows(&report.grid);
    let mut kinds: Vec<&String> = report
        .grid
        .values()
        .flat_map(|cells| cells.keys())
        .collect();
    kinds.sort_by_key(|kind| kind_order(kind));
    kinds.dedup();
    let mut totals = Cell::default();
    for cells in report.grid.values() {
        for cell in cells.values() {
            totals.add(cell);
        }
    }
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CONTENT_SECURITY_POLICY);
                meta name="referrer" content="no-referrer";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "replaysafe report" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "replaysafe report" }
                p.meta {
                    (plural(report.records, "record", "records")) " from "
                    @for (index, journal) in report.journals.iter().enumerate() {
                        @if index > 0 { ", " }
                        code { (text(journal)) }
                    }
                }
                (headlines(report))
                @if let Some(line) = report.unknown_window.text() {
                    p.unknown { (text(&line)) }
                }
                (totals_tiles(&totals))
                (grid(fold, &rows, &kinds))
                (opt_ins(report))
                (in_doubt(report))
                (failed(report))
                @if let Some(diff) = diff { (diff_view(diff)) }
                (breakdowns(report))
                (skipped(report))
            }
        }
    }
}

/// One element a line where whitespace changes nothing, so the page reads as a file too.
/// Journal text holds no `<` (maud escaped it), so only the page's own tags match; and
/// as only whole tags are matched, a page written in parts reads the same as one written
/// whole.
fn one_element_a_line(mut out: String) -> String {
    for tag in [
        "<head>",
        "</style>",
        "</title>",
        "<body>",
        "</h1>",
        "</h2>",
        "</h3>",
        "</p>",
        "</li>",
        "<ul class=\"headlines\">",
        "</ul>",
        "</div>",
        "</svg>",
        "</rect>",
        "</tr>",
        "<tbody>",
        "</tbody>",
        "<tfoot>",
        "</tfoot>",
        "</thead>",
        "</table>",
        "</td>",
    ] {
        out = out.replace(tag, &format!("{tag}\n"));
    }
    out
}

fn headlines(report: &Report) -> Markup {
    html! {
        h2 { "Runs and backfills" }
        @if report.groups.is_empty() {
            p.none-here { "no effects journaled" }
        } @else {
            ul.headlines {
                @for group in &report.groups {
                    li data-group=(group.kind) { (text(&group.headline)) }
                }
            }
        }
    }
}

fn totals_tiles(totals: &Cell) -> Markup {
    html! {
        div.totals {
            @for (count, (class, words)) in counts(totals).iter().zip(OUTCOMES) {
                @if *count > 0 || class != "unknown" {
                    div class={ "total " (class) } data-total=(class) {
                        b { (count) } (words)
                    }
                }
            }
        }
    }
}

fn grid(fold: Fold, rows: &[Row], kinds: &[&String]) -> Markup {
    let windows: u64 = rows.iter().map(|row| row.windows).sum();
    html! {
        h2 { "Effects by window and kind" }
        @if rows.is_empty() {
            p.none-here { "no windows journaled" }
        } @else {
            p {
                (plural(windows, "window", "windows"))
                @match fold {
                    Fold::Window => { ", one row each." }
                    Fold::Week => { ", folded into " (plural(rows.len() as u64, "week", "weeks")) " (by the week each window starts in, Monday to Sunday, UTC)." }
                    Fold::Month => { ", folded into " (plural(rows.len() as u64, "month", "months")) " (by the month each window starts in, UTC)." }
                }
                " Each cell counts the effects of one kind: its colour is the most pressing outcome in it."
            }
            div.legend {
                @for (class, words) in OUTCOMES {
                    span style={ "--c: var(--" (class) ")" } { (words) }
                }
            }
            (strip(rows))
            div.wrap {
                table.grid data-fold=(fold.as_str()) {
                    thead {
                        tr {
                            th scope="col" { (fold.as_str()) }
                            @for kind in kinds { th scope="col" data-kind=(text(kind)) { (text(kind)) } }
                        }
                    }
                    tbody {
                        @for row in rows {
                            tr data-row=(fold.as_str()) data-windows=(row.windows) {
                                th scope="row" {
                                    (text(&row.label))
                                    @if fold != Fold::Window { " (" (plural(row.windows, "window", "windows")) ")" }
                                }
                                @for kind in kinds {
                                    (cell(kind, row.cells.get(*kind)))
                                }
                            }
                        }
                    }
                    tfoot {
                        tr {
                            th scope="row" { "total" }
                            @for kind in kinds {
                                (cell(kind, Some(&kind_total(rows, kind))))
                            }
                        }
                    }
                }
            }
        }
    }
}

fn kind_total(rows: &[Row], kind: &str) -> Cell {
    let mut total = Cell::default();
    for row in rows {
        if let Some(cell) = row.cells.get(kind) {
            total.add(cell);
        }
    }
    total
}

fn cell(kind: &str, cell: Option<&Cell>) -> Markup {
    let cell = cell.copied().unwrap_or_default();
    html! {
        td class={ "cell " (outcome_class(&cell)) } title=(cell_words(&cell))
            data-kind=(text(kind)) data-delivered=(cell.delivered) data-opt-in=(cell.opt_in)
            data-suppressed=(cell.suppressed) data-failed=(cell.failed)
            data-in-doubt=(cell.in_doubt) data-unknown=(cell.unknown) {
            @for (count, (class, words)) in counts(&cell).iter().zip(OUTCOMES) {
                @if *count > 0 {
                    span class={ "n " (class) } title={ (count) " " (words) } { (count) }
                }
            }
        }
    }
}

/// An overview strip in inline SVG: one bar per grid row, coloured as its most pressing cell.
fn strip(rows: &[Row]) -> Markup {
    html! {
        svg.strip xmlns="http://www.w3.org/2000/svg" role="img"
            viewBox={ "0 0 " (rows.len()) " 1" } preserveAspectRatio="none" {
            title { "the grid's rows in time order, coloured by their most pressing outcome" }
            @for (index, row) in rows.iter().enumerate() {
                @let all = row.total();
                rect class=(outcome_class(&all)) x=(index) y="0" width="1" height="1" {
                    title { (text(&row.label)) ": " (cell_words(&all)) }
                }
            }
        }
    }
}

fn opt_ins(report: &Report) -> Markup {
    html! {
        h2 { "Delivered by opt-in" }
        @if report.opt_in_deliveries.is_empty() {
            p.none-here { "no delivery was enabled by an opt-in" }
        } @else {
            div.wrap { table.opt-ins {
                thead { tr {
                    th { "kind" } th { "message type" } th { "target" } th { "window start" }
                    th { "reason" } th { "scope" } th { "approved by" } th { "signer" } th { "expires" }
                } }
                tbody {
                    @for delivery in &report.opt_in_deliveries {
                        tr {
                            td { (text(&delivery.kind)) }
                            td { (text(&delivery.message_type)) }
                            td { (text(&delivery.target)) }
                            td { (time_text(delivery.window_start)) }
                            td { (text(&delivery.reason)) }
                            td { (text(&delivery.scope)) }
                            td { (text(&delivery.approved_by)) }
                            td { @match &delivery.signer {
                                Some(signer) => { (text(signer)) }
                                None => { span.none-here { "none journaled" } }
                            } }
                            td { (replaysafe_core::rfc3339(delivery.expires_at)) }
                        }
                    }
                }
            } }
        }
    }
}

fn in_doubt(report: &Report) -> Markup {
    html! {
        h2 { "In doubt" }
        @if report.in_doubt.is_empty() {
            p.none-here { "nothing is in doubt: every delivery that began has an outcome" }
        } @else {
            p {
                (plural(report.in_doubt.len() as u64, "effect whose", "effects whose"))
                " delivery began and no outcome is recorded; ask the receiver by key before sending again."
            }
            div.wrap { table.in-doubt {
                thead { tr {
                    th { "key" } th { "kind" } th { "message type" } th { "target" } th { "window" }
                    th { "run" } th { "attempt" } th { "began" } th { "last error" }
                } }
                tbody { (PreEscaped(IN_DOUBT_ROWS)) }
            } }
        }
    }
}

fn in_doubt_row(effect: &InDoubt) -> Markup {
    html! {
        tr data-key=(text(&effect.key)) {
            td.key { (text(&effect.key)) }
            td { (text(&effect.kind)) }
            td { (text(&effect.message_type)) }
            td { (text(&effect.target)) }
            td { (window_text(effect.window_start, effect.window_end)) }
            td { (text(&effect.run_id)) }
            td { (effect.attempt) }
            td { (replaysafe_core::rfc3339(effect.began)) }
            td { (error_text(effect.last_error.as_deref())) }
        }
    }
}

fn failed(report: &Report) -> Markup {
    html! {
        h2 { "Failed" }
        @if report.failed_effects.is_empty() {
            p.none-here { "no effect failed for good" }
        } @else {
            p {
                (plural(report.failed_effects.len() as u64, "effect", "effects"))
                " whose attempts failed and that no journal line delivered."
            }
            div.wrap { table.failed {
                thead { tr {
                    th { "key" } th { "kind" } th { "message type" } th { "target" } th { "window" }
                    th { "run" } th { "attempts" } th { "last error" }
                } }
                tbody { (PreEscaped(FAILED_ROWS)) }
            } }
        }
    }
}

fn failed_row(effect: &FailedEffect) -> Markup {
    html! {
        tr data-key=(text(&effect.key)) {
            td.key { (text(&effect.key)) }
            td { (text(&effect.kind)) }
            td { (text(&effect.message_type)) }
            td { (text(&effect.target)) }
            td { (window_text(effect.window_start, effect.window_end)) }
            td { (text(&effect.run_id)) }
            td { (effect.failed_attempts) }
            td { (error_text(effect.last_error.as_deref())) }
        }
    }
}

fn error_text(error: Option<&str>) -> Markup {
    html! {
        @match error {
            Some(error) => { (text(error)) }
            None => { span.none-here { "none journaled" } }
        }
    }
}

fn diff_view(diff: &Diff) -> Markup {
    let to_delivered = diff
        .changed_decision
        .iter()
        .filter(|change| {
            change
                .as_ref()
                .is_ok_and(|change| change.new.decision == "delivered")
        })
        .count() as u64;
    html! {
        h2 { "Compared with the base journal" }
        p data-diff="summary" {
            (diff.only_in_new.len()) " only in new, "
            (diff.only_in_base.len()) " only in base, "
            (diff.changed.len()) " changed payloads, "
            (diff.changed_decision.len()) " changed decisions ("
            (to_delivered) " now delivered), "
            (diff.unchanged) " unchanged"
        }
        @if diff.is_empty() {
            p.none-here { "the journals describe the same effects with the same payloads and decisions" }
        }
        (effects_table("Only in new: the new journal reaches someone the base did not", ONLY_IN_NEW_ROWS, &diff.only_in_new))
        (effects_table("Only in base: someone the base reached is not reached now", ONLY_IN_BASE_ROWS, &diff.only_in_base))
        @if !diff.changed.is_empty() {
            h3 { "Changed payloads" }
            div.wrap { table.diff {
                thead { tr {
                    th { "kind" } th { "message type" } th { "target" } th { "window start" }
                    th { "base sha256" } th { "new sha256" } th { "key" }
                } }
                tbody { (PreEscaped(CHANGED_ROWS)) }
            } }
        }
        @if !diff.changed_decision.is_empty() {
            h3 { "Changed decisions" }
            div.wrap { table.diff {
                thead { tr {
                    th { "kind" } th { "message type" } th { "target" } th { "window start" }
                    th { "base" } th { "new" } th { "key" }
                } }
                tbody { (PreEscaped(CHANGED_DECISION_ROWS)) }
            } }
        }
    }
}

fn changed_row(change: &Changed) -> Markup {
    html! {
        tr.changed {
            (effect_cells(change))
            td.mono { (text(diff::prefix(&change.base.payload_sha256, 12))) }
            td.mono { (text(diff::prefix(&change.new.payload_sha256, 12))) }
            td.key { (text(diff::prefix(&change.new.key, 16))) }
        }
    }
}

fn changed_decision_row(change: &Changed) -> Markup {
    html! {
        tr class={ "flip" @if change.new.decision == "delivered" { " to-delivered" } } {
            (effect_cells(change))
            td { (text(diff::decision_text(&change.base.decision))) }
            td { (text(diff::decision_text(&change.new.decision))) }
            td.key { (text(diff::prefix(&change.new.key, 16))) }
        }
    }
}

fn effect_cells(change: &Changed) -> Markup {
    html! {
        td { (text(&change.new.kind)) }
        td { (text(&change.new.message_type)) }
        td { (text(&change.new.target)) }
        td { (time_text(change.new.window_start)) }
    }
}

fn effect_row(effect: &diff::Effect, class: &str) -> Markup {
    html! {
        tr class=(class) {
            td { (text(&effect.kind)) }
            td { (text(&effect.message_type)) }
            td { (text(&effect.target)) }
            td { (time_text(effect.window_start)) }
            td { (text(diff::decision_text(&effect.decision))) }
            td.key { (text(diff::prefix(&effect.key, 16))) }
        }
    }
}

/// A table of effects; `marker` is where its rows go.
fn effects_table(title: &str, marker: &str, effects: &Rows<diff::Effect>) -> Markup {
    html! {
        @if !effects.is_empty() {
            h3 { (title) }
            div.wrap { table.diff {
                thead { tr {
                    th { "kind" } th { "message type" } th { "target" } th { "window start" }
                    th { "decision" } th { "key" }
                } }
                tbody { (PreEscaped(marker)) }
            } }
        }
    }
}

/// The breakdown tables, as the text formats show them.
fn breakdowns(report: &Report) -> Markup {
    html! {
        @for (breakdown, values) in &report.breakdowns {
            h2 { "By " (breakdown.heading()) }
            @if values.is_empty() {
                p.none-here { "nothing journaled" }
            } @else {
                div.wrap { table.breakdown {
                    thead { tr {
                        th { (breakdown.heading()) } th { "delivered" } th { "suppressed" }
                        th { "failed attempts" } th { "attempts begun" }
                    } }
                    tbody {
                        @for (value, counts) in values {
                            tr {
                                td { (text(value)) }
                                td { (counts.delivered) }
                                td { (counts.suppressed) }
                                td { (counts.failed) }
                                td { (counts.attempting) }
                            }
                        }
                    }
                } }
            }
        }
    }
}

fn skipped(report: &Report) -> Markup {
    html! {
        @if report.skipped_invalid > 0 {
            h2 { "Skipped lines" }
            p {
                "skipped " (plural(report.skipped_invalid, "invalid line", "invalid lines")) ": "
                (text(&report.skipped_invalid_lines.join(", ")))
                @let unlisted = report.skipped_invalid - report.skipped_invalid_lines.len() as u64;
                @if unlisted > 0 { " and " (unlisted) " more" }
            }
            @if let Some(possibly) = crate::report::possibly_in_doubt_text(report) {
                p { (possibly) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;

    fn grid_of(days: i64) -> BTreeMap<WindowKey, BTreeMap<String, Cell>> {
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        (0..days)
            .map(|day| {
                let window_start = start + TimeDelta::days(day);
                let cell = Cell {
                    suppressed: 2,
                    ..Cell::default()
                };
                (
                    (window_start, window_start + TimeDelta::days(1)),
                    BTreeMap::from([("email".to_owned(), cell)]),
                )
            })
            .collect()
    }

    #[test]
    fn long_backfills_fold_into_weeks_then_months() {
        let (fold, rows) = super::rows(&grid_of(MAX_ROWS as i64));
        assert_eq!((fold, rows.len()), (Fold::Window, MAX_ROWS));

        // 2026-01-01 is a Thursday: its week starts on 2025-12-29.
        let (fold, rows) = super::rows(&grid_of(365));
        assert_eq!(fold, Fold::Week);
        assert_eq!(rows[0].label, "week of 2025-12-29");
        assert_eq!(rows[0].windows, 4);
        assert_eq!(rows.len(), 53);
        assert_eq!(rows.iter().map(|r| r.windows).sum::<u64>(), 365);
        assert_eq!(rows[1].cells["email"].suppressed, 14);

        let (fold, rows) = super::rows(&grid_of(2_000));
        assert_eq!(fold, Fold::Month);
        assert_eq!(rows.len(), 66);
        assert_eq!(rows[0].label, "2026-01");
        assert_eq!(rows[0].windows, 31);
        assert_eq!(rows.iter().map(|r| r.windows).sum::<u64>(), 2_000);
    }

    #[test]
    fn a_cell_is_coloured_by_its_most_pressing_outcome() {
        let mut cell = Cell {
            suppressed: 5,
            ..Cell::default()
        };
        assert_eq!(outcome_class(&cell), "suppressed");
        cell.delivered = 1;
        assert_eq!(outcome_class(&cell), "delivered");
        cell.opt_in = 1;
        assert_eq!(outcome_class(&cell), "opt-in");
        cell.failed = 1;
        assert_eq!(outcome_class(&cell), "failed");
        cell.in_doubt = 1;
        assert_eq!(outcome_class(&cell), "in-doubt");
        assert_eq!(
            cell_words(&cell),
            "1 in doubt, 1 failed, 1 delivered by opt-in, 1 delivered, 5 suppressed"
        );
        assert_eq!(outcome_class(&Cell::default()), "none");
    }
}
