//! Nothing leaks from a copy or a switched-off database (behaviour 22), end to end: a
//! running worker follows `ALTER DATABASE ... SET` and `ALTER ROLE ... IN DATABASE ... SET` and
//! their resets; a database copied with `CREATE DATABASE ... TEMPLATE`, or dumped and restored
//! into another cluster, queues but sends nothing until `indexnow_confirm_copy()`. (A promoted
//! physical standby goes on sending: `nothing_is_sent_on_a_hot_standby_until_promotion` in
//! sending.rs.)

use indexnow_e2e::{count, sending_conf, sent_urls, wait_until, Cluster, Options};
use indexnow_receiver::Receiver;
use std::time::Duration;

const SECONDS: fn(u64) -> Duration = Duration::from_secs;
const HOST: &str = "www.example.com";
const KEY: &str = "abcdefgh12";

fn receiver() -> Receiver {
    Receiver::start("127.0.0.1:0").unwrap()
}

fn cluster(receiver: &Receiver) -> Cluster {
    Cluster::start(sending_options(receiver))
}

fn sending_options(receiver: &Receiver) -> Options {
    Options {
        preload: true,
        conf: sending_conf(&receiver.endpoint(), &[]),
    }
}

fn queue(db: &mut postgres::Client, path: &str) {
    db.batch_execute(&format!("SELECT indexnow_queue('https://{HOST}{path}')"))
        .unwrap();
}

fn worker_of(db: &mut postgres::Client) -> String {
    db.query_one("SELECT worker FROM indexnow_status()", &[])
        .unwrap()
        .get(0)
}

/// Waits long enough for a worker to have sent anything it was going to (passes every 200 ms).
fn a_few_passes() {
    std::thread::sleep(Duration::from_millis(2_500));
}

#[test]
fn a_running_worker_follows_database_and_role_settings_and_their_resets() {
    let receiver = receiver();
    let cluster = cluster(&receiver);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!("SELECT indexnow_add_host('{HOST}', '{KEY}')"))
        .unwrap();
    queue(&mut db, "/1");
    wait_until("the first URL is sent", SECONDS(30), || {
        sent_urls(&receiver).len() == 1
    });
    let mut admin = cluster.connect("postgres");
    for (switch_off, switch_on) in [
        (
            "ALTER DATABASE site SET indexnow.enabled = off",
            "ALTER DATABASE site RESET indexnow.enabled",
        ),
        (
            "ALTER ROLE postgres IN DATABASE site SET indexnow.enabled = off",
            "ALTER ROLE postgres IN DATABASE site RESET ALL",
        ),
    ] {
        let before = sent_urls(&receiver).len();
        admin.batch_execute(switch_off).unwrap();
        wait_until(
            &format!("the running worker obeys {switch_off}"),
            SECONDS(30),
            || worker_of(&mut cluster.connect("site")).contains("indexnow.enabled is off"),
        );
        let mut db = cluster.connect("site");
        queue(&mut db, &format!("/while-off-{before}"));
        a_few_passes();
        assert_eq!(
            sent_urls(&receiver).len(),
            before,
            "sent after {switch_off}"
        );
        assert_eq!(
            count(
                &mut db,
                "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"
            ),
            1,
            "queued while off"
        );
        admin.batch_execute(switch_on).unwrap();
        wait_until(
            &format!("the worker sends again after {switch_on}"),
            SECONDS(30),
            || sent_urls(&receiver).len() == before + 1,
        );
    }
    let log = cluster.log();
    assert!(
        log.contains("the database's settings changed; starting again"),
        "{log}"
    );
}

/// A database whose host is switched off, with one URL waiting: what a copy starts from.
fn site_with_a_waiting_url(cluster: &Cluster) -> postgres::Client {
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); SELECT indexnow_disable_host('{HOST}')"
    ))
    .unwrap();
    queue(&mut db, "/waiting");
    db
}

/// In `copy`: the host is switched on, and still nothing is sent, and status says why, until
/// the copy is confirmed; then the waiting URL goes out.
fn held_until_confirmed(copy: &mut postgres::Client, receiver: &Receiver) {
    copy.batch_execute(&format!("SELECT indexnow_enable_host('{HOST}')"))
        .unwrap();
    wait_until("the copy is served", SECONDS(30), || {
        worker_of(copy).starts_with("running")
    });
    a_few_passes();
    assert_eq!(sent_urls(receiver), Vec::<String>::new(), "a copy sent");
    let held: String = copy
        .query_one(
            "SELECT held FROM indexnow_status() WHERE host = $1",
            &[&HOST],
        )
        .unwrap()
        .get(0);
    assert!(held.contains("this database is a copy"), "{held}");
    assert!(held.contains("indexnow_confirm_copy()"), "{held}");
    // push_now holds it too
    assert_eq!(count(copy, "SELECT count(*) FROM indexnow_push_now()"), 0);
    assert_eq!(count(copy, "SELECT indexnow_confirm_copy()"), 1);
    wait_until("the confirmed copy sends", SECONDS(30), || {
        sent_urls(receiver) == vec![format!("https://{HOST}/waiting")]
    });
    let held: Option<String> = copy
        .query_one(
            "SELECT held FROM indexnow_status() WHERE host = $1",
            &[&HOST],
        )
        .unwrap()
        .get(0);
    assert_eq!(held, None);
}

/// `CREATE DATABASE ... TEMPLATE` right after `CREATE EXTENSION`, while the database's worker is
/// starting (connected, or about to be, and not yet known to the registry): the worker leaves at
/// once instead of holding the copy up ("source database is being accessed by other users").
#[test]
fn a_template_copy_right_after_create_extension_is_not_held_up_by_a_starting_worker() {
    let receiver = receiver();
    let cluster = cluster(&receiver);
    let mut admin = cluster.connect("postgres");
    for i in 0..4 {
        drop(cluster.create_db_with_extension(&format!("fresh{i}")));
        admin
            .batch_execute(&format!("CREATE DATABASE copy{i} TEMPLATE fresh{i}"))
            .unwrap_or_else(|e| panic!("copy {i}: {e}"));
    }
}

#[test]
fn a_template_copy_sends_nothing_until_confirmed() {
    let receiver = receiver();
    let cluster = cluster(&receiver);
    drop(site_with_a_waiting_url(&cluster));
    cluster
        .connect("postgres")
        .batch_execute("CREATE DATABASE staging TEMPLATE site")
        .unwrap();
    held_until_confirmed(&mut cluster.connect("staging"), &receiver);
}

#[test]
fn a_dump_restored_into_another_cluster_sends_nothing_until_confirmed() {
    let production = Cluster::start(Options::default());
    let mut site = site_with_a_waiting_url(&production);
    // A history of requests and a watch: the restored ids must not be handed out again.
    site.batch_execute(&format!(
        "INSERT INTO indexnow_pushes (host, url_count, status) \
           SELECT '{HOST}', 1, 200 FROM generate_series(1, 3); \
         CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}');"
    ))
    .unwrap();
    drop(site);
    let dump = production.dump("site");
    let receiver = receiver();
    // (another server: a system identifier of its own)
    let staging = Cluster::start_own_system(sending_options(&receiver));
    let mut copy = staging.restore(&dump, "site");
    held_until_confirmed(&mut copy, &receiver);
    assert_eq!(
        count(&mut copy, "SELECT count(*) FROM indexnow_pushes"),
        4,
        "the restored history and the copy's first request"
    );
    copy.batch_execute(&format!(
        "CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL); \
         SELECT indexnow_watch('posts', url => 'https://{HOST}/posts/{{slug}}');"
    ))
    .unwrap();
    assert_eq!(count(&mut copy, "SELECT count(*) FROM indexnow_watches"), 2);
}

/// How README ("Staging leaks") and docs/operations.md ("Physical backups") start a physical copy
/// the first time.
const README_FIRST_START: &str = "pg_ctl -o '-c indexnow.server_enabled=off' start";

/// The indexnow workers of `db` that `pg_stat_activity` shows.
fn workers_in_activity(cluster: &Cluster, db: &str) -> i64 {
    count(
        &mut cluster.connect("postgres"),
        &format!(
            "SELECT count(*) FROM pg_stat_activity \
              WHERE backend_type = 'indexnow worker' AND datname = '{db}'"
        ),
    )
}

/// A physical copy (pg_basebackup) of a site whose database and role switch sending on
/// (`ALTER DATABASE site SET indexnow.enabled = on`, `ALTER ROLE postgres SET ...`): started with
/// `-c indexnow.enabled=off` on the command line (README's recipe up to 0.2.0) it sends with the
/// production key, because a database's and a role's settings win over the command line for a
/// SUSET setting; started as README says now (`-c indexnow.server_enabled=off`, a SIGHUP setting
/// no database, role or session can set) its worker runs and sends nothing, and `ALTER SYSTEM`
/// keeps it off for the starts after.
#[test]
fn a_physical_copy_started_as_the_readme_says_sends_nothing_whatever_its_databases_say() {
    let receiver = receiver();
    let primary = cluster(&receiver);
    let mut site = primary.create_db_with_extension("site");
    site.batch_execute(&format!("SELECT indexnow_add_host('{HOST}', '{KEY}')"))
        .unwrap();
    queue(&mut site, "/before-the-backup");
    wait_until("the primary sends", SECONDS(30), || {
        sent_urls(&receiver) == vec![format!("https://{HOST}/before-the-backup")]
    });
    primary
        .connect("postgres")
        .batch_execute(
            "ALTER DATABASE site SET indexnow.enabled = on; \
             ALTER ROLE postgres SET indexnow.enabled = on",
        )
        .unwrap();

    for (recipe, leaks) in [
        ("-c indexnow.enabled=off", true),
        ("-c indexnow.server_enabled=off", false),
    ] {
        let before = sent_urls(&receiver).len();
        let copy = Cluster::copy_of(&primary, recipe);
        wait_until(
            &format!("the copy's worker runs ({recipe})"),
            SECONDS(30),
            || workers_in_activity(&copy, "site") == 1,
        );
        let mut db = copy.connect("site");
        let path = format!("/in-the-copy-{}", recipe.replace(' ', ""));
        queue(&mut db, &path);
        if leaks {
            // The old recipe: the database's setting wins over the command line.
            wait_until(
                &format!("the copy started with {recipe} sends"),
                SECONDS(30),
                || sent_urls(&receiver).len() == before + 1,
            );
            continue;
        }
        a_few_passes();
        assert_eq!(workers_in_activity(&copy, "site"), 1, "{}", copy.log());
        assert_eq!(
            sent_urls(&receiver).len(),
            before,
            "the copy started with {recipe} sent: {:?}",
            sent_urls(&receiver)
        );
        let shown: String = db
            .query_one("SHOW indexnow.server_enabled", &[])
            .unwrap()
            .get(0);
        assert_eq!(shown, "off");
        let held: String = db
            .query_one(
                "SELECT held FROM indexnow_status() WHERE host = $1",
                &[&HOST],
            )
            .unwrap()
            .get(0);
        assert!(held.contains("indexnow.server_enabled is off"), "{held}");
        assert!(
            worker_of(&mut db).contains("indexnow.server_enabled is off"),
            "{}",
            worker_of(&mut db)
        );
        assert_eq!(
            count(&mut db, "SELECT count(*) FROM indexnow_push_now()"),
            0
        );
        // The recipe's second step, for the starts after: a plain start keeps it off.
        db.batch_execute("ALTER SYSTEM SET indexnow.server_enabled = off")
            .unwrap();
        drop(db);
        copy.stop();
        copy.start_with("");
        wait_until("the restarted copy's worker runs", SECONDS(30), || {
            workers_in_activity(&copy, "site") == 1
        });
        let mut db = copy.connect("site");
        queue(&mut db, "/after-a-plain-start");
        a_few_passes();
        assert_eq!(
            sent_urls(&receiver).len(),
            before,
            "sent after a plain start"
        );
    }

    // No database, role or session can set it: PostgreSQL refuses, with its own error.
    let mut admin = primary.connect("postgres");
    for sql in [
        "ALTER DATABASE site SET indexnow.server_enabled = off",
        "ALTER ROLE postgres SET indexnow.server_enabled = off",
        "SET indexnow.server_enabled = off",
    ] {
        let e = admin.batch_execute(sql).unwrap_err();
        let e = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
        assert_eq!(
            e.code(),
            &postgres::error::SqlState::CANT_CHANGE_RUNTIME_PARAM,
            "{sql}: {}",
            e.message()
        );
        assert_eq!(
            e.message(),
            "parameter \"indexnow.server_enabled\" cannot be changed now",
            "{sql}"
        );
    }
    // The test started the copy with the recipe README gives.
    let readme = include_str!("../../../README.md");
    assert!(
        readme.contains(README_FIRST_START),
        "README no longer says {README_FIRST_START}"
    );
}

/// Restoring one table as docs/operations.md says ("Restoring one table"), with a worker sending:
/// the host held, `pg_restore --clean -t pages` (which drops the table and brings it back without
/// its key), the key added, the table watched again, the host enabled. Nothing is sent for the 50
/// pages that come back; the page created after the dump, absent from it, is removed.
#[test]
fn restoring_one_table_as_documented_sends_only_the_removal_of_what_is_gone() {
    let receiver = receiver();
    let cluster = cluster(&receiver);
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL); \
         INSERT INTO pages SELECT i, 'p' || i FROM generate_series(1, 50) i; \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}')"
    ))
    .unwrap();
    let dump = cluster.dir.join("site.dump");
    let dump = dump.to_str().unwrap();
    cluster.client_program("pg_dump", &["-d", "site", "-Fc", "-f", dump]);
    db.batch_execute("INSERT INTO pages VALUES (51, 'after-the-dump')")
        .unwrap();
    let gone = format!("https://{HOST}/after-the-dump");
    wait_until("the page made after the dump is sent", SECONDS(30), || {
        sent_urls(&receiver) == [gone.clone()]
    });
    // The recipe, as written.
    cluster.psql("site", &format!("SELECT indexnow_disable_host('{HOST}')"));
    cluster.client_program(
        "pg_restore",
        &["--clean", "-t", "pages", "-d", "site", dump],
    );
    cluster.psql("site", "ALTER TABLE pages ADD PRIMARY KEY (id)");
    cluster.psql(
        "site",
        &format!("SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}')"),
    );
    cluster.psql("site", &format!("SELECT indexnow_enable_host('{HOST}')"));
    wait_until(
        "the removal of the page absent from the dump is sent",
        SECONDS(30),
        || sent_urls(&receiver).len() == 2,
    );
    a_few_passes();
    assert_eq!(sent_urls(&receiver), [gone.clone(), gone]);
    assert_eq!(count(&mut db, "SELECT count(*) FROM pages"), 50);
}
