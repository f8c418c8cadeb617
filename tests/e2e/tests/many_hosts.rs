//! Many hosts in one database, end to end: requests for several hosts in flight together (never
//! two for one host), a pause ordered mid-flight, and hosts taken in turn so that one host's
//! backlog does not hold up another's page. The local receiver answers each request after a
//! latency, as a real endpoint does, serving them concurrently.

use indexnow_e2e::{count, sending_conf, wait_until, wait_until_settled, Cluster, Options};
use indexnow_receiver::{Received, Receiver, Reply};
use std::collections::HashMap;
use std::time::Duration;

const SECONDS: fn(u64) -> Duration = Duration::from_secs;

fn started(receiver: &Receiver, extra: &[&str]) -> Cluster {
    Cluster::start(Options {
        preload: true,
        conf: sending_conf(&receiver.endpoint(), extra),
    })
}

/// Adds `hosts` (each with a key of its own) and queues `per_host` URLs of each, in one
/// transaction: the worker wakes at its commit.
fn queue(db: &mut postgres::Client, hosts: &[&str], per_host: i32) {
    let hosts = hosts.join(",");
    db.batch_execute(&format!(
        "BEGIN; \
         SELECT indexnow_add_host(h, 'key' || md5(h)) FROM unnest('{{{hosts}}}'::text[]) h; \
         SELECT indexnow_queue('https://' || h || '/page/' || g) \
           FROM unnest('{{{hosts}}}'::text[]) h, generate_series(1, {per_host}) g; \
         COMMIT;"
    ))
    .unwrap();
}

fn host_of(r: &Received) -> &str {
    &r.request.as_ref().unwrap().host
}

/// The most requests open at once, each taken as open from its arrival for `latency`.
fn most_at_once(received: &[Received], latency: f64) -> usize {
    received
        .iter()
        .map(|r| {
            received
                .iter()
                .filter(|o| o.arrived_at <= r.arrived_at && r.arrived_at < o.arrived_at + latency)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Every URL the receiver accepted, with how many times.
fn accepted(received: &[Received]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in received.iter().filter(|r| r.status == 200) {
        for url in &r.request.as_ref().unwrap().url_list {
            *seen.entry(url.clone()).or_insert(0) += 1;
        }
    }
    seen
}

#[test]
fn requests_for_several_hosts_are_in_flight_together_and_never_two_for_one_host() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let latency = 0.4;
    receiver.set_latency(Duration::from_secs_f64(latency));
    let cluster = started(
        &receiver,
        &["indexnow.batch_size = 2", "indexnow.max_in_flight = 3"],
    );
    let mut db = cluster.create_db_with_extension("site");
    let hosts = [
        "a.example.com",
        "b.example.com",
        "c.example.com",
        "d.example.com",
        "e.example.com",
    ];
    queue(&mut db, &hosts, 4);
    wait_until_settled(&mut db, "every URL is sent", SECONDS(30));

    let received = receiver.received();
    assert_eq!(
        received.len(),
        10,
        "two batches of two for each of five hosts"
    );
    let seen = accepted(&received);
    assert_eq!(seen.len(), 20, "every URL arrived");
    assert!(seen.values().all(|n| *n == 1), "none twice: {seen:?}");
    let at_once = most_at_once(&received, latency);
    assert_eq!(at_once, 3, "three requests in flight at once, never more");
    for host in hosts {
        let mut arrivals: Vec<f64> = received
            .iter()
            .filter(|r| host_of(r) == host)
            .map(|r| r.arrived_at)
            .collect();
        arrivals.sort_by(f64::total_cmp);
        assert_eq!(arrivals.len(), 2, "{host}");
        assert!(
            arrivals[1] - arrivals[0] >= latency,
            "{host}'s second request started before the first was answered: {arrivals:?}"
        );
    }
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_pushes WHERE status = 200"
        ),
        10,
        "every request recorded"
    );
}

#[test]
fn a_pause_ordered_mid_flight_stops_new_requests_and_every_answer_in_flight_is_recorded() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    receiver.set_latency(Duration::from_millis(800));
    // The third host's answer comes at once, while the first two are still in flight.
    receiver.set_host_latency("b-throttled.example.com", Duration::ZERO);
    receiver.set_host_reply(
        "b-throttled.example.com",
        Reply::Status {
            status: 429,
            retry_after: Some("60".into()),
            body: String::new(),
        },
    );
    let cluster = started(&receiver, &["indexnow.max_in_flight = 3"]);
    let mut db = cluster.create_db_with_extension("site");
    let hosts = [
        "a1.example.com",
        "a2.example.com",
        "b-throttled.example.com",
        "c1.example.com",
        "c2.example.com",
    ];
    queue(&mut db, &hosts, 2);
    wait_until("the requests in flight are recorded", SECONDS(20), || {
        count(&mut db, "SELECT count(*) FROM indexnow_pushes") == 3
    });
    std::thread::sleep(SECONDS(2)); // several passes: the pause holds

    let received = receiver.received();
    let arrived = |host: &str| {
        received
            .iter()
            .find(|r| host_of(r) == host)
            .map(|r| r.arrived_at)
            .unwrap()
    };
    let throttled = arrived("b-throttled.example.com");
    for host in ["a1.example.com", "a2.example.com"] {
        assert!(
            throttled < arrived(host) + 0.8,
            "{host}'s request was in flight when the 429 came"
        );
    }
    let mut requested: Vec<&str> = received.iter().map(host_of).collect();
    requested.sort();
    assert_eq!(
        requested,
        [
            "a1.example.com",
            "a2.example.com",
            "b-throttled.example.com"
        ],
        "no request started after the 429"
    );
    let status_of = |db: &mut postgres::Client, host: &str| -> (i64, i64) {
        let row = db
            .query_one(
                "SELECT count(*) FILTER (WHERE request_seq > settled_seq), \
                        count(*) FILTER (WHERE last_pushed_at IS NOT NULL) \
                   FROM indexnow_urls WHERE host = $1",
                &[&host],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    // Answered 200 while the pause was being written: recorded as pushed.
    assert_eq!(status_of(&mut db, "a1.example.com"), (0, 2));
    assert_eq!(status_of(&mut db, "a2.example.com"), (0, 2));
    // Throttled and never requested: still due, nothing lost.
    for host in [
        "b-throttled.example.com",
        "c1.example.com",
        "c2.example.com",
    ] {
        assert_eq!(status_of(&mut db, host), (2, 0), "{host}");
    }
    let pushes: Vec<(String, i32)> = db
        .query(
            "SELECT host, status FROM indexnow_pushes ORDER BY host",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        pushes,
        [
            ("a1.example.com".to_string(), 200),
            ("a2.example.com".to_string(), 200),
            ("b-throttled.example.com".to_string(), 429)
        ]
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_backoff WHERE scope = '*'"
        ),
        1,
        "the pause holds every host"
    );
    assert!(accepted(&received).values().all(|n| *n == 1));
}

#[test]
fn a_host_with_a_backlog_does_not_hold_up_another_hosts_page() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    receiver.set_latency(Duration::from_millis(150));
    // One request at a time: the order of the requests is the order the pass takes the hosts in.
    let cluster = started(
        &receiver,
        &["indexnow.batch_size = 2", "indexnow.max_in_flight = 1"],
    );
    let mut db = cluster.create_db_with_extension("site");
    queue(&mut db, &["big.example.com"], 40); // 20 batches, 3 s at the least
    wait_until("the backlog is being sent", SECONDS(20), || {
        receiver.received().len() >= 3
    });
    queue(&mut db, &["small.example.com"], 1);
    let queued_after = receiver.received().len();
    wait_until("the other host's page is sent", SECONDS(20), || {
        receiver
            .received()
            .iter()
            .any(|r| host_of(r) == "small.example.com")
    });
    let received = receiver.received();
    let small = received
        .iter()
        .position(|r| host_of(r) == "small.example.com")
        .unwrap();
    assert!(
        small <= queued_after + 2,
        "the page waited for {} of the backlog's batches",
        small - queued_after
    );
    wait_until_settled(&mut db, "the backlog is sent", SECONDS(30));
    let received = receiver.received();
    assert!(
        received[small + 1..]
            .iter()
            .any(|r| host_of(r) == "big.example.com"),
        "taken in turn: the backlog goes on after the page"
    );
    assert_eq!(received.len(), 21);
}

#[test]
fn a_disabled_host_is_held_and_the_others_go_on() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let cluster = started(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "SELECT indexnow_add_host('off.example.com', 'offkey1234'); \
         SELECT indexnow_disable_host('off.example.com');",
    )
    .unwrap();
    queue(
        &mut db,
        &["off.example.com", "on1.example.com", "on2.example.com"],
        3,
    );
    wait_until("the enabled hosts are sent", SECONDS(20), || {
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE host <> 'off.example.com' \
               AND request_seq > settled_seq",
        ) == 0
    });
    std::thread::sleep(SECONDS(1)); // several passes
    assert!(receiver
        .received()
        .iter()
        .all(|r| host_of(r) != "off.example.com"));
    let held: Option<String> = db
        .query_one(
            "SELECT held FROM indexnow_status() WHERE host = 'off.example.com'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        held.as_deref().is_some_and(|h| h.starts_with("disabled")),
        "{held:?}"
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE host = 'off.example.com' \
               AND request_seq > settled_seq"
        ),
        3,
        "held, not dropped"
    );
    db.batch_execute("SELECT indexnow_enable_host('off.example.com')")
        .unwrap();
    wait_until_settled(&mut db, "the host enabled again is sent", SECONDS(20));
    assert_eq!(receiver.received().len(), 3);
}

fn ok(status: u16, body: &str) -> Reply {
    Reply::Status {
        status,
        retry_after: None,
        body: body.to_string(),
    }
}

/// `indexnow_status()`'s key state of `host`: (state, note).
fn key_state(db: &mut postgres::Client, host: &str) -> (String, Option<String>) {
    let row = db
        .query_one(
            "SELECT key_state, key_state_note, key_state_at IS NOT NULL FROM indexnow_status() \
              WHERE host = $1",
            &[&host],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn key_states_follow_the_answers_and_a_new_key_brings_back_what_the_old_one_lost() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    // A long naptime: what is sent here is sent because a commit woke the worker.
    let cluster = started(&receiver, &["indexnow.naptime = '1min'"]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute("SELECT indexnow_add_host('new.example.com', 'newkey1234')")
        .unwrap();
    assert_eq!(
        key_state(&mut db, "new.example.com"),
        ("unused".into(), None)
    );

    receiver.set_host_reply("pending.example.com", ok(202, ""));
    receiver.set_host_reply("rejected.example.com", ok(403, "key not valid"));
    queue(&mut db, &["pending.example.com", "rejected.example.com"], 2);
    wait_until_settled(&mut db, "both hosts are answered", SECONDS(20));
    assert_eq!(
        key_state(&mut db, "pending.example.com"),
        ("pending".into(), Some("202".into()))
    );
    assert_eq!(
        key_state(&mut db, "rejected.example.com"),
        ("rejected".into(), Some("403: key not valid".into()))
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT failed FROM indexnow_status() WHERE host = 'rejected.example.com'"
        ),
        2,
        "the rejected key's URLs failed"
    );

    // Verified once the key file is found; a new key for the rejected host brings its URLs back.
    receiver.set_host_reply("pending.example.com", ok(200, ""));
    receiver.set_host_reply("rejected.example.com", ok(200, ""));
    // The new key alone wakes the worker for the URLs it brings back.
    db.batch_execute("SELECT indexnow_add_host('rejected.example.com', 'rotatedkey99')")
        .unwrap();
    wait_until_settled(&mut db, "the URLs the old key lost are sent", SECONDS(20));
    db.batch_execute("SELECT indexnow_queue('https://pending.example.com/later')")
        .unwrap();
    wait_until_settled(&mut db, "the page of the pending host is sent", SECONDS(20));
    assert_eq!(
        key_state(&mut db, "pending.example.com"),
        ("verified".into(), Some("200".into()))
    );
    assert_eq!(
        key_state(&mut db, "rejected.example.com"),
        ("verified".into(), Some("200".into()))
    );
    let resent: Vec<_> = receiver
        .received()
        .into_iter()
        .filter(|r| r.status == 200 && host_of(r) == "rejected.example.com")
        .collect();
    assert_eq!(resent.len(), 1);
    let request = resent[0].request.as_ref().unwrap();
    assert_eq!(request.key, "rotatedkey99");
    assert_eq!(request.url_list.len(), 2, "both URLs the old key lost");
}

#[test]
fn a_pause_the_endpoint_orders_holds_every_database_of_the_server() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    receiver.script([Reply::Status {
        status: 429,
        retry_after: Some("60".into()),
        body: "slow down".into(),
    }]);
    let cluster = started(&receiver, &[]);
    let mut one = cluster.create_db_with_extension("one");
    queue(&mut one, &["one.example.com"], 1);
    wait_until("the first database is throttled", SECONDS(20), || {
        count(
            &mut one,
            "SELECT count(*) FROM indexnow_backoff WHERE scope = '*'",
        ) == 1
    });
    // Another database of the server, sending to the same endpoint, mid-pause.
    let mut two = cluster.create_db_with_extension("two");
    queue(&mut two, &["two.example.com"], 1);
    wait_until(
        "the second database holds the pause too",
        SECONDS(20),
        || {
            count(
                &mut two,
                "SELECT count(*) FROM indexnow_status() \
              WHERE host = 'two.example.com' AND backoff_until IS NOT NULL",
            ) == 1
        },
    );
    std::thread::sleep(SECONDS(2)); // several passes of its worker
    assert_eq!(receiver.arrived(), 1, "nothing sent after the 429");
    assert_eq!(
        count(
            &mut two,
            "SELECT pending FROM indexnow_status() WHERE host = 'two.example.com'"
        ),
        1,
        "held, not dropped"
    );
    let (until_one, until_two): (f64, f64) = (
        one.query_one(
            "SELECT extract(epoch FROM until)::float8 FROM indexnow_backoff",
            &[],
        )
        .unwrap()
        .get(0),
        two.query_one(
            "SELECT extract(epoch FROM until)::float8 FROM indexnow_backoff",
            &[],
        )
        .unwrap()
        .get(0),
    );
    assert!(
        (until_one - until_two).abs() < 2.0,
        "the same pause: {until_one} / {until_two}"
    );
    assert!(cluster
        .log()
        .contains("answered to another database of this server"));
    // Ended by hand (docs/operations.md, "Clearing a pause"), in each database that shows it: both
    // send at once, not at the end of the pause, which the other database's worker keeps to
    // otherwise.
    one.batch_execute("DELETE FROM indexnow_backoff").unwrap();
    two.batch_execute("DELETE FROM indexnow_backoff").unwrap();
    wait_until("both databases send", SECONDS(20), || {
        receiver.arrived() == 3
    });
    assert_eq!(
        count(&mut two, "SELECT count(*) FROM indexnow_backoff"),
        0,
        "the pause ended is not written back"
    );
}

#[test]
fn a_site_on_another_port_is_sent_under_its_host_name() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let cluster = started(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "SELECT indexnow_add_host('shop.example.com:8443', 'shopkey1234'); \
         SELECT indexnow_queue('https://shop.example.com:8443/cart');",
    )
    .unwrap();
    wait_until_settled(&mut db, "the page is sent", SECONDS(20));
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].status, 200, "{:?}", received[0].problem);
    let request = received[0].request.as_ref().unwrap();
    assert_eq!(request.host, "shop.example.com");
    assert_eq!(request.url_list, ["https://shop.example.com:8443/cart"]);
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE last_pushed_at IS NOT NULL"
        ),
        1
    );
}

#[test]
fn a_thousand_tenants_are_added_rekeyed_and_sent_in_single_statements() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let cluster = started(&receiver, &[]);
    let mut db = cluster.create_db_with_extension("saas");
    db.batch_execute(
        "CREATE TABLE tenants (host text PRIMARY KEY, indexnow_key text NOT NULL); \
         INSERT INTO tenants SELECT format('t%s.example.com', g), 'tenantkey-' || g \
           FROM generate_series(1, 1000) g;",
    )
    .unwrap();
    // One statement adds them all, with the same checks as one call.
    db.batch_execute("SELECT count(indexnow_add_host(host, indexnow_key)) FROM tenants")
        .unwrap();
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_hosts"), 1000);
    // A bad row fails the statement, naming it; nothing of it is kept.
    let refused = db
        .batch_execute(
            "SELECT count(indexnow_add_host(host, CASE WHEN host = 't7.example.com' \
                    THEN 'no good' ELSE 'rotated-' || indexnow_key END)) FROM tenants",
        )
        .unwrap_err();
    assert!(
        refused
            .as_db_error()
            .is_some_and(|e| e.message().contains("key for t7.example.com")),
        "{refused:?}"
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_hosts WHERE key LIKE 'rotated-%'"
        ),
        0
    );
    // Re-keyed in one statement, then a page of every tenant sent with its new key.
    db.batch_execute(
        "UPDATE tenants SET indexnow_key = 'rotated-' || indexnow_key; \
         SELECT count(indexnow_add_host(host, indexnow_key)) FROM tenants; \
         SELECT count(indexnow_queue('https://' || host || '/')) FROM tenants;",
    )
    .unwrap();
    wait_until_settled(&mut db, "every tenant's page is sent", SECONDS(60));
    let received = receiver.received();
    assert_eq!(received.len(), 1000);
    assert!(received.iter().all(|r| {
        let request = r.request.as_ref().unwrap();
        r.status == 200 && request.key.starts_with("rotated-tenantkey-")
    }));
}

/// The worker of `db` that `pg_stat_activity` shows, if any.
fn worker_pid(cluster: &Cluster, db: &str) -> Option<i32> {
    cluster
        .connect("postgres")
        .query_opt(
            "SELECT pid FROM pg_stat_activity \
              WHERE backend_type = 'indexnow worker' AND datname = $1",
            &[&db],
        )
        .unwrap()
        .map(|r| r.get(0))
}

fn worker_of(cluster: &Cluster, db: &str) -> String {
    indexnow_e2e::worker_state(&mut cluster.connect(db))
}

/// The WARNINGs of the launcher about slots in the server log, from the `from`th byte on.
fn slot_warnings(cluster: &Cluster, from: usize) -> Vec<String> {
    cluster.log()[from..]
        .lines()
        .filter(|l| l.contains("WARNING") && l.contains("no free background worker slot"))
        .map(str::to_string)
        .collect()
}

/// Short of background worker slots (`max_worker_processes = 5`: the logical replication
/// launcher and indexnow's launcher take two, three are left for database workers), the launcher
/// serves first the databases known to send, then those never looked at, then copies, and last
/// those it found without the extension; the databases it could not serve are named in one
/// WARNING, by name, and `indexnow_status().worker` in each says so. (It started them in
/// `pg_database` order, warned with the OID of the first it could not serve, `postgres` without
/// the extension, and a copy held a slot that a real site waited for.)
#[test]
fn short_of_worker_slots_the_sites_that_send_come_first_and_the_others_are_named() {
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let cluster = started(
        &receiver,
        &[
            "max_worker_processes = 5",
            "max_parallel_workers = 0",
            "max_parallel_workers_per_gather = 0",
            "max_parallel_maintenance_workers = 0",
        ],
    );
    // A real site, and a copy (its host's home is another database: it sends nothing).
    for (db, copy) in [("site1", false), ("copy1", true), ("site2", false)] {
        let mut c = cluster.create_db_with_extension(db);
        c.batch_execute("SELECT indexnow_add_host('www.example.com', 'abcdefgh12')")
            .unwrap();
        if copy {
            c.batch_execute("UPDATE indexnow_hosts SET home_database = 0")
                .unwrap();
        }
        wait_until(&format!("{db} is served"), SECONDS(30), || {
            worker_pid(&cluster, db).is_some()
        });
    }
    let held: String = cluster
        .connect("copy1")
        .query_one("SELECT held FROM indexnow_status()", &[])
        .unwrap()
        .get(0);
    assert!(held.contains("this database is a copy"), "{held}");
    // (a pass of the copy's worker, which tells the launcher it is a copy)
    std::thread::sleep(Duration::from_millis(1_000));

    // A new site finds no slot: named, not `postgres` (no extension) nor the OID of either.
    let from = cluster.log().len();
    drop(cluster.create_db_with_extension("site3"));
    wait_until("a WARNING names site3", SECONDS(30), || {
        slot_warnings(&cluster, from)
            .iter()
            .any(|w| w.contains("site3"))
    });
    let warnings = slot_warnings(&cluster, from);
    let warning = warnings.iter().find(|w| w.contains("site3")).unwrap();
    assert!(warning.contains("max_worker_processes"), "{warning}");
    assert!(
        !warning.contains("site1") && !warning.contains("site2") && !warning.contains("copy1"),
        "{warning}"
    );
    let state = worker_of(&cluster, "site3");
    assert!(
        state.starts_with("not running: no free background worker slot"),
        "{state}"
    );
    assert!(state.contains("raise max_worker_processes"), "{state}");

    // The copy's worker exits: the slot goes to the site, not back to the copy (older in
    // pg_database), and the copy is the one named.
    let copy_pid = worker_pid(&cluster, "copy1").unwrap();
    let from = cluster.log().len();
    cluster
        .connect("postgres")
        .execute("SELECT pg_terminate_backend($1)", &[&copy_pid])
        .unwrap();
    wait_until("site3 is served", SECONDS(30), || {
        worker_pid(&cluster, "site3").is_some()
    });
    wait_until("a WARNING names copy1", SECONDS(30), || {
        slot_warnings(&cluster, from)
            .iter()
            .any(|w| w.contains("copy1"))
    });
    for _ in 0..20 {
        assert_eq!(
            worker_pid(&cluster, "copy1"),
            None,
            "the copy took a slot back"
        );
        assert!(
            worker_pid(&cluster, "site3").is_some(),
            "site3 lost its slot"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let state = worker_of(&cluster, "copy1");
    assert!(
        state.starts_with("not running: no free background worker slot"),
        "{state}"
    );
    let site3 = worker_of(&cluster, "site3");
    assert!(site3.starts_with("running"), "{site3}");
}
