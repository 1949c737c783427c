//! Text a user or a remote wrote, made safe to quote in a one-line message. The one escaping
//! helper: every error that quotes input (a name, a value, a parser's complaint) goes through
//! [`one_line`], at the ground of the layers (ARCHITECTURE.md, "Layers").

/// The longest quote, in characters: enough for what was found and what was expected.
pub const MAX_CHARS: usize = 300;

/// `text` on one printable line of at most about [`MAX_CHARS`] characters: control characters
/// (newlines included) and the invisible ones that reorder or hide a line (bidi overrides,
/// zero-width characters, line and paragraph separators) are escaped (`\n`, `\u{202e}`); a
/// longer text is cut in its middle, so its start says what was found and its end what was
/// expected. Letters of any script stay as they are.
pub fn one_line(text: &str) -> String {
    let count = text.chars().count();
    if count <= MAX_CHARS {
        return escaped(text.chars());
    }
    let head = escaped(text.chars().take(MAX_CHARS / 2));
    let tail = escaped(text.chars().skip(count - MAX_CHARS / 2));
    format!("{head} … {tail}")
}

fn escaped(chars: impl Iterator<Item = char>) -> String {
    let mut out = String::new();
    for c in chars {
        if hidden(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A character that would break the line or change what a terminal shows around it.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}' // zero-width space, joiners, direction marks
            | '\u{2028}' | '\u{2029}' // line and paragraph separators
            | '\u{202a}'..='\u{202e}' // bidi embeddings and overrides
            | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
            | '\u{2066}'..='\u{2069}' // bidi isolates
            | '\u{feff}' // zero-width no-break space
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_invisible_characters_are_escaped_letters_kept() {
        assert_eq!(one_line("a\nb\tc\u{1b}[31m"), "a\\nb\\tc\\u{1b}[31m");
        assert_eq!(one_line("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(one_line("x\u{2028}y\u{200b}"), "x\\u{2028}y\\u{200b}");
        assert_eq!(one_line("café 'quoted' \"too\" ünï 名前"), "café 'quoted' \"too\" ünï 名前");
    }

    #[test]
    fn a_long_text_is_cut_in_its_middle() {
        let text = format!("start{}end", "x".repeat(10_000));
        let shown = one_line(&text);
        assert!(shown.starts_with("startxx") && shown.ends_with("xxend"), "{shown}");
        assert!(shown.contains(" … "));
        assert_eq!(shown.chars().count(), MAX_CHARS + 3);
        assert_eq!(one_line(&"y".repeat(MAX_CHARS)), "y".repeat(MAX_CHARS));
    }

    proptest::proptest! {
        #[test]
        fn any_text_comes_back_on_one_bounded_line(text in ".*") {
            let shown = one_line(&text);
            proptest::prop_assert!(!shown.chars().any(|c| c.is_control() || hidden(c)));
            // An escape is at most 10 characters (`\u{10ffff}`).
            proptest::prop_assert!(shown.chars().count() <= 10 * MAX_CHARS + 3);
        }
    }
}

/// An elapsed time for people, the one way every surface writes one: `13h 40m`, `1m 30s`,
/// `30m`, `20s`, `450ms` (its two largest units, the smaller dropped when zero).
pub fn span(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    match (h, m, s) {
        (0, 0, 0) if d.as_millis() > 0 => format!("{}ms", d.as_millis()),
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

/// `span` of the milliseconds between two times (none before the first: clocks move).
pub fn span_ms(ms: i64) -> String {
    span(std::time::Duration::from_millis(ms.max(0) as u64))
}

/// A setting's duration as people write it (a time limit, a report's window, a retention):
/// its largest whole unit, `2d`, `12h`, `90m`, `45s`, `1500ms`.
pub fn whole_units(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".into(),
        _ if ms.is_multiple_of(86_400_000) => format!("{}d", ms / 86_400_000),
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1_000) => format!("{}s", ms / 1_000),
        _ => format!("{ms}ms"),
    }
}

/// A moment for people, the one way every surface writes one: the machine's local time to the
/// second (`2026-11-28 04:02:01`), `-` for none. Pages that show it say the zone ([`zone`]).
pub fn clock(ms: Option<i64>) -> String {
    use chrono::TimeZone;
    match ms.and_then(|ms| chrono::Local.timestamp_millis_opt(ms).single()) {
        Some(at) => at.format("%Y-%m-%d %H:%M:%S").to_string(),
        None => "-".into(),
    }
}

/// The zone [`clock`] writes in, as an offset: `UTC`, `UTC+01:00`.
pub fn zone() -> String {
    let offset = chrono::Local::now().offset().local_minus_utc();
    match offset {
        0 => "UTC".into(),
        secs => {
            let sign = if secs < 0 { '-' } else { '+' };
            let secs = secs.unsigned_abs();
            format!("UTC{sign}{:02}:{:02}", secs / 3600, secs % 3600 / 60)
        }
    }
}

#[cfg(test)]
mod duration_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn spans_read_like_people_write_them() {
        assert_eq!(span(Duration::from_secs(1800)), "30m");
        assert_eq!(span(Duration::from_secs(20)), "20s");
        assert_eq!(span(Duration::from_secs(90)), "1m 30s");
        assert_eq!(span(Duration::from_secs(187)), "3m 7s");
        assert_eq!(span(Duration::from_secs(13 * 3600 + 40 * 60 + 5)), "13h 40m");
        assert_eq!(span(Duration::from_millis(2500)), "2s");
        assert_eq!(span(Duration::from_millis(450)), "450ms");
        assert_eq!(span(Duration::ZERO), "0s");
        assert_eq!(span_ms(-5), "0s");
    }

    #[test]
    fn settings_read_in_their_largest_whole_unit() {
        assert_eq!(whole_units(Duration::from_secs(2 * 86_400)), "2d");
        assert_eq!(whole_units(Duration::from_secs(12 * 3600)), "12h");
        assert_eq!(whole_units(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(whole_units(Duration::from_secs(45)), "45s");
        assert_eq!(whole_units(Duration::from_millis(1500)), "1500ms");
        assert_eq!(whole_units(Duration::ZERO), "0s");
    }
}
