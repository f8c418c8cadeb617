//! When a queued URL is due: the rule of behaviour 11, in the one place it is written.
//!
//! A URL is due when all of these hold:
//! - a request is pending: `request_seq > settled_seq` (something asked for it since the last
//!   push settled it; a pushed URL with no new request is never sent again);
//! - it was quiet for `debounce`: `changed_at + debounce <= now`;
//! - its publication time has come: `available_at <= now`;
//! - it was last pushed long enough ago: `min_gap` when its content changed since that push
//!   (`changed_at` differs from the `pushed_changed_at` that push carried), `repeat_after` when the
//!   request is a re-announcement of unchanged content (`refresh`). Never pushed: no gap.
//!
//! The rule has two forms that must agree: [`DueRule::due_at`] in plain Rust (table-tested below,
//! no Postgres needed) and [`DUE_SQL`]/[`DUE_AT_SQL`] over `indexnow_urls` for the queries that
//! pick due rows with the `indexnow_urls_pending` index (`crate::send::sql`, `indexnow_status()`). A `#[pg_test]` runs the same table of
//! cases through both forms.

// The Rust form is the executable statement of the rule that the SQL form is tested against: only
// the tests call it, so it is built for them alone.

use std::time::Duration;

/// A point in time in microseconds, as Postgres keeps `timestamptz`.
#[cfg(any(test, feature = "pg_test"))]
pub type Micros = i64;

/// The three settings the rule depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueRule {
    pub debounce: Duration,
    pub min_gap: Duration,
    pub repeat_after: Duration,
}

/// The columns of an `indexnow_urls` row that the rule reads.
#[cfg(any(test, feature = "pg_test"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedUrl {
    pub changed_at: Micros,
    pub available_at: Micros,
    pub last_pushed_at: Option<Micros>,
    pub pushed_changed_at: Option<Micros>,
    pub request_seq: i64,
    pub settled_seq: i64,
}

#[cfg(test)]
impl QueuedUrl {
    pub fn pending(&self) -> bool {
        self.request_seq > self.settled_seq
    }

    /// The content changed since the last push (or was never pushed).
    pub fn content_changed(&self) -> bool {
        self.pushed_changed_at != Some(self.changed_at)
    }
}

#[cfg(test)]
impl DueRule {
    /// The first moment the URL is due, or `None` while no request is pending.
    pub fn due_at(&self, u: &QueuedUrl) -> Option<Micros> {
        if !u.pending() {
            return None;
        }
        let quiet_from = u.changed_at + micros(self.debounce);
        let mut due = quiet_from.max(u.available_at);
        if let Some(pushed) = u.last_pushed_at {
            let gap = if u.content_changed() {
                self.min_gap
            } else {
                self.repeat_after
            };
            due = due.max(pushed + micros(gap));
        }
        Some(due)
    }

    pub fn is_due(&self, u: &QueuedUrl, now: Micros) -> bool {
        self.due_at(u).is_some_and(|due| due <= now)
    }
}

impl DueRule {
    /// The arguments `$2, $3, $4` of [`DUE_SQL`] and [`DUE_AT_SQL`], in seconds.
    pub fn sql_args(&self) -> [f64; 3] {
        [
            self.debounce.as_secs_f64(),
            self.min_gap.as_secs_f64(),
            self.repeat_after.as_secs_f64(),
        ]
    }
}

#[cfg(test)]
fn micros(d: Duration) -> Micros {
    d.as_micros() as Micros
}

/// A request is pending: something asked for the URL since the last push settled it. The first
/// term of [`DUE_SQL`], and what the partial index `indexnow_urls_pending` covers.
pub const PENDING_SQL: &str = "request_seq > settled_seq";

/// The endpoint refused the URL (a 4xx other than those that pause) and nothing asked for it
/// since: it is not sent again until it is requested again.
pub const FAILED_SQL: &str = "(failed_at IS NOT NULL AND request_seq = settled_seq)";

/// A failure the host's key caused: a 403 (site verification aside: that is a pause, not a
/// failure) or a 422 whose answer names the key. A new key may be accepted where the old one was
/// not, so replacing the key requests these URLs again (`crate::hosts`).
pub const KEY_FAILED_SQL: &str =
    "(failed_status = 403 OR (failed_status = 422 AND failed_note ILIKE '%key%'))";

/// A pending row whose content search engines do not have yet: changed (or removed) since its
/// last push, or never pushed. The other pending rows are re-announcements of unchanged content
/// (`refresh`), which `repeat_after` spaces and which go last under a backlog
/// (`crate::send::sql`).
pub const NEWS_SQL: &str = "changed_at IS DISTINCT FROM pushed_changed_at";

/// The rule as a condition over `indexnow_urls`. `$1` = now (timestamptz); `$2`, `$3`, `$4` =
/// debounce, min_gap and repeat_after in seconds (float8, see [`DueRule::sql_args`]).
/// Its first two terms are what the partial index `indexnow_urls_pending` serves.
pub const DUE_SQL: &str = "(request_seq > settled_seq \
     AND changed_at <= $1 - make_interval(secs => $2) \
     AND available_at <= $1 \
     AND (last_pushed_at IS NULL OR last_pushed_at <= $1 - make_interval(secs => \
          CASE WHEN changed_at IS DISTINCT FROM pushed_changed_at THEN $3 ELSE $4 END)))";

// The terms of the time a row becomes due, each in one place (`concat!` takes literals).
macro_rules! quiet_at {
    () => {
        "(changed_at + make_interval(secs => $2))"
    };
}
macro_rules! gap_at {
    () => {
        "(last_pushed_at + make_interval(secs => \
          CASE WHEN changed_at IS DISTINCT FROM pushed_changed_at THEN $3 ELSE $4 END))"
    };
}

/// When the debounce lets a pending row go: quiet for `debounce` since its last content change.
pub const QUIET_AT_SQL: &str = quiet_at!();

/// When the gap since its last push lets it go (NULL when never pushed): `min_gap` after a
/// content change, `repeat_after` for a re-announcement.
pub const GAP_AT_SQL: &str = gap_at!();

/// The rule as the time a row becomes due (NULL while nothing is pending), the latest of its
/// terms ([`QUIET_AT_SQL`], `available_at`, [`GAP_AT_SQL`]); same arguments.
pub const DUE_AT_SQL: &str = concat!(
    "(CASE WHEN request_seq > settled_seq THEN greatest(",
    quiet_at!(),
    ", available_at, ",
    gap_at!(),
    ") END)"
);

#[cfg(any(test, feature = "pg_test"))]
pub mod cases {
    //! The table of cases both forms of the rule are tested against.
    use super::*;

    pub const S: Micros = 1_000_000;
    pub const NOW: Micros = 1_000_000 * S;

    pub fn rule() -> DueRule {
        DueRule {
            debounce: Duration::from_secs(120),
            min_gap: Duration::from_secs(3600),
            repeat_after: Duration::from_secs(86400),
        }
    }

    /// A URL requested once, never pushed, changed `ago` seconds before NOW.
    pub fn fresh(ago: Micros) -> QueuedUrl {
        QueuedUrl {
            changed_at: NOW - ago * S,
            available_at: NOW - ago * S,
            last_pushed_at: None,
            pushed_changed_at: None,
            request_seq: 1,
            settled_seq: 0,
        }
    }

    /// A URL pushed `pushed_ago` seconds before NOW, carrying content changed `changed_ago` seconds
    /// before NOW, and requested again (pending) unless `settled`.
    pub fn pushed(
        changed_ago: Micros,
        pushed_ago: Micros,
        content_changed_since: bool,
    ) -> QueuedUrl {
        let changed_at = NOW - changed_ago * S;
        QueuedUrl {
            changed_at,
            available_at: changed_at,
            last_pushed_at: Some(NOW - pushed_ago * S),
            pushed_changed_at: Some(if content_changed_since {
                changed_at - 10 * S
            } else {
                changed_at
            }),
            request_seq: 2,
            settled_seq: 1,
        }
    }

    /// (what, row, due now?, due at)
    pub fn table() -> Vec<(&'static str, QueuedUrl, bool, Option<Micros>)> {
        let mut settled = pushed(7200, 7000, false);
        settled.settled_seq = settled.request_seq;
        let mut scheduled = fresh(600);
        scheduled.available_at = NOW + 3600 * S;
        let mut scheduled_past = fresh(600);
        scheduled_past.available_at = NOW - S;
        vec![
            (
                "never pushed, quiet exactly debounce",
                fresh(120),
                true,
                Some(NOW),
            ),
            (
                "never pushed, one second short of debounce",
                fresh(119),
                false,
                Some(NOW + S),
            ),
            (
                "never pushed, long quiet",
                fresh(10_000),
                true,
                Some(NOW - 9880 * S),
            ),
            (
                "changed content, pushed exactly min_gap ago",
                pushed(600, 3600, true),
                true,
                Some(NOW),
            ),
            (
                "changed content, pushed just under min_gap ago",
                pushed(600, 3599, true),
                false,
                Some(NOW + S),
            ),
            (
                "changed content, min_gap passed but not quiet",
                pushed(60, 7200, true),
                false,
                Some(NOW + 60 * S),
            ),
            (
                "refresh of unchanged content at repeat_after",
                pushed(90_000, 86_400, false),
                true,
                Some(NOW),
            ),
            (
                "refresh of unchanged content before repeat_after",
                pushed(90_000, 86_399, false),
                false,
                Some(NOW + S),
            ),
            (
                "refresh of unchanged content, past min_gap only",
                pushed(90_000, 7200, false),
                false,
                Some(NOW + 79_200 * S),
            ),
            ("pushed, no new request: never due", settled, false, None),
            (
                "scheduled in the future",
                scheduled,
                false,
                Some(NOW + 3600 * S),
            ),
            (
                "scheduled time just passed",
                scheduled_past,
                true,
                Some(NOW - S),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::cases::*;

    #[test]
    fn the_due_table() {
        let rule = rule();
        for (what, row, due_now, due_at) in table() {
            assert_eq!(rule.is_due(&row, NOW), due_now, "{what}");
            assert_eq!(rule.due_at(&row), due_at, "{what}");
        }
    }

    #[test]
    fn zero_settings_make_every_pending_url_due_at_once() {
        let rule = super::DueRule {
            debounce: std::time::Duration::ZERO,
            min_gap: std::time::Duration::ZERO,
            repeat_after: std::time::Duration::ZERO,
        };
        assert!(rule.is_due(&fresh(0), NOW));
        assert!(rule.is_due(&pushed(0, 0, false), NOW));
    }
}
