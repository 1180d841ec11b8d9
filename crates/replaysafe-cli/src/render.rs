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
