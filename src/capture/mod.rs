//! Capture: from every write to a watched content table to the right queue requests.
//!
//! Write time records *which rows* a statement changed; derivation decides *what to send* from the
//! rows as they are now and from what each watch last derived from them (`indexnow_sources`).
//!
//! - `watch`       indexnow_watch / unwatch / reconcile / derive: arguments checked, triggers
//!   installed, watches repaired and reconciled
//! - `statements`  the SQL a watch runs (the derivation rules are stated there) and the change set
//!   a trigger records
//! - `derive`      runs derivations: pinned settings, a failing row skipped alone, change sets
//!   derived after commit
//! - `gate`        indexnow_capture(), the trigger function: skips the watches an UPDATE leaves
//!   unchanged, derives a small event at once, records the others
//! - `owner`       a watch's own SQL evaluated with the rights of the role that made it
//! - `related`     related tables: from a written parent row to the watched rows that read it
//! - `partitions`  partitions and inheritance children of a watched table
//! - `triggers`    the capture triggers: installed, dropped when no watch needs them
//! - `template`    URL templates and their percent-encoding
//! - `fingerprint` indexnow_fingerprint(): a key-order-independent md5 of a jsonb row, for custom
//!   triggers (watches fingerprint in their generated SQL, see `statements`)

pub mod derive;
pub mod fingerprint;
pub mod gate;
pub mod owner;
pub mod partitions;
pub mod related;
pub mod statements;
pub mod template;
pub mod triggers;
pub mod watch;
