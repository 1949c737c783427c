//! URLs in what lachesis shows: a webhook's or a database's credentials, query and fragment
//! never appear, even when a library echoes parts of the URL in an error.

use super::REDACTED as MASK;

/// `url` with any `user:pass@` replaced by `***@`, the query by `?***` and a fragment by `#***`.
/// Works on the raw text, so even a URL that doesn't parse is shown safely.
pub fn redact_url(url: &str) -> String {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((head, _)) => (head, Some(MASK)),
        None => (url, None),
    };
    let (before_query, query) = match before_fragment.split_once('?') {
        Some((head, _)) => (head, Some(MASK)),
        None => (before_fragment, None),
    };
    let (scheme, rest) = match before_query.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, before_query),
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    // The userinfo ends at the authority's last '@' (a password may itself contain '@').
    let host = authority.rsplit_once('@').map(|(_, host)| host);
    let mut out = String::with_capacity(url.len());
    if let Some(scheme) = scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    match host {
        Some(host) => {
            out.push_str(MASK);
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    out.push_str(path);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// Removes the secret parts of `raw_url` from `message`, whatever form they appear in there (a
/// library may echo the URL whole, or parts of it, percent-encoded or not).
pub fn redact_url_in(message: &str, raw_url: &str) -> String {
    let mut text = message.replace(raw_url, &redact_url(raw_url));
    // Short user names and query values ("x=1", "json") are not credible secrets, and masking them
    // would mangle ordinary words and numbers in the message; passwords are masked at any length.
    const MIN_LEN: usize = 4;
    let mut secrets: Vec<String> = Vec::new();
    let mut add = |s: &str, min: usize| {
        for form in [s.to_string(), percent_decode(s)] {
            if form.len() >= min.max(1) {
                secrets.push(form);
            }
        }
    };
    let before_fragment = match raw_url.split_once('#') {
        Some((head, fragment)) => {
            add(fragment, 1);
            head
        }
        None => raw_url,
    };
    if let Some((_, query)) = before_fragment.split_once('?') {
        add(query, 1);
        for pair in query.split('&') {
            add(pair.split_once('=').map_or(pair, |(_, v)| v), MIN_LEN);
        }
    }
    if let Ok(url) = reqwest::Url::parse(raw_url.trim()) {
        add(url.username(), MIN_LEN);
        if let Some(password) = url.password() {
            add(password, 1);
        }
    }
    // Longest first, so a secret that contains another is masked whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in &secrets {
        text = text.replace(secret.as_str(), MASK);
    }
    text
}

/// `%XX` escapes decoded (and `+` as space, as in query strings); invalid escapes kept as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push((hi * 16 + lo) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_userinfo_query_and_fragment() {
        let cases = [
            ("https://hooks.example/x?token=abc", "https://hooks.example/x?***"),
            ("https://user:pass@hooks.example/x", "https://***@hooks.example/x"),
            ("https://u:p@ss@h.example:8443/a/b?q=1#frag", "https://***@h.example:8443/a/b?***#***"),
            ("https://hooks.example/path/only", "https://hooks.example/path/only"),
            ("https://token@hooks.example", "https://***@hooks.example"),
            ("http://h/x/a@b", "http://h/x/a@b"),
            ("no scheme?secret=1", "no scheme?***"),
            ("", ""),
        ];
        for (raw, shown) in cases {
            assert_eq!(redact_url(raw), shown, "{raw}");
        }
    }

    #[test]
    fn redact_url_in_masks_echoed_url_parts() {
        let raw = "https://alice:pw%21@h.example/x?token=abc%20def&k=v";
        let message = format!("failed for {raw}; token abc def; user alice pw! abc%20def; os error 111");
        let scrubbed = redact_url_in(&message, raw);
        for secret in ["abc", "pw", "token=", "alice"] {
            assert!(!scrubbed.contains(secret), "{secret}: {scrubbed}");
        }
        assert!(scrubbed.starts_with("failed for https://***@h.example/x?***;"), "{scrubbed}");
        // Short values are left alone so ordinary text survives.
        assert!(scrubbed.ends_with("os error 111"), "{scrubbed}");
        assert_eq!(percent_decode("a%2Fb+c%zz%4"), "a/b c%zz%4");
    }
}
