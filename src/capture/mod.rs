//! Capture: from every write to a watched content table to the right queue requests.
//!
//! Write time records *which rows* a statement changed; derivation decides *what to send* from the
//! rows as they are now and from what each watch last derived from them (`indexnow_sources`).
//!
//! Its files are in the map at the top of `src/lib.rs`.

pub mod after_ddl;
pub mod before_ddl;
pub mod cache;
pub mod dropped;
pub mod partitions;
pub mod placement;
pub mod related;
pub mod transition;
pub mod trigger_function;
pub mod triggers;
pub mod watch;
