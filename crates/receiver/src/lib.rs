//! A local IndexNow endpoint for tests and the demo.
//!
//! `POST /indexnow` is checked as the real API checks it, in this order, and refused with the
//! real API's status when it fails:
//! - the body is JSON with exactly the fields `host`, `key`, `keyLocation` (optional), `urlList` — 400;
//! - `urlList` is not empty — 400; it has at most 10,000 URLs — 422;
//! - the key is 8 to 128 characters of `a-z A-Z 0-9 -` — 422;
//! - `keyLocation`, when given, is on `host` — 422;
//! - every URL is a submittable URL on `host` — 422.
//!
//! A request that passes is answered as scripted: the next answer queued with `POST /__script`
//! (a JSON array), else the default answer (`PUT /__default`, initially 200). An answer is
//! `{"status": 429, "retry_after": "120", "body": "..."}`, `{"hang_ms": 5000}` (answer 200 after
//! that long) or `{"drop": true}` (no HTTP answer at all: the exchange breaks off, see
//! [`Reply::Drop`]). `PUT /__latency` with `{"ms": 50}` makes every answer wait that long before
//! it goes out, `{"ms": 2000, "host": "slow.example.com"}` that host's (requests are served
//! concurrently, each waiting on its own). `GET /__received` lists every request (valid or not)
//! with the answer it got; `POST /__reset` forgets requests, script, default and latencies.
//!
//! A chaos mode ([`Receiver::set_chaos`], for soak runs) answers what the script does not with
//! faults drawn at seeded rates: 429 with Retry-After, 500, a hang past the client's time limit,
//! a dropped exchange; the rest 200 or 202. The same seed draws the same sequence of answers.

use indexnow_protocol::{
    check_key, check_key_location, host_name, submittable_url, SubmitRequest, MAX_URLS_PER_REQUEST,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tiny_http::{Header, Method, Request, Response, Server};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reply {
    Status {
        status: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<String>,
        #[serde(default)]
        body: String,
    },
    Hang {
        hang_ms: u64,
    },
    /// No HTTP answer: the bytes sent back are not a status line, and nothing more comes. (tiny_http
    /// keeps a connection it serves open for the next request, so the socket itself cannot be
    /// closed from here; the client sees its exchange break off, as when a proxy drops it.)
    Drop {
        drop: bool,
    },
}

impl Default for Reply {
    fn default() -> Self {
        Reply::Status {
            status: 200,
            retry_after: None,
            body: String::new(),
        }
    }
}

/// One request as it arrived, and how it was answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Received {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<SubmitRequest>,
    /// Why the request was refused, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The HTTP status the client got: 0 for none (a dropped exchange, or a chaos hang past the
    /// client's time limit).
    pub status: u16,
    /// When the request arrived, in seconds since the Unix epoch.
    pub arrived_at: f64,
    /// The fault chaos mode answered with, if any: `throttled`, `unavailable`, `hang`, `drop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

/// Seeded faults for the submissions the script does not answer (see the module's comment).
/// Rates are per thousand submissions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chaos {
    pub seed: u64,
    /// 429, with `Retry-After: retry_after`.
    pub throttled: u32,
    pub retry_after: String,
    /// 500.
    pub unavailable: u32,
    /// No answer for `hang_ms`, longer than the client waits; then 200, which no one reads.
    pub hang: u32,
    pub hang_ms: u64,
    /// The exchange breaks off.
    pub drop: u32,
}

impl Chaos {
    /// The answer for one submission, and the fault's name if it is one.
    fn draw(&self, rng: &mut StdRng) -> (Reply, Option<&'static str>) {
        let mut roll = rng.random_range(0..1000u32);
        let mut fault = |rate: u32| {
            let hit = roll < rate;
            roll = roll.saturating_sub(rate);
            hit
        };
        if fault(self.throttled) {
            let reply = Reply::Status {
                status: 429,
                retry_after: Some(self.retry_after.clone()),
                body: "chaos: too many requests".into(),
            };
            (reply, Some("throttled"))
        } else if fault(self.unavailable) {
            let reply = Reply::Status {
                status: 500,
                retry_after: None,
                body: "chaos: internal error".into(),
            };
            (reply, Some("unavailable"))
        } else if fault(self.hang) {
            (
                Reply::Hang {
                    hang_ms: self.hang_ms,
                },
                Some("hang"),
            )
        } else if fault(self.drop) {
            (Reply::Drop { drop: true }, Some("drop"))
        } else {
            let status = if rng.random_bool(0.5) { 200 } else { 202 };
            let reply = Reply::Status {
                status,
                retry_after: None,
                body: String::new(),
            };
            (reply, None)
        }
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    default: Reply,
    chaos: Option<(Chaos, StdRng)>,
    received: Vec<Received>,
    /// Submissions that reached the receiver, answered yet or not (a hanging one counts).
    arrived: usize,
    /// How long each answer waits before it goes out (a real endpoint takes tens to hundreds of
    /// milliseconds), and per host (the request's `host`) when that host's differs.
    latency: Duration,
    host_latency: std::collections::HashMap<String, Duration>,
    /// The answer to every submission for a host, before the script and the default.
    host_reply: std::collections::HashMap<String, Reply>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: Arc<Server>,
}

/// The real API's checks; `Err((status, problem))` when the request is refused.
pub fn check(content_type: Option<&str>, body: &str) -> Result<SubmitRequest, (u16, String)> {
    if !content_type.is_some_and(|c| c.to_ascii_lowercase().starts_with("application/json")) {
        return Err((
            400,
            format!("Content-Type must be application/json, not {content_type:?}"),
        ));
    }
    let r: SubmitRequest =
        serde_json::from_str(body).map_err(|e| (400, format!("Invalid format: {e}")))?;
    if r.url_list.is_empty() {
        return Err((400, "urlList is empty".into()));
    }
    if r.url_list.len() > MAX_URLS_PER_REQUEST {
        return Err((
            422,
            format!(
                "urlList has {} URLs: at most {MAX_URLS_PER_REQUEST}",
                r.url_list.len()
            ),
        ));
    }
    check_key(&r.key).map_err(|e| (422, e.to_string()))?;
    if let Some(loc) = &r.key_location {
        check_key_location(&r.host, loc).map_err(|e| (422, e.to_string()))?;
    }
    for url in &r.url_list {
        match submittable_url(url) {
            Ok(u) if host_name(&u.host) == r.host => {}
            Ok(u) => {
                return Err((
                    422,
                    format!("{url} is on host {}, not {}", host_name(&u.host), r.host),
                ))
            }
            Err(e) => return Err((422, format!("{url}: {e}"))),
        }
    }
    Ok(r)
}

impl Receiver {
    /// Listens on `addr` (port 0: any free port) and serves on background threads.
    pub fn start(addr: &str) -> std::io::Result<Receiver> {
        let server = Server::http(addr).map_err(std::io::Error::other)?;
        let addr = server.server_addr().to_ip().expect("an IP listener");
        let receiver = Receiver {
            addr,
            state: Arc::default(),
            server: Arc::new(server),
        };
        let (server, state) = (receiver.server.clone(), receiver.state.clone());
        std::thread::spawn(move || {
            for request in server.incoming_requests() {
                let state = state.clone();
                // A thread per request: a hanging answer must not hold up the others.
                std::thread::spawn(move || handle(request, &state));
            }
        });
        Ok(receiver)
    }

    /// The submission URL, for `indexnow.endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}/indexnow", self.addr)
    }

    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.lock().unwrap().script.extend(replies);
    }

    pub fn set_default(&self, reply: Reply) {
        self.state.lock().unwrap().default = reply;
    }

    /// Every answer from now on waits `latency` before it goes out (the requests are served
    /// concurrently: each waits on its own).
    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().unwrap().latency = latency;
    }

    /// The submissions for `host` wait `latency` instead.
    pub fn set_host_latency(&self, host: &str, latency: Duration) {
        self.state
            .lock()
            .unwrap()
            .host_latency
            .insert(host.to_string(), latency);
    }

    /// Every submission for `host` is answered with `reply` (before the script and the default).
    pub fn set_host_reply(&self, host: &str, reply: Reply) {
        self.state
            .lock()
            .unwrap()
            .host_reply
            .insert(host.to_string(), reply);
    }

    /// Answers with seeded faults from now on (`None`: as scripted again).
    pub fn set_chaos(&self, chaos: Option<Chaos>) {
        self.state.lock().unwrap().chaos = chaos.map(|c| {
            let rng = StdRng::seed_from_u64(c.seed);
            (c, rng)
        });
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// How many submissions have arrived, including those not answered yet.
    pub fn arrived(&self) -> usize {
        self.state.lock().unwrap().arrived
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

fn header<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

fn text(status: u16, body: impl Into<String>) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body.into()).with_status_code(status)
}

/// The body of `PUT /__latency`.
#[derive(Deserialize)]
struct Latency {
    ms: u64,
    host: Option<String>,
}

fn handle(mut request: Request, state: &Mutex<State>) {
    let mut body = String::new();
    if request.as_reader().read_to_string(&mut body).is_err() {
        let _ = request.respond(text(400, "unreadable body"));
        return;
    }
    let method = request.method().clone();
    let path = request.url().split('?').next().unwrap_or("").to_string();
    let response = match (method, path.as_str()) {
        (Method::Post, "/indexnow") => return submission(request, &body, state),
        (Method::Post, "/__script") => match serde_json::from_str::<Vec<Reply>>(&body) {
            Ok(replies) => {
                state.lock().unwrap().script.extend(replies);
                text(200, "scripted")
            }
            Err(e) => text(400, e.to_string()),
        },
        (Method::Put, "/__default") => match serde_json::from_str::<Reply>(&body) {
            Ok(reply) => {
                state.lock().unwrap().default = reply;
                text(200, "default set")
            }
            Err(e) => text(400, e.to_string()),
        },
        (Method::Put, "/__latency") => match serde_json::from_str::<Latency>(&body) {
            Ok(Latency { ms, host }) => {
                let mut s = state.lock().unwrap();
                let latency = Duration::from_millis(ms);
                match host {
                    Some(host) => {
                        s.host_latency.insert(host, latency);
                    }
                    None => s.latency = latency,
                }
                text(200, "latency set")
            }
            Err(e) => text(400, e.to_string()),
        },
        (Method::Get, "/__received") => {
            let received = state.lock().unwrap().received.clone();
            text(200, serde_json::to_string(&received).unwrap())
        }
        (Method::Post, "/__reset") => {
            *state.lock().unwrap() = State::default();
            text(200, "reset")
        }
        (_, "/indexnow") => text(405, "use POST"),
        _ => text(404, "not found"),
    };
    let _ = request.respond(response);
}

fn submission(request: Request, body: &str, state: &Mutex<State>) {
    let arrived_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let checked = check(header(&request, "Content-Type"), body);
    let (reply, record, latency) = {
        let mut s = state.lock().unwrap();
        s.arrived += 1;
        let host = checked
            .as_ref()
            .ok()
            .map(|r| r.host.clone())
            .unwrap_or_default();
        let latency = s.host_latency.get(&host).copied().unwrap_or(s.latency);
        let for_host = s.host_reply.get(&host).cloned();
        let (reply, fault) = match &checked {
            Ok(_) if for_host.is_some() => (for_host.unwrap(), None),
            Ok(_) => match s.script.pop_front() {
                Some(reply) => (reply, None),
                None => match &mut s.chaos {
                    Some((chaos, rng)) => chaos.draw(rng),
                    None => (s.default.clone(), None),
                },
            },
            Err((status, problem)) => (
                Reply::Status {
                    status: *status,
                    retry_after: None,
                    body: problem.clone(),
                },
                None,
            ),
        };
        let status = match &reply {
            Reply::Status { status, .. } => *status,
            Reply::Hang { .. } if fault.is_some() => 0,
            Reply::Hang { .. } => 200,
            Reply::Drop { .. } => 0,
        };
        let (req, problem) = match checked {
            Ok(r) => (Some(r), None),
            Err((_, p)) => (None, Some(p)),
        };
        (
            reply,
            Received {
                request: req,
                problem,
                status,
                arrived_at,
                fault: fault.map(str::to_string),
            },
            latency,
        )
    };
    std::thread::sleep(latency);
    let response = match reply {
        Reply::Drop { .. } => {
            state.lock().unwrap().received.push(record);
            let mut raw = request.into_writer();
            let _ = raw.write_all(b"\x00\x00 connection dropped\r\n\r\n");
            let _ = raw.flush();
            return;
        }
        Reply::Hang { hang_ms } => {
            std::thread::sleep(Duration::from_millis(hang_ms));
            text(200, "")
        }
        Reply::Status {
            status,
            retry_after,
            body,
        } => {
            let mut r = text(status, body);
            if let Some(v) = retry_after {
                r = r.with_header(Header::from_bytes("Retry-After", v).unwrap());
            }
            r
        }
    };
    // Recorded after any hang and before the answer goes out: once the sender has its answer,
    // a test that reads `received` finds the request (recording after `respond` raced with a
    // test that asserted right after `indexnow_push_now()` returned).
    state.lock().unwrap().received.push(record);
    let _ = request.respond(response);
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c";

    fn body(host: &str, urls: &[String]) -> String {
        SubmitRequest {
            host: host.into(),
            key: KEY.into(),
            key_location: None,
            url_list: urls.to_vec(),
        }
        .to_json()
    }

    fn urls(host: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("https://{host}/p/{i}")).collect()
    }

    #[test]
    fn checks_as_the_real_api() {
        let ct = Some("application/json; charset=utf-8");
        assert!(check(
            ct,
            &body("www.example.com", &urls("www.example.com", 10_000))
        )
        .is_ok());
        // A site on another port: the request's host is its host name, the URLs keep the port.
        assert!(check(
            ct,
            &body("www.example.com", &urls("www.example.com:8443", 3))
        )
        .is_ok());
        let cases: Vec<(Option<&str>, String, u16, &str)> = vec![
            (Some("text/plain"), body("www.example.com", &urls("www.example.com", 1)), 400, "Content-Type"),
            (ct, "{not json".into(), 400, "Invalid format"),
            (ct, r#"{"host":"www.example.com","key":"abcdefgh","urls":["https://www.example.com/"]}"#.into(), 400, "Invalid format"),
            (ct, body("www.example.com", &[]), 400, "empty"),
            (ct, body("www.example.com", &urls("www.example.com", 10_001)), 422, "at most 10000"),
            (ct, body("www.example.com", &urls("other.example.com", 1)), 422, "not www.example.com"),
            (ct, body("www.example.com:8443", &urls("www.example.com:8443", 1)), 422, "not www.example.com:8443"),
            (ct, r#"{"host":"www.example.com","key":"bad key!","urlList":["https://www.example.com/"]}"#.into(), 422, "the key contains"),
            (ct, r#"{"host":"www.example.com","key":"abcdefgh","keyLocation":"https://cdn.example.com/k.txt","urlList":["https://www.example.com/"]}"#.into(), 422, "key_location"),
        ];
        for (ct, body, status, want) in cases {
            let (got, problem) = check(ct, &body).unwrap_err();
            assert_eq!(got, status, "{problem}");
            assert!(problem.contains(want), "{problem}");
        }
    }

    fn agent(timeout_ms: u64) -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_millis(timeout_ms)))
            .build()
            .into()
    }

    fn post(
        agent: &ureq::Agent,
        r: &Receiver,
        body: &str,
    ) -> Result<(u16, Option<String>), ureq::Error> {
        let resp = agent
            .post(&r.endpoint())
            .header("Content-Type", "application/json; charset=utf-8")
            .send(body)?;
        let retry = resp
            .headers()
            .get("Retry-After")
            .map(|v| v.to_str().unwrap().to_string());
        Ok((resp.status().as_u16(), retry))
    }

    #[test]
    fn answers_as_scripted_and_records_what_it_received() {
        let r = Receiver::start("127.0.0.1:0").unwrap();
        let a = agent(5_000);
        let ok = body("www.example.com", &urls("www.example.com", 3));
        r.script([
            Reply::Status {
                status: 429,
                retry_after: Some("120".into()),
                body: String::new(),
            },
            Reply::Status {
                status: 403,
                retry_after: None,
                body: "SiteVerificationNotCompleted".into(),
            },
        ]);
        assert_eq!(post(&a, &r, &ok).unwrap(), (429, Some("120".into())));
        assert_eq!(post(&a, &r, &ok).unwrap(), (403, None));
        assert_eq!(post(&a, &r, &ok).unwrap(), (200, None));
        r.set_default(Reply::Status {
            status: 202,
            retry_after: None,
            body: String::new(),
        });
        assert_eq!(post(&a, &r, &ok).unwrap(), (202, None));
        // A refused request is answered with the API's status, whatever the script says.
        r.script([Reply::Status {
            status: 500,
            retry_after: None,
            body: String::new(),
        }]);
        assert_eq!(
            post(
                &a,
                &r,
                &body("www.example.com", &urls("evil.example.com", 1))
            )
            .unwrap()
            .0,
            422
        );
        assert_eq!(post(&a, &r, &ok).unwrap().0, 500);
        let got = r.received();
        assert_eq!(
            got.iter().map(|g| g.status).collect::<Vec<_>>(),
            [429, 403, 200, 202, 422, 500]
        );
        assert_eq!(got[0].request.as_ref().unwrap().url_list.len(), 3);
        assert!(got[4]
            .problem
            .as_ref()
            .unwrap()
            .contains("not www.example.com"));
    }

    #[test]
    fn a_host_can_have_its_own_answer_and_latency_and_slow_answers_overlap() {
        let r = Receiver::start("127.0.0.1:0").unwrap();
        // The slow answers take long enough that a fast answer held behind one of them could not
        // be mistaken for a slow machine's.
        r.set_latency(Duration::from_millis(2_000));
        r.set_host_latency("fast.example.com", Duration::ZERO);
        r.set_host_reply(
            "fast.example.com",
            Reply::Status {
                status: 429,
                retry_after: Some("60".into()),
                body: String::new(),
            },
        );
        let started = std::time::Instant::now();
        let slow: Vec<_> = (0..4)
            .map(|_| {
                let (endpoint, ok) = (
                    r.endpoint(),
                    body("www.example.com", &urls("www.example.com", 1)),
                );
                std::thread::spawn(move || {
                    agent(5_000)
                        .post(&endpoint)
                        .header("Content-Type", "application/json")
                        .send(&ok)
                        .map(|r| r.status().as_u16())
                        .unwrap()
                })
            })
            .collect();
        // (The slow connections settle on their threads first: tiny_http's connection pool can
        // queue a connection that arrives while it still counts a thread as idle behind a busy
        // one, which held the fast answer for a slow one's time now and then.)
        std::thread::sleep(Duration::from_millis(300));
        let fast_started = std::time::Instant::now();
        let fast = post(
            &agent(5_000),
            &r,
            &body("fast.example.com", &urls("fast.example.com", 1)),
        )
        .unwrap();
        assert_eq!(fast, (429, Some("60".into())));
        assert!(
            fast_started.elapsed() < Duration::from_millis(1_000),
            "the fast host waits for no one: {:?}",
            fast_started.elapsed()
        );
        for s in slow {
            assert_eq!(s.join().unwrap(), 200);
        }
        // Four answers of 2 s each, served at once: not one after another (8 s).
        assert!(
            started.elapsed() < Duration::from_millis(6_000),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(r.received().len(), 5);
    }

    #[test]
    fn a_hanging_answer_times_the_client_out_and_holds_up_no_one_else() {
        let r = Receiver::start("127.0.0.1:0").unwrap();
        r.script([Reply::Hang { hang_ms: 3_000 }]);
        let ok = body("www.example.com", &urls("www.example.com", 1));
        let hung = {
            let endpoint = r.endpoint();
            let ok = ok.clone();
            std::thread::spawn(move || {
                agent(500)
                    .post(&endpoint)
                    .header("Content-Type", "application/json")
                    .send(&ok)
                    .map(|r| r.status().as_u16())
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        let started = std::time::Instant::now();
        assert_eq!(post(&agent(5_000), &r, &ok).unwrap().0, 200);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(hung.join().unwrap(), Err(ureq::Error::Timeout(_))));
    }

    #[test]
    fn a_dropped_exchange_gives_the_client_no_answer_at_once() {
        let r = Receiver::start("127.0.0.1:0").unwrap();
        r.script([Reply::Drop { drop: true }]);
        let ok = body("www.example.com", &urls("www.example.com", 1));
        let started = std::time::Instant::now();
        let got = post(&agent(5_000), &r, &ok);
        assert!(got.is_err(), "{got:?}");
        assert!(!matches!(got, Err(ureq::Error::Timeout(_))), "{got:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(r.received()[0].status, 0);
        // the next exchange is answered as usual
        assert_eq!(post(&agent(5_000), &r, &ok).unwrap().0, 200);
    }

    #[test]
    fn control_endpoints_speak_json() {
        let r = Receiver::start("127.0.0.1:0").unwrap();
        let a = agent(5_000);
        let base = format!("http://{}", r.addr);
        let s = a
            .post(&format!("{base}/__script"))
            .send(r#"[{"status": 422, "body": "no"}, {"hang_ms": 10}]"#)
            .unwrap();
        assert_eq!(s.status().as_u16(), 200);
        let s = a
            .put(&format!("{base}/__default"))
            .send(r#"{"status": 202}"#)
            .unwrap();
        assert_eq!(s.status().as_u16(), 200);
        let ok = body("www.example.com", &urls("www.example.com", 1));
        assert_eq!(post(&a, &r, &ok).unwrap().0, 422);
        assert_eq!(post(&a, &r, &ok).unwrap().0, 200);
        assert_eq!(post(&a, &r, &ok).unwrap().0, 202);
        let mut listed = a.get(&format!("{base}/__received")).call().unwrap();
        let listed: Vec<Received> =
            serde_json::from_str(&listed.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(listed.len(), 3);
        let s = a
            .put(&format!("{base}/__latency"))
            .send(r#"{"ms": 300, "host": "www.example.com"}"#)
            .unwrap();
        assert_eq!(s.status().as_u16(), 200);
        let started = std::time::Instant::now();
        assert_eq!(post(&a, &r, &ok).unwrap().0, 202);
        assert!(started.elapsed() >= Duration::from_millis(300));
        a.post(&format!("{base}/__reset")).send("").unwrap();
        assert!(r.received().is_empty());
        assert_eq!(
            a.get(&format!("{base}/indexnow"))
                .call()
                .unwrap()
                .status()
                .as_u16(),
            405
        );
    }

    #[test]
    fn chaos_draws_the_same_faults_for_the_same_seed_at_about_their_rates() {
        let chaos = Chaos {
            seed: 7,
            throttled: 100,
            retry_after: "1".into(),
            unavailable: 100,
            hang: 50,
            hang_ms: 10,
            drop: 50,
        };
        let draws = |chaos: &Chaos| {
            let mut rng = StdRng::seed_from_u64(chaos.seed);
            (0..10_000)
                .map(|_| chaos.draw(&mut rng).1)
                .collect::<Vec<_>>()
        };
        let first = draws(&chaos);
        assert_eq!(first, draws(&chaos));
        let share = |kind: &str| first.iter().filter(|f| **f == Some(kind)).count();
        for (kind, expected) in [
            ("throttled", 1000),
            ("unavailable", 1000),
            ("hang", 500),
            ("drop", 500),
        ] {
            let n = share(kind);
            assert!(n.abs_diff(expected) < expected / 5, "{kind}: {n}");
        }
        assert!(first.iter().filter(|f| f.is_none()).count() > 6_000);
        let other = Chaos { seed: 8, ..chaos };
        assert_ne!(first, draws(&other));
    }
}
