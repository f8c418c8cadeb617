//! URL templates: `https://www.example.com/th/{slug}` — literal text with `{column}` parts that take
//! the row's values, percent-encoded as one path segment (so a `/` or `?` in a slug cannot change
//! the URL's shape). `{{` and `}}` stand for literal braces.

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

pub fn encode_part(value: &str) -> String {
    utf8_percent_encode(value, SEGMENT).to_string()
}

/// One `{column}` value, encoded for a URL template.
#[pg_extern(immutable, strict, parallel_safe)]
fn indexnow_url_part(value: &str) -> String {
    encode_part(value)
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
                            return Err(format!("url template {template:?} has an unclosed '{{'"))
                        }
                        Some(c) => name.push(c),
                    }
                }
                let name = name.trim().to_string();
                if name.is_empty() {
                    return Err(format!("url template {template:?} has an empty {{}}"));
                }
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(Part::Column(name));
            }
            '}' => return Err(format!("url template {template:?} has a '}}' with no '{{'")),
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    if !parts.iter().any(|p| matches!(p, Part::Column(_))) {
        return Err(format!(
            "url template {template:?} names no column: every row would have the same URL \
             (write {{column}} for the row's values)"
        ));
    }
    Ok(parts)
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
    }

    #[test]
    fn encodes_one_segment() {
        assert_eq!(encode_part("hello world"), "hello%20world");
        assert_eq!(encode_part("a/b?c#d"), "a%2Fb%3Fc%23d");
        assert_eq!(encode_part("ข่าว"), "%E0%B8%82%E0%B9%88%E0%B8%B2%E0%B8%A7");
        assert_eq!(encode_part("A-z_0.9~"), "A-z_0.9~");
    }
}
