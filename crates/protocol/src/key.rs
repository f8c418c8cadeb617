//! The IndexNow key: 8 to 128 characters of `a-z A-Z 0-9 -`, and a key file on the host it speaks for.
//!
//! Without `keyLocation` the search engine fetches `https://{host}/{key}.txt`; with it, the key file
//! may live elsewhere on the same host (never on another host: that is how the protocol proves the
//! sender controls the site).

use crate::submittable::{submittable_url, UrlProblem};
use std::fmt;

pub const KEY_MIN_CHARS: usize = 8;
pub const KEY_MAX_CHARS: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyProblem {
    Length(usize),
    Character(char),
    LocationUrl(UrlProblem),
    LocationOtherHost { location_host: String, host: String },
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyProblem::Length(n) => write!(
                f,
                "the key is {n} characters long: it must have {KEY_MIN_CHARS} to {KEY_MAX_CHARS}"
            ),
            KeyProblem::Character(c) => write!(
                f,
                "the key contains {c:?}: only a-z, A-Z, 0-9 and '-' are allowed"
            ),
            KeyProblem::LocationUrl(p) => write!(f, "key_location is not usable: {p}"),
            KeyProblem::LocationOtherHost { location_host, host } => write!(
                f,
                "key_location is on host \"{location_host}\": it must be on the host it speaks for, \"{host}\""
            ),
        }
    }
}

impl std::error::Error for KeyProblem {}

/// Checks the key's format.
pub fn check_key(key: &str) -> Result<(), KeyProblem> {
    if let Some(c) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
    {
        return Err(KeyProblem::Character(c));
    }
    // All characters are ASCII here, so the byte length is the character count.
    if !(KEY_MIN_CHARS..=KEY_MAX_CHARS).contains(&key.len()) {
        return Err(KeyProblem::Length(key.len()));
    }
    Ok(())
}

/// Checks that `location` is a submittable http(s) URL on `host` (already in normal form) and
/// returns the location in normal form.
pub fn check_key_location(host: &str, location: &str) -> Result<String, KeyProblem> {
    let loc = submittable_url(location).map_err(KeyProblem::LocationUrl)?;
    if crate::submittable::host_name(&loc.host) != crate::submittable::host_name(host) {
        return Err(KeyProblem::LocationOtherHost {
            location_host: loc.host,
            host: host.to_string(),
        });
    }
    Ok(loc.url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_format() {
        let max = "a".repeat(128);
        let too_long = "a".repeat(129);
        let cases: Vec<(&str, Result<(), KeyProblem>)> = vec![
            ("5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c", Ok(())),
            ("abcdefgh", Ok(())),
            ("ABC-def-123", Ok(())),
            (&max, Ok(())),
            ("abcdefg", Err(KeyProblem::Length(7))),
            ("", Err(KeyProblem::Length(0))),
            (&too_long, Err(KeyProblem::Length(129))),
            ("abcd_efgh", Err(KeyProblem::Character('_'))),
            ("abcd efgh", Err(KeyProblem::Character(' '))),
            ("abcdéfgh", Err(KeyProblem::Character('é'))),
            ("abcd/../efgh", Err(KeyProblem::Character('/'))),
        ];
        for (key, want) in cases {
            assert_eq!(check_key(key), want, "{key:?}");
        }
    }

    #[test]
    fn key_location_on_the_same_host() {
        assert_eq!(
            check_key_location("www.example.com", "https://WWW.example.com/keys/k.txt"),
            Ok("https://www.example.com/keys/k.txt".to_string())
        );
        assert_eq!(
            check_key_location("www.example.com", "http://www.example.com/k.txt"),
            Ok("http://www.example.com/k.txt".to_string())
        );
        assert_eq!(
            check_key_location("www.example.com", "https://cdn.example.com/k.txt"),
            Err(KeyProblem::LocationOtherHost {
                location_host: "cdn.example.com".into(),
                host: "www.example.com".into()
            })
        );
        // The same host name on another port: the request's host is the host name.
        assert_eq!(
            check_key_location("www.example.com", "https://www.example.com:8443/k.txt"),
            Ok("https://www.example.com:8443/k.txt".to_string())
        );
        assert_eq!(
            check_key_location("www.example.com:8443", "https://www.example.com/k.txt"),
            Ok("https://www.example.com/k.txt".to_string())
        );
        assert!(matches!(
            check_key_location("www.example.com", "ftp://www.example.com/k.txt"),
            Err(KeyProblem::LocationUrl(UrlProblem::NotHttp(_)))
        ));
        assert!(matches!(
            check_key_location("www.example.com", "/k.txt"),
            Err(KeyProblem::LocationUrl(UrlProblem::NotAbsolute(_)))
        ));
    }
}
