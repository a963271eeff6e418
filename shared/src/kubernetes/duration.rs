//! Go-syntax durations (`90s`, `1h30m`, `1.5h`), as the chart and OME write them.

use k8s_openapi::jiff::SignedDuration;

/// A text that is not a Go duration; the message says what syntax to use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {} (use Go syntax such as \"90s\", \"5m\" or \"1h30m\")",
    crate::input::quoted(.0)
)]
pub struct DurationError(pub String);

/// Parses a Go duration string.
pub fn parse_go_duration(text: &str) -> Result<SignedDuration, DurationError> {
    let invalid = || DurationError(text.to_string());
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(SignedDuration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        if number_len == 0 {
            return Err(invalid());
        }
        let value: f64 = rest[..number_len].parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_len..];
        nanos += value * scale;
    }
    if !nanos.is_finite() || nanos > i64::MAX as f64 {
        return Err(invalid());
    }
    let nanos = nanos.round() as i64;
    Ok(SignedDuration::from_nanos(if negative {
        -nanos
    } else {
        nanos
    }))
}

/// Formats a duration as Go prints it (`5m0s`, `1h30m0s`, `90ms`).
pub fn format_go_duration(d: SignedDuration) -> String {
    let total = d.as_nanos();
    if total == 0 {
        return "0s".into();
    }
    let sign = if total < 0 { "-" } else { "" };
    let total = total.unsigned_abs();
    if total < 1_000_000_000 {
        return if total.is_multiple_of(1_000_000) {
            format!("{sign}{}ms", total / 1_000_000)
        } else {
            format!("{sign}{}ns", total)
        };
    }
    let secs = total / 1_000_000_000;
    let frac = total % 1_000_000_000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let seconds = if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:09}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => format!("{sign}{seconds}"),
        (0, m) => format!("{sign}{m}m{seconds}"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_forms() {
        let secs = |s: i64| SignedDuration::from_secs(s);
        assert_eq!(parse_go_duration("90s"), Ok(secs(90)));
        assert_eq!(parse_go_duration("1h30m"), Ok(secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Ok(secs(5400)));
        assert_eq!(parse_go_duration("0"), Ok(secs(0)));
        assert_eq!(parse_go_duration("-5m"), Ok(secs(-300)));
        assert_eq!(
            parse_go_duration("300ms"),
            Ok(SignedDuration::from_millis(300))
        );
        for bad in ["", "5", "m", "5x", "1h 30m", "h1", "1..5s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(SignedDuration::from_secs(300)), "5m0s");
        assert_eq!(
            format_go_duration(SignedDuration::from_secs(5400)),
            "1h30m0s"
        );
        assert_eq!(
            format_go_duration(SignedDuration::from_secs(45 * 60)),
            "45m0s"
        );
        assert_eq!(
            format_go_duration(SignedDuration::from_millis(1500)),
            "1.5s"
        );
        assert_eq!(format_go_duration(SignedDuration::ZERO), "0s");
    }
}
