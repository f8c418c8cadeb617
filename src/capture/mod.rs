//! Capture: turning every write to a watched content table into the right queue requests.
//!
//! - `watch`       indexnow_watch / unwatch / reconcile: arguments checked, triggers installed
//! - `plan`        the SQL each trigger event runs (the capture rules are stated there)
//! - `template`    URL templates and their percent-encoding
//! - `fingerprint` indexnow_fingerprint(): the md5 of a row's public columns
//! - sql/capture.sql  the trigger function that runs the plans

pub mod fingerprint;
pub mod plan;
pub mod template;
pub mod watch;
