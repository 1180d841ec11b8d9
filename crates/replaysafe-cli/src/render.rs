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

/// A date when the instant is midnight UTC, otherwise full RFC 3339.
pub fn time_text(instant: DateTime<Utc>) -> String {
    if instant.num_seconds_from_midnight() == 0 && instant.nanosecond() == 0 {
        instant.format("%Y-%m-%d").to_string()
    } else {
        replaysafe_core::rfc3339(instant)
    }
}

/// A titled table rendered as text or Markdown.
#[derive(Debug)]
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table.
    pub fn new<const N: usize>(title: impl Into<String>, header: [&str; N]) -> Self {
        Table {
            title: title.into(),
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Replaces the header (for tables whose columns are known only at run time).
    pub fn set_header(&mut self, header: Vec<String>) {
        self.header = header;
    }

    /// Adds a row of any width.
    pub fn push_row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Adds a row.
    pub fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.rows.push(cells.into());
    }

    /// Renders as a text table or a Markdown table.
    pub fn render(&self, format: Format) -> String {
        if format == Format::Markdown {
            let escape = |cell: &str| cell.replace('|', "\\|");
            let mut out = format!(
                "### {}\n\n| {} |\n|{}\n",
                self.title,
                self.header.join(" | "),
                "---|".repeat(self.header.len())
            );
            for row in &self.rows {
                out.push_str(&format!(
                    "| {} |\n",
                    row.iter()
                        .map(|c| escape(c))
                        .collect::<Vec<_>>()
                        .join(" | ")
                ));
            }
            return out;
        }
        let mut table = comfy_table::Table::new();
        table
            .load_preset(presets::UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled);
        table.set_header(&self.header);
        for row in &self.rows {
            table.add_row(row);
        }
        format!("{}\n{table}\n", self.title)
    }
}
