//! Human durations on the command line and in configuration: `90s`, `15m`, `12h`, `7d`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `s`, `m`, `h` or `d`; the number must be positive.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 90s, 15m, 12h or 7d"))?;
    if unit == "ms" && number > 0 {
        return Ok(Duration::from_millis(number));
    }
    let seconds_per_unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "" => return Err(format!("{text:?} has no unit: use s, m, h or d (for example 12h)")),
        other => return Err(format!("{text:?}: unknown unit {other:?}: use s, m, h or d (for example 7d)")),
    };
    if number == 0 {
        return Err(format!("{text:?} must be longer than zero"));
    }
    number.checked_mul(seconds_per_unit).map(Duration::from_secs).ok_or_else(|| format!("{text:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_refuses_nonsense() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        for bad in ["", "5", "h", "0h", "-1h", "1.5h", "1w", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_duration("5").unwrap_err(), "\"5\" has no unit: use s, m, h or d (for example 12h)");
        let days = parse_duration("7days").unwrap_err();
        assert!(days.contains("unknown unit \"days\"") && days.contains("s, m, h or d"), "{days}");
    }
}
