//! The IndexNow client: one POST of one batch, with the result as an [`Answer`] — a value, never
//! an error, so a network fault can never become an ERROR in the worker (behaviour 13:
//! temporary failures back off, they do not drop URLs).
//!
//! ureq with rustls (no OpenSSL to install), a User-Agent naming the extension and its version, a
//! time limit for the whole exchange, and no redirects followed (a POST that is redirected did
//! not arrive; the 3xx is an answer like any other).

use crate::request::{SubmitRequest, CONTENT_TYPE};
use crate::response::Answer;
use std::io::Read;
use std::time::Duration;

pub const USER_AGENT: &str = concat!("indexnow-postgres/", env!("CARGO_PKG_VERSION"));

/// Reads at most this much of an answer's body: only its start is kept in a note.
const BODY_LIMIT: u64 = 64 * 1024;

#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
}

impl Client {
    pub fn new(timeout: Duration) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .max_redirects(0)
            .user_agent(USER_AGENT)
            .build()
            .into();
        Client { agent }
    }

    pub fn submit(&self, endpoint: &str, request: &SubmitRequest) -> Answer {
        let sent = self
            .agent
            .post(endpoint)
            .header("Content-Type", CONTENT_TYPE)
            .send(request.to_json());
        match sent {
            Ok(mut response) => {
                let code = response.status().as_u16();
                let retry_after = response
                    .headers()
                    .get("Retry-After")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let mut body = String::new();
                let read = response
                    .body_mut()
                    .as_reader()
                    .take(BODY_LIMIT)
                    .read_to_string(&mut body);
                match read {
                    Ok(_) => Answer::Status {
                        code,
                        retry_after,
                        body,
                    },
                    // The status arrived; the body did not. The status is what classifies.
                    Err(e) => Answer::Status {
                        code,
                        retry_after,
                        body: format!("(body unreadable: {e})"),
                    },
                }
            }
            Err(e) => network_answer(e),
        }
    }
}

fn network_answer(e: ureq::Error) -> Answer {
    use ureq::Error::*;
    match e {
        Timeout(_) => Answer::Timeout,
        HostNotFound | ConnectionFailed | BadUri(_) | Tls(_) | Rustls(_) | TlsRequired => {
            Answer::NoConnection(e.to_string())
        }
        Io(ref io) if never_connected(io) => Answer::NoConnection(e.to_string()),
        other => Answer::Reset(other.to_string()),
    }
}

/// Whether an I/O error came before any connection: refused, no route, or a name that does not
/// resolve (ureq hands the resolver's error on as `Error::Io`, of a kind std does not name:
/// `failed to lookup address information: Name or service not known`).
fn never_connected(io: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        io.kind(),
        ConnectionRefused | HostUnreachable | NetworkUnreachable | AddrNotAvailable
    ) || io
        .to_string()
        .starts_with("failed to lookup address information")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    fn request() -> SubmitRequest {
        SubmitRequest {
            host: "www.example.com".into(),
            key: "abcdefgh".into(),
            key_location: None,
            url_list: vec!["https://www.example.com/a".into()],
        }
    }

    /// A one-shot server that reads the request and then does `then` with the socket.
    fn server(then: impl FnOnce(std::net::TcpStream) + Send + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = [0u8; 65536];
            let _ = std::io::Read::read(&mut stream, &mut buf);
            let _ = stream.flush();
            then(stream);
        });
        format!("http://{addr}/indexnow")
    }

    #[test]
    fn statuses_headers_and_bodies_arrive_as_values() {
        let url = server(|mut s| {
            let _ = s.write_all(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 120\r\nContent-Length: 4\r\n\r\nslow");
        });
        assert_eq!(
            Client::new(Duration::from_secs(5)).submit(&url, &request()),
            Answer::Status {
                code: 429,
                retry_after: Some("120".into()),
                body: "slow".into()
            }
        );
    }

    #[test]
    fn network_faults_are_answers_too() {
        // Nothing listens: connection refused.
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/indexnow", l.local_addr().unwrap())
        };
        assert!(matches!(
            Client::new(Duration::from_secs(5)).submit(&closed, &request()),
            Answer::NoConnection(_)
        ));
        // Reads the request, never answers: timeout.
        let silent = server(|s| {
            std::thread::sleep(Duration::from_secs(3));
            drop(s);
        });
        assert_eq!(
            Client::new(Duration::from_millis(300)).submit(&silent, &request()),
            Answer::Timeout
        );
        // Reads the request, closes without a word: reset.
        let rude = server(drop);
        assert!(matches!(
            Client::new(Duration::from_secs(5)).submit(&rude, &request()),
            Answer::Reset(_)
        ));
    }

    #[test]
    fn a_name_that_does_not_resolve_is_no_connection() {
        // `.invalid` never resolves (RFC 2606); the resolver fails before any connection.
        let answer = Client::new(Duration::from_secs(5))
            .submit("http://nonexistent.invalid/indexnow", &request());
        assert!(matches!(answer, Answer::NoConnection(_)), "{answer:?}");
    }
}
