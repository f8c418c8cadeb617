//! Sending, end to end: a real cluster with the library preloaded (the launcher and the
//! per-database workers), and the local IndexNow receiver answering as scripted.

use indexnow_e2e::{
    count, sending_conf, sent_urls, sigkill, wait_until, wait_until_settled, worker_state, Cluster,
    Options,
};
use indexnow_receiver::{Received, Receiver, Reply};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const KEY: &str = "abcdefgh12";
const HOST: &str = "www.example.com";

fn receiver() -> Receiver {
    Receiver::start("127.0.0.1:0").unwrap()
}

fn cluster(receiver: &Receiver, extra: &[&str]) -> Cluster {
    Cluster::start(Options {
        preload: true,
        conf: sending_conf(&receiver.endpoint(), extra),
    })
}

fn ok() -> Reply {
    Reply::Status {
        status: 200,
        retry_after: None,
        body: String::new(),
    }
}

fn status(code: u16, retry_after: Option<&str>, body: &str) -> Reply {
    Reply::Status {
        status: code,
        retry_after: retry_after.map(str::to_string),
        body: body.to_string(),
    }
}

/// Adds the test host with its key and queues `n` URLs under `path` of it, in one transaction.
fn queue_for_host(db: &mut postgres::Client, path: &str, n: i32) {
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         SELECT indexnow_queue('https://{HOST}{path}' || g) FROM generate_series(1, {n}) g;"
    ))
    .unwrap();
}

/// Every URL the receiver accepted (answered 2xx), with how many times.
fn accepted_urls(received: &[Received]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in received.iter().filter(|r| (200..300).contains(&r.status)) {
        for url in &r.request.as_ref().unwrap().url_list {
            *seen.entry(url.clone()).or_insert(0) += 1;
        }
    }
    seen
}

const SECONDS: fn(u64) -> Duration = Duration::from_secs;

#[test]
fn twenty_five_thousand_due_urls_arrive_as_three_posts_with_the_right_key() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.execute(
        "SELECT indexnow_add_host($1, $2, $3)",
        &[&HOST, &KEY, &format!("https://{HOST}/{KEY}.txt")],
    )
    .unwrap();
    db.batch_execute(
        "SELECT indexnow_queue('https://www.example.com/p/' || g) FROM generate_series(1, 25000) g",
    )
    .unwrap();
    wait_until("25,000 URLs arrive", SECONDS(60), || {
        accepted_urls(&receiver.received()).len() == 25_000
    });
    let received = receiver.received();
    let mut sizes: Vec<usize> = received
        .iter()
        .map(|r| r.request.as_ref().unwrap().url_list.len())
        .collect();
    sizes.sort();
    assert_eq!(sizes, vec![5_000, 10_000, 10_000]);
    for r in &received {
        let req = r.request.as_ref().unwrap();
        assert_eq!((req.host.as_str(), req.key.as_str()), (HOST, KEY));
        assert_eq!(
            req.key_location.as_deref(),
            Some("https://www.example.com/abcdefgh12.txt")
        );
    }
    assert!(accepted_urls(&received).values().all(|n| *n == 1));
    // The worker records a push just after its answer arrives.
    wait_until_settled(&mut db, "the pushes are recorded", SECONDS(10));
    let recorded = db
        .query_one(
            "SELECT count(*), sum(url_count)::bigint, min(status), max(status) FROM indexnow_pushes",
            &[],
        )
        .unwrap();
    assert_eq!(recorded.get::<_, i64>(0), 3);
    assert_eq!(recorded.get::<_, i64>(1), 25_000);
    assert_eq!(
        (recorded.get::<_, i32>(2), recorded.get::<_, i32>(3)),
        (200, 200)
    );
    let pending = count(
        &mut db,
        "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq OR last_pushed_at IS NULL",
    );
    assert_eq!(pending, 0);
}

#[test]
fn two_hosts_get_separate_posts_and_a_host_without_a_key_is_held() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "SELECT indexnow_add_host('a.example.com', 'aaaaaaaa11'); \
         SELECT indexnow_add_host('b.example.com', 'bbbbbbbb22'); \
         SELECT indexnow_queue('https://' || h || '/page/' || g) \
           FROM unnest('{a.example.com,b.example.com,keyless.example.com}'::text[]) h, \
                generate_series(1, 3) g;",
    )
    .unwrap();
    wait_until("both hosts are sent", SECONDS(20), || {
        receiver.received().len() >= 2
    });
    std::thread::sleep(Duration::from_secs(1)); // five more passes: the keyless host stays held
    let received = receiver.received();
    assert_eq!(received.len(), 2, "{received:?}");
    for r in &received {
        let req = r.request.as_ref().unwrap();
        let want_key = if req.host == "a.example.com" {
            "aaaaaaaa11"
        } else {
            "bbbbbbbb22"
        };
        assert_eq!(req.key, want_key, "{req:?}");
        assert_eq!(req.url_list.len(), 3);
        assert!(req
            .url_list
            .iter()
            .all(|u| u.starts_with(&format!("https://{}/", req.host))));
    }
    let held = db
        .query_one(
            "SELECT has_key, pending, due_now FROM indexnow_status() WHERE host = 'keyless.example.com'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            held.get::<_, bool>(0),
            held.get::<_, i64>(1),
            held.get::<_, i64>(2)
        ),
        (false, 3, 3)
    );
    // Held, not dropped: once the host has a key, its URLs go.
    db.batch_execute("SELECT indexnow_add_host('keyless.example.com', 'cccccccc33')")
        .unwrap();
    wait_until("the held host is sent", SECONDS(20), || {
        receiver.received().len() == 3
    });
    let last = receiver.received().pop().unwrap().request.unwrap();
    assert_eq!(
        (last.host.as_str(), last.key.as_str()),
        ("keyless.example.com", "cccccccc33")
    );
}

/// What becomes of a case's URL.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ends {
    /// Settled and pushed.
    Pushed,
    /// Settled as failed, with the answer's status and note.
    Failed,
    /// Still due (a pause holds it).
    Held,
}

/// The scope a case's answer pauses.
#[derive(Clone, Copy)]
enum Paused {
    /// Every host (`*`), for this many seconds.
    All(f64),
    /// The case's host alone, for this many seconds.
    Host(f64),
}

/// One answer class: what the endpoint says, and what must follow.
struct Case {
    what: &'static str,
    reply: Reply,
    /// Settings of the calling session for this case.
    session: &'static str,
    ends: Ends,
    /// The status `indexnow_pushes` records (0: no answer).
    pushes_status: i32,
    note_has: &'static str,
    pause: Option<Paused>,
}

fn case(
    what: &'static str,
    reply: Reply,
    ends: Ends,
    pushes_status: i32,
    note_has: &'static str,
    pause: Option<Paused>,
) -> Case {
    Case {
        what,
        reply,
        session: "",
        ends,
        pushes_status,
        note_has,
        pause,
    }
}

#[test]
fn each_answer_class_has_its_effect_on_the_queue_the_history_and_the_status() {
    use Ends::*;
    use Paused::*;
    let receiver = receiver();
    // The worker is off: the cases run through indexnow_push_now(), one at a time.
    let cluster = cluster(&receiver, &["indexnow.enabled = off"]);
    let mut db = cluster.create_db_with_extension("site");
    let verification = r#"{"code":"SiteVerificationNotCompleted"}"#;
    #[rustfmt::skip]
    let cases = vec![
        case("200", ok(), Pushed, 200, "", None),
        case("202", status(202, None, ""), Pushed, 202, "", None),
        case("400", status(400, None, "Invalid format"), Failed, 400, "Invalid format", None),
        case("403", status(403, None, "key not valid"), Failed, 403, "key not valid", None),
        case("422", status(422, None, "URLs do not belong to the host"), Failed, 422, "do not belong", None),
        case("403 SiteVerificationNotCompleted", status(403, None, verification), Held, 403, "SiteVerificationNotCompleted", Some(Host(900.0))),
        // Answers about the endpoint, not the URLs: kept, and all sending paused, loudly.
        case("404", status(404, None, "Not Found"), Held, 404, "check indexnow.endpoint", Some(All(900.0))),
        case("405", status(405, None, ""), Held, 405, "check indexnow.endpoint", Some(All(900.0))),
        case("401", status(401, None, ""), Held, 401, "no authentication", Some(All(900.0))),
        case("410", status(410, None, "gone"), Held, 410, "not the protocol's", Some(All(900.0))),
        case("400 a proxy's page", status(400, None, "<html>blocked</html>"), Held, 400, "not the protocol's", Some(All(900.0))),
        case("403 a firewall's page", status(403, None, "<!DOCTYPE html><p>denied</p>"), Held, 403, "not the protocol's", Some(All(900.0))),
        case("408", status(408, None, ""), Held, 408, "408", Some(All(900.0))),
        // (a request of one URL too large says the endpoint's body limit is wrong, not the URL)
        case("413 of one URL", status(413, None, ""), Held, 413, "body limit", Some(All(900.0))),
        // 429: never less than the floor; each 429 in a row doubles it.
        case("429 Retry-After 0", status(429, Some("0"), ""), Held, 429, "429", Some(All(5.0))),
        case("429 with Retry-After", status(429, Some("120"), ""), Held, 429, "429", Some(All(120.0))),
        case("429 without Retry-After", status(429, None, ""), Held, 429, "429", Some(All(3600.0))),
        case("429 Retry-After 0, the fourth in a row", status(429, Some("0"), ""), Held, 429, "429", Some(All(40.0))),
        case("500", status(500, None, "oops"), Held, 500, "oops", Some(All(900.0))),
        Case {
            session: "SET indexnow.http_timeout = '500ms'",
            ..case("timeout", Reply::Hang { hang_ms: 3_000 }, Held, 0, "timeout", Some(All(900.0)))
        },
        Case {
            session: "SET indexnow.endpoint = 'http://127.0.0.1:9/indexnow'",
            ..case("refused connection", ok(), Held, 0, "no connection", Some(All(900.0)))
        },
    ];
    for (i, case) in cases.iter().enumerate() {
        let what = case.what;
        let host = format!("case{i}.example.com");
        let url = format!("https://{host}/page");
        db.batch_execute(&format!(
            "RESET ALL; SET indexnow.enabled = on; {}; DELETE FROM indexnow_backoff; \
             UPDATE indexnow_hosts SET enabled = false; \
             SELECT indexnow_add_host('{host}', 'casekey{i}x'); SELECT indexnow_queue('{url}');",
            case.session
        ))
        .unwrap();
        receiver.script([case.reply.clone()]);
        let sent = db
            .query(
                "SELECT host, requests, url_count FROM indexnow_push_now()",
                &[],
            )
            .unwrap();
        assert_eq!(sent.len(), 1, "{what}: one host sent");
        assert_eq!(sent[0].get::<_, String>(0), host, "{what}");
        assert_eq!(sent[0].get::<_, i32>(1), 1, "{what}: one request");

        let row = db
            .query_one(
                "SELECT request_seq > settled_seq, last_pushed_at IS NOT NULL, failed_status, \
                        failed_note, claimed_until IS NULL, tried_at IS NOT NULL \
                   FROM indexnow_urls WHERE url = $1",
                &[&url],
            )
            .unwrap();
        let (pending, pushed) = (row.get::<_, bool>(0), row.get::<_, bool>(1));
        let failed_status: Option<i32> = row.get(2);
        match case.ends {
            Pushed => assert!(!pending && pushed && failed_status.is_none(), "{what}"),
            Failed => {
                assert!(!pending && !pushed, "{what}: settled, not pushed");
                assert_eq!(failed_status, Some(case.pushes_status), "{what}");
                let note: String = row.get(3);
                assert!(note.contains(case.note_has), "{what}: {note}");
            }
            // The request was made and may have arrived (a timeout): a later removal is owed.
            Held => assert!(
                pending && !pushed && failed_status.is_none() && row.get::<_, bool>(5),
                "{what}: still due, noted as tried"
            ),
        }
        assert!(row.get::<_, bool>(4), "{what}: no lease left behind");

        let push = db
            .query_one(
                "SELECT status, coalesce(note, ''), url_count FROM indexnow_pushes \
                  WHERE host = $1 ORDER BY id DESC LIMIT 1",
                &[&host],
            )
            .unwrap();
        assert_eq!(push.get::<_, i32>(0), case.pushes_status, "{what}");
        assert!(push.get::<_, String>(1).contains(case.note_has), "{what}");
        assert_eq!(push.get::<_, i32>(2), 1, "{what}");

        let pauses = db
            .query(
                "SELECT scope, extract(epoch FROM until - now())::float8 FROM indexnow_backoff",
                &[],
            )
            .unwrap();
        match case.pause {
            None => assert!(pauses.is_empty(), "{what}: no pause"),
            Some(Host(secs) | All(secs)) => {
                assert_eq!(pauses.len(), 1, "{what}");
                let want_scope = match case.pause {
                    Some(Host(_)) => host.as_str(),
                    _ => "*",
                };
                assert_eq!(pauses[0].get::<_, String>(0), want_scope, "{what}");
                let left: f64 = pauses[0].get(1);
                let margin = if secs < 60.0 { 2.0 } else { 10.0 };
                assert!(
                    left > secs - margin && left <= secs + 1.0,
                    "{what}: {left} s"
                );
            }
        }

        let status = db
            .query_one(
                "SELECT pending, failed, backoff_until IS NOT NULL, last_status \
                   FROM indexnow_status() WHERE host = $1",
                &[&host],
            )
            .unwrap();
        let want = match case.ends {
            Pushed => (0, 0),
            Failed => (0, 1),
            Held => (1, 0),
        };
        assert_eq!(
            (status.get::<_, i64>(0), status.get::<_, i64>(1)),
            want,
            "{what}"
        );
        assert_eq!(status.get::<_, bool>(2), case.pause.is_some(), "{what}");
        assert_eq!(
            status.get::<_, Option<i32>>(3),
            Some(case.pushes_status),
            "{what}"
        );
    }
    // Paused (by the last case): a further pass sends nothing, the URLs stay due.
    let last = format!("https://case{}.example.com/later", cases.len() - 1);
    db.execute("SELECT indexnow_queue($1)", &[&last]).unwrap();
    let before = receiver.arrived();
    let sent = count(&mut db, "SELECT count(*) FROM indexnow_push_now()");
    assert_eq!(
        (sent, receiver.arrived()),
        (0, before),
        "paused: nothing sent"
    );
}

/// A 413 keeps the URLs and splits the batch: the host's next requests carry half as many, and
/// grow back as the endpoint takes them. A burst of 413s down to one URL pauses (the URL kept),
/// and after the pause the requests are full again.
#[test]
fn a_request_too_large_is_sent_again_in_halves() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.enabled = off"]);
    let mut db = cluster.create_db_with_extension("site");
    // (a pass starts no round after naptime, and each step below is one pass of several rounds:
    // on a loaded machine the rounds took longer than the cluster's naptime)
    db.batch_execute("SET indexnow.enabled = on; SET indexnow.naptime = '60s'")
        .unwrap();
    queue_for_host(&mut db, "/big/", 4);
    receiver.script([status(413, None, "Payload Too Large")]); // then 200s
    let sent = count(&mut db, "SELECT sum(requests) FROM indexnow_push_now()");
    let sizes: Vec<(u16, usize)> = receiver
        .received()
        .iter()
        .map(|r| (r.status, r.request.as_ref().unwrap().url_list.len()))
        .collect();
    assert_eq!(sizes, [(413, 4), (200, 2), (200, 2)]);
    assert_eq!(sent, 3);
    assert_eq!(accepted_urls(&receiver.received()).len(), 4);
    assert_eq!(
        count(&mut db, "SELECT count(*) FROM indexnow_backoff"),
        0,
        "a 413 pauses nothing"
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_pushes WHERE status = 413 \
              AND note LIKE '%requests of at most 2 URLs%'"
        ),
        1
    );
    let sizes_from = |from: usize| -> Vec<(u16, usize)> {
        receiver.received()[from..]
            .iter()
            .map(|r| (r.status, r.request.as_ref().unwrap().url_list.len()))
            .collect()
    };
    // Eight requests taken at the cap double it.
    queue_for_host(&mut db, "/more/", 16);
    db.batch_execute("SELECT indexnow_push_now()").unwrap();
    assert_eq!(
        sizes_from(3),
        [
            (200, 2),
            (200, 2),
            (200, 2),
            (200, 2),
            (200, 2),
            (200, 2),
            (200, 4)
        ]
    );
    // A burst down to one URL: paused, loudly, the URL kept; then full requests again.
    queue_for_host(&mut db, "/burst/", 5);
    let payload = || status(413, None, "Payload Too Large");
    receiver.script([payload(), payload(), payload()]);
    db.batch_execute("SELECT indexnow_push_now()").unwrap();
    assert_eq!(sizes_from(10), [(413, 4), (413, 2), (413, 1)]);
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq \
              AND failed_status IS NULL"
        ),
        5,
        "every URL kept"
    );
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_backoff"), 1);
    db.batch_execute("DELETE FROM indexnow_backoff").unwrap();
    db.batch_execute("SELECT indexnow_push_now()").unwrap();
    assert_eq!(sizes_from(13), [(200, 5)]);
}

/// An endpoint, proxy or firewall that echoes the request puts the key nowhere: not in the
/// history, the failed URLs' notes, the key's state or the server log.
#[test]
fn a_key_echoed_in_an_answer_is_kept_nowhere() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.enabled = off"]);
    let mut db = cluster.create_db_with_extension("site");
    let key = "e5c8a2b7d9f14c3a";
    let location = "https://www.example.com/site-verification-e5c8.txt";
    db.batch_execute(&format!(
        "SET indexnow.enabled = on; \
         SELECT indexnow_add_host('{HOST}', '{key}', '{location}'); \
         SELECT indexnow_queue('https://{HOST}/a'), indexnow_queue('https://{HOST}/b');"
    ))
    .unwrap();
    let echo = format!(
        r#"key not valid: {{"host":"{HOST}","key":"{}","keyLocation":"{location}"}}"#,
        key.to_ascii_uppercase()
    );
    receiver.script([status(403, None, &echo)]);
    count(&mut db, "SELECT count(*) FROM indexnow_push_now()");
    let kept = db
        .query_one(
            "SELECT (SELECT string_agg(note, ' ') FROM indexnow_pushes), \
                    (SELECT string_agg(failed_note, ' ') FROM indexnow_urls), \
                    (SELECT key_state || ': ' || key_state_note FROM indexnow_status() \
                      WHERE host = $1)",
            &[&HOST],
        )
        .unwrap();
    let log = cluster.log();
    for (what, text) in [
        ("indexnow_pushes.note", kept.get::<_, String>(0)),
        ("indexnow_urls.failed_note", kept.get::<_, String>(1)),
        ("indexnow_status().key_state_note", kept.get::<_, String>(2)),
        ("the server log", log),
    ] {
        let lower = text.to_ascii_lowercase();
        assert!(!lower.contains(key), "{what} has the key: {text}");
        assert!(
            !lower.contains("site-verification-e5c8"),
            "{what} has the key file: {text}"
        );
    }
    assert!(kept.get::<_, String>(0).contains("[redacted]"));
    assert!(kept.get::<_, String>(2).starts_with("rejected: "));
    assert!(cluster
        .log()
        .contains(r#"403: key not valid: {"host":"www.example.com","key":"[redacted]""#));
}

/// A watched content table for the tests that save pages while a push is in flight.
fn pages(db: &mut postgres::Client) {
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, body text); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}');"
    ))
    .unwrap();
}

/// Once the (hanging) push has reached the receiver, saves page 1 and asserts that the save did
/// not wait for the push.
fn save_page_while_the_push_hangs(db: &mut postgres::Client, receiver: &Receiver) {
    wait_until("the push is in flight", SECONDS(20), || {
        receiver.arrived() == 1
    });
    let started = Instant::now();
    db.batch_execute("UPDATE pages SET body = 'second' WHERE id = 1")
        .unwrap();
    let took = started.elapsed();
    assert!(took < SECONDS(1), "the save waited {took:?} for the push");
}

#[test]
fn a_save_while_the_endpoint_hangs_is_fast_and_the_url_stays_due() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.http_timeout = '10s'"]);
    let mut db = cluster.create_db_with_extension("site");
    pages(&mut db);
    receiver.script([Reply::Hang { hang_ms: 3_000 }]);
    db.batch_execute("INSERT INTO pages VALUES (1, 'news', 'first')")
        .unwrap();
    save_page_while_the_push_hangs(&mut db, &receiver);
    assert_eq!(
        receiver.received().len(),
        0,
        "the first push is still in flight"
    );
    // The change made during the push is sent after it: the push settled only what it carried.
    wait_until("the URL is sent again", SECONDS(20), || {
        receiver.received().len() == 2
    });
    let urls = accepted_urls(&receiver.received());
    assert_eq!(urls.get("https://www.example.com/news"), Some(&2));
    // (recorded just after the answer arrives)
    wait_until("the second push settles the URL", SECONDS(10), || {
        let row = db
            .query_one(
                "SELECT request_seq = settled_seq, pushed_changed_at = changed_at \
                   FROM indexnow_urls",
                &[],
            )
            .unwrap();
        row.get::<_, bool>(0) && row.get::<_, bool>(1)
    });
}

/// A watched `pages` table whose first push (of the rows `insert` adds) hangs `hang_ms` at the
/// receiver; returns once that push is in flight. The request timeout outlasts the hang.
fn push_in_flight(hang_ms: u64, insert: &str) -> (Receiver, Cluster, postgres::Client) {
    let receiver = receiver();
    let timeout = format!("indexnow.http_timeout = '{}ms'", hang_ms + 10_000);
    let cluster = cluster(&receiver, &[timeout.as_str()]);
    let mut db = cluster.create_db_with_extension("site");
    pages(&mut db);
    receiver.script([Reply::Hang { hang_ms }]);
    db.batch_execute(insert).unwrap();
    wait_until("the push is in flight", SECONDS(20), || {
        receiver.arrived() == 1
    });
    (receiver, cluster, db)
}

/// The worker settles its push while a save of one of its URLs is still in progress: the settle
/// waits for the save, then must leave the saved row pending (behaviour 14). (PostgreSQL
/// re-checks the waiting UPDATE's conditions, its `ctid` condition included, on the saved row.)
#[test]
fn a_save_that_commits_while_the_push_is_settled_stays_due() {
    let (receiver, cluster, mut db) =
        push_in_flight(2_000, "INSERT INTO pages VALUES (1, 'news', 'first')");
    // (a save that derives in its statement, so that it holds the URL's queue row until it
    // commits; recorded, as by default, it holds nothing the settle waits for)
    let mut saver = cluster.connect("site");
    saver
        .batch_execute(
            "SET indexnow.derive_at_write = 100; \
             BEGIN; UPDATE pages SET body = 'second' WHERE id = 1",
        )
        .unwrap();
    wait_until(
        "the worker's settle waits for the save",
        SECONDS(20),
        || {
            db.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
            count(
                &mut db,
                "SELECT count(*) FROM pg_stat_activity \
              WHERE backend_type = 'indexnow worker' AND wait_event = 'transactionid'",
            ) == 1
        },
    );
    saver.batch_execute("COMMIT").unwrap();
    wait_until("the URL is sent again", SECONDS(20), || {
        receiver.received().len() == 2
    });
    assert_eq!(
        accepted_urls(&receiver.received()).get("https://www.example.com/news"),
        Some(&2)
    );
}

/// The worker finds the rows it leased by their `ctid`. While its push is in flight, saves move
/// the rows and VACUUM frees the slots of the leased versions, which later saved versions take:
/// a `ctid` alone would then name a row the push did not carry. The saves must stay due and be
/// sent again. (A settle that trusted the row found by `ctid` and the claim's `xmin`, without
/// joining in the claimed values, failed this test.)
#[test]
fn a_leased_row_slot_taken_by_another_row_during_the_push_is_not_settled() {
    let (receiver, _cluster, mut db) = push_in_flight(
        8_000,
        "INSERT INTO pages VALUES (1, 'one', 'first'), (2, 'two', 'first')",
    );
    let leased: Vec<String> = db
        .query("SELECT ctid::text FROM indexnow_urls ORDER BY url", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Save both pages, vacuuming in between, until a saved row sits in a leased version's slot.
    let mut taken = false;
    for round in 0..8 {
        db.batch_execute(&format!("UPDATE pages SET body = 'save {round}'"))
            .unwrap();
        db.batch_execute("VACUUM indexnow_urls").unwrap();
        taken = db
            .query("SELECT ctid::text FROM indexnow_urls", &[])
            .unwrap()
            .iter()
            .any(|r| leased.contains(&r.get::<_, String>(0)));
        if taken {
            break;
        }
    }
    assert!(
        taken,
        "the test's premise: a saved row took the slot of a leased version"
    );
    assert_eq!(receiver.received().len(), 0, "the push is still in flight");
    wait_until("both URLs are sent again", SECONDS(30), || {
        receiver.received().len() == 2
    });
    let urls = accepted_urls(&receiver.received());
    assert_eq!(urls.get("https://www.example.com/one"), Some(&2));
    assert_eq!(urls.get("https://www.example.com/two"), Some(&2));
}

/// The pids of the backends of `backend_type` (connected to `datname`, if given).
fn pids_of(db: &mut postgres::Client, backend_type: &str, datname: Option<&str>) -> Vec<i32> {
    db.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    db.query(
        "SELECT pid FROM pg_stat_activity \
          WHERE backend_type = $1 AND ($2::text IS NULL OR datname = $2)",
        &[&backend_type, &datname],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The one worker of `datname`, if any.
fn worker_pid(db: &mut postgres::Client, datname: &str) -> Option<i32> {
    let pids = worker_pids(db, datname);
    assert!(pids.len() <= 1, "one worker expected: {pids:?}");
    pids.first().copied()
}

fn worker_pids(db: &mut postgres::Client, datname: &str) -> Vec<i32> {
    pids_of(db, "indexnow worker", Some(datname))
}

#[test]
fn sigkill_mid_push_loses_nothing_and_resends_nothing_accepted() {
    let receiver = receiver();
    // batches of 5; the lease is http_timeout + 10 s
    let cluster = cluster(
        &receiver,
        &["indexnow.batch_size = 5", "indexnow.http_timeout = '3s'"],
    );
    let mut db = cluster.create_db_with_extension("killed");
    // The first batch is accepted, the second hangs until the worker is killed.
    receiver.script([ok(), Reply::Hang { hang_ms: 60_000 }]);
    queue_for_host(&mut db, "/k/", 15);
    wait_until("the second batch hangs", SECONDS(20), || {
        receiver.arrived() == 2
    });
    let pid = worker_pid(&mut db, "killed").expect("a worker serves the database");
    sigkill(pid);
    drop(db);
    // The postmaster restarts every process; the lease of the hung batch runs out; all is sent.
    wait_until("all 15 URLs are accepted", SECONDS(90), || {
        accepted_urls(&receiver.received()).len() == 15
    });
    let urls = accepted_urls(&receiver.received());
    let dupes: Vec<_> = urls.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dupes.is_empty(), "sent twice after a success: {dupes:?}");
    let mut db = cluster.connect("killed");
    wait_until_settled(&mut db, "every URL is settled", SECONDS(10));
    assert!(cluster.log().contains("was terminated by signal 9"));
}

#[test]
fn two_push_now_calls_and_the_worker_at_once_never_send_one_url_twice() {
    let receiver = receiver();
    receiver.set_default(Reply::Hang { hang_ms: 200 }); // a slow endpoint: the senders overlap
    let cluster = cluster(&receiver, &["indexnow.batch_size = 10"]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/p/", 100);
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let conninfo = cluster.conninfo("site");
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
                c.query("SELECT * FROM indexnow_push_now()", &[])
                    .unwrap()
                    .len()
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    wait_until("100 URLs arrive", SECONDS(30), || {
        accepted_urls(&receiver.received()).len() == 100
    });
    std::thread::sleep(Duration::from_millis(500));
    let urls = accepted_urls(&receiver.received());
    let dupes: Vec<_> = urls.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dupes.is_empty(), "sent twice: {dupes:?}");
    wait_until_settled(&mut db, "every push is recorded", SECONDS(10));
    let recorded = count(
        &mut db,
        "SELECT sum(url_count)::bigint FROM indexnow_pushes",
    );
    assert_eq!(recorded, 100, "one record per URL sent");
}

fn set_workers_per_database(db: &mut postgres::Client, n: i32) {
    db.batch_execute(&format!(
        "ALTER SYSTEM SET indexnow.workers_per_database = {n}"
    ))
    .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").unwrap();
}

#[test]
fn several_workers_of_one_database_send_at_once_and_never_one_url_twice() {
    let receiver = receiver();
    receiver.set_default(Reply::Hang { hang_ms: 300 }); // a slow endpoint: the workers overlap
    let cluster = cluster(
        &receiver,
        &[
            "indexnow.batch_size = 50",
            "indexnow.workers_per_database = 3",
        ],
    );
    let mut db = cluster.create_db_with_extension("site");
    let mut admin = cluster.connect("postgres");
    wait_until("three workers serve the database", SECONDS(30), || {
        worker_pids(&mut admin, "site").len() == 3
    });
    let status = worker_state(&mut db);
    assert_eq!(status.matches("(pid ").count(), 3, "{status}");
    db.batch_execute(
        "SELECT indexnow_add_host('a.example.com', 'hostkey-a1'); \
         SELECT indexnow_add_host('b.example.com', 'hostkey-b2'); \
         SELECT indexnow_queue('https://' || h || '.example.com/p/' || g) \
           FROM generate_series(1, 600) g, unnest('{a,b}'::text[]) h",
    )
    .unwrap();
    wait_until("1,200 URLs arrive", SECONDS(60), || {
        accepted_urls(&receiver.received()).len() == 1_200
    });
    wait_until_settled(&mut db, "every push is recorded", SECONDS(10));
    let urls = accepted_urls(&receiver.received());
    let dupes: Vec<_> = urls.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dupes.is_empty(), "sent twice: {dupes:?}");
    assert_eq!(
        count(
            &mut db,
            "SELECT sum(url_count)::bigint FROM indexnow_pushes"
        ),
        1_200,
        "one record per URL sent"
    );
    // One worker sends one request at a time: requests in flight together were sent by several.
    let overlapping = count(
        &mut db,
        "SELECT count(*) FROM indexnow_pushes p JOIN indexnow_pushes q \
            ON p.id < q.id AND p.pushed_at < q.pushed_at + q.duration \
                           AND q.pushed_at < p.pushed_at + p.duration",
    );
    assert!(overlapping > 0, "no two requests were in flight at once");

    // The number follows the setting at a reload, down and up.
    set_workers_per_database(&mut admin, 1);
    wait_until("one worker is left", SECONDS(30), || {
        worker_pids(&mut admin, "site").len() == 1
    });
    set_workers_per_database(&mut admin, 2);
    wait_until("two workers serve the database", SECONDS(30), || {
        worker_pids(&mut admin, "site").len() == 2
    });
    // DROP DATABASE gets every one of them out of the way.
    drop(db);
    admin.batch_execute("DROP DATABASE site").unwrap();
    assert!(worker_pids(&mut admin, "site").is_empty());
}

#[test]
fn a_server_restart_loses_nothing_and_keeps_a_pause() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.enabled = off"]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/p/", 3);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        receiver.arrived(),
        0,
        "indexnow.enabled = off sends nothing"
    );
    let worker = worker_state(&mut db);
    assert!(worker.contains("indexnow.enabled is off"), "{worker}");
    // A 429 with Retry-After pauses all sending, in the database.
    receiver.script([status(429, Some("4"), "slow down")]);
    db.batch_execute("SET indexnow.enabled = on; SELECT indexnow_push_now()")
        .unwrap();
    let throttled_at = Instant::now();
    drop(db);
    cluster.restart();
    let mut db = cluster.connect("site");
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_urls"), 3);
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_backoff"), 1);
    db.batch_execute("ALTER SYSTEM SET indexnow.enabled = on")
        .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until("the URLs are sent after the pause", SECONDS(30), || {
        accepted_urls(&receiver.received()).len() == 3
    });
    assert!(
        throttled_at.elapsed() >= Duration::from_millis(3_500),
        "sent {:?} after a 4 s pause began",
        throttled_at.elapsed()
    );
}

#[test]
fn every_database_with_the_extension_is_served_and_a_dropped_one_is_let_go() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut dbs: Vec<_> = ["one", "two"]
        .iter()
        .map(|name| (name.to_string(), cluster.create_db_with_extension(name)))
        .collect();
    for (i, (_, db)) in dbs.iter_mut().enumerate() {
        db.batch_execute(&format!(
            "SELECT indexnow_add_host('site{i}.example.com', 'databasekey{i}'); \
             SELECT indexnow_queue('https://site{i}.example.com/page');"
        ))
        .unwrap();
    }
    wait_until("both databases are served", SECONDS(30), || {
        receiver.received().len() == 2
    });
    let keys: HashSet<String> = receiver
        .received()
        .iter()
        .map(|r| r.request.as_ref().unwrap().key.clone())
        .collect();
    assert_eq!(
        keys,
        HashSet::from(["databasekey0".into(), "databasekey1".into()])
    );
    let (_, two) = &mut dbs[1];
    assert!(worker_pid(two, "two").is_some());
    two.batch_execute("DROP EXTENSION indexnow").unwrap();
    let mut admin = cluster.connect("postgres");
    wait_until(
        "the worker of the dropped extension exits",
        SECONDS(30),
        || worker_pid(&mut admin, "two").is_none(),
    );
    wait_until("no worker where there is no extension", SECONDS(30), || {
        worker_pid(&mut admin, "postgres").is_none()
    });
    let (_, one) = &mut dbs[0];
    let state = worker_state(one);
    assert!(state.starts_with("running"), "{state}");
    // A served database can still be dropped: its worker gets out of the way.
    drop(dbs);
    assert!(worker_pid(&mut admin, "one").is_some());
    admin.batch_execute("DROP DATABASE one").unwrap();
}

fn launcher_pid(db: &mut postgres::Client) -> Option<i32> {
    pids_of(db, "indexnow launcher", None).first().copied()
}

#[test]
fn a_terminated_launcher_comes_back_and_serves_new_databases() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut admin = cluster.connect("postgres");
    wait_until("the launcher runs", SECONDS(30), || {
        launcher_pid(&mut admin).is_some()
    });
    let first = launcher_pid(&mut admin).unwrap();
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&first])
        .unwrap();
    wait_until("another launcher runs", SECONDS(30), || {
        launcher_pid(&mut admin).is_some_and(|pid| pid != first)
    });
    let mut db = cluster.create_db_with_extension("late");
    queue_for_host(&mut db, "/late/", 1);
    wait_until("the new database is served", SECONDS(30), || {
        accepted_urls(&receiver.received()).contains_key(&format!("https://{HOST}/late/1"))
    });
}

#[test]
fn a_served_database_can_be_copied_renamed_and_moved_and_is_served_again() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut admin = cluster.connect("postgres");
    for db in ["copied", "renamed", "moved"] {
        drop(cluster.create_db_with_extension(db));
        wait_until(&format!("{db} is served"), SECONDS(30), || {
            worker_pid(&mut admin, db).is_some()
        });
    }
    let space = cluster.dir.join("space");
    std::fs::create_dir(&space).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["postgres:postgres", space.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(chown.success());
    // Each of these needs the database to itself: the worker gets out of the way.
    for command in [
        "CREATE DATABASE the_copy TEMPLATE copied".to_string(),
        "ALTER DATABASE renamed RENAME TO new_name".to_string(),
        format!("CREATE TABLESPACE space LOCATION '{}'", space.display()),
        "ALTER DATABASE moved SET TABLESPACE space".to_string(),
    ] {
        admin
            .batch_execute(&command)
            .unwrap_or_else(|e| panic!("{command}: {e}\n{}", cluster.log()));
    }
    // The worker comes back (the launcher leaves the database alone for a minute) and serves
    // the database under its new name.
    let mut db = cluster.connect("new_name");
    db.batch_execute(
        "SELECT indexnow_add_host('renamed.example.com', 'renamedkey1'); \
         SELECT indexnow_queue('https://renamed.example.com/page');",
    )
    .unwrap();
    wait_until("the renamed database is served again", SECONDS(90), || {
        receiver.received().len() == 1
    });
}

#[test]
fn dry_run_sends_nothing_and_records_every_decision_once() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.dry_run = on"]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/p/", 3);
    wait_until("the decision is recorded", SECONDS(20), || {
        count(&mut db, "SELECT count(*) FROM indexnow_pushes") > 0
    });
    std::thread::sleep(Duration::from_secs(1)); // five more passes decide nothing new
    let decided = db
        .query_one(
            "SELECT count(*), sum(url_count)::bigint, max(status), max(note) FROM indexnow_pushes",
            &[],
        )
        .unwrap();
    assert_eq!(decided.get::<_, i64>(0), 1);
    assert_eq!(decided.get::<_, i64>(1), 3);
    assert_eq!(decided.get::<_, i32>(2), 0);
    assert_eq!(decided.get::<_, String>(3), "dry_run");
    assert_eq!(receiver.arrived(), 0, "no request in a dry run");
    let pending = count(&mut db, "SELECT pending FROM indexnow_status()");
    assert_eq!(
        pending, 3,
        "a dry run tells no search engine: the URLs stay queued"
    );
    let dry_run = |db: &mut postgres::Client| -> (bool, String) {
        let row = db
            .query_one("SELECT dry_run, worker FROM indexnow_status()", &[])
            .unwrap();
        (row.get(0), row.get(1))
    };
    let (shown, worker) = dry_run(&mut db);
    assert!(shown && worker.contains(", dry run (pid "), "{worker}");
    // Decided once: not due again in the dry run, so nothing is waiting (no alert fires).
    let row = db
        .query_one(
            "SELECT due_now, oldest_due_age IS NULL, next_due_at IS NULL FROM indexnow_status()",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, bool>(1),
            row.get::<_, bool>(2)
        ),
        (0, true, true)
    );
    assert!(
        cluster
            .log()
            .contains("indexnow: dry run: 3 URLs for www.example.com, no request made"),
        "{}",
        cluster.log()
    );
    db.batch_execute("ALTER SYSTEM SET indexnow.dry_run = off")
        .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until("sent for real", SECONDS(20), || {
        accepted_urls(&receiver.received()).len() == 3
    });
    let (shown, worker) = dry_run(&mut db);
    assert!(!shown && !worker.contains("dry run"), "{worker}");
}

#[test]
fn the_server_log_has_a_line_per_request_pause_and_resume_and_none_per_url() {
    let receiver = receiver();
    // (Retry-After above the floor of 5 s, which a shorter one would be raised to)
    receiver.script([ok(), status(429, Some("6"), "slow down")]);
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/first/", 3);
    wait_until_settled(&mut db, "the first request is recorded", SECONDS(20));
    queue_for_host(&mut db, "/second/", 2);
    wait_until("the 429 pauses sending", SECONDS(20), || {
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_status() WHERE backoff_until IS NOT NULL",
        ) == 1
    });
    // Mid-pause the status says when the URLs can really go out, and how long they have waited.
    let row = db
        .query_one(
            "SELECT next_due_at = backoff_until, oldest_due_age >= interval '0', due_now \
               FROM indexnow_status()",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, bool>(0),
            row.get::<_, bool>(1),
            row.get::<_, i64>(2)
        ),
        (true, true, 2)
    );
    wait_until_settled(
        &mut db,
        "the held URLs are sent after the pause",
        SECONDS(30),
    );
    let log = cluster.log();
    let line = |text: &str| {
        log.lines()
            .position(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no LOG line with {text:?} in:\n{log}"))
    };
    let first = line("indexnow: sent 3 URLs for www.example.com: status 200 in ");
    let throttled = line("indexnow: sent 2 URLs for www.example.com: status 429 in ");
    let paused = line(&format!(
        "indexnow: sending paused for 6 s, for all hosts (status 429 from {})",
        receiver.endpoint()
    ));
    let resumed = line("indexnow: the pause for all hosts (status 429) is over; sending resumes");
    let after = log
        .lines()
        .enumerate()
        .skip(resumed)
        .find(|(_, l)| l.contains("indexnow: sent 2 URLs for www.example.com: status 200 in "))
        .map(|(i, _)| i);
    assert!(
        first < throttled && throttled <= paused && paused < resumed && after.is_some(),
        "in order: {first} {throttled} {paused} {resumed} {after:?}\n{log}"
    );
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("indexnow: sent "))
            .count(),
        3,
        "one line per request:\n{log}"
    );
    assert!(
        !log.contains("https://www.example.com/"),
        "no line names a URL:\n{log}"
    );
}

#[test]
fn without_preloading_push_now_sends_status_says_why_and_history_is_pruned() {
    let receiver = receiver();
    let cluster = Cluster::start(Options {
        preload: false,
        conf: sending_conf(&receiver.endpoint(), &[]),
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         SELECT indexnow_queue('https://{HOST}/p/1'); \
         INSERT INTO indexnow_pushes (pushed_at, host, url_count, status) \
              VALUES (now() - interval '31 days', '{HOST}', 1, 200), \
                     (now() - interval '29 days', '{HOST}', 1, 200);"
    ))
    .unwrap();
    let worker = worker_state(&mut db);
    assert!(
        worker.contains("not in shared_preload_libraries"),
        "{worker}"
    );
    let sent = db
        .query_one("SELECT url_count, status FROM indexnow_push_now()", &[])
        .unwrap();
    assert_eq!(
        (sent.get::<_, i64>(0), sent.get::<_, Option<i32>>(1)),
        (1, Some(200))
    );
    assert_eq!(accepted_urls(&receiver.received()).len(), 1);
    let kept = count(
        &mut db,
        "SELECT count(*) FROM indexnow_pushes WHERE pushed_at < now() - interval '30 days'",
    );
    assert_eq!(kept, 0, "older than history_days: pruned");
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_pushes"), 2);
}

#[test]
fn scheduled_pages_are_re_read_at_send_time() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.enabled = off"]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, status text NOT NULL, \
                             published_at timestamptz); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/{{slug}}', \
                               visible => $$status = 'published'$$, publish_at => 'published_at'); \
         INSERT INTO posts SELECT g, 'post-' || g, 'published', now() + interval '1 second' \
           FROM generate_series(1, 4) g; \
         SELECT indexnow_derive();"
    ))
    .unwrap();
    // Writes the triggers do not see (a restore, a replica-mode maintenance script).
    db.batch_execute(
        "SET session_replication_role = replica; \
         UPDATE posts SET published_at = now() + interval '1 day' WHERE id = 1; \
         DELETE FROM posts WHERE id = 2; \
         UPDATE posts SET status = 'draft' WHERE id = 3; \
         RESET session_replication_role;",
    )
    .unwrap();
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"
        ),
        4,
        "the queue did not see those writes"
    );
    std::thread::sleep(Duration::from_millis(1_200)); // the original publication time passes
    db.batch_execute("SET indexnow.enabled = on").unwrap();
    let sent = count(
        &mut db,
        "SELECT coalesce(sum(url_count), 0)::bigint FROM indexnow_push_now()",
    );
    assert_eq!(sent, 1);
    let urls: Vec<String> = accepted_urls(&receiver.received()).into_keys().collect();
    assert_eq!(urls, vec!["https://www.example.com/post-4".to_string()]);
    let rows = db
        .query(
            "SELECT url, request_seq > settled_seq, available_at > now() + interval '23 hours' \
               FROM indexnow_urls ORDER BY url",
            &[],
        )
        .unwrap();
    let got: Vec<(String, bool, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let want = |slug: &str, pending: bool, moved: bool| {
        (format!("https://www.example.com/{slug}"), pending, moved)
    };
    assert_eq!(
        got,
        vec![
            want("post-1", true, true),   // rescheduled: waits for its new time
            want("post-2", false, false), // gone before its time: never public, never sent
            want("post-3", false, false), // hidden before its time: likewise
            want("post-4", false, false), // sent
        ]
    );
    assert_eq!(
        count(&mut db, "SELECT count(*) FROM indexnow_push_now()"),
        0
    );
}

#[test]
fn only_scheduled_pages_are_re_read_at_send_time() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.enabled = off"]);
    let mut db = cluster.create_db_with_extension("site");
    // url_sql counts its evaluations: the re-read derives every URL of the table.
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE SEQUENCE derived; \
         CREATE FUNCTION counted(slug text) RETURNS text LANGUAGE sql VOLATILE AS \
           $$ SELECT 'https://{HOST}/' || slug || left(nextval('derived')::text, 0) $$; \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, published_at timestamptz); \
         SELECT indexnow_watch('posts', url_sql => 'counted(slug)', publish_at => 'published_at'); \
         INSERT INTO posts SELECT g, 'live-' || g, now() - interval '1 day' \
           FROM generate_series(1, 3) g;"
    ))
    .unwrap();
    // (the saves derived, as the worker would: what follows counts the re-reads only)
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    let derived = |db: &mut postgres::Client| count(db, "SELECT last_value FROM derived");
    db.batch_execute("SET indexnow.enabled = on").unwrap();
    let before = derived(&mut db);
    let sent = count(
        &mut db,
        "SELECT coalesce(sum(url_count), 0)::bigint FROM indexnow_push_now()",
    );
    assert_eq!(sent, 3);
    assert_eq!(
        derived(&mut db),
        before,
        "pages live when saved are not re-read"
    );

    db.batch_execute("INSERT INTO posts VALUES (4, 'scheduled', now() + interval '1 second')")
        .unwrap();
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    std::thread::sleep(Duration::from_millis(1_200));
    let before = derived(&mut db);
    let sent = count(
        &mut db,
        "SELECT coalesce(sum(url_count), 0)::bigint FROM indexnow_push_now()",
    );
    assert_eq!(sent, 1);
    assert!(derived(&mut db) > before, "a scheduled page is re-read");
}

#[test]
fn nothing_is_sent_on_a_hot_standby_until_promotion() {
    let receiver = receiver();
    // The primary queues but does not send; its standby would send if it could.
    let primary = cluster(&receiver, &["indexnow.enabled = off"]);
    let mut db = primary.create_db_with_extension("site");
    queue_for_host(&mut db, "/p/", 3);
    let standby = Cluster::standby_of(&primary, &["indexnow.enabled = on"]);
    let mut replica = standby.connect("site");
    wait_until("the queue is replicated", SECONDS(30), || {
        count(&mut replica, "SELECT count(*) FROM indexnow_urls") == 3
    });
    std::thread::sleep(Duration::from_millis(1_500)); // several naptimes
    assert_eq!(receiver.arrived(), 0, "a hot standby sends nothing");
    let worker = worker_state(&mut replica);
    assert!(worker.contains("hot standby"), "{worker}");
    // A "send now" on every node of a pair (a cron job) is told why, by name.
    let queue = format!("SELECT indexnow_queue('https://{HOST}/new')");
    for call in ["SELECT * FROM indexnow_push_now()", queue.as_str()] {
        let err = replica.batch_execute(call).unwrap_err();
        assert_eq!(
            err.code(),
            Some(&postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION),
            "{err}"
        );
        let message = err
            .as_db_error()
            .expect("a server error")
            .message()
            .to_string();
        assert!(
            message.contains("this server is a hot standby"),
            "{call}: {message}"
        );
    }
    drop(db);
    drop(primary);
    standby.promote();
    wait_until("the promoted server sends", SECONDS(30), || {
        accepted_urls(&receiver.received()).len() == 3
    });
}

#[test]
fn a_commit_wakes_the_worker_without_waiting_for_naptime() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.naptime = '10min'"]);
    let mut db = cluster.create_db_with_extension("site");
    let mut status = || -> String { worker_state(&mut db) };
    wait_until("the worker sleeps", SECONDS(30), || {
        status().starts_with("running: idle")
    });
    let mut db = cluster.connect("site");
    let started = Instant::now();
    queue_for_host(&mut db, "/p/", 1);
    wait_until("the URL is sent", SECONDS(30), || {
        !receiver.received().is_empty()
    });
    assert!(
        started.elapsed() < SECONDS(10),
        "sent after {:?}: the worker slept on",
        started.elapsed()
    );
    // A save of a watched table wakes it the same way (the capture trigger asks for it).
    db.batch_execute(&format!(
        "CREATE TABLE pages (id int PRIMARY KEY, slug text); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/w/{{slug}}')"
    ))
    .unwrap();
    let started = Instant::now();
    db.batch_execute("INSERT INTO pages VALUES (1, 'woken')")
        .unwrap();
    wait_until("the saved page is sent", SECONDS(30), || {
        accepted_urls(&receiver.received()).contains_key(&format!("https://{HOST}/w/woken"))
    });
    assert!(
        started.elapsed() < SECONDS(10),
        "sent after {:?}: the worker slept on",
        started.elapsed()
    );
}

#[test]
fn push_now_holds_no_row_lock_across_its_request() {
    let receiver = receiver();
    let cluster = cluster(
        &receiver,
        &["indexnow.enabled = off", "indexnow.http_timeout = '10s'"],
    );
    let mut db = cluster.create_db_with_extension("site");
    pages(&mut db);
    db.batch_execute("INSERT INTO pages VALUES (1, 'news', 'first')")
        .unwrap();
    receiver.script([Reply::Hang { hang_ms: 3_000 }]);
    let conninfo = cluster.conninfo("site");
    let pushing = std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
        c.batch_execute("SET indexnow.enabled = on").unwrap();
        c.query("SELECT * FROM indexnow_push_now()", &[])
            .unwrap()
            .len()
    });
    save_page_while_the_push_hangs(&mut db, &receiver);
    assert_eq!(pushing.join().unwrap(), 1);
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    let row = db
        .query_one(
            "SELECT request_seq > settled_seq, last_pushed_at IS NOT NULL FROM indexnow_urls",
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, bool>(0), row.get::<_, bool>(1)),
        (true, true),
        "pushed, and the save made during the push is still pending"
    );
}

#[test]
fn the_worker_sleeps_until_the_next_url_is_due_not_for_naptime() {
    let receiver = receiver();
    let cluster = cluster(
        &receiver,
        &["indexnow.naptime = '10min'", "indexnow.debounce = '2s'"],
    );
    let mut db = cluster.create_db_with_extension("site");
    let started = Instant::now();
    // Woken at this commit, the worker finds nothing due yet (debounce) and must sleep only
    // until the URL is quiet.
    queue_for_host(&mut db, "/p/", 1);
    wait_until("the URL is sent", SECONDS(30), || {
        !receiver.received().is_empty()
    });
    let took = started.elapsed();
    assert!(
        took >= SECONDS(2),
        "sent after {took:?}: before the debounce"
    );
    assert!(
        took < SECONDS(10),
        "sent after {took:?}: the worker slept on"
    );
}

#[test]
fn a_held_host_does_not_make_the_worker_oversleep_another_hosts_url() {
    let receiver = receiver();
    let cluster = cluster(
        &receiver,
        &["indexnow.naptime = '10min'", "indexnow.debounce = '2s'"],
    );
    let mut db = cluster.create_db_with_extension("site");
    // URLs of a host without a key: due after the debounce, and held (never sendable).
    db.batch_execute(
        "SELECT indexnow_queue('https://keyless.example.com/p/' || g) FROM generate_series(1, 5) g",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    let started = Instant::now();
    queue_for_host(&mut db, "/p/", 1);
    wait_until("the keyed host's URL is sent", SECONDS(30), || {
        !receiver.received().is_empty()
    });
    let took = started.elapsed();
    assert!(
        took < SECONDS(10),
        "sent after {took:?}: the held URLs made the worker sleep for naptime"
    );
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].request.as_ref().unwrap().host, HOST);
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls \
              WHERE host = 'keyless.example.com' AND request_seq > settled_seq"
        ),
        5,
        "held, not sent"
    );
}

#[test]
fn an_idle_worker_takes_no_transaction_id() {
    // An idle pass only reads: taking a transaction id per pass would burn through xids and
    // write a commit record every naptime on an idle server.
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.naptime = '100ms'"]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/p/", 3);
    wait_until_settled(&mut db, "the URLs are pushed", SECONDS(30));
    let next_xid = |db: &mut postgres::Client| -> i64 {
        db.query_one(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let before = next_xid(&mut db);
    std::thread::sleep(SECONDS(3)); // about 30 idle passes
    let taken = next_xid(&mut db) - before;
    assert!(taken < 5, "{taken} transaction ids taken while idle");
    // Every pass, idle ones too, shows "sending" while it looks (a few ms of each 100 ms): the
    // worker is idle between passes.
    wait_until("the worker shows idle between passes", SECONDS(5), || {
        worker_state(&mut db).starts_with("running: idle")
    });
}

/// `(state, query)` of the one worker of `datname` in `pg_stat_activity`.
fn worker_activity(db: &mut postgres::Client, datname: &str) -> Option<(String, String)> {
    db.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    db.query_opt(
        "SELECT state, query FROM pg_stat_activity \
          WHERE backend_type = 'indexnow worker' AND datname = $1",
        &[&datname],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

/// The database `site` of a cluster whose saves are recorded (derived by the worker after the
/// commit), with `posts` watched for the test host through a `visible` that takes `seconds` a
/// row, and `rows` posts inserted in one statement.
fn slowly_derived_posts(seconds: f64, rows: i32) -> (Receiver, Cluster, postgres::Client) {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.derive_at_write = 0"]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         SELECT indexnow_add_host('other.example.com', '{KEY}'); \
         CREATE FUNCTION slowly_visible() RETURNS boolean LANGUAGE plpgsql AS \
           'BEGIN PERFORM pg_sleep({seconds}); RETURN true; END'; \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/{{slug}}', \
                               visible => 'slowly_visible()'); \
         INSERT INTO posts SELECT g, 'p' || g FROM generate_series(1, {rows}) g;"
    ))
    .unwrap();
    (receiver, cluster, db)
}

/// A worker deriving shows it in pg_stat_activity: how many rows, of which table, for which
/// pattern (a slow watch expression is seen there, not as an idle worker).
#[test]
fn a_worker_deriving_shows_what_it_derives() {
    let (receiver, _cluster, mut db) = slowly_derived_posts(0.1, 40);
    let want =
        format!("indexnow: deriving 40 changed rows of public.posts for https://{HOST}/{{slug}}");
    wait_until("the worker shows it derives", SECONDS(20), || {
        worker_activity(&mut db, "site") == Some(("active".to_string(), want.clone()))
    });
    wait_until("the 40 posts are sent", SECONDS(30), || {
        accepted_urls(&receiver.received()).len() == 40
    });
}

/// A slow watch expression does not stall the database's sending: a worker's derivation is cut
/// short after its time (3 s), and the table's rows are derived in smaller slices from then on,
/// while another host's URL goes out within seconds; every page is derived in the end. (With
/// 0.6.0's 10 s a derivation, split in two new change sets after the others, the other host's
/// URL waited about 10 s.)
#[test]
fn a_slow_watch_expression_does_not_hold_up_another_hosts_url() {
    // 50 rows: 20 s of expression, in one change set.
    let (receiver, cluster, mut db) = slowly_derived_posts(0.4, 50);
    wait_until("the worker derives", SECONDS(20), || {
        worker_activity(&mut db, "site").is_some_and(|(_, q)| q.starts_with("indexnow: deriving"))
    });
    let started = Instant::now();
    db.batch_execute("SELECT indexnow_queue('https://other.example.com/quick')")
        .unwrap();
    wait_until("the other host's URL is sent", SECONDS(30), || {
        accepted_urls(&receiver.received()).contains_key("https://other.example.com/quick")
    });
    let took = started.elapsed();
    assert!(took < SECONDS(7), "another host's URL waited {took:?}");
    let all_sent = Instant::now();
    while accepted_urls(&receiver.received()).len() < 51 {
        assert!(
            all_sent.elapsed() < SECONDS(150),
            "{} of 51 sent; changes left: {}\n{}",
            accepted_urls(&receiver.received()).len(),
            count(&mut db, "SELECT count(*) FROM indexnow_changes"),
            cluster.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        cluster
            .log()
            .contains("took longer than 3 s (a slow or blocking watch expression): derived from now on in slices of"),
        "{}",
        cluster.log()
    );
}

/// The worker's private memory (`RssAnon`: its own heap, not the shared buffers it maps), in
/// bytes.
fn private_memory(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A change of a whole big table (here an ALTER that may change rows, after writes no trigger
/// saw: 200,000 rows) is derived a slice at a time: the worker's private memory stays within
/// 64 MiB while it derives, another host's URL goes out within seconds meanwhile, and the rows
/// changed unseen are announced. (Derived in one statement, the table was read whole into the
/// worker's memory: 75 MB of it here, and 1.19 GB at 2,000,000 rows; and another host's URL
/// waited 9 s.) `INDEXNOW_BIG_ROWS` sets the rows (for a measurement at another size).
#[test]
fn a_whole_big_table_is_derived_in_bounded_memory_while_the_worker_sends() {
    let rows: i32 = std::env::var("INDEXNOW_BIG_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         SELECT indexnow_add_host('other.example.com', '{KEY}'); \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, body text NOT NULL); \
         INSERT INTO posts SELECT g, 'p' || g, repeat('x', 200) FROM generate_series(1, {rows}) g; \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/{{slug}}');"
    ))
    .unwrap();
    wait_until_settled(&mut db, "the watch is made", SECONDS(60));
    db.batch_execute(
        "SET session_replication_role = replica; \
         UPDATE posts SET slug = slug || '-moved' WHERE id % 1000 = 0; \
         RESET session_replication_role; \
         ALTER TABLE posts ALTER slug SET DATA TYPE varchar;",
    )
    .unwrap();
    let pid = worker_pid(&mut db, "site").expect("the worker runs");
    let mut most = 0;
    let mut other_sent_after = None;
    let started = Instant::now();
    loop {
        most = most.max(private_memory(pid));
        // (from the statement that records the table's keys on)
        let deriving = worker_activity(&mut db, "site").is_some_and(|(_, q)| {
            q.starts_with("indexnow: reading the keys") || q.starts_with("indexnow: deriving")
        });
        if deriving && other_sent_after.is_none() {
            db.batch_execute("SELECT indexnow_queue('https://other.example.com/quick')")
                .unwrap();
            let queued = Instant::now();
            while !accepted_urls(&receiver.received())
                .contains_key("https://other.example.com/quick")
            {
                most = most.max(private_memory(pid));
                assert!(
                    queued.elapsed() < SECONDS(30),
                    "the other host's URL is not sent"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            other_sent_after = Some(queued.elapsed());
        }
        if count(&mut db, "SELECT count(*) FROM indexnow_changes") == 0 {
            break;
        }
        assert!(
            started.elapsed() < SECONDS(300),
            "not derived yet: {:?}",
            worker_activity(&mut db, "site")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = other_sent_after.expect("the worker was seen deriving");
    eprintln!(
        "{rows} rows derived whole in {:?}; the worker's private memory at most {} KiB; another \
         host's URL sent {took:?} after it was queued",
        started.elapsed(),
        most >> 10
    );
    assert!(
        took < SECONDS(7),
        "another host's URL waited {took:?} while the table was derived"
    );
    assert!(
        most < 64 << 20,
        "the worker's private memory reached {} MiB",
        most >> 20
    );
    assert_eq!(
        worker_pid(&mut db, "site"),
        Some(pid),
        "the same worker derived it all"
    );
    let moved = rows as usize / 1000;
    wait_until("the moved pages are sent", SECONDS(60), || {
        accepted_urls(&receiver.received()).len() == 1 + 2 * moved
    });
}

/// A worker's request that hangs (the endpoint answers nothing for `hang_ms`, `http_timeout`
/// long enough), under way for one URL of the database `site`.
fn request_under_way(hang_ms: u64, http_timeout: &str) -> (Receiver, Cluster, postgres::Client) {
    let receiver = receiver();
    receiver.set_default(Reply::Hang { hang_ms });
    let cluster = cluster(
        &receiver,
        &[&format!("indexnow.http_timeout = '{http_timeout}'")],
    );
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/p/", 1);
    wait_until("the request is under way", SECONDS(30), || {
        receiver.arrived() == 1
    });
    (receiver, cluster, db)
}

#[test]
fn drop_database_goes_ahead_while_a_request_hangs() {
    let (_receiver, cluster, db) = request_under_way(60_000, "60s");
    drop(db);
    let started = Instant::now();
    cluster
        .connect("postgres")
        .batch_execute("DROP DATABASE site")
        .unwrap_or_else(|e| panic!("DROP DATABASE: {e}\n{}", cluster.log()));
    let took = started.elapsed();
    assert!(took < SECONDS(3), "DROP DATABASE waited {took:?}");
}

/// The DDL of another database (no extension in it) that waits for every backend to absorb a
/// procsignal barrier goes ahead while a worker's request hangs: the worker waits for answers as
/// a backend waits, absorbing barriers.
#[test]
fn ddl_of_another_database_does_not_wait_for_a_hanging_request() {
    let (receiver, cluster, _db) = request_under_way(60_000, "60s");
    let mut postgres = cluster.connect("postgres");
    let space = cluster.dir.join("space");
    std::fs::create_dir_all(&space).unwrap();
    std::process::Command::new("chown")
        .args(["postgres:postgres", space.to_str().unwrap()])
        .status()
        .unwrap();
    for ddl in [
        "CREATE DATABASE plain".to_string(),
        "CREATE DATABASE moved".to_string(),
        format!("CREATE TABLESPACE space LOCATION '{}'", space.display()),
    ] {
        postgres.batch_execute(&ddl).unwrap();
    }
    for ddl in [
        "DROP DATABASE plain",
        "ALTER DATABASE moved SET TABLESPACE space",
        "ALTER DATABASE moved SET TABLESPACE pg_default",
        "DROP TABLESPACE space",
    ] {
        let started = Instant::now();
        postgres
            .batch_execute(ddl)
            .unwrap_or_else(|e| panic!("{ddl}: {e}\n{}", cluster.log()));
        let took = started.elapsed();
        assert!(took < SECONDS(5), "{ddl} waited {took:?}");
    }
    assert_eq!(receiver.arrived(), 1, "the request was under way all along");
    assert!(
        !cluster.log().contains("to accept ProcSignalBarrier"),
        "{}",
        cluster.log()
    );
}

/// A postmaster killed with SIGKILL takes a worker in the middle of a request with it at once
/// (it kept the shared memory in use until its request timed out, and the server could not
/// start again meanwhile); the URL it was sending is still queued after the restart.
#[test]
fn a_crashed_postmaster_takes_a_worker_in_a_request_with_it_and_the_server_starts_again() {
    let (_receiver, cluster, mut db) = request_under_way(120_000, "100s");
    let worker = worker_pid(&mut db, "site").expect("a worker serves the database");
    drop(db);
    sigkill(cluster.postmaster_pid());
    let alive = |pid: i32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    wait_until(
        "the worker is gone with the postmaster",
        SECONDS(10),
        || !alive(worker),
    );
    cluster
        .start_again()
        .unwrap_or_else(|e| panic!("the server did not start: {e}"));
    let mut db = cluster.connect("site");
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"
        ),
        1,
        "the URL under way is still queued"
    );
}

#[test]
fn a_worker_told_to_stop_leaves_a_hanging_request_at_once_and_its_urls_stay_due() {
    let receiver = receiver();
    receiver.script([Reply::Hang { hang_ms: 60_000 }]); // then 200s
    let cluster = cluster(&receiver, &["indexnow.http_timeout = '60s'"]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/p/", 3);
    wait_until("the request is under way", SECONDS(30), || {
        receiver.arrived() == 1
    });
    // pg_stat_activity shows what the worker is doing.
    assert_eq!(
        worker_activity(&mut db, "site"),
        Some((
            "active".to_string(),
            format!("indexnow: sending 3 URLs to {HOST}")
        ))
    );
    let pid = worker_pid(&mut db, "site").unwrap();
    let started = Instant::now();
    db.batch_execute(&format!("SELECT pg_terminate_backend({pid})"))
        .unwrap();
    wait_until("the worker is gone", SECONDS(10), || {
        !worker_pids(&mut db, "site").contains(&pid)
    });
    let took = started.elapsed();
    assert!(took < SECONDS(3), "the worker took {took:?} to stop");
    // The next worker sends the URLs again at once: the left claim was given back.
    wait_until("the URLs are sent again", SECONDS(30), || {
        accepted_urls(&receiver.received()).len() == 3
    });
    wait_until_settled(&mut db, "every URL is settled", SECONDS(10));
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_pushes WHERE status = 0 AND note LIKE 'left:%'"
        ),
        1
    );
    wait_until("the worker shows it is idle", SECONDS(10), || {
        worker_activity(&mut db, "site") == Some(("idle".to_string(), "indexnow: idle".to_string()))
    });
}

#[test]
fn a_url_that_falls_due_during_a_long_pass_is_sent_right_after_it() {
    let receiver = receiver();
    // The first request takes 1.5 s; the second URL falls due while it is under way.
    receiver.script([Reply::Hang { hang_ms: 1_500 }]);
    let cluster = cluster(
        &receiver,
        &["indexnow.naptime = '10min'", "indexnow.debounce = '1s'"],
    );
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/a", 1);
    std::thread::sleep(Duration::from_millis(500));
    let queued = Instant::now();
    db.batch_execute(&format!("SELECT indexnow_queue('https://{HOST}/b')"))
        .unwrap();
    wait_until("both URLs are sent", SECONDS(60), || {
        accepted_urls(&receiver.received()).len() == 2
    });
    let took = queued.elapsed();
    assert_eq!(receiver.received().len(), 2, "one POST each");
    assert!(
        took < SECONDS(5),
        "the second URL was sent {took:?} after it was queued (due after 1 s, the pass \
         before it ended after about 2 s)"
    );
}

#[test]
fn what_the_worker_writes_counts_in_pg_stat_user_tables() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/p/", 100);
    wait_until_settled(&mut db, "every URL is settled", SECONDS(30));
    // Only the worker updates queue rows (a claim and a settle each) and writes history.
    wait_until("the worker's writes are counted", SECONDS(30), || {
        count(
            &mut db,
            "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'indexnow_urls'",
        ) >= 200
            && count(
                &mut db,
                "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'indexnow_pushes'",
            ) >= 1
    });
}

#[test]
fn a_url_whose_push_was_lost_with_a_killed_worker_still_has_its_removal_sent() {
    // Found by the long soak: the request reached the endpoint, the worker died before recording
    // the answer, the lease ran out, and the page was unpublished before the URL was sent again.
    // Search engines know the URL: its removal is owed.
    let receiver = receiver();
    receiver.script([Reply::Hang { hang_ms: 60_000 }]); // then 200s
    let cluster = cluster(&receiver, &["indexnow.http_timeout = '2s'"]); // a 12 s lease
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE pages (id int PRIMARY KEY, slug text, status text); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}', \
                               visible => $$status = 'published'$$); \
         INSERT INTO pages VALUES (1, 'launch', 'published');"
    ))
    .unwrap();
    wait_until("the push is under way", SECONDS(30), || {
        receiver.arrived() == 1
    });
    sigkill(worker_pid(&mut db, "site").expect("a worker"));
    drop(db);
    std::thread::sleep(Duration::from_secs(1));
    cluster.wait_for_connections(SECONDS(60));
    let mut admin = cluster.connect("postgres");
    admin
        .batch_execute("ALTER SYSTEM SET indexnow.enabled = off")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    std::thread::sleep(Duration::from_secs(14)); // past the lease
    let mut db = cluster.connect("site");
    db.batch_execute("UPDATE pages SET status = 'draft'")
        .unwrap();
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls \
              WHERE reason = 'unpublished' AND request_seq > settled_seq"
        ),
        1,
        "the removal was cancelled as if the URL had never been sent"
    );
    admin
        .batch_execute("ALTER SYSTEM RESET indexnow.enabled")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until("the removal is sent", SECONDS(30), || {
        receiver.received().iter().any(|r| {
            r.status == 200
                && r.request
                    .as_ref()
                    .is_some_and(|q| q.url_list == [format!("https://{HOST}/launch")])
        })
    });
}

/// A transaction left prepared that holds a queue row a recorded change needs does not stop the
/// database's worker: its derivation waits a few seconds, leaves that change for the next pass,
/// derives the changes recorded after it, and sends what is due; once the transaction ends, the
/// held change is derived and sent too.
#[test]
fn a_prepared_transaction_does_not_stop_the_worker() {
    let receiver = receiver();
    receiver.set_default(ok());
    let cluster = cluster(&receiver, &["max_prepared_transactions = 2"]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, body text); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}'); \
         INSERT INTO pages VALUES (1, 'a', ''), (2, 'b', '')"
    ))
    .unwrap();
    wait_until("the pages are sent", SECONDS(30), || {
        accepted_urls(&receiver.received()).len() == 2
    });
    // (the held save derived in its statement, so that it holds its URL's queue row)
    db.batch_execute(
        "BEGIN; SET LOCAL indexnow.derive_at_write = 100; \
         UPDATE pages SET body = 'held' WHERE id = 1",
    )
    .unwrap();
    db.batch_execute("PREPARE TRANSACTION 'held'").unwrap();
    // Page 2 takes page 1's URL: its save is recorded; the worker's derivation of it waits for
    // that row.
    db.batch_execute("UPDATE pages SET slug = 'a', body = 'q' WHERE id = 2")
        .unwrap();
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_changes"), 1);
    db.batch_execute(&format!("SELECT indexnow_queue('https://{HOST}/other')"))
        .unwrap();
    wait_until("sending goes on", SECONDS(30), || {
        accepted_urls(&receiver.received()).contains_key(&format!("https://{HOST}/other"))
    });
    // A bulk insert after it (recorded, a later change set) is derived and sent meanwhile: the
    // held change set does not hold back the ones after it.
    db.batch_execute("INSERT INTO pages SELECT g, 'p' || g, '' FROM generate_series(10, 209) g")
        .unwrap();
    wait_until(
        "the later change set is derived and sent",
        SECONDS(30),
        || accepted_urls(&receiver.received()).contains_key(&format!("https://{HOST}/p209")),
    );
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_changes"), 1);
    db.batch_execute("COMMIT PREPARED 'held'").unwrap();
    wait_until("the held change is derived and sent", SECONDS(30), || {
        accepted_urls(&receiver.received()).get(&format!("https://{HOST}/b")) == Some(&2)
            && count(&mut db, "SELECT count(*) FROM indexnow_changes") == 0
    });
}

#[test]
fn a_steady_stream_of_saves_does_not_keep_the_worker_from_sending() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let receiver = receiver();
    // Every save recorded as a change set, and derived by the worker more slowly than the saves
    // come (10 ms a row, in the worker only): there are always change sets waiting.
    let cluster = cluster(&receiver, &["indexnow.derive_at_write = 0"]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE FUNCTION slow_in_worker() RETURNS bool LANGUAGE sql VOLATILE AS $$ \
           SELECT true FROM (SELECT pg_sleep(CASE WHEN backend_type = 'indexnow worker' \
                                                  THEN 0.01 ELSE 0 END) \
                               FROM pg_stat_activity WHERE pid = pg_backend_pid()) s $$; \
         CREATE TABLE items (id int PRIMARY KEY, body text); \
         INSERT INTO items SELECT g, 'b' FROM generate_series(1, 400) g; \
         SELECT indexnow_watch('items', url => 'https://{HOST}/i/{{id}}', \
                               visible => 'slow_in_worker()');"
    ))
    .unwrap();
    let saving = Arc::new(AtomicBool::new(true));
    let savers: Vec<_> = (0..4)
        .map(|n| {
            let mut saver = cluster.connect("site");
            let saving = saving.clone();
            std::thread::spawn(move || {
                let mut id = n;
                while saving.load(Ordering::Relaxed) {
                    saver
                        .execute(
                            "UPDATE items SET body = md5(random()::text) WHERE id = $1",
                            &[&(id % 400 + 1)],
                        )
                        .unwrap();
                    id += 4;
                }
            })
        })
        .collect();
    // The saves go on for as long as it takes (20 s at most): something must be sent meanwhile.
    let started = Instant::now();
    while receiver.received().is_empty() && started.elapsed() < SECONDS(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let sent_while_saving = !receiver.received().is_empty();
    saving.store(false, Ordering::Relaxed);
    for saver in savers {
        saver.join().unwrap();
    }
    assert!(
        sent_while_saving,
        "nothing sent in {:?} of steady saves: the worker derived and never sent",
        started.elapsed()
    );
}

/// What a database owner (here `alice`) may put in `public`, the extension's schema: functions and
/// an operator that match the extension's own calls more closely than the built-ins do
/// (`format(text, name, name)` over `format(text, VARIADIC "any")`, `unnest(text[])` over
/// `unnest(anyarray)`, `text || integer` over `text || anynonarray`). Each notes who ran it.
const SHADOWS: &str = "
CREATE TABLE public.ran (who text, super boolean, what text);
GRANT INSERT, SELECT ON public.ran TO PUBLIC;
CREATE FUNCTION public.noted(what text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.ran SELECT current_user, rolsuper, what FROM pg_catalog.pg_roles
     WHERE rolname = current_user $$;
CREATE FUNCTION public.format(f text, a name, b name) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('format(text, name, name)'); RETURN pg_catalog.format(f, a, b); END $$;
CREATE FUNCTION public.format(f text, a text) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('format(text, text)'); RETURN pg_catalog.format(f, a); END $$;
CREATE FUNCTION public.unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('unnest(text[])');
          RETURN QUERY SELECT x FROM pg_catalog.unnest(a) x; END $$;
CREATE FUNCTION public.unnest(a bytea[]) RETURNS SETOF bytea LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('unnest(bytea[])');
          RETURN QUERY SELECT x FROM pg_catalog.unnest(a) x; END $$;
CREATE FUNCTION public.unnest(a bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('unnest(bigint[])');
          RETURN QUERY SELECT x FROM pg_catalog.unnest(a) x; END $$;
CREATE FUNCTION public.unnest(a int2[]) RETURNS SETOF int2 LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('unnest(int2[])');
          RETURN QUERY SELECT x FROM pg_catalog.unnest(a) x; END $$;
CREATE FUNCTION public.cardinality(a int2[]) RETURNS integer LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('cardinality(int2[])'); RETURN pg_catalog.cardinality(a); END $$;
CREATE FUNCTION public.to_jsonb(a text) RETURNS jsonb LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('to_jsonb(text)'); RETURN pg_catalog.to_jsonb(a); END $$;
CREATE FUNCTION public.jsonb_build_array(a integer) RETURNS jsonb LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('jsonb_build_array(integer)'); RETURN pg_catalog.jsonb_build_array(a); END $$;
CREATE FUNCTION public.text_and_integer(a text, b integer) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.noted('text || integer'); RETURN a OPERATOR(pg_catalog.||) b; END $$;
CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = integer, FUNCTION = public.text_and_integer);
";

/// None of [`SHADOWS`] ever runs as anyone but its maker, whatever the extension does for a
/// superuser's watch of alice's table: watching, alice's DDL and saves (in the statement and
/// after the commit), the worker's deriving and sending, status, reconcile, push_now, TRUNCATE,
/// a new key, unwatching.
#[test]
fn functions_a_database_owner_puts_in_the_extensions_schema_never_run_with_its_rights() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut admin = cluster.connect("postgres");
    admin.batch_execute("CREATE ROLE alice LOGIN").unwrap();
    admin
        .batch_execute("CREATE DATABASE tenant OWNER alice")
        .unwrap();
    let mut db = cluster.connect("tenant");
    db.batch_execute(&format!(
        "CREATE EXTENSION indexnow; SELECT indexnow_add_host('{HOST}', '{KEY}');"
    ))
    .unwrap();
    let mut alice = cluster.connect_as("tenant", "alice");
    alice.batch_execute(SHADOWS).unwrap();
    db.batch_execute(
        "CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, live boolean NOT NULL DEFAULT true); \
         ALTER TABLE pages OWNER TO alice; \
         SELECT indexnow_watch('pages', url => 'https://www.example.com/p/{slug}', visible => 'live');",
    )
    .unwrap();
    alice
        .batch_execute(
            "ALTER TABLE pages ADD COLUMN note text; \
             INSERT INTO pages (id, slug) VALUES (1, 'one'), (2, 'two'); \
             UPDATE pages SET slug = 'uno' WHERE id = 1; \
             INSERT INTO pages (id, slug) SELECT g, 'bulk-' || g::text FROM generate_series(10, 400) g;",
        )
        .unwrap();
    wait_until_settled(&mut db, "the saves are sent", Duration::from_secs(60));
    alice
        .batch_execute(
            "DELETE FROM pages WHERE id = 2; UPDATE pages SET live = false WHERE id = 10;",
        )
        .unwrap();
    wait_until_settled(&mut db, "the removals are sent", Duration::from_secs(60));
    db.batch_execute(&format!(
        "SELECT * FROM indexnow_status(); SELECT * FROM indexnow_reconcile('pages'); \
         SELECT * FROM indexnow_push_now(); \
         SELECT indexnow_disable_host('{HOST}'); SELECT indexnow_enable_host('{HOST}'); \
         SELECT indexnow_add_host('{HOST}', 'another-key-1');"
    ))
    .unwrap();
    alice.batch_execute("TRUNCATE pages").unwrap();
    wait_until_settled(&mut db, "the TRUNCATE is sent", Duration::from_secs(60));
    db.batch_execute("SELECT indexnow_unwatch('pages')")
        .unwrap();
    assert!(
        sent_urls(&receiver).len() > 390,
        "{}",
        sent_urls(&receiver).len()
    );
    let ran: Vec<String> = db
        .query(
            "SELECT who || ': ' || what FROM public.ran WHERE who <> 'alice'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(ran.is_empty(), "ran with another's rights: {ran:?}");
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM pg_roles WHERE rolname = 'alice' AND rolsuper"
        ),
        0
    );
}

/// With a long naptime, a URL held by a pause goes out when the pause ends, not a naptime later:
/// the worker sleeps until the end of the pause.
#[test]
fn sending_resumes_when_a_pause_ends_not_a_naptime_later() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.naptime = '1h'"]);
    let mut db = cluster.create_db_with_extension("site");
    receiver.script([status(429, Some("2"), "slow down")]);
    queue_for_host(&mut db, "/paused/", 1);
    wait_until("the 429", Duration::from_secs(30), || {
        receiver.arrived() == 1
    });
    let paused_at = Instant::now();
    wait_until("the URL after the pause", Duration::from_secs(30), || {
        receiver.arrived() == 2
    });
    let waited = paused_at.elapsed();
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(accepted_urls(&receiver.received()).len(), 1);
}

/// A page scheduled for `infinity` (a common "never") is never sent, and the worker neither
/// stops nor spins: it keeps running, one process, and sends the other pages.
#[test]
fn a_page_scheduled_for_infinity_never_goes_and_the_worker_keeps_running() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, publish_at timestamptz); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/p/{{slug}}', publish_at => 'publish_at'); \
         INSERT INTO posts VALUES (1, 'never', 'infinity');"
    ))
    .unwrap();
    wait_until("the worker runs", Duration::from_secs(30), || {
        worker_state(&mut db).starts_with("running")
    });
    let pid = |db: &mut postgres::Client| {
        count(
            db,
            "SELECT coalesce(max(pid), 0)::bigint FROM pg_stat_activity \
              WHERE backend_type = 'indexnow worker'",
        )
    };
    let first = pid(&mut db);
    std::thread::sleep(Duration::from_secs(2)); // ten passes at naptime 200ms
    assert_eq!(pid(&mut db), first);
    db.batch_execute("INSERT INTO posts VALUES (2, 'now', NULL)")
        .unwrap();
    wait_until("the other page is sent", Duration::from_secs(30), || {
        !sent_urls(&receiver).is_empty()
    });
    assert_eq!(sent_urls(&receiver), [format!("https://{HOST}/p/now")]);
    assert_eq!(pid(&mut db), first);
    assert!(
        !cluster.log().contains("cannot subtract infinite"),
        "{}",
        cluster.log()
    );
}

/// The worker's re-read at send time, as `indexnow_push_now()`'s above: a scheduled page the
/// triggers did not see deleted, hidden or renamed before its time is cancelled, never sent as a
/// removal (its claim had noted it as tried: the re-read took it for announced); and a page
/// rescheduled by the re-read and deleted later is cancelled too.
#[test]
fn the_workers_re_read_never_announces_a_page_that_was_never_public() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, \
                             published boolean NOT NULL DEFAULT true, publish_at timestamptz); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/p/{{slug}}', \
                               visible => 'published', publish_at => 'publish_at'); \
         INSERT INTO posts (id, slug, publish_at) VALUES \
           (1, 'deleted', now() + interval '2 s'), (2, 'hidden', now() + interval '2 s'), \
           (3, 'renamed', now() + interval '2 s'), (4, 'rescheduled', now() + interval '2 s');"
    ))
    .unwrap();
    db.batch_execute(
        "SET session_replication_role = replica; \
         DELETE FROM posts WHERE id = 1; \
         UPDATE posts SET published = false WHERE id = 2; \
         UPDATE posts SET slug = 'renamed-new' WHERE id = 3; \
         UPDATE posts SET publish_at = now() + interval '1 hour' WHERE id = 4; \
         RESET session_replication_role;",
    )
    .unwrap();
    wait_until("the re-read", Duration::from_secs(30), || {
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/rescheduled' \
               AND available_at > now() + interval '50 minutes'",
        ) == 1
    });
    wait_until_settled_but(&mut db, "rescheduled");
    db.batch_execute("DELETE FROM posts WHERE id = 4").unwrap();
    wait_until_settled(&mut db, "the delete", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500)); // a pass more
    let sent: Vec<String> = accepted_urls(&receiver.received()).into_keys().collect();
    assert_eq!(sent, [format!("https://{HOST}/p/renamed-new")]);
}

/// Waits until every pending URL but those containing `but` is settled.
fn wait_until_settled_but(db: &mut postgres::Client, but: &str) {
    wait_until("the others are settled", Duration::from_secs(30), || {
        count(
            db,
            &format!(
                "SELECT count(*) FROM indexnow_urls \
                  WHERE request_seq > settled_seq AND url NOT LIKE '%{but}%'"
            ),
        ) == 0
    });
}

/// Pages published and at once unpublished again while the worker sends: each page announced as
/// live gets its removal after it, however the unpublishing statement's snapshot fell against
/// the worker's claim (its derivation read the queue row as untried and cancelled the request
/// while the announcement went out).
#[test]
fn a_page_unpublished_while_the_worker_claims_it_gets_its_removal() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &["indexnow.naptime = '20ms'"]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, published boolean NOT NULL); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/r/{{slug}}', visible => 'published'); \
         INSERT INTO posts SELECT g, 'race-' || g::text, false FROM generate_series(1, 1000) g;"
    ))
    .unwrap();
    // Rounds of 200 pages until the worker has caught some published (on a machine busy enough,
    // a round can go by with every page hidden again before the worker looked).
    for round in 0..5 {
        for id in round * 200 + 1..=round * 200 + 200 {
            db.execute("UPDATE posts SET published = true WHERE id = $1", &[&id])
                .unwrap();
            db.execute("UPDATE posts SET published = false WHERE id = $1", &[&id])
                .unwrap();
        }
        wait_until_settled(&mut db, "everything is sent", Duration::from_secs(60));
        if !accepted_urls(&receiver.received()).is_empty() {
            break;
        }
    }
    let sent = accepted_urls(&receiver.received());
    assert!(
        !sent.is_empty(),
        "nothing was announced in five rounds: the race was not run"
    );
    let announced_only: Vec<&String> = sent
        .iter()
        .filter(|(_, &times)| times % 2 == 1)
        .map(|(url, _)| url)
        .collect();
    assert!(
        announced_only.is_empty(),
        "{} of {} announced without their removal: {announced_only:?}",
        announced_only.len(),
        sent.len()
    );
}

/// A page that goes, comes back and goes again while the request announcing it is under way
/// (a slow endpoint) is owed its removal: the row that came back began to give the URL after the
/// claim noted it tried, and the second going cancelled every request instead.
#[test]
fn a_page_gone_back_and_gone_while_its_request_is_under_way_gets_its_removal() {
    let receiver = receiver();
    receiver.set_latency(Duration::from_millis(1_500));
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, published boolean NOT NULL); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/p/{{slug}}', visible => 'published'); \
         INSERT INTO posts VALUES (1, 'flicker', true);"
    ))
    .unwrap();
    wait_until("the request is under way", Duration::from_secs(30), || {
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE claimed_until > now()",
        ) == 1
    });
    for published in [false, true, false] {
        db.execute("UPDATE posts SET published = $1", &[&published])
            .unwrap();
    }
    wait_until(
        "the announcement is answered",
        Duration::from_secs(30),
        || !accepted_urls(&receiver.received()).is_empty(),
    );
    wait_until_settled(&mut db, "everything is sent", Duration::from_secs(60));
    wait_until("every request is answered", Duration::from_secs(30), || {
        receiver.received().len() == receiver.arrived()
    });
    let sent = accepted_urls(&receiver.received());
    assert_eq!(
        sent.get(&format!("https://{HOST}/p/flicker")),
        Some(&2),
        "announced, then removed: {sent:?}"
    );
}

/// A page unpublished while `indexnow_push_now()` sends its announcement (a slow endpoint) gets
/// its removal: `indexnow_push_now()` claims by reading, noting nothing, so the derivation of the
/// unpublish found nothing saying search engines might know the page and cancelled its request;
/// then the endpoint accepted the announcement, and nothing was left to remove it.
#[test]
fn a_page_unpublished_while_push_now_sends_it_gets_its_removal() {
    let receiver = receiver();
    receiver.set_latency(Duration::from_millis(1_500));
    let cluster = Cluster::start(Options {
        preload: false,
        conf: sending_conf(&receiver.endpoint(), &[]),
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, published boolean NOT NULL); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/p/{{slug}}', visible => 'published'); \
         INSERT INTO posts VALUES (1, 'pushed', true);"
    ))
    .unwrap();
    let mut editor = cluster.connect("site");
    let pushing = std::thread::spawn(move || {
        db.query_one("SELECT url_count FROM indexnow_push_now()", &[])
            .unwrap()
            .get::<_, i64>(0)
    });
    wait_until("the request is under way", SECONDS(20), || {
        receiver.arrived() == 1
    });
    editor
        .execute("UPDATE posts SET published = false", &[])
        .unwrap();
    assert_eq!(pushing.join().unwrap(), 1, "the announcement was sent");
    editor.batch_execute("SELECT indexnow_derive()").unwrap();
    let owed = editor
        .query_one(
            "SELECT reason FROM indexnow_urls WHERE request_seq > settled_seq",
            &[],
        )
        .map(|r| r.get::<_, String>(0));
    assert_eq!(
        owed.ok().as_deref(),
        Some("unpublished"),
        "the removal is owed"
    );
    editor
        .query_one("SELECT url_count FROM indexnow_push_now()", &[])
        .unwrap();
    let sent = accepted_urls(&receiver.received());
    assert_eq!(
        sent.get(&format!("https://{HOST}/p/pushed")),
        Some(&2),
        "announced, then removed: {sent:?}"
    );
}

/// `indexnow_push_now()` during a pause, or with a host held, sends nothing and says why in a
/// NOTICE, so that a cron job can tell a pause from an empty queue (it returned no rows and said
/// nothing).
#[test]
fn push_now_says_which_pause_or_hold_keeps_due_urls_waiting() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let cluster = Cluster::start(Options {
        preload: false,
        conf: sending_conf(&receiver.endpoint(), &[]),
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         SELECT indexnow_add_host('off.example.com', '{KEY}'); \
         SELECT indexnow_disable_host('off.example.com'); \
         SELECT indexnow_queue('https://{HOST}/a'); \
         SELECT indexnow_queue('https://off.example.com/b'); \
         INSERT INTO indexnow_backoff VALUES ('*', now() + interval '1 hour', 429, 'slow down')"
    ))
    .unwrap();
    let printed = cluster.psql("site", "SELECT count(*) FROM indexnow_push_now()");
    assert!(
        printed.contains("NOTICE:  indexnow: sending is paused until ")
            && printed.contains(" for all hosts (status 429)"),
        "{printed}"
    );
    assert!(
        printed.contains(
            "NOTICE:  indexnow: 1 due URLs of off.example.com wait: disabled: nothing is sent"
        ),
        "{printed}"
    );
    db.batch_execute(&format!(
        "UPDATE indexnow_backoff SET scope = '{HOST}', status = 403"
    ))
    .unwrap();
    let printed = cluster.psql("site", "SELECT count(*) FROM indexnow_push_now()");
    assert!(
        printed.contains(&format!(" for {HOST} (status 403): 1 due URLs wait")),
        "{printed}"
    );
    assert!(!printed.contains("all hosts"), "{printed}");
    assert!(sent_urls(&receiver).is_empty());
}

/// Time alone, without a write (spec behaviour 23): a page past its `expire_at` gets its removal,
/// and a live page whose `publish_at` moved into the future gets its removal at once and its
/// announcement again at the new time. Each arrives at the endpoint at its time, not before.
#[test]
fn an_expiry_and_a_publication_moved_later_are_sent_at_their_times_without_a_write() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, publish_at timestamptz, \
                             expire_at timestamptz); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/t/{{slug}}', \
                               publish_at => 'publish_at', expire_at => 'expire_at'); \
         INSERT INTO posts VALUES (1, 'expiring', NULL, now() + interval '5 s'), \
                                  (2, 'moving', NULL, NULL), (3, 'forever', NULL, NULL);"
    ))
    .unwrap();
    let url = |slug: &str| format!("https://{HOST}/t/{slug}");
    let arrivals = |slug: &str| -> Vec<f64> {
        receiver
            .received()
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .filter(|r| r.request.as_ref().unwrap().url_list.contains(&url(slug)))
            .map(|r| r.arrived_at)
            .collect()
    };
    wait_until("the three pages are announced", SECONDS(30), || {
        ["expiring", "moving", "forever"]
            .iter()
            .all(|s| arrivals(s).len() == 1)
    });
    let expires_at = epoch(&mut db, "SELECT expire_at FROM posts WHERE id = 1");
    db.batch_execute("UPDATE posts SET publish_at = now() + interval '6 s' WHERE id = 2")
        .unwrap();
    let republished_at = epoch(&mut db, "SELECT publish_at FROM posts WHERE id = 2");
    // From here on nothing writes the table.
    wait_until("the moved page's removal", SECONDS(30), || {
        arrivals("moving").len() == 2
    });
    assert!(
        arrivals("moving")[1] < republished_at,
        "the removal went out at once, before the new publication time"
    );
    wait_until("the expiry and the new publication", SECONDS(60), || {
        arrivals("expiring").len() == 2 && arrivals("moving").len() == 3
    });
    assert!(
        arrivals("expiring")[1] >= expires_at,
        "not before its expiry"
    );
    assert!(
        arrivals("moving")[2] >= republished_at,
        "not before its time"
    );
    wait_until_settled(&mut db, "the queue", SECONDS(30));
    std::thread::sleep(Duration::from_millis(600)); // a few passes more: nothing else is sent
    let sent = accepted_urls(&receiver.received());
    assert_eq!(sent.get(&url("forever")), Some(&1));
    assert_eq!(sent.get(&url("expiring")), Some(&2));
    assert_eq!(sent.get(&url("moving")), Some(&3));
    let told: Vec<(String, String)> = db
        .query(
            "SELECT url, settled_reason FROM indexnow_urls ORDER BY url",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        told,
        vec![
            (url("expiring"), "unpublished".to_string()),
            (url("forever"), "created".to_string()),
            (url("moving"), "created".to_string()),
        ]
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_sources WHERE wake_at IS NOT NULL OR withdrawn"
        ),
        0,
        "nothing left to wake"
    );
}

/// The Unix time of the timestamptz `sql` returns.
fn epoch(db: &mut postgres::Client, sql: &str) -> f64 {
    db.query_one(&format!("SELECT extract(epoch FROM ({sql}))::float8"), &[])
        .unwrap()
        .get(0)
}

/// Under a backlog larger than a request (issue 33, item 5), what search engines do not have yet
/// goes first: content changes and removals, oldest first, then re-announcements of unchanged
/// pages (`refresh`), however much older those are.
#[test]
fn under_a_backlog_changes_and_removals_go_before_re_announcements() {
    let receiver = receiver();
    let cluster = cluster(
        &receiver,
        &["indexnow.batch_size = 4", "indexnow.enabled = off"],
    );
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/old/", 6);
    // Pushed long ago, then queued for re-announcement: their changes are the oldest.
    db.batch_execute(
        "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           changed_at = now() - interval '3 days' + split_part(url, '/', 5)::int * interval '1 s', \
           last_pushed_at = now() - interval '2 days'; \
         UPDATE indexnow_urls SET pushed_changed_at = changed_at; \
         SELECT indexnow_queue(url, 'refresh') FROM indexnow_urls;",
    )
    .unwrap();
    db.batch_execute(&format!(
        "SELECT indexnow_queue('https://{HOST}/new/' || g) FROM generate_series(1, 2) g; \
         SELECT indexnow_queue('https://{HOST}/old/1', 'deleted');"
    ))
    .unwrap();
    db.batch_execute("SET indexnow.enabled = on; SELECT indexnow_push_now();")
        .unwrap();
    let requests: Vec<Vec<String>> = receiver
        .received()
        .iter()
        .map(|r| {
            let mut urls = r.request.as_ref().unwrap().url_list.clone();
            urls.sort();
            urls
        })
        .collect();
    let url = |p: &str| format!("https://{HOST}{p}");
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(
        requests[0],
        vec![url("/new/1"), url("/new/2"), url("/old/1"), url("/old/2")],
        "the two new pages and the removal, then the oldest re-announcement"
    );
    assert_eq!(
        requests[1],
        vec![url("/old/3"), url("/old/4"), url("/old/5"), url("/old/6")]
    );
}

/// Every request keeps the URLs it carried beside its answer (issue 33, item 2): what the
/// endpoint received, request by request, is what `indexnow_pushes.urls` says, refused requests
/// included.
#[test]
fn every_request_keeps_the_urls_it_carried() {
    let receiver = receiver();
    receiver.script([ok(), status(422, None, "URLs do not belong to the host")]);
    let cluster = cluster(&receiver, &["indexnow.batch_size = 3"]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/kept/", 5);
    wait_until_settled(&mut db, "the two requests", SECONDS(30));
    let mut sent: Vec<(Vec<String>, i32)> = receiver
        .received()
        .iter()
        .map(|r| {
            let mut urls = r.request.as_ref().unwrap().url_list.clone();
            urls.sort();
            (urls, i32::from(r.status))
        })
        .collect();
    sent.sort();
    let mut kept: Vec<(Vec<String>, i32)> = db
        .query(
            "SELECT ARRAY(SELECT u FROM unnest(urls) u ORDER BY u), status FROM indexnow_pushes",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    kept.sort();
    assert_eq!(sent.len(), 2);
    assert_eq!(kept, sent);
    // "Was this page sent, when, and what was the answer?"
    let answer: i32 = db
        .query_one(
            &format!(
                "SELECT status FROM indexnow_pushes \
                  WHERE 'https://{HOST}/kept/5' = ANY (urls) ORDER BY pushed_at DESC LIMIT 1"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert!(answer == 200 || answer == 422);
}

/// The picture (issue 33, item 6) of a real run: requests accepted, one answered 429 (a pause),
/// then sent after it; what it reads adds up to what the receiver took, the pause is marked,
/// and the SVG file is drawn with its legend.
#[test]
fn the_picture_of_a_run_shows_what_was_sent_and_the_pause() {
    let receiver = receiver();
    receiver.script([ok(), status(429, Some("6"), "slow down")]);
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    queue_for_host(&mut db, "/seen/", 3);
    wait_until_settled(&mut db, "the first request", SECONDS(20));
    queue_for_host(&mut db, "/later/", 2);
    wait_until_settled(&mut db, "the held URLs sent after the pause", SECONDS(40));
    let periods = indexnow_picture::read(&mut db, 60, 10).unwrap();
    assert_eq!(periods.len(), 10);
    let accepted: i64 = periods.iter().map(|p| p.accepted).sum();
    assert_eq!(accepted as usize, accepted_urls(&receiver.received()).len());
    assert_eq!(
        periods.iter().map(|p| p.unanswered).sum::<i64>(),
        2,
        "the 429's two URLs"
    );
    assert!(periods.iter().any(|p| p.paused));
    assert_eq!(periods.last().unwrap().backlog, 0, "nothing waits now");
    let file = cluster.dir.join("picture.svg");
    indexnow_picture::draw(&periods, &file).unwrap();
    let svg = std::fs::read_to_string(&file).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
    for legend in ["accepted", "paused", "backlog"] {
        assert!(svg.contains(legend), "{legend}");
    }
}

/// A database made read-only for sessions (`ALTER DATABASE ... SET default_transaction_read_only
/// = on`, as a DBA does before a migration) does not put its worker in a crash loop: the worker's
/// own transactions write, and what is queued is sent.
#[test]
fn a_database_read_only_for_sessions_keeps_its_worker_sending() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "ALTER DATABASE site SET default_transaction_read_only = on; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
          WHERE backend_type = 'indexnow worker' AND datname = 'site'",
    )
    .unwrap();
    let mut db = cluster.connect("site");
    // (the worker started again, with the database's settings)
    wait_until(
        "a worker serves the database again",
        Duration::from_secs(30),
        || {
            count(
                &mut db,
                "SELECT count(*) FROM pg_stat_activity \
              WHERE backend_type = 'indexnow worker' AND datname = 'site'",
            ) == 1
        },
    );
    db.batch_execute("SET default_transaction_read_only = off")
        .unwrap();
    queue_for_host(&mut db, "/read-only/", 1);
    wait_until("the URL is sent", Duration::from_secs(30), || {
        !sent_urls(&receiver).is_empty()
    });
    assert_eq!(
        sent_urls(&receiver),
        [format!("https://{HOST}/read-only/1")]
    );
    assert!(
        !cluster.log().contains("read-only transaction"),
        "the worker failed on the read-only default"
    );
}

/// One transaction is one announcement, however long its derivation takes: a shop imports its
/// products, its two catalogues and the products' prices in one transaction (a product watch, a
/// watch of each catalogue, whose rows cost 50 ms each to derive here, and a price watch whose
/// `url_sql` gives the product's URL). The worker derives a change set or two a pass and sends
/// between passes: a product page went out after the products' change set was derived, and
/// again after the prices' changed it. Now the pages go once, after the whole import.
#[test]
fn a_transaction_is_announced_once_however_long_its_derivation_takes() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE FUNCTION slow_visible(i int) RETURNS boolean LANGUAGE plpgsql \
           AS $$BEGIN PERFORM pg_sleep(0.05); RETURN true; END$$; \
         CREATE TABLE products (id int PRIMARY KEY, slug text NOT NULL); \
         CREATE TABLE prices (id int PRIMARY KEY, product_id int NOT NULL REFERENCES products, \
                              amount int); \
         CREATE TABLE books (id int PRIMARY KEY, slug text NOT NULL); \
         CREATE TABLE films (id int PRIMARY KEY, slug text NOT NULL); \
         SELECT indexnow_watch('products', url => 'https://{HOST}/p/{{slug}}'); \
         SELECT indexnow_watch('books', url => 'https://{HOST}/b/{{slug}}', \
                               visible => 'slow_visible(id)'); \
         SELECT indexnow_watch('films', url => 'https://{HOST}/f/{{slug}}', \
                               visible => 'slow_visible(id)'); \
         SELECT indexnow_watch('prices', url_sql => $$(SELECT 'https://{HOST}/p/' || p.slug \
                                 FROM products p WHERE p.id = product_id)$$, \
                               related => '{{products}}');"
    ))
    .unwrap();
    // (what watching recorded is derived first)
    wait_until_settled(&mut db, "the watches are derived", Duration::from_secs(30));
    db.batch_execute(
        "BEGIN; \
         INSERT INTO products SELECT g, 'p' || g FROM generate_series(1, 30) g; \
         INSERT INTO books SELECT g, 'b' || g FROM generate_series(1, 20) g; \
         INSERT INTO films SELECT g, 'f' || g FROM generate_series(1, 20) g; \
         INSERT INTO prices SELECT g, g, 100 FROM generate_series(1, 30) g; \
         COMMIT;",
    )
    .unwrap();
    wait_until_settled(&mut db, "the import is sent", Duration::from_secs(60));
    let sent = sent_urls(&receiver);
    let mut expected: Vec<String> = (1..=30)
        .map(|i| format!("https://{HOST}/p/p{i}"))
        .chain((1..=20).map(|i| format!("https://{HOST}/b/b{i}")))
        .chain((1..=20).map(|i| format!("https://{HOST}/f/f{i}")))
        .collect();
    expected.sort();
    assert_eq!(sent, expected, "each page sent once");
}

/// A worker told to stop leaves at once, whatever it derives: `DROP DATABASE` (with and without
/// `FORCE`) of a database whose worker derives a slow change (50 ms a row, 200 rows) goes ahead
/// at once. (Before: the derivation went on for up to 10 s, and PostgreSQL gives the database's
/// other processes 5 s before a DROP fails with "database is being accessed by other users".)
#[test]
fn a_worker_deriving_leaves_at_once_for_drop_database() {
    let receiver = receiver();
    let cluster = cluster(&receiver, &[]);
    for (db_name, ddl) in [
        ("site", "DROP DATABASE site"),
        ("forced", "DROP DATABASE forced WITH (FORCE)"),
    ] {
        let mut db = cluster.create_db_with_extension(db_name);
        db.batch_execute(
            "CREATE FUNCTION slow_visible(i int) RETURNS boolean LANGUAGE plpgsql \
               AS $$BEGIN PERFORM pg_sleep(0.05); RETURN true; END$$; \
             CREATE TABLE slow (id int PRIMARY KEY, slug text NOT NULL); \
             SELECT indexnow_watch('slow', url => 'https://www.example.com/s/{slug}', \
                                   visible => 'slow_visible(id)'); \
             INSERT INTO slow SELECT g, 's' || g FROM generate_series(1, 200) g;",
        )
        .unwrap();
        wait_until("the worker derives", Duration::from_secs(10), || {
            count(
                &mut db,
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'indexnow: deriving%'",
            ) > 0
        });
        drop(db);
        let started = Instant::now();
        cluster
            .connect("postgres")
            .batch_execute(ddl)
            .unwrap_or_else(|e| panic!("{ddl}: {e}\n{}", cluster.log()));
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "{ddl} waited {took:?}");
    }
}

/// A command that wants the database alone but will fail makes no worker leave its request:
/// `ALTER DATABASE ... RENAME` while another session is connected (PostgreSQL refuses it
/// whatever the workers do) leaves the worker and its request under way; one that fails for
/// another reason (the new name is taken) has the database served again at once, not after a
/// minute. (Before: the worker left its request, whose URLs were sent twice, and sending stopped
/// for a minute.)
#[test]
fn a_failed_rename_of_the_database_leaves_its_worker_alone() {
    let (_receiver, cluster, mut db) = request_under_way(60_000, "60s");
    let worker = |db: &mut postgres::Client| -> Option<i32> {
        db.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        db.query_opt(
            "SELECT pid FROM pg_stat_activity \
              WHERE backend_type = 'indexnow worker' AND datname = 'site'",
            &[],
        )
        .unwrap()
        .map(|r| r.get(0))
    };
    let before = worker(&mut db).expect("a worker serves the database");
    let mut postgres = cluster.connect("postgres");
    let refused = postgres.batch_execute("ALTER DATABASE site RENAME TO site2");
    assert!(
        refused.is_err(),
        "the rename went through with a session connected"
    );
    assert_eq!(worker(&mut db), Some(before), "the worker left its request");
    // (alone, the rename would go ahead: the workers are stopped for it; it fails on the name)
    drop(db);
    let taken = postgres.batch_execute("ALTER DATABASE site RENAME TO postgres");
    assert!(taken.is_err(), "renamed onto a database that exists");
    let mut db = cluster.connect("site");
    wait_until("a worker serves the database again", SECONDS(15), || {
        worker(&mut db).is_some_and(|pid| pid != before)
    });
}
