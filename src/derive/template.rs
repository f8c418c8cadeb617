//! URL templates: `https://www.example.com/th/{slug}` — literal text with `{column}` parts that take
//! the row's values, percent-encoded as one path segment (so a `/` or `?` in a slug cannot change
//! the URL's shape). `{{` and `}}` stand for literal braces. A value that is empty, `.` or `..`
//! makes no URL (the row is skipped, as for a NULL): as a whole segment it would name another page
//! (`/th/` or the parent folder; URL parsers treat even `%2E%2E` as `..`).

use crate::error::shown;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use pgrx::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(String),
    Column(String),
}

/// Everything but RFC 3986's unreserved characters is encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One `{column}` value as it goes into a URL, or `None` when it cannot (see the module's comment).
pub fn encode_part(value: &str) -> Option<String> {
    if matches!(value, "" | "." | "..") {
        return None;
    }
    Some(utf8_percent_encode(value, SEGMENT).to_string())
}

/// One `{column}` value, encoded for a URL template (NULL: no URL).
#[pg_extern(name = "_indexnow_url_part", immutable, strict, parallel_safe)]
fn indexnow_url_part(value: &str) -> Option<String> {
    encode_part(value)
}

/// The URL a template makes of a row whose `{column}` values `value_of` gives, as the derivation
/// statement builds it in SQL (`crate::derive::statements`): literals, and each value encoded.
#[cfg(test)]
pub fn render<'a>(parts: &[Part], value_of: impl Fn(&str) -> Option<&'a str>) -> Option<String> {
    parts
        .iter()
        .map(|p| match p {
            Part::Literal(text) => Some(text.clone()),
            Part::Column(c) => value_of(c).and_then(encode_part),
        })
        .collect()
}

pub fn parse(template: &str) -> Result<Vec<Part>, String> {
    let mut parts = vec![];
    let mut literal = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => {
                            return Err(format!(
                                "url template {} has an unclosed '{{'",
                                shown(template)
                            ))
                        }
                        Some(c) => name.push(c),
                    }
                }
                let name = name.trim().to_string();
                if name.is_empty() {
                    return Err(format!(
                        "url template {} has an empty {{}}",
                        shown(template)
                    ));
                }
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(Part::Column(name));
            }
            '}' => {
                return Err(format!(
                    "url template {} has a '}}' with no '{{'",
                    shown(template)
                ))
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    if !parts.iter().any(|p| matches!(p, Part::Column(_))) {
        return Err(format!(
            "url template {} names no column: every row would have the same URL \
             (write {{column}} for the row's values)",
            shown(template)
        ));
    }
    Ok(parts)
}

/// The template text of `parts` (as [`parse`] reads it back; braces in literals doubled).
pub fn unparse(parts: impl IntoIterator<Item = Part>) -> String {
    parts
        .into_iter()
        .map(|p| match p {
            Part::Literal(text) => text.replace('{', "{{").replace('}', "}}"),
            Part::Column(c) => format!("{{{c}}}"),
        })
        .collect()
}

/// What is wrong with the template's fixed part, if anything: it must start with `https://` or
/// `http://`, and when it names the host (the first column comes after the host's `/`), the URL it
/// starts must be one that can be submitted (a public host, no user info). A template that takes
/// the host from a column is checked row by row instead.
pub fn literal_problem(parts: &[Part]) -> Option<String> {
    let Some(Part::Literal(first)) = parts.first() else {
        return Some("must start with https:// or http://, not with a column".into());
    };
    let lower = first.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    else {
        return Some("must start with https:// or http://".into());
    };
    // Each column gives at least one character (an empty value makes no URL).
    let shortest: usize = parts
        .iter()
        .map(|p| match p {
            Part::Literal(text) => text.len(),
            Part::Column(_) => 1,
        })
        .sum();
    if shortest > indexnow_protocol::submittable::MAX_URL_BYTES {
        return Some(format!(
            "makes URLs of at least {shortest} bytes (its fixed part, and a character for each \
             column): longer than the {} bytes a URL can be submitted with",
            indexnow_protocol::submittable::MAX_URL_BYTES
        ));
    }
    if !rest.contains('/') {
        return None; // the host goes on in a column
    }
    let path_start = first.len() - rest.len() + rest.find('/').unwrap_or(0);
    let sample = format!("{}/x", &first[..path_start]);
    indexnow_protocol::submittable_url(&sample)
        .err()
        .map(|problem| format!("does not make a URL that can be submitted: {problem}"))
}

pub fn columns(parts: &[Part]) -> impl Iterator<Item = &str> {
    parts.iter().filter_map(|p| match p {
        Part::Column(c) => Some(c.as_str()),
        Part::Literal(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::Part::*;
    use super::*;

    #[test]
    fn parses_templates() {
        assert_eq!(
            parse("https://www.example.com/th/{slug}").unwrap(),
            vec![
                Literal("https://www.example.com/th/".into()),
                Column("slug".into())
            ]
        );
        assert_eq!(
            parse("https://x.com/{ lang }/{id}.html?x={{y}}").unwrap(),
            vec![
                Literal("https://x.com/".into()),
                Column("lang".into()),
                Literal("/".into()),
                Column("id".into()),
                Literal(".html?x={y}".into()),
            ]
        );
        for bad in [
            "https://x.com/{slug",
            "https://x.com/{}",
            "https://x.com/a}",
            "https://x.com/",
            "https://x.com/{a{b}",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_fixed_part_must_make_a_public_url() {
        let problem = |t: &str| literal_problem(&parse(t).unwrap());
        assert_eq!(problem("https://www.example.com/th/{slug}"), None);
        assert_eq!(problem("https://{host}/{slug}"), None);
        assert_eq!(problem("https://www.{sub}.example.com/{slug}"), None);
        assert!(problem("{host}/x").unwrap().contains("not with a column"));
        assert!(problem("ftp://x.example.com/{slug}")
            .unwrap()
            .contains("https://"));
        assert!(problem("/th/{slug}").unwrap().contains("https://"));
        assert!(problem("https://localhost/{slug}").is_some());
        assert!(problem("https://10.0.0.1/{slug}").is_some());
        assert!(problem("https://user@www.example.com/{slug}").is_some());
        // Its fixed part alone longer than a URL may be: every row would be skipped.
        let long = |n: usize| format!("https://www.example.com/{}/{{slug}}", "a".repeat(n));
        let at_most = long(2048 - "https://www.example.com//".len() - 1);
        assert_eq!(problem(&at_most), None);
        assert!(problem(&long(2048))
            .unwrap()
            .contains("longer than the 2048 bytes"));
    }

    #[test]
    fn encodes_one_segment() {
        let encoded = |v: &str| encode_part(v).unwrap();
        assert_eq!(encoded("hello world"), "hello%20world");
        assert_eq!(encoded("a/b?c#d"), "a%2Fb%3Fc%23d");
        assert_eq!(encoded("ข่าว"), "%E0%B8%82%E0%B9%88%E0%B8%B2%E0%B8%A7");
        assert_eq!(encoded("A-z_0.9~"), "A-z_0.9~");
        assert_eq!(encoded("..."), "...");
        for none in ["", ".", ".."] {
            assert_eq!(encode_part(none), None, "{none:?}");
        }
    }

    /// The path segments and host of a URL the rules accept, or `None`.
    fn shape(url: &str) -> Option<(String, usize)> {
        let accepted = indexnow_protocol::submittable_url(url).ok()?;
        let parsed = url::Url::parse(&accepted.url).ok()?;
        Some((accepted.host, parsed.path_segments()?.count()))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 3_000, ..Default::default()
        })]

        /// Whatever a row holds, a `{column}` in the path is one segment of it: it never adds or
        /// takes away a segment, and never changes the host.
        #[test]
        fn a_value_never_changes_the_shape_of_the_url(
            slug in proptest::prelude::any::<String>(),
            lang in "(th|en|\\.|\\.\\.|/|%2e|%2E%2E|\\?|#|@|:|[ -~]{0,6})",
        ) {
            let template = parse("https://www.example.com/{lang}/{slug}.html").unwrap();
            let value = |c: &str| Some(if c == "lang" { lang.as_str() } else { slug.as_str() });
            if let Some(url) = render(&template, value) {
                if let Some((host, segments)) = shape(&url) {
                    proptest::prop_assert_eq!(host, "www.example.com", "{}", url);
                    proptest::prop_assert_eq!(segments, 2, "{}", url);
                }
            }
            let whole = parse("https://www.example.com/th/{slug}").unwrap();
            if let Some(url) = render(&whole, |_| Some(slug.as_str())) {
                if let Some((host, segments)) = shape(&url) {
                    proptest::prop_assert_eq!(host, "www.example.com", "{}", url);
                    proptest::prop_assert_eq!(segments, 2, "{}", url);
                }
            }
        }

        /// A `{column}` in the host stays inside its label: the site is still the template's.
        #[test]
        fn a_value_in_the_host_stays_under_the_templates_domain(
            sub in proptest::prelude::any::<String>(),
        ) {
            let template = parse("https://{sub}.example.com/x").unwrap();
            if let Some(url) = render(&template, |_| Some(sub.as_str())) {
                if let Some((host, segments)) = shape(&url) {
                    proptest::prop_assert!(host.ends_with(".example.com"), "{}", url);
                    proptest::prop_assert_eq!(segments, 1, "{}", url);
                }
            }
        }
    }

    #[test]
    fn dot_segments_make_no_url() {
        let whole = parse("https://www.example.com/th/{slug}").unwrap();
        for slug in ["", ".", ".."] {
            assert_eq!(render(&whole, |_| Some(slug)), None, "{slug:?}");
        }
        assert_eq!(
            render(&whole, |_| Some("a/../b")).as_deref(),
            Some("https://www.example.com/th/a%2F..%2Fb")
        );
    }
}
