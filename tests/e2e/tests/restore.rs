//! Restores, as a DBA makes them: a custom-format dump of a site with every shape of watched tree
//! (a partitioned watched table with a sub-partitioned partition, a watched partition, a watched
//! table with a partitioned related table and a body table, a plain watched table), restored by
//! `pg_restore -j 4 --exit-on-error` again and again while two busy loops load the machine, and a
//! dump of the previous release restored under this one. Each restore must succeed, announce
//! nothing, leave every table with the capture triggers it had, and a save on each watched
//! table must be announced (docs/operations.md, "Back up and restore", says why no restore can
//! race the extension's own DDL following).
//!
//! `INDEXNOW_RESTORES=50` runs fifty restores (the proof recorded in docs/reliability.md); the
//! suite runs twenty.

use indexnow_e2e::{queued, release_library, Cluster, Options, PREVIOUS_RELEASE};
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The site: every shape of tree a watch can have, a thousand rows or so in each table so that
/// the parallel jobs' loads overlap.
const SITE: &str = "
    CREATE TABLE parts (id int NOT NULL, slug text NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id);
    CREATE TABLE parts_a PARTITION OF parts FOR VALUES FROM (0) TO (100);
    CREATE TABLE parts_b PARTITION OF parts FOR VALUES FROM (100) TO (200) PARTITION BY RANGE (id);
    CREATE TABLE parts_b1 PARTITION OF parts_b FOR VALUES FROM (100) TO (150);
    CREATE TABLE parts_b2 PARTITION OF parts_b FOR VALUES FROM (150) TO (200);
    CREATE TABLE parts_c PARTITION OF parts FOR VALUES FROM (200) TO (2000);
    INSERT INTO parts SELECT g, 's' || g FROM generate_series(1, 1999) g;
    SELECT indexnow_watch('parts', url => 'https://www.example.com/p/{slug}');
    SELECT indexnow_watch('parts_c', url => 'https://www.example.com/c/{slug}');
    CREATE TABLE shelves (code text PRIMARY KEY, name text) PARTITION BY LIST (code);
    CREATE TABLE shelves_x PARTITION OF shelves FOR VALUES IN ('x');
    CREATE TABLE shelves_y PARTITION OF shelves FOR VALUES IN ('y');
    INSERT INTO shelves VALUES ('x', 'ex'), ('y', 'why');
    CREATE TABLE books (id int PRIMARY KEY, slug text NOT NULL,
                        shelf text NOT NULL REFERENCES shelves (code));
    CREATE TABLE book_bodies (book_id int PRIMARY KEY REFERENCES books (id), body text);
    INSERT INTO books SELECT g, 'b' || g, CASE WHEN g = 1 THEN 'x' ELSE 'y' END
      FROM generate_series(1, 1000) g;
    INSERT INTO book_bodies SELECT g, 'text' FROM generate_series(1, 1000) g;
    SELECT indexnow_watch('books', url_sql => $$'https://www.example.com/' ||
      (SELECT s.name FROM shelves s WHERE s.code = shelf) || '/' || slug$$,
      related => '{shelves,book_bodies}');
    CREATE TABLE notes (id int PRIMARY KEY, slug text NOT NULL);
    INSERT INTO notes SELECT g, 'n' || g FROM generate_series(1, 1000) g;
    SELECT indexnow_watch('notes', url => 'https://www.example.com/n/{slug}');";

/// A save on each watched table, straight and through parents, on a related table and a body
/// table; and what each announces.
const SAVES: &str = "
    UPDATE parts SET slug = slug || 'x' WHERE id IN (1, 201);
    UPDATE parts_b2 SET slug = slug || 'x' WHERE id = 160;
    UPDATE shelves SET name = 'ex2' WHERE code = 'x';
    UPDATE book_bodies SET body = 'new' WHERE book_id = 2;
    UPDATE notes SET slug = 'n1b' WHERE id = 1;";
const ANNOUNCED: &[&str] = &[
    "https://www.example.com/c/s201 moved",
    "https://www.example.com/c/s201x created",
    "https://www.example.com/ex/b1 moved",
    "https://www.example.com/ex2/b1 created",
    "https://www.example.com/n/n1 moved",
    "https://www.example.com/n/n1b created",
    "https://www.example.com/p/s1 moved",
    "https://www.example.com/p/s160 moved",
    "https://www.example.com/p/s160x created",
    "https://www.example.com/p/s1x created",
    "https://www.example.com/p/s201 moved",
    "https://www.example.com/p/s201x created",
    "https://www.example.com/why/b2 changed",
];

/// Each table with capture triggers, and how many.
fn capture_triggers(db: &mut Client) -> Vec<String> {
    db.query(
        "SELECT tgrelid::regclass::text || ' ' || count(*) || ' ' || min(tgenabled::text) \
           FROM pg_trigger WHERE tgname LIKE 'indexnow_capture_%' GROUP BY tgrelid ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Builds the site in a new database `db` of `cluster` and dumps it in the custom format; returns
/// the dump's path and the tables' capture triggers.
fn dumped_site(cluster: &Cluster, db: &str) -> (std::path::PathBuf, Vec<String>) {
    let mut site = cluster.connect(db);
    site.batch_execute(SITE).unwrap();
    assert_eq!(
        queued(&mut site),
        Vec::<String>::new(),
        "watching announced"
    );
    let triggers = capture_triggers(&mut site);
    // (parts and its five partitions; shelves and both its partitions; books, book_bodies,
    // notes)
    assert_eq!(triggers.len(), 12, "{triggers:?}");
    let dump = cluster.dir.join(format!("{db}.dump"));
    cluster.client_program("pg_dump", &["-d", db, "-Fc", "-f", dump.to_str().unwrap()]);
    (dump, triggers)
}

/// Restores `dump` into a new database `to` with `pg_restore -j 4 --exit-on-error` (panics with
/// what pg_restore said when it fails), checks it as the module says, and drops it.
fn restore_and_check(cluster: &Cluster, dump: &std::path::Path, to: &str, triggers: &[String]) {
    cluster
        .connect("postgres")
        .batch_execute(&format!("CREATE DATABASE {to}"))
        .unwrap();
    cluster.client_program(
        "pg_restore",
        &[
            "-j",
            "4",
            "--exit-on-error",
            "-d",
            to,
            dump.to_str().unwrap(),
        ],
    );
    let mut restored = cluster.connect(to);
    assert_eq!(
        capture_triggers(&mut restored),
        triggers,
        "{to}: the capture triggers"
    );
    assert_eq!(
        queued(&mut restored),
        Vec::<String>::new(),
        "{to}: the restore announced"
    );
    // What the watches had derived came back with the dump (the previous release's too): a
    // reconcile of every watched table finds every page as it was. (A source of a 0.7.0 dump,
    // its fingerprint as md5 text: `a_source_restored_from_an_older_dump_keeps_its_fingerprint`.)
    let changed = restored
        .query_one(
            "SELECT coalesce(sum(r.created + r.changed + r.gone), 0)::int8 \
               FROM (SELECT DISTINCT tbl FROM indexnow_watches WHERE active) w, \
                    LATERAL indexnow_reconcile(w.tbl) r",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(changed, 0, "{to}: a reconcile found pages changed");
    restored.batch_execute(SAVES).unwrap();
    assert_eq!(queued(&mut restored), ANNOUNCED, "{to}: the saves");
    drop(restored);
    cluster
        .connect("postgres")
        .batch_execute(&format!("DROP DATABASE {to} WITH (FORCE)"))
        .unwrap();
}

/// Two threads that spin until dropped: the load under which races show.
struct BusyLoops(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl BusyLoops {
    fn start() -> BusyLoops {
        let stop = Arc::new(AtomicBool::new(false));
        let loops = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        BusyLoops(stop, loops)
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for l in self.1.drain(..) {
            let _ = l.join();
        }
    }
}

#[test]
fn parallel_restores_under_load_leave_every_watched_table_captured() {
    let restores: usize = std::env::var("INDEXNOW_RESTORES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    // (the workers on: they serve each restored database as it appears, as on a real server)
    let cluster = Cluster::start(Options::default());
    cluster.create_db_with_extension("site");
    let (dump, triggers) = dumped_site(&cluster, "site");
    let _load = BusyLoops::start();
    for i in 0..restores {
        restore_and_check(&cluster, &dump, &format!("restored_{i}"), &triggers);
    }
}

/// A dump made under the previous release, restored in parallel under this one (the extension
/// the dump creates is this release's; the rows of its tables are the previous release's).
#[test]
fn a_dump_of_the_previous_release_restores_in_parallel() {
    let cluster = Cluster::start(Options::default());
    cluster.use_library(Some(&release_library(PREVIOUS_RELEASE)));
    cluster.restart();
    cluster
        .connect("postgres")
        .batch_execute("CREATE DATABASE site")
        .unwrap();
    cluster
        .connect("site")
        .batch_execute(&format!(
            "CREATE EXTENSION indexnow VERSION '{PREVIOUS_RELEASE}'"
        ))
        .unwrap();
    let (dump, triggers) = dumped_site(&cluster, "site");
    cluster.use_library(None);
    cluster.restart();
    restore_and_check(&cluster, &dump, "restored", &triggers);
}
