//! Remote file names: rendering the template and refusing names that leave the directory.

use chrono::format::StrftimeItems;
use chrono::{DateTime, Utc};
use replaysafe_core::ReplayContext;

use crate::Error;

/// The longest file name accepted, in bytes: the temporary name adds about 45 bytes and
/// must stay within the usual 255-byte limit of a file name.
pub(crate) const MAX_NAME_BYTES: usize = 200;

/// The format of `{window_start}` and `{window_end}` without an explicit one.
const DEFAULT_TIME_FORMAT: &str = "%Y%m%dT%H%M%SZ";

/// Renders `template` for the run in `cx` and validates the result.
///
/// Placeholders: `{pipeline}`, `{window_start}`, `{window_end}`, and
/// `{window_start:FORMAT}`/`{window_end:FORMAT}` with a chrono strftime format;
/// `{{` and `}}` are literal braces.
pub(crate) fn render(template: &str, cx: &ReplayContext) -> Result<String, Error> {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(position) = rest.find(['{', '}']) {
        out.push_str(&rest[..position]);
        let tail = &rest[position..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push('}');
            rest = after;
        } else if tail.starts_with('}') {
            return Err(Error::invalid(
                "name",
                format!("template {template:?} has an unmatched '}}' (write '}}}}' for a brace)"),
            ));
        } else {
            let Some(close) = tail.find('}') else {
                return Err(Error::invalid(
                    "name",
                    format!("template {template:?} has an unclosed '{{'"),
                ));
            };
            expand(&tail[1..close], template, cx, &mut out)?;
            rest = &tail[close + 1..];
        }
    }
    out.push_str(rest);
    validate(&out)?;
    Ok(out)
}

fn expand(
    placeholder: &str,
    template: &str,
    cx: &ReplayContext,
    out: &mut String,
) -> Result<(), Error> {
    let (name, format) = match placeholder.split_once(':') {
        Some((name, format)) => (name, Some(format)),
        None => (placeholder, None),
    };
    let instant = match name {
        "pipeline" if format.is_none() => {
            out.push_str(cx.pipeline());
            return Ok(());
        }
        "window_start" => cx.window().start(),
        "window_end" => cx.window().end(),
        _ => {
            return Err(Error::invalid(
                "name",
                format!(
                    "template {template:?} has an unknown placeholder {{{placeholder}}}; \
                     use {{pipeline}}, {{window_start:FORMAT}} or {{window_end:FORMAT}}"
                ),
            ));
        }
    };
    format_time(
        instant,
        format.unwrap_or(DEFAULT_TIME_FORMAT),
        template,
        out,
    )
}

fn format_time(
    instant: DateTime<Utc>,
    format: &str,
    template: &str,
    out: &mut String,
) -> Result<(), Error> {
    let items = StrftimeItems::new(format).parse().map_err(|_| {
        Error::invalid(
            "name",
            format!("template {template:?} has an invalid time format {format:?}"),
        )
    })?;
    use std::fmt::Write as _;
    write!(out, "{}", instant.format_with_items(items.iter())).map_err(|_| {
        Error::invalid(
            "name",
            format!("template {template:?}: time format {format:?} cannot render this window"),
        )
    })
}

/// Checks that `name` is one file name inside the remote directory.
pub(crate) fn validate(name: &str) -> Result<(), Error> {
    let problem = if name.is_empty() {
        "must not be empty".to_owned()
    } else if name.contains('\0') {
        format!("{:?} contains a NUL byte", name)
    } else if name.starts_with('/') {
        format!("{name:?} is an absolute path; give a file name inside the remote directory")
    } else if name.contains('\\') {
        format!("{name:?} contains a backslash")
    } else if name.split('/').any(|part| part == "..") {
        format!("{name:?} leaves the remote directory")
    } else if name == "." {
        format!("{name:?} names the remote directory itself, not a file")
    } else if name.contains('/') {
        format!("{name:?} is a path; give a file name inside the remote directory")
    } else if name.chars().any(char::is_control) {
        format!("{:?} contains control characters", name)
    } else if name.len() > MAX_NAME_BYTES {
        format!(
            "{name:?} is {} bytes long; the limit is {MAX_NAME_BYTES}",
            name.len()
        )
    } else {
        return Ok(());
    };
    Err(Error::invalid("name", problem))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> ReplayContext {
        use chrono::TimeZone;
        let start = Utc.with_ymd_and_hms(2026, 8, 5, 0, 0, 0).unwrap();
        let end = Utc.with_ymd_and_hms(2026, 8, 6, 0, 0, 0).unwrap();
        ReplayContext::builder()
            .pipeline("daily_orders")
            .run_id("scheduled__x")
            .run_kind(replaysafe_core::RunKind::Scheduled)
            .window(replaysafe_core::Window::new(start, end).unwrap())
            .build()
            .unwrap()
    }

    #[test]
    fn placeholders_render_from_the_context() {
        let cx = context();
        assert_eq!(
            render("orders_{window_start:%Y%m%d}.csv", &cx).unwrap(),
            "orders_20260805.csv"
        );
        assert_eq!(
            render("{pipeline}-{window_start}-{window_end:%d}.csv", &cx).unwrap(),
            "daily_orders-20260805T000000Z-06.csv"
        );
        assert_eq!(render("a{{b}}.txt", &cx).unwrap(), "a{b}.txt");
    }

    #[test]
    fn bad_templates_name_the_field() {
        let cx = context();
        for template in [
            "x{nope}.csv",
            "x{window_start:%Q}.csv",
            "x{.csv",
            "x}.csv",
            "{pipeline:%Y}",
            "{window_start:%Y/%m}.csv",
        ] {
            let error = render(template, &cx).unwrap_err();
            assert_eq!(error.field(), Some("name"), "{template}: {error}");
        }
    }

    #[test]
    fn traversal_and_odd_names_are_refused() {
        for name in [
            "../x",
            "a/../../x",
            "/etc/x",
            "a\\b",
            "x\0y",
            "",
            ".",
            "..",
            "a/b",
            "x\ny",
        ] {
            let error = validate(name).unwrap_err();
            assert_eq!(error.field(), Some("name"), "{name:?}");
        }
        assert!(validate(&"x".repeat(MAX_NAME_BYTES + 1)).is_err());
        for name in ["orders.csv", ".hidden", "a..b", "ü.txt"] {
            validate(name).unwrap();
        }
    }
}
