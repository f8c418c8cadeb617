//! The soak: real load on a watched bilingual site, with faults injected, then a check that
//! nothing was lost, leaked or sent twice (docs/reliability.md says what is promised).
//!
//! - Load: pgbench, the real client, 8 connections at a fixed rate, running a script of
//!   single-row public edits, ignored-only edits, slug changes, unpublish/republish, translation
//!   and noindex toggles, deletes and inserts; and a bulk UPDATE every so often.
//! - Faults, at seeded times: the worker SIGKILLed (preferably while it is sending), the launcher
//!   terminated, the server restarted with `-m immediate`, a transaction holding the xmin horizon;
//!   and the local receiver in chaos mode (429 with Retry-After, 500, hangs past the client's time
//!   limit, dropped exchanges). A crash ends pgbench's connections: the load runs in segments, and
//!   a segment with a crash may end early.
//! - Then the faults stop, the queue drains, and three sources are compared: the content (and a
//!   log of every committed version of every page, kept by a trigger of the site's own), the
//!   queue, and what the receiver accepted.

use crate::{pg_bin, sending_conf, sigkill, wait_until, Cluster, Options};
use indexnow_receiver::{Chaos, Receiver};
use postgres::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

const HOST: &str = "www.example.com";
const KEY: &str = "soak-key-1234";
/// Two requests of a URL are for different changes when its page changed between them, or less
/// than this before the first: the debounce (1 s here) kept the first from carrying a change that
/// recent; 0.2 s more for a transaction that committed after the claim it began before.
const CLAIM_MARGIN_S: f64 = 1.2;

/// What a soak does and for how long.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seconds: u64,
    pub pages: i64,
    /// pgbench transactions per second, all clients together.
    pub rate: u32,
    pub segment_seconds: u64,
    pub kills: u32,
    pub launcher_terminations: u32,
    pub immediate_restarts: u32,
    pub xmin_hold_seconds: u64,
    pub bulk_every_seconds: u64,
    pub seed: u64,
    pub chaos: Chaos,
    /// How long the queue may take to drain once the faults stop.
    pub drain_limit: Duration,
}

impl Plan {
    /// About a minute, for CI: two kills, one launcher termination, one immediate restart.
    pub fn short(seed: u64) -> Plan {
        Plan {
            seconds: 60,
            pages: 1_000,
            rate: 100,
            segment_seconds: 10,
            kills: 2,
            launcher_terminations: 1,
            immediate_restarts: 1,
            xmin_hold_seconds: 15,
            bulk_every_seconds: 20,
            seed,
            chaos: chaos(seed),
            drain_limit: Duration::from_secs(180),
        }
    }

    /// `seconds` long, with a fault about every minute and a half.
    pub fn long(seconds: u64, seed: u64) -> Plan {
        let faults = (seconds / 90).max(4) as u32;
        Plan {
            seconds,
            pages: 5_000,
            rate: 200,
            segment_seconds: 20,
            kills: faults / 2,
            launcher_terminations: faults / 4,
            immediate_restarts: faults / 4,
            xmin_hold_seconds: (seconds / 10).clamp(15, 300),
            bulk_every_seconds: 60,
            seed,
            chaos: chaos(seed),
            drain_limit: Duration::from_secs(600),
        }
    }
}

fn chaos(seed: u64) -> Chaos {
    Chaos {
        seed,
        throttled: 30,
        retry_after: "1".into(),
        unavailable: 30,
        hang: 20,
        hang_ms: 1_500, // past the worker's http_timeout of 1 s
        drop: 20,
    }
}

/// What a soak measured, and what it found wrong.
#[derive(Debug, Default)]
pub struct Report {
    pub edits: i64,
    pub pgbench_transactions: i64,
    pub pgbench_failed: i64,
    pub urls_sent: usize,
    pub posts: usize,
    pub faults: Vec<(String, usize)>,
    /// Accepted again with no change in between, across a crash: the answer was lost with the
    /// worker (at-least-once).
    pub resent_after_crash: i64,
    pub violations: Vec<String>,
    /// What the queue and the oracle hold for the first removal violations.
    pub evidence: Vec<String>,
    /// URLs accepted before the load began: the seeded pages' first announcements.
    pub urls_sent_for_seed: usize,
    /// The checker run again on what the receiver accepted, tampered with one way each: whether
    /// it caught each (a checker that cannot fail proves nothing).
    pub checker_catches: Vec<(String, bool)>,
    /// The server log's ERROR, FATAL, PANIC and WARNING lines, without their time stamps, each
    /// with how often it appeared (faults make some: a killed worker's connections).
    pub server_messages: Vec<(String, usize)>,
    /// `(seconds into the run, total bytes of indexnow_urls with its indexes, live rows, dead rows)`.
    pub queue_size: Vec<(u64, i64, i64, i64)>,
}

impl Report {
    pub fn print(&self) {
        println!("soak: edits {}", self.edits);
        println!(
            "soak: pgbench transactions {} (failed {})",
            self.pgbench_transactions, self.pgbench_failed
        );
        println!(
            "soak: URLs sent (accepted) {} for edits, {} for the seeded pages",
            self.urls_sent, self.urls_sent_for_seed
        );
        println!("soak: POSTs {}", self.posts);
        if self.urls_sent > 0 {
            println!(
                "soak: edits per URL sent {:.2}",
                self.edits as f64 / self.urls_sent as f64
            );
        }
        for (kind, n) in &self.faults {
            println!("soak: faults injected: {kind} {n}");
        }
        println!(
            "soak: re-sent after a crash (at-least-once) {}",
            self.resent_after_crash
        );
        for (at, bytes, live, dead) in &self.queue_size {
            println!(
                "soak: queue at {at:>5} s: {:.1} MiB, {live} live rows, {dead} dead rows",
                *bytes as f64 / 1_048_576.0
            );
        }
        for (tamper, caught) in &self.checker_catches {
            println!(
                "soak: checker self-test: {tamper}: {}",
                if *caught { "caught" } else { "MISSED" }
            );
        }
        for (line, n) in &self.server_messages {
            println!("soak: server log ({n}x): {line}");
        }
        println!("soak: violations {}", self.violations.len());
        for v in &self.violations {
            println!("soak: VIOLATION {v}");
        }
        for e in &self.evidence {
            println!("soak: evidence {e}");
        }
    }
}

/// One fault, at a time within a segment.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    KillWorker,
    TerminateLauncher,
    RestartImmediately,
    HoldXmin,
}

impl Fault {
    fn crashes(self) -> bool {
        matches!(self, Fault::KillWorker | Fault::RestartImmediately)
    }

    fn name(self) -> &'static str {
        match self {
            Fault::KillWorker => "worker SIGKILLed",
            Fault::TerminateLauncher => "launcher terminated",
            Fault::RestartImmediately => "server restarted -m immediate",
            Fault::HoldXmin => "xmin horizon held",
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub fn run(plan: &Plan) -> Report {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let cluster = Cluster::start(Options {
        preload: true,
        conf: sending_conf(
            &receiver.endpoint(),
            &[
                "indexnow.debounce = '1s'",
                "indexnow.http_timeout = '1s'",
                "indexnow.backoff_throttled = '1s'",
                "indexnow.backoff_unavailable = '1s'",
                "indexnow.batch_size = 500",
                "autovacuum_naptime = '5s'",
                "max_connections = 50",
            ],
        ),
    });
    let mut db = cluster.create_db_with_extension("site");
    set_up_site(&mut db, plan.pages);
    let seeded: i64 = one(&mut db, "SELECT count(*) FROM page_log");
    let script = cluster.dir.join("soak.pgbench");
    std::fs::write(&script, pgbench_script()).unwrap();
    let mut report = Report::default();
    wait_until("the seeded pages are announced", plan.drain_limit, || {
        drained(&mut db)
    });
    let seed_posts = receiver.received().len();
    let started = Instant::now();
    report.queue_size.push(queue_size(&mut db, 0));
    drop(db);

    receiver.set_chaos(Some(plan.chaos.clone()));
    let segments = (plan.seconds / plan.segment_seconds).max(1);
    let schedule = schedule(plan, segments, &mut rng);
    let mut crashes: Vec<f64> = vec![];
    let mut injected: Vec<Fault> = vec![];
    let mut holder: Option<std::thread::JoinHandle<()>> = None;
    let mut last_bulk = Instant::now();
    for segment in 0..segments {
        let faults: Vec<(Fault, f64)> = schedule
            .iter()
            .filter(|(s, _, _)| *s == segment)
            .map(|(_, f, at)| (*f, *at))
            .collect();
        let pgbench = start_pgbench(
            &cluster,
            &script,
            plan,
            segment,
            (plan.pages as f64 * 1.25) as i64,
        );
        let segment_started = Instant::now();
        for (fault, at) in &faults {
            let offset = Duration::from_secs_f64(plan.segment_seconds as f64 * at);
            if let Some(rest) = offset.checked_sub(segment_started.elapsed()) {
                std::thread::sleep(rest);
            }
            if fault.crashes() {
                crashes.push(unix_now());
            }
            match fault {
                Fault::KillWorker => kill_worker(&cluster),
                Fault::TerminateLauncher => terminate_launcher(&cluster),
                Fault::RestartImmediately => cluster.restart_immediately(),
                Fault::HoldXmin => holder = Some(hold_xmin(&cluster, plan.xmin_hold_seconds)),
            }
            if fault.crashes() {
                // (the postmaster needs a moment to notice a killed child and start over)
                std::thread::sleep(Duration::from_secs(1));
                cluster.wait_for_connections(Duration::from_secs(120));
                crashes.push(unix_now());
            }
            injected.push(*fault);
        }
        let crashed = faults.iter().any(|(f, _)| f.crashes());
        if last_bulk.elapsed() >= Duration::from_secs(plan.bulk_every_seconds) && !crashed {
            last_bulk = Instant::now();
            let k = rng.random_range(0..20);
            if let Err(e) = cluster.connect("site").batch_execute(&format!(
                "UPDATE pages SET body = body || '.', edited_at = clock_timestamp() \
                  WHERE id % 20 = {k}"
            )) {
                report.violations.push(format!("a bulk UPDATE failed: {e}"));
            }
        }
        let out = pgbench.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        report.pgbench_transactions +=
            pgbench_figure(&text, "number of transactions actually processed:");
        report.pgbench_failed += pgbench_figure(&text, "number of failed transactions:");
        if !out.status.success() && !crashed {
            report.violations.push(format!(
                "pgbench failed in segment {segment} with no crash injected: {}",
                text.lines()
                    .filter(|l| l.contains("ERROR") || l.contains("abort"))
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
        }
        cluster.wait_for_connections(Duration::from_secs(120));
        let mut db = cluster.connect("site");
        report
            .queue_size
            .push(queue_size(&mut db, started.elapsed().as_secs()));
    }
    if let Some(holder) = holder {
        let _ = holder.join();
    }

    // The faults stop; the queue drains.
    receiver.set_chaos(None);
    let mut db = cluster.connect("site");
    let drain_started = Instant::now();
    while !drained(&mut db) {
        if drain_started.elapsed() > plan.drain_limit {
            report.violations.push(format!(
                "the queue did not drain within {:?} after the faults stopped: {}",
                plan.drain_limit,
                status_text(&mut db)
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Let autovacuum see what the drain left, then measure again.
    std::thread::sleep(Duration::from_secs(12));
    report
        .queue_size
        .push(queue_size(&mut db, started.elapsed().as_secs()));

    let received = receiver.received();
    report.posts = received.len() - seed_posts;
    let accepted_of = |received: &[indexnow_receiver::Received]| -> Vec<(String, f64)> {
        received
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .flat_map(|r| {
                let at = r.arrived_at;
                r.request
                    .iter()
                    .flat_map(move |q| q.url_list.iter().map(move |u| (u.clone(), at)))
            })
            .collect()
    };
    let accepted = accepted_of(&received);
    report.urls_sent_for_seed = accepted_of(&received[..seed_posts]).len();
    report.urls_sent = accepted.len() - report.urls_sent_for_seed;
    report.edits = one(&mut db, "SELECT count(*) FROM page_log") - seeded;
    for fault in [
        Fault::KillWorker,
        Fault::TerminateLauncher,
        Fault::RestartImmediately,
        Fault::HoldXmin,
    ] {
        let n = injected.iter().filter(|f| **f == fault).count();
        report.faults.push((fault.name().to_string(), n));
    }
    for kind in ["throttled", "unavailable", "hang", "drop"] {
        let n = received
            .iter()
            .filter(|r| r.fault.as_deref() == Some(kind))
            .count();
        report.faults.push((format!("receiver {kind}"), n));
    }
    check(&mut db, &accepted, &crashes, &mut report);
    report.server_messages = server_messages(&cluster.log());
    report.checker_catches = checker_self_test(&mut db, &accepted, &crashes);
    report
}

/// A tampered copy of the accepted requests: what was changed, what the check must say, and the
/// requests (URL, when accepted).
type Tamper<'a> = (&'a str, &'a str, Vec<(String, f64)>);

/// Runs the checker on tampered copies of what was accepted, one tamper each, and says whether
/// it found the violation each one makes.
fn checker_self_test(
    db: &mut Client,
    accepted: &[(String, f64)],
    crashes: &[f64],
) -> Vec<(String, bool)> {
    let public_now: Vec<String> = db
        .query("SELECT url FROM public_now ORDER BY url", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let is_public = |u: &str| public_now.binary_search_by(|p| p.as_str().cmp(u)).is_ok();
    let last_of = |url: &str| {
        accepted
            .iter()
            .filter(|(u, _)| u == url)
            .map(|(_, at)| *at)
            .fold(f64::MIN, f64::max)
    };
    let mut tampers: Vec<Tamper> = vec![];
    let mut never = accepted.to_vec();
    never.push((format!("https://{HOST}/th/never-public"), unix_now()));
    tampers.push(("a URL never public sent", "sent but never public", never));
    if let Some(page) = public_now.first() {
        let lost: Vec<_> = accepted
            .iter()
            .filter(|(u, _)| u != page)
            .cloned()
            .collect();
        tampers.push((
            "a public page's announcements lost",
            "public now, not accepted since its last change",
            lost,
        ));
    }
    // Every removal's last request taken away: the one before it announced the page live.
    let removals_lost: Vec<_> = accepted
        .iter()
        .filter(|(u, at)| is_public(u) || *at < last_of(u))
        .cloned()
        .collect();
    tampers.push(("the removals lost", "removal not accepted", removals_lost));
    // A public page announced twice more after the run, with no change in between.
    if let Some(page) = public_now.first() {
        let mut twice = accepted.to_vec();
        let later = unix_now() + 10.0;
        twice.push((page.clone(), later));
        twice.push((page.clone(), later + 0.5));
        tampers.push((
            "one URL accepted twice for one change",
            "accepted twice for one change, no crash between",
            twice,
        ));
    }
    tampers
        .into_iter()
        .map(|(tamper, finds, accepted)| {
            let mut report = Report::default();
            check(db, &accepted, crashes, &mut report);
            let caught = report.violations.iter().any(|v| v.starts_with(finds));
            (tamper.to_string(), caught)
        })
        .collect()
}

fn server_messages(log: &str) -> Vec<(String, usize)> {
    let mut seen: Vec<(String, usize)> = vec![];
    for line in log.lines() {
        let Some(at) = ["ERROR:", "FATAL:", "PANIC:", "WARNING:"]
            .iter()
            .filter_map(|level| line.find(level))
            .min()
        else {
            continue;
        };
        // Numbers vary (pids, keys): the message's shape is what is counted.
        let shape: String = line[at..]
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .take(200)
            .collect();
        match seen.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, n)) => *n += 1,
            None => seen.push((shape, 1)),
        }
    }
    seen.sort_by_key(|s| std::cmp::Reverse(s.1));
    seen.truncate(15);
    seen
}

fn one(db: &mut Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).unwrap().get(0)
}

/// The site: `pages`, watched in Thai and English, and `page_log`, the oracle: every committed
/// version of every page and the URLs it gives, written by a trigger of the site's own. A public
/// change is a change of any column the watches do not ignore (all but `sort_order`).
fn set_up_site(db: &mut Client, pages: i64) {
    db.batch_execute(&format!(
        "CREATE TABLE pages ( \
             id bigint PRIMARY KEY, slug text NOT NULL UNIQUE, \
             status text NOT NULL DEFAULT 'published', noindex boolean NOT NULL DEFAULT false, \
             title_en text, body text, sort_order int NOT NULL DEFAULT 0, \
             edited_at timestamptz NOT NULL DEFAULT clock_timestamp()); \
         CREATE TABLE page_log ( \
             seq bigserial PRIMARY KEY, id bigint NOT NULL, th_url text, en_url text, \
             th_public boolean NOT NULL, en_public boolean NOT NULL, \
             public_change boolean NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()); \
         CREATE INDEX ON page_log (id, seq); \
         CREATE FUNCTION log_page() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
           IF TG_OP = 'DELETE' THEN \
             INSERT INTO page_log (id, th_public, en_public, public_change) \
             VALUES (OLD.id, false, false, true); \
             RETURN OLD; \
           END IF; \
           INSERT INTO page_log (id, th_url, en_url, th_public, en_public, public_change) \
           VALUES (NEW.id, 'https://{HOST}/th/' || NEW.slug, 'https://{HOST}/en/' || NEW.slug, \
                   NEW.status = 'published' AND NOT NEW.noindex, \
                   NEW.status = 'published' AND NOT NEW.noindex AND NEW.title_en IS NOT NULL, \
                   TG_OP = 'INSERT' OR (OLD.slug, OLD.status, OLD.noindex, OLD.title_en, \
                                        OLD.body, OLD.edited_at) \
                       IS DISTINCT FROM (NEW.slug, NEW.status, NEW.noindex, NEW.title_en, \
                                         NEW.body, NEW.edited_at)); \
           RETURN NEW; \
         END $$; \
         CREATE TRIGGER log_page AFTER INSERT OR UPDATE OR DELETE ON pages \
             FOR EACH ROW EXECUTE FUNCTION log_page(); \
         SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/th/{{slug}}', \
             visible => $$status = 'published' AND NOT noindex$$, ignore => '{{sort_order}}'); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/en/{{slug}}', \
             visible => $$status = 'published' AND NOT noindex AND title_en IS NOT NULL$$, \
             ignore => '{{sort_order}}', hidden_reason => 'untranslated'); \
         INSERT INTO pages (id, slug, status, title_en, body) \
         SELECT g, 'p' || g || '-0', CASE WHEN g % 5 = 0 THEN 'draft' ELSE 'published' END, \
                CASE WHEN g % 3 = 0 THEN NULL ELSE 'Title ' || g END, md5(g::text) \
           FROM generate_series(1, {pages}) g;"
    ))
    .unwrap();
}

/// One pgbench transaction: a single-row write of one kind, drawn at these shares.
fn pgbench_script() -> &'static str {
    r"\set r random(1, 100)
\set id random(1, :maxid)
\set v random(1, 1000000000)
\if :r <= 40
UPDATE pages SET body = md5(:v::text), edited_at = clock_timestamp() WHERE id = :id;
\elif :r <= 60
UPDATE pages SET sort_order = sort_order + 1 WHERE id = :id;
\elif :r <= 68
UPDATE pages SET slug = 'p' || id || '-' || :v, edited_at = clock_timestamp() WHERE id = :id;
\elif :r <= 78
UPDATE pages SET status = CASE status WHEN 'published' THEN 'draft' ELSE 'published' END, edited_at = clock_timestamp() WHERE id = :id;
\elif :r <= 83
UPDATE pages SET title_en = CASE WHEN title_en IS NULL THEN 'Title ' || :v END, edited_at = clock_timestamp() WHERE id = :id;
\elif :r <= 85
UPDATE pages SET noindex = NOT noindex, edited_at = clock_timestamp() WHERE id = :id;
\elif :r <= 92
DELETE FROM pages WHERE id = :id;
\else
INSERT INTO pages (id, slug, status, title_en, body) VALUES (:id, 'p' || :id || '-' || :v, CASE WHEN :v % 4 = 0 THEN 'draft' ELSE 'published' END, CASE WHEN :v % 3 = 0 THEN NULL ELSE 'Title' END, md5(:v::text)) ON CONFLICT DO NOTHING;
\endif
"
}

fn start_pgbench(
    cluster: &Cluster,
    script: &std::path::Path,
    plan: &Plan,
    segment: u64,
    maxid: i64,
) -> std::process::Child {
    // Each segment its own seed: with one seed, every segment replayed the same edits.
    let seed = plan.seed * 1_000_000 + segment;
    Command::new(format!("{}/pgbench", pg_bin()))
        .args([
            "-h",
            &cluster.socket_dir(),
            "-p",
            &cluster.port.to_string(),
            "-U",
            "postgres",
        ])
        .args(["-n", "-c", "8", "-j", "2", "--max-tries=10"])
        .args(["--random-seed", &seed.to_string()])
        .args(["-T", &plan.segment_seconds.to_string()])
        .args(["-R", &plan.rate.to_string()])
        .args(["-D", &format!("maxid={maxid}")])
        .args(["-f", script.to_str().unwrap(), "site"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pgbench")
}

/// The number after `label` in pgbench's report (0 when it is not there: a run cut short).
fn pgbench_figure(text: &str, label: &str) -> i64 {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Which segment each fault falls in, and where in it (a share of the segment), spread over
/// the run: the xmin hold early, the rest in between, none in the last segment.
fn schedule(plan: &Plan, segments: u64, rng: &mut StdRng) -> Vec<(u64, Fault, f64)> {
    let mut faults = vec![Fault::HoldXmin];
    faults.extend(std::iter::repeat_n(Fault::KillWorker, plan.kills as usize));
    faults.extend(std::iter::repeat_n(
        Fault::TerminateLauncher,
        plan.launcher_terminations as usize,
    ));
    faults.extend(std::iter::repeat_n(
        Fault::RestartImmediately,
        plan.immediate_restarts as usize,
    ));
    let usable = segments.saturating_sub(1).max(1);
    let n = faults.len() as u64;
    faults
        .into_iter()
        .enumerate()
        .map(|(i, fault)| (i as u64 * usable / n, fault, rng.random_range(0.2..0.8)))
        .collect()
}

/// SIGKILLs the site's worker, waiting up to three seconds for it to be in the middle of a
/// request first.
fn kill_worker(cluster: &Cluster) {
    let mut admin = cluster.connect("postgres");
    let started = Instant::now();
    let pid = loop {
        admin
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .unwrap();
        let row = admin
            .query_opt(
                "SELECT pid, state = 'active' FROM pg_stat_activity \
                  WHERE backend_type = 'indexnow worker' AND datname = 'site'",
                &[],
            )
            .unwrap();
        match row {
            Some(r) if r.get::<_, bool>(1) || started.elapsed() > Duration::from_secs(3) => {
                break Some(r.get::<_, i32>(0))
            }
            None if started.elapsed() > Duration::from_secs(10) => break None,
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    drop(admin);
    if let Some(pid) = pid {
        sigkill(pid);
    }
}

fn terminate_launcher(cluster: &Cluster) {
    cluster
        .connect("postgres")
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
              WHERE backend_type = 'indexnow launcher'",
        )
        .unwrap();
}

/// A transaction that holds the xmin horizon (a REPEATABLE READ snapshot) for `seconds`, so
/// vacuum can remove no dead row meanwhile.
fn hold_xmin(cluster: &Cluster, seconds: u64) -> std::thread::JoinHandle<()> {
    let mut db = cluster.connect("site");
    std::thread::spawn(move || {
        let held =
            db.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pages;");
        if held.is_ok() {
            std::thread::sleep(Duration::from_secs(seconds));
            let _ = db.batch_execute("COMMIT");
        }
    })
}

fn queue_size(db: &mut Client, at: u64) -> (u64, i64, i64, i64) {
    db.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    let r = db
        .query_one(
            "SELECT pg_total_relation_size('indexnow_urls'), n_live_tup, n_dead_tup \
               FROM pg_stat_user_tables WHERE relname = 'indexnow_urls'",
            &[],
        )
        .unwrap();
    (at, r.get(0), r.get(1), r.get(2))
}

/// Nothing pending, no change set waiting, no pause in force.
fn drained(db: &mut Client) -> bool {
    one(
        db,
        "SELECT (SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq) \
              + (SELECT count(*) FROM indexnow_changes) \
              + (SELECT count(*) FROM indexnow_backoff WHERE until > now())",
    ) == 0
}

fn status_text(db: &mut Client) -> String {
    db.query(
        "SELECT format('%s: pending %s, due %s, failed %s, backoff %s, worker %s', \
                       host, pending, due_now, failed, backoff_until, worker) \
           FROM indexnow_status()",
        &[],
    )
    .map(|rows| {
        rows.iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("; ")
    })
    .unwrap_or_else(|e| e.to_string())
}

/// Compares the content, the log of its versions, the queue and what the receiver accepted;
/// what it finds goes into `report.violations`.
fn check(db: &mut Client, accepted: &[(String, f64)], crashes: &[f64], report: &mut Report) {
    let (urls, ats): (Vec<String>, Vec<f64>) = accepted.iter().cloned().unzip();
    db.batch_execute("DROP TABLE IF EXISTS accepted, crashes, versions, public_now")
        .unwrap();
    db.execute(
        "CREATE TEMP TABLE accepted AS \
         SELECT url, to_timestamp(at) AS at FROM unnest($1::text[], $2::float8[]) AS a(url, at)",
        &[&urls, &ats],
    )
    .unwrap();
    db.execute(
        "CREATE TEMP TABLE crashes AS SELECT to_timestamp(at) AS at FROM unnest($1::float8[]) at",
        &[&crashes.to_vec()],
    )
    .unwrap();
    db.batch_execute(
        "CREATE INDEX ON accepted (url, at); ANALYZE accepted; \
         CREATE TEMP TABLE versions AS \
           SELECT seq, id, at, 'th' AS watch, th_url AS url, th_public AS public, public_change \
             FROM page_log \
           UNION ALL SELECT seq, id, at, 'en', en_url, en_public, public_change FROM page_log; \
         CREATE INDEX ON versions (url, seq); CREATE INDEX ON versions (id, seq); \
         ANALYZE versions; \
         CREATE TEMP TABLE public_now AS \
           SELECT 'https://www.example.com/th/' || slug AS url, id, edited_at FROM pages \
            WHERE status = 'published' AND NOT noindex \
           UNION ALL \
           SELECT 'https://www.example.com/en/' || slug, id, edited_at FROM pages \
            WHERE status = 'published' AND NOT noindex AND title_en IS NOT NULL;",
    )
    .unwrap();
    let violations = |db: &mut Client, what: &str, sql: &str| -> Vec<String> {
        db.query(sql, &[])
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .iter()
            .map(|r| format!("{what}: {}", r.get::<_, String>(0)))
            .collect()
    };
    // Every page public now had its current URL accepted after its last public change.
    report.violations.extend(violations(
        db,
        "public now, not accepted since its last change",
        "SELECT p.url || ' changed ' || last.at || ', last accepted ' \
                || coalesce((SELECT max(a.at)::text FROM accepted a WHERE a.url = p.url), 'never') \
           FROM public_now p \
           CROSS JOIN LATERAL (SELECT max(v.at) AS at FROM versions v \
                                WHERE v.id = p.id AND v.public_change) last \
          WHERE NOT EXISTS (SELECT FROM accepted a WHERE a.url = p.url AND a.at > last.at) \
          LIMIT 20",
    ));
    // Every URL announced and no longer public had its removal accepted: the last request
    // accepted for it came when it was not public (the version of its page in force then gives
    // another URL, hides it, or is the page's deletion).
    report.violations.extend(violations(
        db,
        "removal not accepted",
        "WITH last AS (SELECT url, max(at) AS at FROM accepted GROUP BY url) \
         SELECT l.url || ' last accepted ' || l.at || ' while public, and not public now' \
           FROM last l \
           CROSS JOIN LATERAL (SELECT w.id, w.watch FROM versions w \
                                WHERE w.url = l.url LIMIT 1) owner \
          WHERE NOT EXISTS (SELECT FROM public_now p WHERE p.url = l.url) \
            AND (SELECT v.url IS NOT DISTINCT FROM l.url AND v.public FROM versions v \
                  WHERE v.id = owner.id AND v.watch = owner.watch AND v.at <= l.at \
                  ORDER BY v.seq DESC LIMIT 1) \
          LIMIT 20",
    ));
    // For the next reader of a removal violation: what the queue and the oracle hold for it.
    let evidence: Vec<String> = report
        .violations
        .iter()
        .filter_map(|v| v.strip_prefix("removal not accepted: "))
        .filter_map(|v| v.split_whitespace().next())
        .take(3)
        .flat_map(|url| {
            let queue = db
                .query(
                    "SELECT format('queue: reason %s, request_seq %s, settled_seq %s, \
                                    changed_at %s, last_pushed_at %s, claimed_until %s', \
                                   reason, request_seq, settled_seq, changed_at, last_pushed_at, \
                                   claimed_until) FROM indexnow_urls WHERE url = $1",
                    &[&url],
                )
                .unwrap();
            let versions = db
                .query(
                    "SELECT format('version %s at %s: %s %s', v.seq, v.at, \
                                   coalesce(v.url, '(deleted)'), \
                                   CASE WHEN v.public THEN 'public' ELSE 'hidden' END) \
                       FROM versions v \
                      WHERE v.id = (SELECT id FROM versions WHERE url = $1 LIMIT 1) \
                        AND v.watch = (SELECT watch FROM versions WHERE url = $1 LIMIT 1) \
                      ORDER BY v.seq DESC LIMIT 6",
                    &[&url],
                )
                .unwrap();
            queue
                .iter()
                .chain(versions.iter())
                .map(|r| format!("  {url} {}", r.get::<_, String>(0)))
                .collect::<Vec<_>>()
        })
        .collect();
    report.evidence.extend(evidence);
    // No URL was sent that was never public (before it was sent).
    report.violations.extend(violations(
        db,
        "sent but never public",
        "SELECT DISTINCT a.url FROM accepted a \
          WHERE NOT EXISTS (SELECT FROM versions v \
                             WHERE v.url = a.url AND v.public AND v.at < a.at) LIMIT 20",
    ));
    // Nothing is marked pushed with a change it did not carry: a request of the URL was
    // accepted between the change it records and the moment it was recorded.
    report.violations.extend(violations(
        db,
        "marked pushed without an accepted request",
        "SELECT u.url || ' pushed_changed_at ' || u.pushed_changed_at \
                || ' last_pushed_at ' || u.last_pushed_at \
           FROM indexnow_urls u \
          WHERE u.pushed_changed_at IS NOT NULL \
            AND NOT EXISTS (SELECT FROM accepted a WHERE a.url = u.url \
                             AND a.at >= u.pushed_changed_at AND a.at <= u.last_pushed_at) \
          LIMIT 20",
    ));
    // No URL accepted twice for one change after its success was recorded. Two accepted
    // requests with no public change of the page in between (allowing CLAIM_MARGIN_S for a
    // change the first claim could not see) are a re-send: after a crash, at-least-once.
    let resends = format!(
        "WITH ordered AS ( \
             SELECT url, at, lag(at) OVER (PARTITION BY url ORDER BY at) AS before FROM accepted), \
              resent AS ( \
             SELECT o.url, o.before, o.at, \
                    EXISTS (SELECT FROM crashes c WHERE c.at BETWEEN o.before AND o.at) AS crash \
               FROM ordered o \
              WHERE o.before IS NOT NULL \
                AND NOT EXISTS ( \
                    SELECT FROM versions v \
                     WHERE v.public_change \
                       AND v.id = (SELECT w.id FROM versions w WHERE w.url = o.url LIMIT 1) \
                       AND v.at > o.before - make_interval(secs => {CLAIM_MARGIN_S}) \
                       AND v.at < o.at))"
    );
    report.resent_after_crash = one(
        db,
        &format!("{resends} SELECT count(*) FROM resent WHERE crash"),
    );
    report.violations.extend(violations(
        db,
        "accepted twice for one change, no crash between",
        &format!(
            "{resends} SELECT url || ' at ' || before || ' and ' || at FROM resent \
              WHERE NOT crash LIMIT 20"
        ),
    ));
}
