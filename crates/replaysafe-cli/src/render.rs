//! Output formats shared by the commands.

use chrono::{DateTime, Timelike, Utc};
use comfy_table::{ContentArrangement, presets};

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text tables, for a terminal.
    #[default]
    Table,
    /// JSON, for programs.
    Json,
    /// GitHub-flavoured Markdown, for a pull-request comment.
    Markdown,
}

/// How `report` prints: the text formats, or one self-contained HTML page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// Aligned text tables, for a terminal.
    #[default]
    Table,
    /// JSON, for programs.
    Json,
    /// GitHub-flavoured Markdown, for a pull-request comment.
    Markdown,
    /// One self-contained HTML page (no script, nothing fetched), for a reviewer's browser.
    Html,
}

impl ReportFormat {
    /// The text format, or `None` for HTML.
    pub fn text(self) -> Option<Format> {
        match self {
            ReportFormat::Table => Some(Format::Table),
            ReportFormat::Json => Some(Format::Json),
            ReportFormat::Markdown => Some(Format::Markdown),
            ReportFormat::Html => None,
        }
    }
}

/// A date when the instant is midnight UTC, otherwise full RFC 3339.
pub fn time_text(instant: DateTime<Utc>) -> String {
    if instant.num_seconds_from_midnight() == 0 && instant.nanosecond() == 0 {
        instant.format("%Y-%m-%d").to_string()
    } else {
        replaysafe_core::rfc3339(instant)
    }
}

/// A window as text: `start → end`, or the one time of an instant (`start == end`).
pub fn window_text(start: DateTime<Utc>, end: DateTime<Utc>) -> String {
    if start == end {
        time_text(start)
    } else {
        format!("{} → {}", time_text(start), time_text(end))
    }
}

/// Whether a character would act on a terminal or on the text around it rather than
/// show: control characters (C0, DEL, C1) and the bidirectional overrides and isolates.
fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text from a journal made safe to print in `format`.
///
/// Every control character (a newline, an escape sequence's ESC) and every bidirectional
/// override is shown as a visible escape such as `\u{1b}`, so nothing a journal holds can
/// move the cursor, recolour a terminal or break a line. In Markdown, the characters that
/// could end a table cell or make a link, an image, HTML or a code span (`\`, `` ` ``, `[`,
/// `]`, `<`, `>`, `|`) are backslash-escaped as well; emphasis marks are left alone, as they
/// only change how text looks. JSON needs neither: serde escapes it.
pub fn escape(text: &str, format: Format) -> std::borrow::Cow<'_, str> {
    let markdown = format == Format::Markdown;
    let special = |c: char| {
        is_unprintable(c) || (markdown && matches!(c, '\\' | '`' | '[' | ']' | '<' | '>' | '|'))
    };
    if !text.chars().any(special) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unprintable(c) {
            // `\u{..}` shows as typed in a terminal; in Markdown its backslash is doubled.
            out.push_str(if markdown { "\\\\" } else { "\\" });
            out.push_str(&format!("u{{{:x}}}", u32::from(c)));
        } else if special(c) {
            out.push('\\');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A titled table rendered as text or Markdown.
#[derive(Debug)]
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column headings.
    pub fn new<H: Into<String>>(
        title: impl Into<String>,
        header: impl IntoIterator<Item = H>,
    ) -> Self {
        Table {
            title: title.into(),
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: impl IntoIterator<Item = String>) {
        self.rows.push(cells.into_iter().collect());
    }

    /// Renders as a text table or a Markdown table.
    pub fn render(&self, format: Format) -> String {
        let cells = |row: &[String]| -> Vec<String> {
            row.iter()
                .map(|cell| escape(cell, format).into_owned())
                .collect()
        };
        if format == Format::Markdown {
            let mut out = format!(
                "### {}\n\n| {} |\n|{}\n",
                escape(&self.title, format),
                cells(&self.header).join(" | "),
                "---|".repeat(self.header.len())
            );
            for row in &self.rows {
                out.push_str(&format!("| {} |\n", cells(row).join(" | ")));
            }
            return out;
        }
        let mut table = comfy_table::Table::new();
        table
            .load_preset(presets::UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled);
        table.set_header(cells(&self.header));
        for row in &self.rows {
            table.add_row(cells(row));
        }
        format!("{}\n{table}\n", escape(&self.title, format))
    }
}
