//! `cargo xtask browser`: the demo's report page in a real browser.
//!
//! Installs Debian's `chromium`, renders `target/demo/report.html` headless (running the
//! demo first when the page is missing), keeps a screenshot at `target/demo/report.png`,
//! and checks what the browser built against `replaysafe report --format json` on the
//! same journal:
//!
//! - the grid has one row per window (or per week or month when folded), covering every window;
//! - each kind's delivered, suppressed, failed and in-doubt counts match the JSON report;
//! - one headline per run or backfill, with the JSON report's words;
//! - every opt-in delivery has its row;
//! - the page fetches nothing: Chromium's network log holds no request the page started.
//!   A control page with an external image is rendered the same way first, and its
//!   request must show in the log, so the check is known to see one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use crate::system::{cargo, ensure_packages, root, target_dir};

/// What a page is rendered at: wide enough for the grid, tall enough for the whole of the demo's page.
const WINDOW_SIZE: (u32, u32) = (1400, 4400);

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    if !args.is_empty() {
        bail!("usage: cargo xtask browser (got {args:?})");
    }
    check()
}

/// The whole check; `cargo xtask ci` runs it after the demo.
pub(crate) fn check() -> anyhow::Result<()> {
    let started = Instant::now();
    ensure_packages(&["chromium", "fonts-dejavu-core"])?;
    eprintln!(
        "xtask browser: chromium ready in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let demo = target_dir().join("demo");
    let page = demo.join("report.html");
    let journal = demo.join("journal.jsonl");
    if !page.exists() || !journal.exists() {
        crate::demo::run(&[])?;
    }
    let work = demo.join("browser");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;

    // Positive control: an external image must show in the network log.
    let control = work.join("control.html");
    std::fs::write(
        &control,
        "<!DOCTYPE html><title>control</title><img src=\"http://127.0.0.1:9/control.png\">",
    )?;
    let rendered = render(&control, &work.join("control"), None)?;
    let requests = page_requests(&rendered.net_log)?;
    ensure!(
        requests
            .iter()
            .any(|url| url.contains("127.0.0.1:9/control.png")),
        "the network-log check saw no request from a page that makes one: {requests:?}"
    );

    let screenshot = demo.join("report.png");
    let rendered = render(&page, &work.join("report"), Some(&screenshot))?;
    let requests = page_requests(&rendered.net_log)?;
    ensure!(
        requests.is_empty(),
        "the report page made requests: {requests:?}"
    );
    ensure!(
        png_size(&screenshot)? == WINDOW_SIZE,
        "the screenshot is not {WINDOW_SIZE:?}"
    );

    let report = json_report(&journal)?;
    let dom = Dom(&rendered.dom);
    let summary = compare(&dom, &report)?;
    eprintln!(
        "xtask browser: {} checked in chromium in {:.1}s: {summary}; no request left the page; screenshot {}",
        page.display(),
        started.elapsed().as_secs_f64(),
        screenshot.display()
    );
    Ok(())
}

/// What Chromium made of a page.
struct Rendered {
    dom: String,
    net_log: PathBuf,
}

/// Renders `page` headless: its DOM, its network log, and optionally a screenshot.
fn render(page: &Path, work: &Path, screenshot: Option<&Path>) -> anyhow::Result<Rendered> {
    std::fs::create_dir_all(work)?;
    let net_log = work.join("net-log.json");
    let url = format!("file://{}", page.canonicalize()?.display());
    let browser = |extra: &[String]| -> anyhow::Result<std::process::Output> {
        let output = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-default-apps",
                "--no-pings",
                "--hide-scrollbars",
            ])
            .arg(format!(
                "--user-data-dir={}",
                work.join("profile").display()
            ))
            .arg(format!("--window-size={},{}", WINDOW_SIZE.0, WINDOW_SIZE.1))
            .args(extra)
            .arg(&url)
            .output()
            .context("starting chromium")?;
        if !output.status.success() {
            bail!(
                "chromium failed on {url}: {}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(output)
    };
    let output = browser(&[
        format!("--log-net-log={}", net_log.display()),
        "--dump-dom".to_owned(),
    ])?;
    let dom = String::from_utf8(output.stdout).context("chromium's DOM is not UTF-8")?;
    if let Some(path) = screenshot {
        let _ = std::fs::remove_file(path);
        browser(&[format!("--screenshot={}", path.display())])?;
        ensure!(
            path.exists(),
            "chromium wrote no screenshot to {}",
            path.display()
        );
    }
    Ok(Rendered { dom, net_log })
}

/// The URLs of the requests a page started (not those of the browser itself), from a
/// Chromium network log: a request the browser makes for itself has no initiator origin.
fn page_requests(net_log: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(net_log)
        .with_context(|| format!("reading chromium's network log {}", net_log.display()))?;
    // Chromium may end the log without closing its array when it exits quickly.
    let log: Value = serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(&format!("{}]}}", text.trim_end().trim_end_matches(','))))
        .context("parsing chromium's network log")?;
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .context("the network log names no URL_REQUEST_START_JOB event")?;
    let events = log["events"]
        .as_array()
        .context("the network log has no events")?;
    Ok(events
        .iter()
        .filter(|event| event["type"].as_u64() == Some(start_job))
        .filter(|event| {
            event["params"]["initiator"]
                .as_str()
                .is_some_and(|initiator| initiator != "not an origin")
        })
        .filter_map(|event| event["params"]["url"].as_str().map(str::to_owned))
        .collect())
}

/// Width and height from a PNG's header.
fn png_size(path: &Path) -> anyhow::Result<(u32, u32)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR",
        "{} is not a PNG",
        path.display()
    );
    let number =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    Ok((number(16), number(20)))
}

/// `replaysafe report --format json --by kind --by window JOURNAL`.
fn json_report(journal: &Path) -> anyhow::Result<Value> {
    let output = cargo()
        .args([
            "run",
            "--quiet",
            "--package",
            "replaysafe-cli",
            "--bin",
            "replaysafe",
            "--",
        ])
        .args([
            "report", "--format", "json", "--by", "kind", "--by", "window",
        ])
        .arg(journal)
        .current_dir(root())
        .output()
        .context("running replaysafe report")?;
    ensure!(
        output.status.success(),
        "replaysafe report failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).context("parsing replaysafe report's JSON")
}

/// A serialized DOM, read by the `data-` attributes the page puts on what is checked.
struct Dom<'a>(&'a str);

/// One start tag: its attributes, and where its content begins.
struct Element {
    attributes: BTreeMap<String, String>,
    content: usize,
}

impl<'a> Dom<'a> {
    /// The part of the DOM between `start` and the next `end`, after `start`.
    fn section(&self, start: &str, end: &str) -> anyhow::Result<Dom<'a>> {
        let from = self
            .0
            .find(start)
            .with_context(|| format!("no {start} in the DOM"))?;
        let rest = &self.0[from..];
        let to = rest
            .find(end)
            .with_context(|| format!("no {end} after {start}"))?;
        Ok(Dom(&rest[..to]))
    }

    /// Every `<tag ...>` start tag, with its attributes.
    fn elements(&self, tag: &str) -> Vec<Element> {
        let open = format!("<{tag}");
        let mut found = Vec::new();
        let mut at = 0;
        while let Some(offset) = self.0[at..].find(&open) {
            let start = at + offset + open.len();
            at = start;
            let rest = &self.0[start..];
            if !rest.starts_with([' ', '>']) {
                continue;
            }
            let Some(close) = rest.find('>') else { break };
            found.push(Element {
                attributes: attributes(&rest[..close]),
                content: start + close + 1,
            });
        }
        found
    }

    /// The text of an element whose content starts at `content`, up to its closing tag.
    fn text(&self, content: usize, tag: &str) -> String {
        let rest = &self.0[content..];
        let end = rest.find(&format!("</{tag}>")).unwrap_or(rest.len());
        unescape(&rest[..end])
    }
}

/// `name="value"` pairs of a serialized start tag (Chromium quotes every value).
fn attributes(tag: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut rest = tag;
    while let Some(equals) = rest.find("=\"") {
        let name = rest[..equals].rsplit(' ').next().unwrap_or("").to_owned();
        let value_start = equals + 2;
        let Some(length) = rest[value_start..].find('"') else {
            break;
        };
        found.insert(name, unescape(&rest[value_start..value_start + length]));
        rest = &rest[value_start + length + 1..];
    }
    found
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

fn number(element: &Element, name: &str) -> anyhow::Result<u64> {
    element
        .attributes
        .get(name)
        .with_context(|| format!("an element has no {name}"))?
        .parse()
        .with_context(|| format!("{name} is not a number"))
}

fn json_u64(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// Checks the page's DOM against the JSON report; returns what it checked, in words.
fn compare(dom: &Dom<'_>, report: &Value) -> anyhow::Result<String> {
    // Headlines: one per run or backfill, the same words.
    let groups = report["groups"]
        .as_array()
        .context("no groups in the JSON report")?;
    let headlines: Vec<String> = dom
        .elements("li")
        .iter()
        .filter(|li| li.attributes.contains_key("data-group"))
        .map(|li| dom.text(li.content, "li"))
        .collect();
    let expected: Vec<&str> = groups
        .iter()
        .filter_map(|g| g["headline"].as_str())
        .collect();
    ensure!(
        headlines == expected,
        "the page's headlines {headlines:#?} are not the report's {expected:#?}"
    );

    // The grid: one row per window or fold, covering every window.
    let grid = dom.section("<table class=\"grid\"", "</table>")?;
    let fold = grid
        .elements("table")
        .first()
        .and_then(|table| table.attributes.get("data-fold").cloned())
        .context("the grid names no fold")?;
    let body = grid.section("<tbody>", "</tbody>")?;
    let rows = body.elements("tr");
    let windows = report["breakdowns"]["window"]
        .as_object()
        .context("no window breakdown in the JSON report")?
        .len() as u64;
    let covered = rows
        .iter()
        .map(|row| number(row, "data-windows"))
        .sum::<anyhow::Result<u64>>()?;
    ensure!(
        covered == windows,
        "the grid's rows cover {covered} windows, the journal has {windows}"
    );
    if fold == "window" {
        ensure!(
            rows.len() as u64 == windows,
            "{} rows for {windows} windows",
            rows.len()
        );
    } else {
        ensure!(
            rows.len() <= 120 && (rows.len() as u64) < windows,
            "{} {fold} rows for {windows} windows",
            rows.len()
        );
    }

    // Each kind's counts.
    let mut cells: BTreeMap<String, [u64; 4]> = BTreeMap::new();
    for cell in body.elements("td") {
        let kind = cell
            .attributes
            .get("data-kind")
            .context("a cell has no data-kind")?
            .clone();
        let counts = cells.entry(kind).or_default();
        counts[0] += number(&cell, "data-delivered")? + number(&cell, "data-opt-in")?;
        counts[1] += number(&cell, "data-suppressed")?;
        counts[2] += number(&cell, "data-failed")?;
        counts[3] += number(&cell, "data-in-doubt")?;
    }
    let by_kind = report["breakdowns"]["kind"]
        .as_object()
        .context("no kind breakdown in the JSON report")?;
    let count_of = |list: &str, kind: &str| {
        report[list].as_array().map_or(0, |effects| {
            effects.iter().filter(|e| e["kind"] == kind).count() as u64
        })
    };
    let mut expected: BTreeMap<String, [u64; 4]> = BTreeMap::new();
    for (kind, counts) in by_kind {
        expected.insert(
            kind.clone(),
            [
                json_u64(&counts["delivered"]),
                json_u64(&counts["suppressed"]),
                count_of("failed_effects", kind),
                count_of("in_doubt", kind),
            ],
        );
    }
    ensure!(
        cells == expected,
        "the grid's [delivered, suppressed, failed, in doubt] per kind {cells:?} are not the report's {expected:?}"
    );

    // Every opt-in delivery has its row.
    let opt_ins = report["opt_in_deliveries"].as_array().map_or(0, Vec::len);
    let opt_in_rows = if opt_ins == 0 {
        0
    } else {
        dom.section("<table class=\"opt-ins\"", "</table>")?
            .section("<tbody>", "</tbody>")?
            .elements("tr")
            .len()
    };
    ensure!(
        opt_in_rows == opt_ins,
        "{opt_in_rows} opt-in rows for {opt_ins} opt-in deliveries"
    );

    let totals: [u64; 4] = cells.values().fold([0; 4], |mut sum, counts| {
        for (total, count) in sum.iter_mut().zip(counts) {
            *total += count;
        }
        sum
    });
    Ok(format!(
        "{} headlines, {} {fold} rows for {windows} windows, {} kinds ({} delivered, {} suppressed, {} failed, {} in doubt), {opt_ins} opt-in deliveries",
        headlines.len(),
        rows.len(),
        cells.len(),
        totals[0],
        totals[1],
        totals[2],
        totals[3]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_read_as_chromium_serializes_them() {
        let dom = Dom(
            "<tbody><tr data-row=\"window\" data-windows=\"1\"><td class=\"cell a\" data-kind=\"a&amp;b &quot;c&quot;\" data-delivered=\"2\">x</td></tr></tbody>",
        );
        let cells = dom.elements("td");
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].attributes["data-kind"], "a&b \"c\"");
        assert_eq!(number(&cells[0], "data-delivered").unwrap(), 2);
        assert_eq!(dom.text(cells[0].content, "td"), "x");
        assert_eq!(dom.elements("tr").len(), 1, "<tbody> is not a <tr>");
    }
}
