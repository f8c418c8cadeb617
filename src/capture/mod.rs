//! Capture: turning writes to content tables into queue requests.

pub mod fingerprint;
