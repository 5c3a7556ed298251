//! Unix times as the shop shows them to people (a page's sale notice, a
//! command's refusal): a UTC date and time to the minute, with no time-zone
//! database and no dependency.

use std::fmt;

/// Unix seconds, shown as `2026-11-28 14:05 UTC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc(pub i64);

impl fmt::Display for Utc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (days, secs) = (self.0.div_euclid(86_400), self.0.rem_euclid(86_400));
        let (year, month, day) = civil_from_days(days);
        let (hour, minute) = (secs / 3_600, secs % 3_600 / 60);
        write!(f, "{year}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
    }
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::Utc;

    #[test]
    fn shows_utc_to_the_minute() {
        assert_eq!(Utc(0).to_string(), "1970-01-01 00:00 UTC");
        assert_eq!(Utc(1_796_473_559).to_string(), "2026-12-05 12:25 UTC");
        assert_eq!(Utc(951_825_600).to_string(), "2000-02-29 12:00 UTC");
        assert_eq!(Utc(4_107_542_399).to_string(), "2100-02-28 23:59 UTC");
        assert_eq!(Utc(-1).to_string(), "1969-12-31 23:59 UTC");
    }
}
