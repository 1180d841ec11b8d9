//! The output formats of the commands, as flags, mapped onto the review library's.

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

impl From<Format> for replaysafe_review::Format {
    fn from(format: Format) -> Self {
        match format {
            Format::Table => replaysafe_review::Format::Table,
            Format::Json => replaysafe_review::Format::Json,
            Format::Markdown => replaysafe_review::Format::Markdown,
        }
    }
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

/// Text from a journal or a database made safe to print in `format`
/// ([`replaysafe_review::escape`]).
pub fn escape(text: &str, format: Format) -> std::borrow::Cow<'_, str> {
    replaysafe_review::escape(text, format.into())
}
