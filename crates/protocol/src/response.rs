//! What an answer from the endpoint means (behaviour 13). A pure function of the answer, the
//! configured pauses, the clock and how many 429s came in a row, so each class has a table test.
//!
//! | answer                                   | outcome                                           |
//! |------------------------------------------|---------------------------------------------------|
//! | 2xx (200, 202, ...)                      | accepted: the URLs are pushed                     |
//! | 429                                      | pause all sending: Retry-After, else `throttled`; at least [`THROTTLED_FLOOR`], doubled for each 429 in a row before it |
//! | 5xx, timeout, no connection, reset, 1xx, 3xx, 408 | pause all sending for `unavailable` (transport or server) |
//! | 403 whose body says SiteVerificationNotCompleted | pause that host for `unavailable`         |
//! | 400, 422, 403 (the protocol's answers on the request's content and key) | refused: those URLs failed, kept with status and body, not retried until requested again |
//! | 413                                      | too large: the URLs are kept and sent again in smaller requests; a request of one URL too large pauses all sending for `unavailable`, loudly ([`too_large`]): a body limit set too low, not the URL |
//! | 401, 404, 405, any other 4xx; a 400, 403 or 422 whose body is a web page | pause all sending for `unavailable`, loudly: an answer about the endpoint (a wrong `indexnow.endpoint`, a proxy, a firewall), which a person must look at |
//!
//! A temporary failure, or an answer that is not about the URLs, never drops a URL: only the
//! protocol's own refusals do. A body a proxy or firewall wrote (an HTML page) is not the
//! endpoint's word on the URLs, whatever its status.

use std::time::{Duration, SystemTime};

/// What came back from one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Status {
        code: u16,
        retry_after: Option<String>,
        body: String,
    },
    Timeout,
    /// Connection refused, name not resolved, TLS failure: no request reached a server.
    NoConnection(String),
    /// The connection was closed or reset before a full answer.
    Reset(String),
}

impl Answer {
    /// The `status` column of `indexnow_pushes`: the HTTP status, 0 when there was no response.
    pub fn status_code(&self) -> u16 {
        match self {
            Answer::Status { code, .. } => *code,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoffs {
    pub throttled: Duration,
    pub unavailable: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    /// Pause all sending. `act` says what a person must look at, for an answer about the
    /// endpoint rather than the URLs (logged as a WARNING).
    PauseAll {
        pause: Duration,
        note: String,
        act: Option<&'static str>,
    },
    /// Pause this host only.
    PauseHost {
        pause: Duration,
        note: String,
    },
    /// These URLs failed for good (until they are requested again).
    Refused {
        note: String,
    },
    /// 413: the request was too large for the endpoint. The URLs are kept, and sent again in
    /// requests of half as many.
    TooLarge {
        note: String,
    },
}

/// The longest body kept in a note.
pub const NOTE_BYTES: usize = 500;

/// Retry-After values beyond this are taken as this: a typo should not stop sending for a year.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(7 * 86_400);

/// The shortest pause after a 429, whatever Retry-After says (`0`, a date passed): an endpoint
/// that throttles is never asked again at once, and a client that hammers risks its key.
pub const THROTTLED_FLOOR: Duration = Duration::from_secs(5);

/// What a person must look at after an answer about the endpoint, not the URLs.
const CHECK_ENDPOINT: &str = "check indexnow.endpoint: the endpoint's address or method is wrong";
const CHECK_AUTHENTICATION: &str =
    "check indexnow.endpoint and any proxy in between: IndexNow asks for no authentication";
const CHECK_PROXY: &str =
    "check indexnow.endpoint and any proxy or firewall in between: the answer is not the protocol's";

const CHECK_BODY_LIMIT: &str = "check indexnow.endpoint and any proxy in between: a request of \
                                 one URL is too large for it (a body limit set too low)";

/// What a 413 ([`Outcome::TooLarge`]) to a request of `carried` URLs means: a larger request
/// than the endpoint takes, sent again in smaller ones; or, for a request of one URL (a few
/// hundred bytes, which any IndexNow endpoint takes), an endpoint or a proxy whose body limit is
/// wrong: the URL is kept and all sending pauses for `unavailable`, loudly, as for a 404.
pub fn too_large(carried: usize, note: String, backoffs: &Backoffs) -> Outcome {
    if carried > 1 {
        return Outcome::TooLarge { note };
    }
    Outcome::PauseAll {
        pause: backoffs.unavailable,
        note,
        act: Some(CHECK_BODY_LIMIT),
    }
}

/// What `answer` means. `throttled_before` is how many answers in a row were 429 before this one
/// (each doubles the pause of the next 429).
pub fn classify(
    answer: &Answer,
    backoffs: &Backoffs,
    now: SystemTime,
    throttled_before: u32,
) -> Outcome {
    let unavailable = |note: String, act: Option<&'static str>| Outcome::PauseAll {
        pause: backoffs.unavailable,
        note,
        act,
    };
    match answer {
        Answer::Status {
            code: 200..=299, ..
        } => Outcome::Accepted,
        Answer::Status {
            code: 429,
            retry_after,
            body,
        } => {
            let asked = retry_after
                .as_deref()
                .and_then(|v| retry_after_duration(v, now))
                .unwrap_or(backoffs.throttled);
            let escalated = THROTTLED_FLOOR.saturating_mul(1 << throttled_before.min(20));
            Outcome::PauseAll {
                pause: asked.max(escalated).min(MAX_RETRY_AFTER),
                note: note("429 Too Many Requests", body),
                act: None,
            }
        }
        Answer::Status { code, body, .. } if (400..=499).contains(code) && is_a_web_page(body) => {
            unavailable(note(&code.to_string(), body), Some(CHECK_PROXY))
        }
        Answer::Status {
            code: 403, body, ..
        } if body.contains("SiteVerificationNotCompleted") => Outcome::PauseHost {
            pause: backoffs.unavailable,
            note: note("403 site verification not completed", body),
        },
        Answer::Status {
            code: code @ (400 | 403 | 422),
            body,
            ..
        } => Outcome::Refused {
            note: note(&code.to_string(), body),
        },
        Answer::Status {
            code: 413, body, ..
        } => Outcome::TooLarge {
            note: note("413 Payload Too Large", body),
        },
        Answer::Status {
            code: 408, body, ..
        } => unavailable(note("408 Request Timeout", body), None),
        Answer::Status {
            code: code @ (404 | 405),
            body,
            ..
        } => unavailable(note(&code.to_string(), body), Some(CHECK_ENDPOINT)),
        Answer::Status {
            code: 401, body, ..
        } => unavailable(note("401", body), Some(CHECK_AUTHENTICATION)),
        Answer::Status { code, body, .. } if (400..=499).contains(code) => {
            unavailable(note(&code.to_string(), body), Some(CHECK_PROXY))
        }
        Answer::Status { code, body, .. } => unavailable(note(&code.to_string(), body), None),
        Answer::Timeout => unavailable("timeout".into(), None),
        Answer::NoConnection(e) => unavailable(note("no connection", e), None),
        Answer::Reset(e) => unavailable(note("connection reset", e), None),
    }
}

/// Whether a body is a web page (a proxy's, a firewall's, a web server's error page) rather than
/// the endpoint's own words, which are plain text or JSON.
fn is_a_web_page(body: &str) -> bool {
    let start = body.trim_start();
    start.starts_with('<')
}

/// `text` with the host's key, its key file's address and the file's name put out of sight: an
/// endpoint, proxy or firewall that echoes the request in its answer must not carry the key into
/// the history, the log or the status, which roles without the key may read.
pub fn redact(text: &str, key: &str, key_location: Option<&str>) -> String {
    let mut secrets: Vec<&str> = vec![];
    if let Some(location) = key_location {
        secrets.push(location);
        let file = location.rsplit('/').next().unwrap_or("");
        let stem = file.rsplit_once('.').map_or(file, |(stem, _)| stem);
        // (a short name is a word, not a secret: the key file's name is the key when short)
        for name in [file, stem] {
            if name.len() >= crate::key::KEY_MIN_CHARS {
                secrets.push(name);
            }
        }
    }
    if !key.is_empty() {
        secrets.push(key);
    }
    // The longest first: a key inside its file's address goes with the address.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for secret in secrets {
        out = replace_ignoring_case(&out, secret, "[redacted]");
    }
    out
}

fn replace_ignoring_case(text: &str, what: &str, with: &str) -> String {
    let (lower, what) = (text.to_ascii_lowercase(), what.to_ascii_lowercase());
    if what.is_empty() || !lower.contains(&what) {
        return text.to_string();
    }
    // (ASCII lower-casing keeps every byte where it was, so the offsets hold in `text`)
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find(&what) {
        out.push_str(&text[at..at + found]);
        out.push_str(with);
        at += found + what.len();
    }
    out.push_str(&text[at..]);
    out
}

impl Answer {
    /// The answer with [`redact`] applied to every text it carries.
    pub fn redacted(&self, key: &str, key_location: Option<&str>) -> Answer {
        let r = |t: &str| redact(t, key, key_location);
        match self {
            Answer::Status {
                code,
                retry_after,
                body,
            } => Answer::Status {
                code: *code,
                retry_after: retry_after.clone(),
                body: r(body),
            },
            Answer::Timeout => Answer::Timeout,
            Answer::NoConnection(e) => Answer::NoConnection(r(e)),
            Answer::Reset(e) => Answer::Reset(r(e)),
        }
    }
}

/// What an answer says of the host's key, when it says anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// 202, or 403 `SiteVerificationNotCompleted`: the URLs were received, the key file is not
    /// verified yet.
    Pending,
    /// 200: the key file was verified.
    Verified,
    /// A 403 otherwise, or a 422 whose answer names the key: the key is not accepted.
    Rejected,
}

impl KeyState {
    /// As `indexnow_hosts.key_state` stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Pending => "pending",
            KeyState::Verified => "verified",
            KeyState::Rejected => "rejected",
        }
    }
}

/// The key's state as this answer reveals it; `None` for an answer that says nothing of the key
/// (a pause, no answer, another refusal).
pub fn key_state(answer: &Answer) -> Option<KeyState> {
    match answer {
        Answer::Status {
            code: 400..=499,
            body,
            ..
        } if is_a_web_page(body) => None,
        Answer::Status { code: 200, .. } => Some(KeyState::Verified),
        Answer::Status { code: 202, .. } => Some(KeyState::Pending),
        Answer::Status {
            code: 403, body, ..
        } if body.contains("SiteVerificationNotCompleted") => Some(KeyState::Pending),
        Answer::Status { code: 403, .. } => Some(KeyState::Rejected),
        Answer::Status {
            code: 422, body, ..
        } if body.to_ascii_lowercase().contains("key") => Some(KeyState::Rejected),
        _ => None,
    }
}

/// Retry-After as delay-seconds or an HTTP date; `None` when it is neither. Delay-seconds too
/// large for a number are as long as any (the longest pause), not a value unread.
pub fn retry_after_duration(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let pause = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        value
            .parse::<u64>()
            .map_or(MAX_RETRY_AFTER, Duration::from_secs)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(pause.min(MAX_RETRY_AFTER))
}

/// `what: body`, the body cut to [`NOTE_BYTES`] on a character boundary.
pub fn note(what: &str, body: &str) -> String {
    let body = body.trim();
    if body.is_empty() {
        return what.to_string();
    }
    let mut end = body.len().min(NOTE_BYTES);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    let ellipsis = if end < body.len() { "…" } else { "" };
    format!("{what}: {}{ellipsis}", &body[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: Option<&str>, body: &str) -> Answer {
        Answer::Status {
            code,
            retry_after: retry_after.map(str::to_string),
            body: body.to_string(),
        }
    }

    #[test]
    fn a_413_splits_a_request_and_pauses_for_one_url() {
        let b = Backoffs {
            throttled: Duration::from_secs(3600),
            unavailable: Duration::from_secs(900),
        };
        assert_eq!(
            too_large(2, "413".into(), &b),
            Outcome::TooLarge { note: "413".into() }
        );
        assert_eq!(
            too_large(1, "413".into(), &b),
            Outcome::PauseAll {
                pause: Duration::from_secs(900),
                note: "413".into(),
                act: Some(CHECK_BODY_LIMIT),
            }
        );
    }

    #[test]
    fn every_answer_class() {
        let b = Backoffs {
            throttled: Duration::from_secs(3600),
            unavailable: Duration::from_secs(900),
        };
        let now = httpdate::parse_http_date("Mon, 30 Nov 2026 12:00:00 GMT").unwrap();
        let secs = Duration::from_secs;
        let all = |s: u64, note: &str| Outcome::PauseAll {
            pause: secs(s),
            note: note.into(),
            act: None,
        };
        let loud = |note: &str, act: &'static str| Outcome::PauseAll {
            pause: secs(900),
            note: note.into(),
            act: Some(act),
        };
        let refused = |note: &str| Outcome::Refused { note: note.into() };
        let page = "<!DOCTYPE html><html><body>Access denied</body></html>";
        let cases: Vec<(&str, Answer, Outcome)> = vec![
            ("200", status(200, None, ""), Outcome::Accepted),
            ("202", status(202, None, ""), Outcome::Accepted),
            ("204", status(204, None, ""), Outcome::Accepted),
            ("429 without Retry-After", status(429, None, ""), all(3600, "429 Too Many Requests")),
            ("429 Retry-After seconds", status(429, Some("120"), ""), all(120, "429 Too Many Requests")),
            ("429 Retry-After date", status(429, Some("Mon, 30 Nov 2026 12:30:00 GMT"), ""), all(1800, "429 Too Many Requests")),
            ("429 Retry-After date passed: the floor", status(429, Some("Mon, 30 Nov 2026 11:00:00 GMT"), ""), all(5, "429 Too Many Requests")),
            ("429 Retry-After 0: the floor", status(429, Some("0"), ""), all(5, "429 Too Many Requests")),
            ("429 Retry-After nonsense", status(429, Some("soon"), ""), all(3600, "429 Too Many Requests")),
            ("429 Retry-After a year", status(429, Some("31536000"), ""), Outcome::PauseAll { pause: MAX_RETRY_AFTER, note: "429 Too Many Requests".into(), act: None }),
            ("429 Retry-After past any number", status(429, Some("18446744073709551616"), ""), Outcome::PauseAll { pause: MAX_RETRY_AFTER, note: "429 Too Many Requests".into(), act: None }),
            ("403 site verification", status(403, None, r#"{"code":"SiteVerificationNotCompleted"}"#), Outcome::PauseHost { pause: secs(900), note: r#"403 site verification not completed: {"code":"SiteVerificationNotCompleted"}"#.into() }),
            ("403 the key", status(403, None, "key not valid"), refused("403: key not valid")),
            ("400 the request's content", status(400, None, "Invalid format"), refused("400: Invalid format")),
            ("422 the URLs", status(422, None, "URLs do not belong to the host"), refused("422: URLs do not belong to the host")),
            ("400 a proxy's page", status(400, None, page), loud(&format!("400: {page}"), CHECK_PROXY)),
            ("403 a firewall's page", status(403, None, page), loud(&format!("403: {page}"), CHECK_PROXY)),
            ("422 a web page", status(422, None, "  <html>no</html>"), loud("422: <html>no</html>", CHECK_PROXY)),
            ("404 a wrong endpoint path", status(404, None, "Not Found"), loud("404: Not Found", CHECK_ENDPOINT)),
            ("405 a wrong method or path", status(405, None, ""), loud("405", CHECK_ENDPOINT)),
            ("401", status(401, None, ""), loud("401", CHECK_AUTHENTICATION)),
            ("410 another 4xx", status(410, None, "gone"), loud("410: gone", CHECK_PROXY)),
            ("451 another 4xx", status(451, None, ""), loud("451", CHECK_PROXY)),
            ("408", status(408, None, ""), all(900, "408 Request Timeout")),
            ("413", status(413, None, "too big"), Outcome::TooLarge { note: "413 Payload Too Large: too big".into() }),
            ("500", status(500, None, "oops"), all(900, "500: oops")),
            ("503", status(503, Some("60"), ""), all(900, "503")),
            ("302", status(302, None, ""), all(900, "302")),
            ("101", status(101, None, ""), all(900, "101")),
            ("timeout", Answer::Timeout, all(900, "timeout")),
            ("refused", Answer::NoConnection("Connection refused".into()), all(900, "no connection: Connection refused")),
            ("reset", Answer::Reset("connection reset by peer".into()), all(900, "connection reset: connection reset by peer")),
        ];
        for (what, answer, want) in cases {
            assert_eq!(classify(&answer, &b, now, 0), want, "{what}");
        }
    }

    #[test]
    fn each_429_in_a_row_doubles_the_pause_from_the_floor() {
        let b = Backoffs {
            throttled: Duration::from_secs(3600),
            unavailable: Duration::from_secs(900),
        };
        let now = SystemTime::now();
        let pause = |retry_after: Option<&str>, before: u32| match classify(
            &status(429, retry_after, ""),
            &b,
            now,
            before,
        ) {
            Outcome::PauseAll { pause, .. } => pause.as_secs(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (0..6).map(|n| pause(Some("0"), n)).collect::<Vec<_>>(),
            [5, 10, 20, 40, 80, 160]
        );
        // Retry-After wins while it is longer; the doubling overtakes it.
        assert_eq!(pause(Some("120"), 0), 120);
        assert_eq!(pause(Some("120"), 5), 160);
        assert_eq!(pause(None, 3), 3600);
        // Never past the longest pause, however many came before.
        assert_eq!(pause(Some("0"), 1_000), MAX_RETRY_AFTER.as_secs());
        // Other answers do not escalate.
        assert_eq!(
            classify(&status(503, None, ""), &b, now, 9),
            Outcome::PauseAll {
                pause: Duration::from_secs(900),
                note: "503".into(),
                act: None
            }
        );
    }

    #[test]
    fn the_key_and_its_file_are_redacted_from_what_an_answer_says() {
        let key = "5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c";
        let echo = format!(
            r#"400: bad request {{"host":"www.example.com","key":"{key}","keyLocation":"https://www.example.com/mykeyfile-abc.txt"}} KEY={}"#,
            key.to_ascii_uppercase()
        );
        let out = redact(
            &echo,
            key,
            Some("https://www.example.com/mykeyfile-abc.txt"),
        );
        assert!(!out.to_ascii_lowercase().contains(key), "{out}");
        assert!(!out.contains("mykeyfile-abc"), "{out}");
        assert!(out.contains(r#""host":"www.example.com""#), "{out}");
        assert_eq!(out.matches("[redacted]").count(), 3, "{out}");
        // The file's name alone, as a web server's 404 page names it.
        assert_eq!(
            redact(
                "no such file: mykeyfile-abc.txt",
                key,
                Some("https://www.example.com/mykeyfile-abc.txt")
            ),
            "no such file: [redacted]"
        );
        // A short file name is a word, not a secret.
        assert_eq!(
            redact("the key file", key, Some("https://www.example.com/key.txt")),
            "the key file"
        );
        // Every text of an answer.
        let answer = status(403, None, &format!("key {key} not valid")).redacted(key, None);
        assert_eq!(answer, status(403, None, "key [redacted] not valid"));
        assert_eq!(
            Answer::Reset(format!("reset after {key}")).redacted(key, None),
            Answer::Reset("reset after [redacted]".into())
        );
    }

    #[test]
    fn what_each_answer_says_of_the_key() {
        let cases: Vec<(Answer, Option<KeyState>)> = vec![
            (status(200, None, ""), Some(KeyState::Verified)),
            (status(202, None, ""), Some(KeyState::Pending)),
            (
                status(403, None, r#"{"code":"SiteVerificationNotCompleted"}"#),
                Some(KeyState::Pending),
            ),
            (status(403, None, "key not valid"), Some(KeyState::Rejected)),
            (status(403, None, ""), Some(KeyState::Rejected)),
            (
                status(422, None, "The Key does not match the key file"),
                Some(KeyState::Rejected),
            ),
            (status(422, None, "URLs do not belong to the host"), None),
            (
                status(403, None, "<html>Forbidden by the firewall</html>"),
                None,
            ),
            (status(400, None, "Invalid format"), None),
            (status(204, None, ""), None),
            (status(429, None, ""), None),
            (status(500, None, ""), None),
            (Answer::Timeout, None),
        ];
        for (answer, want) in cases {
            assert_eq!(key_state(&answer), want, "{answer:?}");
        }
    }

    #[test]
    fn status_zero_means_no_response() {
        assert_eq!(Answer::Timeout.status_code(), 0);
        assert_eq!(status(429, None, "").status_code(), 429);
    }

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        let long = "ก".repeat(400); // 1200 bytes
        let n = note("400", &long);
        assert!(
            n.len() <= "400: ".len() + NOTE_BYTES + "…".len(),
            "{}",
            n.len()
        );
        assert!(n.ends_with('…'));
        assert_eq!(note("400", "  short  "), "400: short");
    }
}
