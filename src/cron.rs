//! Cron expressions in a time zone (`cron/tick.rs`: which due times have passed since a
//! schedule last fired).
//!
//! Everything here is pure. The clock is always a parameter, so the daemon decides what "now"
//! is and the tests can walk through weeks of due times in microseconds.
//!
//! Cron expressions are standard 5-field crontab lines (minute hour day-of-month month
//! day-of-week) or one of the `@yearly`-style aliases, evaluated by `croner` with POSIX/Vixie
//! semantics: day-of-week 0 and 7 are Sunday, and when both day-of-month and day-of-week are
//! restricted a day matching either fires. Seconds and years are rejected even though croner can
//! parse them: training tests run for hours, so second precision only turns a schedule into a
//! stream of "missed" due times, and a 6-field line is ambiguous (croner reads seconds first,
//! other tools read a trailing year), so accepting it would run some pasted lines at the wrong
//! times without a word.

use std::fmt;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::errors::CronError as CronerError;
use croner::parser::{CronParser, Seconds, Year};

mod tick;

pub use tick::{MAX_COUNTED_DUE_TIMES, Tick, tick};

/// An expression that can't be used as a schedule, or a time zone that doesn't exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("invalid cron expression '{expr}': {reason}")]
    InvalidExpression { expr: String, reason: String },
    #[error("unknown time zone '{0}' (expected an IANA name such as Europe/Paris)")]
    UnknownTimeZone(String),
}

/// The aliases Vixie cron accepts, minus `@reboot`: a daemon restart is not a schedule.
/// `@midnight` is spelled out here because croner 4 does not know it.
const ALIASES: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

const MONTH_NAMES: [&str; 12] =
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const WEEKDAY_WORDS: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "L"];
const DAY_OF_MONTH_WORDS: [&str; 3] = ["L", "W", "LW"];

/// What one of the five fields may hold, for error messages that name the field.
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    /// The letter groups allowed in this field. croner swaps month and weekday names for numbers
    /// across the whole line, so `JAN` in the day-of-week field would silently mean Monday;
    /// checking words per field turns that into an error.
    words: &'static [&'static str],
}

const FIELDS: [FieldSpec; 5] = [
    FieldSpec { name: "minute", min: 0, max: 59, words: &[] },
    FieldSpec { name: "hour", min: 0, max: 23, words: &[] },
    FieldSpec { name: "day-of-month", min: 1, max: 31, words: &DAY_OF_MONTH_WORDS },
    FieldSpec { name: "month", min: 1, max: 12, words: &MONTH_NAMES },
    // 7 is Sunday as in Vixie cron; croner folds it onto 0.
    FieldSpec { name: "day-of-week", min: 0, max: 7, words: &WEEKDAY_WORDS },
];

/// A parsed cron schedule, evaluated in an IANA time zone or, without one, in UTC.
///
/// UTC rather than the machine's local zone: the daemon's zone is an accident of where it runs,
/// and a schedule must fire at the same instants wherever that is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    expr: String,
    pattern: croner::Cron,
    tz: Option<Tz>,
}

impl Cron {
    /// Parses a 5-field crontab line or an alias (`@daily`…), with an optional IANA time zone.
    pub fn parse(expr: &str, tz: Option<&str>) -> Result<Cron, CronError> {
        let expr = expr.trim();
        // Both are echoed in messages: kept on one line.
        let invalid = |reason: String| CronError::InvalidExpression {
            expr: crate::text::one_line(expr),
            reason: crate::text::one_line(&reason),
        };
        let fields = expand_alias(expr).map_err(invalid)?;
        let pattern = parse_fields(&fields).map_err(invalid)?;
        let tz = tz.map(parse_tz).transpose()?;
        let cron = Cron { expr: expr.to_string(), pattern, tz };
        ensure_fires(&cron).map_err(invalid)?;
        Ok(cron)
    }

    /// The first due time strictly after `t`, or `None` if croner finds none (its search stops
    /// in the year 5000).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let next = match self.tz {
            None => self.pattern.find_next_occurrence(&t, false).ok(),
            Some(tz) => self
                .pattern
                .find_next_occurrence(&t.with_timezone(&tz), false)
                .ok()
                .map(|d| d.with_timezone(&Utc)),
        };
        // croner already excludes `t`; the filter makes "strictly after" a guarantee that loops
        // walking from one due time to the next can rely on to terminate.
        next.filter(|n| *n > t)
    }

    /// The latest due time at or before `t`.
    fn latest_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let previous = match self.tz {
            None => self.pattern.find_previous_occurrence(&t, true).ok(),
            Some(tz) => self
                .pattern
                .find_previous_occurrence(&t.with_timezone(&tz), true)
                .ok()
                .map(|d| d.with_timezone(&Utc)),
        };
        previous.filter(|p| *p <= t)
    }

    /// The expression as given (trimmed), aliases unexpanded.
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The IANA name of the time zone, `None` for UTC by default.
    pub fn time_zone(&self) -> Option<&str> {
        self.tz.as_ref().map(|tz| tz.name())
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expr)
    }
}

/// Turns an alias into its 5-field line; leaves other expressions as they are.
fn expand_alias(expr: &str) -> Result<String, String> {
    if expr.is_empty() {
        return Err("the expression is empty".to_string());
    }
    if !expr.starts_with('@') {
        return Ok(expr.to_string());
    }
    ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(expr))
        .map(|(_, fields)| fields.to_string())
        .ok_or_else(|| {
            let known: Vec<&str> = ALIASES.iter().map(|(alias, _)| *alias).collect();
            format!("unknown alias (expected one of {})", known.join(", "))
        })
}

/// Checks the five fields one by one, then lets croner parse the line.
fn parse_fields(line: &str) -> Result<croner::Cron, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() != FIELDS.len() {
        return Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week) or an alias such as \
             @daily, got {}; seconds and years are not supported",
            fields.len()
        ));
    }
    for (field, spec) in fields.iter().zip(&FIELDS) {
        check_field(field, spec)?;
    }
    cron_parser().parse(line).map_err(|err| blame_field(&fields, &err))
}

fn cron_parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build()
}

/// The checks croner does not do, or reports without saying which field is wrong.
fn check_field(field: &str, spec: &FieldSpec) -> Result<(), String> {
    let items: Vec<&str> = field.split(',').collect();
    if items.iter().any(|item| item.is_empty()) {
        return Err(format!("{} field '{field}' has an empty list item", spec.name));
    }
    if let Some(word) = unknown_word(field, spec) {
        return Err(unknown_word_message(field, &word, spec));
    }
    items.iter().try_for_each(|item| check_item_numbers(item, spec))
}

/// The first letter group in `field` that its field does not allow.
fn unknown_word(field: &str, spec: &FieldSpec) -> Option<String> {
    field
        .split(|c: char| !c.is_alphabetic())
        .filter(|word| !word.is_empty())
        .find(|word| !spec.words.contains(&word.to_uppercase().as_str()))
        .map(str::to_string)
}

fn unknown_word_message(field: &str, word: &str, spec: &FieldSpec) -> String {
    let hint = match spec.name {
        "month" => " (use 1-12 or JAN-DEC)",
        "day-of-week" => " (use 0-7 or SUN-SAT)",
        _ => "",
    };
    format!("{} field '{field}' has an unknown name '{word}'{hint}", spec.name)
}

/// Range-checks the values of one list item (`a`, `a-b`, `a-b/step`, `5#2`, `15W`). The step is
/// left to croner, which rejects 0 and accepts steps longer than the range, as Vixie cron does.
fn check_item_numbers(item: &str, spec: &FieldSpec) -> Result<(), String> {
    let values = item.split('/').next().unwrap_or_default();
    let values = values.strip_prefix('+').unwrap_or(values);
    values
        .split('-')
        .map(|end| end.split('#').next().unwrap_or_default())
        .map(|end| end.trim_end_matches(|c: char| c.is_ascii_alphabetic()))
        .filter(|end| !end.is_empty() && end.bytes().all(|b| b.is_ascii_digit()))
        .try_for_each(|end| check_value(end, spec))
}

fn check_value(digits: &str, spec: &FieldSpec) -> Result<(), String> {
    match digits.parse::<u32>() {
        Ok(value) if (spec.min..=spec.max).contains(&value) => Ok(()),
        _ => Err(format!("{} {digits} is out of range ({}-{})", spec.name, spec.min, spec.max)),
    }
}

/// croner's messages don't say which field they are about, so each field is parsed alone (the
/// others set to `*`) to find the one croner rejects.
fn blame_field(fields: &[&str], err: &CronerError) -> String {
    let detail = croner_detail(err);
    let culprit = (0..fields.len()).find(|&i| {
        let probe: Vec<&str> = (0..fields.len()).map(|j| if j == i { fields[j] } else { "*" }).collect();
        cron_parser().parse(&probe.join(" ")).is_err()
    });
    match culprit.and_then(|i| Some((FIELDS.get(i)?, fields.get(i)?))) {
        Some((spec, field)) => format!("{} field '{field}' is not valid: {detail}", spec.name),
        None => detail,
    }
}

/// croner's message without its prefix and full stop, to sit inside a sentence.
fn croner_detail(err: &CronerError) -> String {
    let message = match err {
        CronerError::ComponentError(msg) | CronerError::InvalidPattern(msg) => msg.clone(),
        // croner names the character as it saw it, after swapping names for numbers and
        // upper-casing, which would quote something the user never wrote.
        CronerError::IllegalCharacters(_) => "it contains characters cron does not accept".into(),
        other => other.to_string(),
    };
    let message = message.trim_end_matches('.');
    let mut chars = message.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn parse_tz(name: &str) -> Result<Tz, CronError> {
    name.parse::<Tz>().map_err(|_| CronError::UnknownTimeZone(crate::text::one_line(name)))
}

/// Rejects lines such as `0 0 30 2 *` that parse but can never fire, so `schedule add` fails
/// instead of leaving a schedule that silently never runs. The search starts at a fixed instant
/// to keep parsing pure.
fn ensure_fires(cron: &Cron) -> Result<(), String> {
    let Some(anchor) = DateTime::<Utc>::from_timestamp(946_684_800, 0) else {
        return Ok(()); // 2000-01-01T00:00:00Z always exists; nothing to check otherwise
    };
    match cron.next_after(anchor) {
        Some(_) => Ok(()),
        None => Err("it never fires".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeDelta, TimeZone, Weekday};

    pub(super) fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).single().expect("a valid UTC instant")
    }

    pub(super) fn cron(expr: &str) -> Cron {
        Cron::parse(expr, None).expect("a valid expression")
    }

    pub(super) fn cron_in(expr: &str, tz: &str) -> Cron {
        Cron::parse(expr, Some(tz)).expect("a valid expression and zone")
    }

    /// Every due time in `(from, to]`.
    fn due_times(cron: &Cron, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        let mut cursor = from;
        while let Some(t) = cron.next_after(cursor).filter(|t| *t <= to) {
            out.push(t);
            cursor = t;
        }
        out
    }

    fn parse_error(expr: &str) -> String {
        Cron::parse(expr, None).expect_err(expr).to_string()
    }
    // 2025-01-06 is a Monday.
    const MON: u32 = 6;

    #[test]
    fn weekday_range_fires_monday_to_friday_only() {
        let c = cron("0 9 * * 1-5");
        let week = due_times(&c, utc(2025, 1, 5, 0, 0), utc(2025, 1, 12, 23, 59));
        let expected: Vec<_> = (0..5).map(|i| utc(2025, 1, MON + i, 9, 0)).collect();
        assert_eq!(week, expected);
        let days: Vec<Weekday> = week.iter().map(|t| t.weekday()).collect();
        assert_eq!(days, [Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri]);
    }

    #[test]
    fn weekday_names_match_numbers() {
        let from = utc(2025, 1, 1, 0, 0);
        let to = utc(2025, 2, 1, 0, 0);
        let numbers = due_times(&cron("0 9 * * 1-5"), from, to);
        assert_eq!(due_times(&cron("0 9 * * MON-FRI"), from, to), numbers);
        assert_eq!(due_times(&cron("0 9 * * mon-fri"), from, to), numbers);
    }

    #[test]
    fn sunday_is_both_zero_and_seven() {
        let from = utc(2025, 1, 5, 0, 0); // a Sunday, before 09:00
        let to = utc(2025, 1, 19, 23, 59);
        let sundays = vec![utc(2025, 1, 5, 9, 0), utc(2025, 1, 12, 9, 0), utc(2025, 1, 19, 9, 0)];
        for expr in ["0 9 * * 0", "0 9 * * 7", "0 9 * * SUN"] {
            assert_eq!(due_times(&cron(expr), from, to), sundays, "{expr}");
        }
        let weekend = due_times(&cron("0 9 * * SAT-SUN"), from, utc(2025, 1, 12, 23, 59));
        let days: Vec<Weekday> = weekend.iter().map(|t| t.weekday()).collect();
        assert_eq!(days, [Weekday::Sun, Weekday::Sat, Weekday::Sun]);
    }

    #[test]
    fn month_names_are_accepted() {
        let c = cron("0 0 1 JAN,jul *");
        let due = due_times(&c, utc(2025, 1, 1, 0, 0), utc(2026, 12, 31, 0, 0));
        assert_eq!(due, [utc(2025, 7, 1, 0, 0), utc(2026, 1, 1, 0, 0), utc(2026, 7, 1, 0, 0)]);
    }

    #[test]
    fn day_of_month_or_day_of_week_as_in_vixie_cron() {
        // Both restricted: either matching fires (the 1st, and every Monday).
        let due = due_times(&cron("0 0 1 * 1"), utc(2025, 1, 31, 0, 0), utc(2025, 2, 14, 0, 0));
        assert_eq!(due, [utc(2025, 2, 1, 0, 0), utc(2025, 2, 3, 0, 0), utc(2025, 2, 10, 0, 0)]);
    }

    #[test]
    fn daily_fires_at_midnight_utc() {
        let due = due_times(&cron("@daily"), utc(2025, 1, 1, 0, 0), utc(2025, 1, 4, 0, 0));
        assert_eq!(due, [utc(2025, 1, 2, 0, 0), utc(2025, 1, 3, 0, 0), utc(2025, 1, 4, 0, 0)]);
    }

    #[test]
    fn aliases_expand_to_their_lines() {
        let from = utc(2025, 1, 1, 0, 0);
        let to = utc(2027, 1, 1, 0, 0);
        for (alias, line) in [
            ("@yearly", "0 0 1 1 *"),
            ("@annually", "0 0 1 1 *"),
            ("@monthly", "0 0 1 * *"),
            ("@weekly", "0 0 * * 0"),
            ("@daily", "0 0 * * *"),
            ("@midnight", "0 0 * * *"),
            ("@HOURLY", "0 * * * *"),
        ] {
            let to = if alias == "@HOURLY" { utc(2025, 1, 3, 0, 0) } else { to };
            let aliased = due_times(&cron(alias), from, to);
            assert!(!aliased.is_empty(), "{alias}");
            assert_eq!(aliased, due_times(&cron(line), from, to), "{alias}");
        }
        assert_eq!(cron("@weekly").next_after(from), Some(utc(2025, 1, 5, 0, 0)));
        assert_eq!(cron("@yearly").next_after(from), Some(utc(2026, 1, 1, 0, 0)));
    }

    #[test]
    fn every_fifteen_minutes() {
        let c = cron("*/15 * * * *");
        let due = due_times(&c, utc(2025, 1, 1, 10, 0), utc(2025, 1, 1, 11, 0));
        assert_eq!(
            due,
            [
                utc(2025, 1, 1, 10, 15),
                utc(2025, 1, 1, 10, 30),
                utc(2025, 1, 1, 10, 45),
                utc(2025, 1, 1, 11, 0)
            ]
        );
        assert_eq!(c.next_after(utc(2025, 1, 1, 10, 7)), Some(utc(2025, 1, 1, 10, 15)));
    }

    #[test]
    fn next_after_is_strictly_after() {
        let c = cron("0 9 * * *");
        assert_eq!(c.next_after(utc(2025, 1, 6, 9, 0)), Some(utc(2025, 1, 7, 9, 0)));
        let just_before = utc(2025, 1, 6, 9, 0) - TimeDelta::milliseconds(1);
        assert_eq!(c.next_after(just_before), Some(utc(2025, 1, 6, 9, 0)));
        let just_after = utc(2025, 1, 6, 9, 0) + TimeDelta::milliseconds(500);
        assert_eq!(c.next_after(just_after), Some(utc(2025, 1, 7, 9, 0)));
    }

    #[test]
    fn time_zone_follows_daylight_saving() {
        let c = cron_in("0 3 * * *", "Europe/Paris");
        assert_eq!(c.time_zone(), Some("Europe/Paris"));
        // Winter, CET = UTC+1.
        assert_eq!(c.next_after(utc(2025, 1, 15, 0, 0)), Some(utc(2025, 1, 15, 2, 0)));
        // Summer, CEST = UTC+2.
        assert_eq!(c.next_after(utc(2025, 7, 15, 0, 0)), Some(utc(2025, 7, 15, 1, 0)));
        // Clocks go forward at 02:00 on 2025-03-30, so that day 03:00 is already CEST.
        let spring = due_times(&c, utc(2025, 3, 29, 0, 0), utc(2025, 3, 31, 0, 0));
        assert_eq!(spring, [utc(2025, 3, 29, 2, 0), utc(2025, 3, 30, 1, 0)]);
        // Clocks go back at 03:00 on 2025-10-26, so that day 03:00 is CET again.
        let autumn = due_times(&c, utc(2025, 10, 25, 0, 0), utc(2025, 10, 27, 0, 0));
        assert_eq!(autumn, [utc(2025, 10, 25, 1, 0), utc(2025, 10, 26, 2, 0)]);
    }

    #[test]
    fn time_zone_gap_and_repeated_hour_fire_once() {
        let c = cron_in("30 2 * * *", "Europe/Paris");
        // 02:30 does not exist on 2025-03-30: croner runs it at the first instant after the
        // gap, 03:00 CEST.
        let spring = due_times(&c, utc(2025, 3, 29, 12, 0), utc(2025, 3, 31, 12, 0));
        assert_eq!(spring, [utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 0, 30)]);
        // 02:30 happens twice on 2025-10-26: croner runs a fixed-time test once, the first time.
        let autumn = due_times(&c, utc(2025, 10, 25, 12, 0), utc(2025, 10, 27, 12, 0));
        assert_eq!(autumn, [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)]);
    }

    #[test]
    fn utc_zone_names_are_accepted() {
        let named = cron_in("0 3 * * *", "UTC");
        assert_eq!(named.next_after(utc(2025, 7, 1, 0, 0)), Some(utc(2025, 7, 1, 3, 0)));
        assert_eq!(cron("0 3 * * *").time_zone(), None);
    }

    #[test]
    fn display_gives_back_the_expression() {
        assert_eq!(cron("  0 3 * * *\n").to_string(), "0 3 * * *");
        assert_eq!(cron("@daily").to_string(), "@daily");
        assert_eq!(cron_in("0 9 * * MON-FRI", "Europe/Paris").to_string(), "0 9 * * MON-FRI");
        assert_eq!(cron("0 9 * * mon").expression(), "0 9 * * mon");
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        assert_eq!(
            parse_error("0 25 * * *"),
            "invalid cron expression '0 25 * * *': hour 25 is out of range (0-23)"
        );
        assert!(parse_error("60 * * * *").ends_with("minute 60 is out of range (0-59)"));
        assert!(parse_error("0 0 0 * *").ends_with("day-of-month 0 is out of range (1-31)"));
        assert!(parse_error("0 0 32W * *").ends_with("day-of-month 32 is out of range (1-31)"));
        assert!(parse_error("0 0 * 13 *").ends_with("month 13 is out of range (1-12)"));
        assert!(parse_error("0 0 * * 1-8").ends_with("day-of-week 8 is out of range (0-7)"));
        assert!(parse_error("0 0-24/2 * * *").ends_with("hour 24 is out of range (0-23)"));
        assert!(parse_error("99999999999 * * * *").ends_with("minute 99999999999 is out of range (0-59)"));
    }

    #[test]
    fn field_count_is_five() {
        for expr in ["* * * *", "0 * * * * *", "0 0 3 * * * 2025"] {
            let err = parse_error(expr);
            assert!(err.contains("expected 5 fields"), "{err}");
        }
        assert!(parse_error("0 0 * * * *").contains("got 6; seconds and years are not supported"));
    }

    #[test]
    fn names_belong_to_their_field() {
        // croner alone would read these as Monday and January.
        assert_eq!(
            parse_error("0 0 * * JAN"),
            "invalid cron expression '0 0 * * JAN': day-of-week field 'JAN' has an unknown \
             name 'JAN' (use 0-7 or SUN-SAT)"
        );
        assert!(
            parse_error("0 0 * MON *")
                .ends_with("month field 'MON' has an unknown name 'MON' (use 1-12 or JAN-DEC)")
        );
        assert!(parse_error("0 0 * * MONDAY").contains("unknown name 'MONDAY'"));
        assert!(parse_error("0 L * * *").contains("hour field 'L' has an unknown name 'L'"));
        assert!(parse_error("0 0 ß * *").ends_with("has an unknown name 'ß'"));
    }

    #[test]
    fn croner_errors_name_their_field() {
        assert_eq!(
            parse_error("0 0 * * ☃"),
            "invalid cron expression '0 0 * * ☃': day-of-week field '☃' is not valid: it \
             contains characters cron does not accept"
        );
        assert_eq!(
            parse_error("*/0 * * * *"),
            "invalid cron expression '*/0 * * * *': minute field '*/0' is not valid: step \
             cannot be zero"
        );
        assert!(
            parse_error("0 0 * * 5-1").ends_with("day-of-week field '5-1' is not valid: range out of bounds")
        );
        assert!(parse_error("0 0 * * 5#9").contains("day-of-week field '5#9' is not valid"));
        assert!(parse_error("5/5 * * * *").contains("minute field '5/5' is not valid: invalid step syntax"));
        assert!(parse_error("0 0 * * 1,").ends_with("day-of-week field '1,' has an empty list item"));
    }

    #[test]
    fn other_invalid_expressions() {
        assert_eq!(parse_error("   "), "invalid cron expression '': the expression is empty");
        assert!(parse_error("@reboot").starts_with("invalid cron expression '@reboot': unknown alias"));
        assert_eq!(parse_error("0 0 30 2 *"), "invalid cron expression '0 0 30 2 *': it never fires");
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        for expr in [
            "-1 * * * *",
            "0 0 * * -",
            "0 0 * * +",
            "1-2-3 * * * *",
            ",,, * * * *",
            "0 0 * * L#L",
            "0 0 ß * *",
            "0 0 * * ☃",
            "@",
            "@@daily",
            "* * * * @daily",
            "0 0 ? ? ?",
            "/ / / / /",
            "0 0 * * 5#",
            "0 0 * * #5",
            "0 0 -5 * *",
            "0 0 1-- * *",
            "0 0 * * 0-7/0",
        ] {
            assert!(Cron::parse(expr, None).is_err(), "{expr} should be rejected");
        }
    }

    #[test]
    fn croner_extensions_still_work() {
        // Last day of the month, last Friday, the nearest weekday to the 15th.
        assert_eq!(cron("0 0 L * *").next_after(utc(2025, 2, 1, 0, 0)), Some(utc(2025, 2, 28, 0, 0)));
        assert_eq!(cron("0 0 * * FRI#L").next_after(utc(2025, 1, 1, 0, 0)), Some(utc(2025, 1, 31, 0, 0)));
        // 2025-03-15 is a Saturday.
        assert_eq!(cron("0 0 15W * *").next_after(utc(2025, 3, 1, 0, 0)), Some(utc(2025, 3, 14, 0, 0)));
        assert!(Cron::parse("0 0 ? * *", None).is_ok());
    }

    #[test]
    fn unknown_time_zones_are_rejected() {
        let err = Cron::parse("0 3 * * *", Some("Mars/Base")).expect_err("no such zone");
        assert_eq!(err, CronError::UnknownTimeZone("Mars/Base".to_string()));
        assert!(err.to_string().starts_with("unknown time zone 'Mars/Base'"));
        assert!(Cron::parse("0 3 * * *", Some("")).is_err());
        // The expression is checked first.
        assert!(matches!(
            Cron::parse("0 25 * * *", Some("Mars/Base")),
            Err(CronError::InvalidExpression { .. })
        ));
    }
}
