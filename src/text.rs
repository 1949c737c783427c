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
