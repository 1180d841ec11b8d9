//! Durations on the command line: `90s`, `30m`, `6h`, `1d`, `1w`.

use chrono::TimeDelta;

/// Parses a whole number followed by one unit: `s`, `m`, `h`, `d` or `w`.
pub fn parse(text: &str) -> Result<TimeDelta, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: i64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 90s, 30m, 6h, 1d or 1w"))?;
    let duration = match unit {
        "s" => TimeDelta::try_seconds(number),
        "m" => TimeDelta::try_minutes(number),
        "h" => TimeDelta::try_hours(number),
        "d" => TimeDelta::try_days(number),
        "w" => TimeDelta::try_weeks(number),
        _ => None,
    };
    duration.ok_or_else(|| format!("{text:?} is not a duration like 90s, 30m, 6h, 1d or 1w"))
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
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(format(TimeDelta::hours(48)), "2d");
        assert_eq!(format(TimeDelta::minutes(90)), "90m");
    }
}
