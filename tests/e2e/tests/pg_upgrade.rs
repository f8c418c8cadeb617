//! `pg_upgrade` of a cluster that runs indexnow, as a DBA does it (docs/operations.md, "Replicas,
//! failover, pg_upgrade"): from the PostgreSQL of `INDEXNOW_PG_BIN` to the one of
//! `INDEXNOW_PG_UPGRADE_BIN`, each with this release installed. `scripts/test.sh` runs it from 15
//! to 18 and from 16 to 17, once every version is installed.

use indexnow_e2e::{count, queued, sending_conf, sent_urls, wait_until, Cluster, Options};
use indexnow_receiver::Receiver;
use std::time::Duration;

const HOST: &str = "www.example.com";

/// A site with watched pages and URLs pending (sending switched off), upgraded by `pg_upgrade`:
/// its workers start on the new version and hold its hosts as a copy's (a new system identifier)
/// until `indexnow_confirm_copy()`; then every pending URL is sent once, and a save after the
/// upgrade is captured and sent.
#[test]
fn pending_urls_and_watches_survive_pg_upgrade() {
    let new_bin = std::env::var("INDEXNOW_PG_UPGRADE_BIN")
        .expect("INDEXNOW_PG_UPGRADE_BIN names the bindir of the version to upgrade to");
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let conf = sending_conf(&receiver.endpoint(), &[]);
    let mut held = conf.clone();
    held.push("indexnow.enabled = off".into());
    let cluster = Cluster::start(Options {
        preload: true,
        conf: held,
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', 'abcdefgh12'); \
         CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, live boolean NOT NULL); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}', visible => 'live'); \
         INSERT INTO pages SELECT g, 'p' || g, g % 5 <> 0 FROM generate_series(1, 200) g;"
    ))
    .unwrap();
    let pending = queued(&mut db);
    assert_eq!(pending.len(), 160, "{pending:?}");
    assert!(sent_urls(&receiver).is_empty());
    drop(db);

    let (upgraded, said) = cluster.upgraded_to(&new_bin, &conf);
    assert!(said.contains("Upgrade Complete"), "{said}");
    let mut db = upgraded.connect("site");
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"
        ),
        160,
        "the pending URLs are there after the upgrade"
    );
    // A new cluster is another system to indexnow (pg_upgrade's `initdb` gave it its own system
    // identifier): its hosts are held as a copy's until the DBA confirms it, as for any copy.
    let held: String = db
        .query_one(
            "SELECT held FROM indexnow_status() WHERE host = $1",
            &[&HOST],
        )
        .unwrap()
        .get(0);
    assert!(held.contains("this database is a copy"), "{held}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        sent_urls(&receiver).is_empty(),
        "sent before it was confirmed"
    );
    db.batch_execute("SELECT indexnow_confirm_copy()").unwrap();
    wait_until("every pending URL is sent", Duration::from_secs(60), || {
        sent_urls(&receiver).len() >= 160
    });
    let sent = sent_urls(&receiver);
    let mut once = sent.clone();
    once.dedup();
    assert_eq!(once, sent, "a URL was sent twice");
    assert_eq!(sent.len(), 160);
    // A save after the upgrade: captured by the watch's trigger, sent (the new URL, and the old
    // one's removal).
    db.batch_execute("UPDATE pages SET slug = 'moved' WHERE id = 1")
        .unwrap();
    wait_until("the save is sent", Duration::from_secs(60), || {
        sent_urls(&receiver).len() == 162
    });
    let mut after = sent_urls(&receiver);
    for url in &sent {
        let at = after.iter().position(|u| u == url).unwrap();
        after.remove(at);
    }
    assert_eq!(
        after,
        [
            format!("https://{HOST}/moved"),
            format!("https://{HOST}/p1")
        ]
    );
    assert_eq!(
        db.query_one(
            "SELECT current_setting('server_version_num')::int / 10000",
            &[]
        )
        .unwrap()
        .get::<_, i32>(0),
        major(&new_bin)
    );
}

fn major(bin: &str) -> i32 {
    let out = std::process::Command::new(format!("{bin}/postgres"))
        .arg("--version")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap()
}
