//! What an answer from the endpoint means (behaviour 13). A pure function of the answer, the
//! configured pauses and the clock, so each class has a table test.
//!
//! | answer                                   | outcome                                           |
//! |------------------------------------------|---------------------------------------------------|
//! | 2xx (200, 202, ...)                      | accepted: the URLs are pushed                     |
//! | 429                                      | pause all sending: Retry-After, else `throttled`  |
//! | 5xx, timeout, no connection, reset       | pause all sending for `unavailable`               |
//! | 403 whose body says SiteVerificationNotCompleted | pause that host for `unavailable`         |
//! | any other 4xx (400, 403, 405, 422, ...)  | refused: those URLs failed, kept with status and body, not retried until requested again |
//! | anything else (1xx, 3xx)                 | pause all sending for `unavailable`: unexpected, so nothing is dropped |
//!
//! A temporary failure never drops a URL: only a 4xx refuses.

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
    /// Pause all sending.
    PauseAll {
        pause: Duration,
        note: String,
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
}

/// The longest body kept in a note.
pub const NOTE_BYTES: usize = 500;

/// Retry-After values beyond this are taken as this: a typo should not stop sending for a year.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(7 * 86_400);

pub fn classify(answer: &Answer, backoffs: &Backoffs, now: SystemTime) -> Outcome {
    match answer {
        Answer::Status {
            code: 200..=299, ..
        } => Outcome::Accepted,
        Answer::Status {
            code: 429,
            retry_after,
            body,
        } => {
            let pause = retry_after
                .as_deref()
                .and_then(|v| retry_after_duration(v, now))
                .unwrap_or(backoffs.throttled);
            Outcome::PauseAll {
                pause,
                note: note("429 Too Many Requests", body),
            }
        }
        Answer::Status {
            code: 403, body, ..
        } if body.contains("SiteVerificationNotCompleted") => Outcome::PauseHost {
            pause: backoffs.unavailable,
            note: note("403 site verification not completed", body),
        },
        Answer::Status {
            code: code @ 400..=499,
            body,
            ..
        } => Outcome::Refused {
            note: note(&code.to_string(), body),
        },
        Answer::Status { code, body, .. } => Outcome::PauseAll {
            pause: backoffs.unavailable,
            note: note(&code.to_string(), body),
        },
        Answer::Timeout => Outcome::PauseAll {
            pause: backoffs.unavailable,
            note: "timeout".into(),
        },
        Answer::NoConnection(e) => Outcome::PauseAll {
            pause: backoffs.unavailable,
            note: note("no connection", e),
        },
        Answer::Reset(e) => Outcome::PauseAll {
            pause: backoffs.unavailable,
            note: note("connection reset", e),
        },
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
    fn every_answer_class() {
        let b = Backoffs {
            throttled: Duration::from_secs(3600),
            unavailable: Duration::from_secs(900),
        };
        let now = httpdate::parse_http_date("Mon, 30 Nov 2026 12:00:00 GMT").unwrap();
        let all = |secs: u64| Duration::from_secs(secs);
        let cases: Vec<(&str, Answer, Outcome)> = vec![
            ("200", status(200, None, ""), Outcome::Accepted),
            ("202", status(202, None, ""), Outcome::Accepted),
            ("204", status(204, None, ""), Outcome::Accepted),
            ("429 without Retry-After", status(429, None, ""), Outcome::PauseAll { pause: all(3600), note: "429 Too Many Requests".into() }),
            ("429 Retry-After seconds", status(429, Some("120"), ""), Outcome::PauseAll { pause: all(120), note: "429 Too Many Requests".into() }),
            ("429 Retry-After date", status(429, Some("Mon, 30 Nov 2026 12:30:00 GMT"), ""), Outcome::PauseAll { pause: all(1800), note: "429 Too Many Requests".into() }),
            ("429 Retry-After date passed", status(429, Some("Mon, 30 Nov 2026 11:00:00 GMT"), ""), Outcome::PauseAll { pause: all(0), note: "429 Too Many Requests".into() }),
            ("429 Retry-After nonsense", status(429, Some("soon"), ""), Outcome::PauseAll { pause: all(3600), note: "429 Too Many Requests".into() }),
            ("429 Retry-After a year", status(429, Some("31536000"), ""), Outcome::PauseAll { pause: MAX_RETRY_AFTER, note: "429 Too Many Requests".into() }),
            ("429 Retry-After past any number", status(429, Some("18446744073709551616"), ""), Outcome::PauseAll { pause: MAX_RETRY_AFTER, note: "429 Too Many Requests".into() }),
            ("403 site verification", status(403, None, r#"{"code":"SiteVerificationNotCompleted"}"#), Outcome::PauseHost { pause: all(900), note: r#"403 site verification not completed: {"code":"SiteVerificationNotCompleted"}"#.into() }),
            ("403 other", status(403, None, "key not valid"), Outcome::Refused { note: "403: key not valid".into() }),
            ("400", status(400, None, "Invalid format"), Outcome::Refused { note: "400: Invalid format".into() }),
            ("405", status(405, None, ""), Outcome::Refused { note: "405".into() }),
            ("422", status(422, None, "URLs do not belong to the host"), Outcome::Refused { note: "422: URLs do not belong to the host".into() }),
            ("500", status(500, None, "oops"), Outcome::PauseAll { pause: all(900), note: "500: oops".into() }),
            ("503", status(503, Some("60"), ""), Outcome::PauseAll { pause: all(900), note: "503".into() }),
            ("302", status(302, None, ""), Outcome::PauseAll { pause: all(900), note: "302".into() }),
            ("timeout", Answer::Timeout, Outcome::PauseAll { pause: all(900), note: "timeout".into() }),
            ("refused", Answer::NoConnection("Connection refused".into()), Outcome::PauseAll { pause: all(900), note: "no connection: Connection refused".into() }),
            ("reset", Answer::Reset("connection reset by peer".into()), Outcome::PauseAll { pause: all(900), note: "connection reset: connection reset by peer".into() }),
        ];
        for (what, answer, want) in cases {
            assert_eq!(classify(&answer, &b, now), want, "{what}");
        }
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
