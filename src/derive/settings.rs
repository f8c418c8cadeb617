//! The settings a derivation runs under. Each derivation runs with the extension's own
//! `search_path` (`pg_catalog` first; the watch's `visible` and `url_sql` run with the watch's,
//! `super::owner`) and with the output settings fixed (`TimeZone` UTC, `DateStyle` ISO,
//! `IntervalStyle` postgres, `extra_float_digits` 1, `bytea_output` hex), so that a URL, a
//! fingerprint or a publication time never depends on the session that happens to derive it.
//! They are set for the derivation only and put back after, as a function's `SET` clause would.

/// The output settings every derivation runs under, with `search_path` (the extension's own for
/// the derivation statements, the watch's for its row query: `super::owner`).
pub fn pinned_settings() -> [(&'static str, String); 6] {
    [
        ("search_path", crate::extension::OWN_SEARCH_PATH.to_string()),
        ("TimeZone", "UTC".into()),
        ("DateStyle", "ISO, YMD".into()),
        ("IntervalStyle", "postgres".into()),
        ("extra_float_digits", "1".into()),
        ("bytea_output", "hex".into()),
    ]
}
