//! Durations on the command line: `90s`, `30m`, `6h`, `1d`, `1w`.

use chrono::TimeDelta;

/// Parses a whole number followed by one unit: `s`, `m`, `h`, `d` or `w`. A number too
/// large for a duration is said to be so, not called malformed.
pub fn parse(text: &str) -> Result<TimeDelta, String> {
    replaysafe_core::parse_duration(text).ok_or_else(|| {
        let text = text.trim();
        let shaped = text.len() > 1
            && text[..text.len() - 1].bytes().all(|b| b.is_ascii_digit())
            && text.ends_with(['s', 'm', 'h', 'd', 'w']);
        if shaped {
            format!("{text:?} is longer than the clock can hold")
        } else {
            format!("{text:?} is not a duration like 90s, 30m, 6h, 1d or 1w")
        }
    })
}

/// Parses `KIND=DURATION` (`email=2h`), the value of `--max-age`.
pub fn parse_kind_age(text: &str) -> Result<(replaysafe_core::EffectKind, TimeDelta), String> {
    let (kind, age) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KIND=DURATION, e.g. email=2h"))?;
    let kind = kind
        .trim()
        .parse()
        .map_err(|e: replaysafe_core::Error| e.to_string())?;
    Ok((kind, parse(age)?))
}

/// The shortest whole-unit spelling of `duration`.
pub fn format(duration: TimeDelta) -> String {
    let seconds = duration.num_seconds();
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)] {
        if seconds != 0 && seconds % size == 0 {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit_and_refuses_the_rest() {
        assert_eq!(parse("90s").unwrap(), TimeDelta::seconds(90));
        assert_eq!(parse("6h").unwrap(), TimeDelta::hours(6));
        assert_eq!(parse("1d").unwrap(), TimeDelta::days(1));
        assert_eq!(parse("2w").unwrap(), TimeDelta::weeks(2));
        for bad in ["", "d", "1", "1.5h", "1y", "-1d", "1 d"] {
            assert!(
                parse(bad).unwrap_err().contains("is not a duration"),
                "{bad}"
            );
        }
        for huge in [
            "99999999999999999999d",
            "9999999999999999w",
            "9999999999999999999s",
        ] {
            assert!(
                parse(huge).unwrap_err().contains("longer than the clock"),
                "{huge}"
            );
        }
        assert_eq!(format(TimeDelta::hours(48)), "2d");
        assert_eq!(format(TimeDelta::minutes(90)), "90m");
    }
}
