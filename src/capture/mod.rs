//! Capture: turning every write to a watched content table into the right queue requests.
//!
//! - `watch`       indexnow_watch / unwatch / reconcile: arguments checked, triggers installed
//! - `plan`        the SQL each trigger event runs (the capture rules are stated there)
//! - `template`    URL templates and their percent-encoding
//! - `fingerprint` indexnow_fingerprint(): the md5 of a row's public columns
//! - `gate`        indexnow_capture(), the trigger function: skips the watches an UPDATE leaves
//!   unchanged, hands the rest to the runner
//! - `runner`      runs each watch's statement: its search_path, a subtransaction each (a failure is
//!   a WARNING), plans kept for small events

pub mod fingerprint;
pub mod gate;
pub mod plan;
mod runner;
pub mod template;
pub mod watch;
