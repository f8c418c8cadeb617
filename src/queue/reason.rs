//! Why a URL was queued. The removal reasons tell a search engine the page is gone; the others
//! that it is live. The `reason` CHECK constraint in `sql/schema.sql` lists the same names, and a
//! test holds the two lists together.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Created,
    Changed,
    /// Re-announce unchanged content (subject to `repeat_after`, not `min_gap`).
    Refresh,
    Moved,
    Unpublished,
    Deleted,
    Gone,
    Untranslated,
}

impl Reason {
    pub const ALL: [Reason; 8] = [
        Reason::Created,
        Reason::Changed,
        Reason::Refresh,
        Reason::Moved,
        Reason::Unpublished,
        Reason::Deleted,
        Reason::Gone,
        Reason::Untranslated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Created => "created",
            Reason::Changed => "changed",
            Reason::Refresh => "refresh",
            Reason::Moved => "moved",
            Reason::Unpublished => "unpublished",
            Reason::Deleted => "deleted",
            Reason::Gone => "gone",
            Reason::Untranslated => "untranslated",
        }
    }

    /// The page is no longer there (or no longer public) at this URL.
    pub fn is_removal(self) -> bool {
        matches!(
            self,
            Reason::Moved
                | Reason::Unpublished
                | Reason::Deleted
                | Reason::Gone
                | Reason::Untranslated
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownReason(pub String);

impl fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        write!(
            f,
            "indexnow: unknown reason {}; the reasons are: {}",
            crate::error::shown(&self.0),
            names.join(", ")
        )
    }
}

impl FromStr for Reason {
    type Err = UnknownReason;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_removals_are_the_last_five() {
        for r in Reason::ALL {
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
        }
        let removals: Vec<_> = Reason::ALL
            .iter()
            .filter(|r| r.is_removal())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(
            removals,
            ["moved", "unpublished", "deleted", "gone", "untranslated"]
        );
    }

    #[test]
    fn unknown_reason_lists_the_valid_ones() {
        let err = "Changed".parse::<Reason>().unwrap_err().to_string();
        assert!(err.contains("unknown reason \"Changed\""), "{err}");
        assert!(err.contains("created, changed, refresh, moved"), "{err}");
    }
}
