//! The settings a derivation runs under. Each derivation runs with the extension's own
//! `search_path` (`pg_catalog` first; the watch's `visible` and `url_sql` run with the watch's,
//! `super::owner`) and with the output settings fixed (`TimeZone` UTC, `DateStyle` ISO,
//! `IntervalStyle` postgres, `extra_float_digits` 1, `bytea_output` hex), so that a URL, a
//! fingerprint or a publication time never depends on the session that happens to derive it.
//! They are set for the derivation only and put back after, as a function's `SET` clause would.

use pgrx::prelude::*;
use std::ffi::CString;

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

/// Runs `f` with `settings`, and puts every setting back after it, those `f` changed included (a
/// `set_config(..., false)` in a watch's expression does not outlive it), as PostgreSQL does
/// around `REFRESH MATERIALIZED VIEW`. An ERROR inside unwinds them with the (sub)transaction it
/// aborts.
pub fn with_settings<R>(settings: &[(&str, String)], f: impl FnOnce() -> R) -> R {
    // SAFETY: a GUC nest level is opened and closed around `f` on this backend's own state.
    let level = unsafe { pg_sys::NewGUCNestLevel() };
    for (name, value) in settings {
        let (name, value) = (
            CString::new(*name).expect("a setting's name"),
            CString::new(value.as_str()).unwrap_or_else(|_| error!("indexnow: a NUL in {name}")),
        );
        // SAFETY: both strings live across the call; errors are raised as ERRORs.
        unsafe {
            pg_sys::set_config_option(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                pgrx::PgLogLevel::ERROR as i32,
                false,
            );
        }
    }
    let r = f();
    // SAFETY: closes the level opened above, undoing everything set at it.
    unsafe { pg_sys::AtEOXact_GUC(false, level) };
    r
}
