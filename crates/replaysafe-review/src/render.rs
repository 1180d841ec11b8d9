//! Output formats: text tables, Markdown and JSON, and the escaping of journal text.

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use comfy_table::{ContentArrangement, presets};

/// How a report, a diff or a plan is written. (A report can also be one HTML page:
/// [`Report::write_html`](crate::report::Report::write_html).)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// Aligned text tables, for a terminal.
    #[default]
    Table,
    /// JSON, for programs.
    Json,
    /// GitHub-flavoured Markdown, for a pull-request comment.
    Markdown,
}

/// The shortest whole-unit spelling of `duration`: `90s`, `30m`, `6h`, `1d`, `2w`.
pub(crate) fn duration_text(duration: TimeDelta) -> String {
    let seconds = duration.num_seconds();
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)] {
        if seconds != 0 && seconds % size == 0 {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

/// A date when the instant is midnight UTC, otherwise full RFC 3339.
pub(crate) fn time_text(instant: DateTime<Utc>) -> String {
    if instant.num_seconds_from_midnight() == 0 && instant.nanosecond() == 0 {
        instant.format("%Y-%m-%d").to_string()
    } else {
        replaysafe_core::rfc3339(instant)
    }
}

/// A window as text: `start → end`, or the one time of an instant (`start == end`).
pub(crate) fn window_text(start: DateTime<Utc>, end: DateTime<Utc>) -> String {
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

/// Text from a journal made safe to print in `format`, as every output of this crate
/// prints it.
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

/// A titled table rendered as text or Markdown, every cell and the title escaped for the
/// format: the tables of `report`, `diff` and `plan`.
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

/// Writes a titled table whose rows are read twice, once for the column widths and once
/// to print them, so a table of any length is never held in memory; for the lists that
/// grow with the journals (effects in doubt, differences).
///
/// It prints exactly what [`Table::render`] prints for the same rows (a test holds the
/// two together). A column wider than 65,535 characters, which the text table would wrap,
/// is left to [`Table::render`], in memory.
pub(crate) fn write_table<R, I>(
    out: &mut dyn std::io::Write,
    title: &str,
    header: &[&str],
    rows: R,
    format: Format,
) -> std::io::Result<()>
where
    R: Fn() -> I,
    I: Iterator<Item = std::io::Result<Vec<String>>>,
{
    use unicode_width::UnicodeWidthStr;
    let cells = |row: &[String]| -> Vec<String> {
        row.iter()
            .map(|cell| escape(cell, format).into_owned())
            .collect()
    };
    if format == Format::Markdown {
        let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
        write!(
            out,
            "### {}\n\n| {} |\n|{}\n",
            escape(title, format),
            cells(&header).join(" | "),
            "---|".repeat(header.len())
        )?;
        for row in rows() {
            writeln!(out, "| {} |", cells(&row?).join(" | "))?;
        }
        return Ok(());
    }
    let header: Vec<String> = cells(&header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>());
    // A column is at least one character wide.
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.width().max(1)).collect();
    for row in rows() {
        for (index, cell) in cells(&row?).iter().enumerate() {
            if index >= widths.len() {
                widths.push(1);
            }
            widths[index] = widths[index].max(cell.width());
        }
    }
    if widths.iter().any(|width| *width > usize::from(u16::MAX)) {
        let mut table = Table::new(title, header.iter().map(String::as_str));
        for row in rows() {
            table.row(row?);
        }
        return out.write_all(table.render(format).as_bytes());
    }
    let border = |left: &str, line: &str, middle: &str, right: &str| {
        let parts: Vec<String> = widths.iter().map(|width| line.repeat(width + 2)).collect();
        format!("{left}{}{right}\n", parts.join(middle))
    };
    let line = |row: &[String]| {
        let parts: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(index, width)| {
                let cell = row.get(index).map_or("", String::as_str);
                format!(" {cell}{} ", " ".repeat(width - cell.width()))
            })
            .collect();
        format!("│{}│\n", parts.join("┆"))
    };
    writeln!(out, "{}", escape(title, format))?;
    out.write_all(border("┌", "─", "┬", "┐").as_bytes())?;
    out.write_all(line(&header).as_bytes())?;
    out.write_all(border("╞", "═", "╪", "╡").as_bytes())?;
    for row in rows() {
        out.write_all(line(&cells(&row?)).as_bytes())?;
    }
    out.write_all(border("└", "─", "┴", "┘").as_bytes())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn streamed(title: &str, header: &[&str], rows: &[Vec<String>], format: Format) -> String {
        let mut out = Vec::new();
        write_table(
            &mut out,
            title,
            header,
            || rows.iter().cloned().map(Ok),
            format,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    fn in_memory(title: &str, header: &[&str], rows: &[Vec<String>], format: Format) -> String {
        let mut table = Table::new(title, header.iter().copied());
        for row in rows {
            table.row(row.clone());
        }
        table.render(format)
    }

    #[test]
    fn durations_read_in_their_largest_whole_unit() {
        assert_eq!(duration_text(TimeDelta::hours(48)), "2d");
        assert_eq!(duration_text(TimeDelta::minutes(90)), "90m");
        assert_eq!(duration_text(TimeDelta::weeks(2)), "2w");
        assert_eq!(duration_text(TimeDelta::seconds(90)), "90s");
        assert_eq!(duration_text(TimeDelta::zero()), "0s");
    }

    #[test]
    fn a_streamed_table_prints_what_the_table_prints() {
        let rows = vec![
            vec![
                "email".to_owned(),
                "*@shop.example".to_owned(),
                String::new(),
            ],
            vec![
                "webhook".to_owned(),
                "https://例え.example/フック".to_owned(),
                "👩‍👩‍👧 e\u{301} \u{1b}[31m |`".to_owned(),
            ],
        ];
        for format in [Format::Table, Format::Markdown] {
            assert_eq!(
                streamed("in doubt: 2", &["kind", "target", "x"], &rows, format),
                in_memory("in doubt: 2", &["kind", "target", "x"], &rows, format),
            );
        }
    }

    proptest! {
        #[test]
        fn any_rows_print_alike(
            rows in proptest::collection::vec(
                proptest::collection::vec("\\PC{0,12}|[a-z\u{300}\u{200d}\u{4e00}-\u{4e10}\u{1f600}]{0,6}", 3),
                1..6,
            )
        ) {
            for format in [Format::Table, Format::Markdown] {
                prop_assert_eq!(
                    streamed("t", &["a", "bb", ""], &rows, format),
                    in_memory("t", &["a", "bb", ""], &rows, format)
                );
            }
        }
    }
}
