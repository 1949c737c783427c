//! HTML building: escaping (every value from the service passes through `esc`), the page
//! frame, and the small pieces several pages share (badges, times, the progress bar).

use std::fmt::Write;

use serde_json::Value;

/// Text made safe for element content and double-quoted attributes.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A path segment (run id, schedule name) made safe for a URL inside an attribute.
pub fn url_segment(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

const NAV: [(&str, &str); 8] = [
    ("runs", "Runs"),
    ("sweeps", "Sweeps"),
    ("environments", "Environments"),
    ("tests", "Inference tests"),
    ("schedules", "Schedules"),
    ("nodes", "Nodes"),
    ("report", "Report"),
    ("webhooks", "Webhooks"),
];

/// A whole page: `active` names the navigation entry; `live` makes the script swap `<main>`
/// when the store's events move.
pub fn page(title: &str, active: &str, live: bool, body: &str) -> String {
    let mut nav = String::new();
    for (path, label) in NAV {
        let class = if path == active { " class=\"active\"" } else { "" };
        let _ = write!(nav, "<a href=\"/ui/{path}\"{class}>{label}</a>");
    }
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · lachesis</title><link rel=\"stylesheet\" href=\"/ui/assets/app.css\">\
         <script src=\"/ui/assets/app.js\" defer></script></head>\
         <body data-live=\"{live}\"><header><span class=\"brand\">lachesis</span><nav>{nav}</nav>\
         <span id=\"live\" class=\"muted\"></span><span class=\"muted zone\">times in {zone}</span></header><main id=\"main\">{body}</main></body></html>",
        title = esc(title),
        zone = crate::text::zone(),
    )
}

/// The login prompt, shown instead of any data when the token is missing or wrong.
pub fn login(message: Option<&str>) -> String {
    let note = message.map(|m| format!("<p class=\"error\">{}</p>", esc(m))).unwrap_or_default();
    let body = format!(
        "<section class=\"login\"><h1>Sign in</h1>\
         <p>This dashboard needs the API token (<code>LACHESIS_API_TOKEN</code>, or the file <code>api-token</code> in the lachesis home).</p>\
         {note}<form method=\"post\" action=\"/ui/login\"><input type=\"password\" name=\"token\" \
         placeholder=\"API token\" autocomplete=\"current-password\" required autofocus>\
         <button type=\"submit\">Sign in</button></form></section>"
    );
    page("Sign in", "", false, &body)
}

/// A state as a coloured label.
pub fn badge(state: &str) -> String {
    let class = match state {
        "completed" | "succeeded" | "up" | "done" | "delivered" => "ok",
        "failed" | "regressed" | "lost" => "bad",
        "running" | "starting" | "stopping" | "retrying" | "overdue" | "live" => "busy",
        _ => "idle",
    };
    format!("<span class=\"badge {class}\">{}</span>", esc(state))
}

/// A moment as every surface writes one (`text::clock`: local time; the header says the zone).
pub fn time(ms: Option<i64>) -> String {
    crate::text::clock(ms)
}

/// A duration in milliseconds, as every surface writes one (`crate::text::span`).
pub fn duration(ms: i64) -> String {
    crate::text::span_ms(ms)
}

/// The progress bar of a run from its `progress` object (`step`, `total`, `fraction`,
/// `eta_seconds`), or a note that none was reported.
pub fn progress_bar(progress: Option<&Value>) -> String {
    let Some(p) = progress.filter(|p| p.is_object()) else {
        return "<span class=\"muted\">no progress reported</span>".into();
    };
    progress_of(p)
}

/// The table's short form: the bar, or a dash that says why on hover (1,000 rows stay light).
pub fn progress_cell(progress: Option<&Value>) -> String {
    match progress.filter(|p| p.is_object()) {
        Some(p) => progress_of(p),
        None => "<span class=\"muted\" title=\"no progress reported\">-</span>".into(),
    }
}

fn progress_of(p: &Value) -> String {
    let step = p.get("step").and_then(Value::as_i64);
    let total = p.get("total").and_then(Value::as_i64);
    let fraction = p
        .get("fraction")
        .and_then(Value::as_f64)
        .or_else(|| Some(step? as f64 / total.filter(|t| *t > 0)? as f64))
        .unwrap_or(0.0)
        .clamp(0.0, 1.0);
    let label = match (step, total) {
        (Some(step), Some(total)) => format!("{step}/{total}"),
        (Some(step), None) => format!("step {step}"),
        _ => format!("{:.0}%", fraction * 100.0),
    };
    let eta = p
        .get("eta_seconds")
        .and_then(Value::as_f64)
        .map(|s| format!(" · ETA {}", duration((s * 1000.0) as i64)))
        .unwrap_or_default();
    format!(
        "<div class=\"progress\" data-fraction=\"{fraction:.4}\"><div class=\"fill\" style=\"width:{:.1}%\"></div></div>\
         <span class=\"progress-label\">{}{}</span>",
        fraction * 100.0,
        esc(&label),
        esc(&eta)
    )
}

/// A form button that POSTs to `action` after the page asks `confirm`.
pub fn action_button(action: &str, label: &str, confirm: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{}\" class=\"inline\" data-confirm=\"{}\"><button type=\"submit\">{}</button></form>",
        esc(action),
        esc(confirm),
        esc(label)
    )
}

/// An error from the service, shown in the page.
pub fn failure(message: &str) -> String {
    format!("<p class=\"error\">{}</p>", esc(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(esc("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(url_segment("night ly/<x>"), "night%20ly%2F%3Cx%3E");
    }

    #[test]
    fn progress_bar_reads_the_documented_shape_and_says_when_there_is_none() {
        let bar = progress_bar(Some(&json!({
            "step": 30, "total": 120, "fraction": 0.25, "steps_per_min": 6.0,
            "eta_seconds": 900.0, "updated_at": 1_700_000_000_000i64
        })));
        assert!(bar.contains("width:25.0%") && bar.contains("30/120") && bar.contains("ETA 15m"), "{bar}");
        let derived = progress_bar(Some(&json!({ "step": 1, "total": 4 })));
        assert!(derived.contains("width:25.0%"), "{derived}");
        assert!(progress_bar(None).contains("no progress reported"));
        assert!(progress_bar(Some(&Value::Null)).contains("no progress reported"));
    }

    #[test]
    fn durations_and_times_read_naturally() {
        assert_eq!(duration(59_000), "59s");
        assert_eq!(duration(187_000), "3m 7s");
        assert_eq!(duration(7_380_000), "2h 3m");
        assert_eq!(time(None), "-");
        assert_eq!(time(Some(0)), "1970-01-01 00:00:00");
    }
}
