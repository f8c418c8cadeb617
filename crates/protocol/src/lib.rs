//! The rules of the IndexNow protocol, as plain Rust with no Postgres in sight.
//!
//! Both the extension (which must refuse what the real API would refuse, before it is queued) and
//! the local test receiver (which must refuse what the real API refuses) use these, so a rule of
//! the protocol is written once.
//!
//! - [`submittable`]: which URLs may be submitted at all, and their normal form.
//! - [`key`]: the key format and where a key file may live.
//! - [`request`]: the body of a submission.
//! - [`response`]: what an answer means: accepted, back off (all or one host), or refused.
//! - [`client`]: one POST to the endpoint, its result as an [`Answer`] value (never an error).

pub mod client;
pub mod key;
pub mod request;
pub mod response;
pub mod submittable;

pub use key::{check_key, check_key_location, KeyProblem};
pub use request::SubmitRequest;
pub use response::{classify, key_state, Answer, Backoffs, KeyState, Outcome};
pub use submittable::{host_name, normalise_host, submittable_url, SubmittableUrl, UrlProblem};

/// The protocol's limit on URLs in one request.
pub const MAX_URLS_PER_REQUEST: usize = 10_000;
