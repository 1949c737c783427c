//! A dashboard page as its golden file holds it: the HTML the daemon serves, from `<body>` on
//! (the head is the same stylesheet and script on every page), one tag per line so that a
//! change reads as a change of the element it is in. A chart keeps its elements, classes,
//! labels and titles; its geometry, drawn over times, is left out (the charts' own unit tests
//! pin it).

use regex::Regex;

use crate::http::Api;

/// `GET PATH` over the API with its token, answered 200, as text.
pub async fn page(api: &Api, path: &str) -> String {
    let (status, body) = api.get(path).await;
    assert_eq!(status.as_u16(), 200, "GET {path}: {body}");
    let html = body.as_str().unwrap_or_else(|| panic!("GET {path} is not a page: {body}"));
    let body = html.find("<body").map_or(html, |at| &html[at..]);
    let geometry = Regex::new(r#" (x|y|x1|x2|y1|y2|cx|cy|r|width|height|d|style)="[^"]*""#).unwrap();
    let mut out = String::new();
    let mut in_chart = false;
    for line in body.replace("><", ">\n<").lines() {
        in_chart |= line.starts_with("<svg");
        match in_chart {
            true => out.push_str(&geometry.replace_all(line, "")),
            false => out.push_str(line),
        }
        out.push('\n');
        in_chart &= !line.ends_with("</svg>");
    }
    out
}
