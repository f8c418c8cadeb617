//! The background workers: a launcher, and a worker per database where the extension is
//! installed (behaviour 18), found without any database named in configuration.
//!
//! - The launcher is a static worker (registered while preloading), connected to no database: it
//!   reads the shared catalog `pg_database` and starts a dynamic worker for each database that
//!   accepts connections (`indexnow.workers_per_database` of them, numbered from 0: one by
//!   default; several claim different rows and drain a large backlog faster on spare cores). It
//!   looks again every few seconds, and at once when a `CREATE EXTENSION` commits (see
//!   `wake.rs`).
//! - A database worker exits when its database has no `indexnow` extension (also after a
//!   `DROP EXTENSION`); the launcher then leaves that database alone until the next
//!   `CREATE EXTENSION` anywhere, or a minute has passed. It also exits when a reload lowered
//!   `indexnow.workers_per_database` below its number.
//! - Background worker slots (`max_worker_processes`) may be too few for every database. The
//!   launcher serves first the databases it knows send (served before, not a copy, not switched
//!   off), then those it has not looked into yet, then copies and switched-off ones (they send
//!   nothing), and last those it found without the extension. It names every database left
//!   without a worker in one WARNING, by name, and notes them in shared memory, so that
//!   `indexnow_status().worker` there says why.
//! - `DROP DATABASE` stops that database's workers first (`ddl.rs`): PostgreSQL refuses to drop a
//!   database someone is connected to.
//! - Both start only once the server accepts writes: on a hot standby nothing runs and nothing is
//!   sent; after promotion the launcher starts and serves every database.
//! - A worker runs a pass (`crate::send`), then sleeps until the next row becomes due or
//!   `naptime`, whichever is sooner (not at all when one is due already); a commit that queued
//!   something wakes it. SIGHUP reloads the settings; a change of the settings the database or
//!   its role give it (`ALTER DATABASE ... SET`) makes it start again with them (`settings.rs`).
//!   SIGTERM ends it at once, even inside a request (which is left: its URLs stay due). A
//!   launcher ended by SIGTERM outside a shutdown (`pg_terminate_backend()`) is started again by
//!   the postmaster.
//! - What workers write counts in `pg_stat_user_tables` (autovacuum decides from those counts),
//!   and `pg_stat_activity` shows what each is doing.

mod ddl;
mod settings;

use crate::guc;
use crate::process::{report_activity, report_statistics, told_to_stop};
use crate::registry::{self, State};
use crate::send::{derive_change_sets, run_pass, sleep_before_next_pass, Session};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, DynamicBackgroundWorker,
    SignalWakeFlags,
};
use pgrx::prelude::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often the launcher looks for new databases when nobody wakes it.
const LAUNCHER_NAP: Duration = Duration::from_secs(5);

/// How long the launcher leaves a database without the extension (or being dropped) alone, unless
/// a `CREATE EXTENSION` commits somewhere first.
const LEAVE_ALONE_FOR: Duration = Duration::from_secs(60);

const WORKER_TYPE: &str = "indexnow worker";
const LAUNCHER_TYPE: &str = "indexnow launcher";

/// Called from `_PG_init` while preloading: shared memory and the launcher.
pub fn register_at_preload() {
    registry::init();
    ddl::install();
    BackgroundWorkerBuilder::new(LAUNCHER_TYPE)
        .set_type(LAUNCHER_TYPE)
        .set_library("indexnow")
        .set_function("indexnow_launcher_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

/// The `worker` column of `indexnow_status()`.
pub fn state_for_status() -> String {
    if !registry::preloaded() {
        return "not running: indexnow is not in shared_preload_libraries".to_string();
    }
    if unsafe { pg_sys::RecoveryInProgress() } {
        return "not running: this server is a hot standby (the worker starts after promotion)"
            .to_string();
    }
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let workers = registry::workers_of(db);
    if workers.is_empty() {
        if let Some(waiting) = registry::starved(db) {
            let databases = if waiting == 1 {
                "database waits"
            } else {
                "databases wait"
            };
            return format!(
                "not running: no free background worker slot (raise max_worker_processes; \
                 {waiting} {databases})"
            );
        }
        return "not running: not started yet (the launcher starts them within seconds; if it \
                does not, raise max_worker_processes)"
            .to_string();
    }
    // One worker: "running: idle (pid 123)"; several: "running: sending (pid 123), idle (pid 124)".
    let each = workers
        .iter()
        .map(|slot| {
            let state = match slot.state {
                State::Starting => "starting",
                State::Idle => "idle",
                State::Sending => "sending",
                State::Disabled if !guc::SERVER_ENABLED.get() => {
                    "idle: indexnow.server_enabled is off"
                }
                State::Disabled => "idle: indexnow.enabled is off",
                State::Outdated => "waiting for ALTER EXTENSION indexnow UPDATE",
                State::Free | State::NoExtension | State::Stopped => "stopping",
            };
            let dry_run = if slot.dry_run { ", dry run" } else { "" };
            format!("{state}{dry_run} (pid {})", slot.pid)
        })
        .collect::<Vec<_>>();
    format!("running: {}", each.join(", "))
}

/// Whether this database sends, and whether as a dry run, for `indexnow_status()`: as its workers
/// go by `indexnow.server_enabled` (the server's), `indexnow.enabled` and `indexnow.dry_run` (set
/// for them in postgresql.conf, or for the database or their role), or, with no worker running,
/// as this session sees the settings.
pub fn sending_for_status() -> (bool, bool) {
    let workers = registry::workers_of(unsafe { pg_sys::MyDatabaseId }.to_u32());
    if workers.is_empty() {
        (guc::sending_on(), guc::DRY_RUN.get())
    } else {
        (
            workers.iter().any(|w| w.state != State::Disabled),
            workers.iter().any(|w| w.dry_run),
        )
    }
}

/// A database worker the launcher started, and when.
struct Started {
    handle: DynamicBackgroundWorker,
    generation: u64,
}

/// What the launcher learnt of a database from its workers: the order in which databases get
/// the background worker slots there are.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Known {
    /// Served, not a copy, not switched off: it sends.
    Sends,
    /// Not looked into yet.
    Unknown,
    /// A copy, or sending switched off: its worker sends nothing.
    SendsNothing,
    /// Its worker found no extension.
    NoExtension,
}

/// What the launcher keeps between its looks at the databases.
#[derive(Default)]
struct Launcher {
    /// The workers it started, by (database, sender number).
    running: HashMap<(u32, u32), Started>,
    /// Databases left alone (no extension, or being dropped): the generation to wait past, and
    /// since when.
    left_alone: HashMap<u32, (u64, Instant)>,
    /// What each database's workers showed, last time they ran.
    known: HashMap<u32, Known>,
    /// The databases the last WARNING about slots named, and when it was given.
    warned: Option<(Vec<u32>, Instant)>,
}

/// How often the WARNING about slots is repeated while the same databases wait.
const WARN_AGAIN_AFTER: Duration = Duration::from_secs(60);

impl Launcher {
    /// Forgets the workers that exited. A database whose worker exited because it has no
    /// extension is left alone until the next `CREATE EXTENSION` (one committed after that worker
    /// started may have come too late for it to see); a database being dropped waits for one
    /// committed from now on.
    fn forget_exited_workers(&mut self, generation: u64) {
        self.learn();
        let left_alone = &mut self.left_alone;
        let known = &mut self.known;
        self.running
            .retain(|&(db, _), started| match started.handle.pid() {
                Ok(_) => true,
                Err(pgrx::bgworkers::BackgroundWorkerStatus::NotYetStarted) => true,
                Err(_) => {
                    match registry::exit_reason(db) {
                        Some(State::NoExtension) => {
                            left_alone.insert(db, (started.generation, Instant::now()));
                            known.insert(db, Known::NoExtension);
                        }
                        Some(State::Stopped) => {
                            left_alone.insert(db, (generation, Instant::now()));
                        }
                        _ => {}
                    }
                    false
                }
            });
    }

    /// Notes what the running workers show of their databases (see [`Known`]).
    fn learn(&mut self) {
        let dbs: Vec<u32> = self.running.keys().map(|&(db, _)| db).collect();
        for db in dbs {
            let workers = registry::workers_of(db);
            let copy = workers.iter().any(|w| w.copy);
            let off = !workers.is_empty() && workers.iter().all(|w| w.state == State::Disabled);
            let known = if copy || off {
                Known::SendsNothing
            } else if workers
                .iter()
                .any(|w| matches!(w.state, State::Idle | State::Sending | State::Outdated))
            {
                Known::Sends
            } else {
                continue; // starting, or gone
            };
            self.known.insert(db, known);
        }
    }

    /// Starts the workers each database lacks (`indexnow.workers_per_database` of them), but in
    /// databases left alone, in the order of [`Known`] (then `pg_database`'s). When no
    /// background worker slot is free, every database left without its workers is named in
    /// one WARNING and noted in shared memory, for `indexnow_status()`.
    fn start_missing_workers(&mut self, generation: u64) {
        let senders = guc::WORKERS_PER_DATABASE.get() as u32;
        let mut dbs = databases();
        let known = |db: u32| self.known.get(&db).copied().unwrap_or(Known::Unknown);
        dbs.sort_by_key(|(db, _)| known(*db)); // (stable: pg_database's order within a kind)
        let mut out_of_slots = false;
        let mut starved: Vec<(u32, String)> = vec![];
        for (db, name) in dbs {
            if let Some((seen, at)) = self.left_alone.get(&db) {
                if *seen == generation && at.elapsed() < LEAVE_ALONE_FOR {
                    continue;
                }
            }
            if registry::wanted_alone(db) {
                continue; // being dropped, renamed, moved or copied (worker/ddl.rs)
            }
            self.left_alone.remove(&db);
            for sender in 0..senders {
                // (a worker started by an earlier launcher process, which exited with an ERROR
                // and was restarted, is still serving: starting another would only see it exit)
                if self.running.contains_key(&(db, sender)) || registry::serves(db, sender) {
                    continue;
                }
                let started = if out_of_slots {
                    None
                } else {
                    start_worker(db, sender)
                };
                match started {
                    Some(handle) => {
                        self.running
                            .insert((db, sender), Started { handle, generation });
                    }
                    None => {
                        out_of_slots = true;
                        starved.push((db, name));
                        break;
                    }
                }
            }
        }
        self.tell_starved(&starved);
    }

    /// Notes the databases left without workers for want of a slot, and warns (when they
    /// change, and once a minute while they wait) naming them: those not known to lack the
    /// extension (a database without it needs no worker; it is tried last, and named apart).
    fn tell_starved(&mut self, starved: &[(u32, String)]) {
        let (without, waiting): (Vec<_>, Vec<_>) = starved
            .iter()
            .partition(|(db, _)| self.known.get(db) == Some(&Known::NoExtension));
        let oids: Vec<u32> = starved.iter().map(|(db, _)| *db).collect();
        registry::set_starved(&oids, waiting.len());
        if waiting.is_empty() {
            self.warned = None;
            return;
        }
        let named: Vec<u32> = waiting.iter().map(|(db, _)| *db).collect();
        if let Some((last, at)) = &self.warned {
            if *last == named && at.elapsed() < WARN_AGAIN_AFTER {
                return;
            }
        }
        let names = |list: &[&(u32, String)]| {
            list.iter()
                .map(|(_, name)| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let also = if without.is_empty() {
            String::new()
        } else {
            format!(
                "; nor for {}, which had no indexnow extension when last looked into",
                names(&without)
            )
        };
        let n = waiting.len();
        warning!(
            "indexnow: no free background worker slot for the workers of {n} database{}: {} \
             (raise max_worker_processes){also}",
            if n == 1 { "" } else { "s" },
            names(&waiting)
        );
        self.warned = Some((named, Instant::now()));
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn indexnow_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None);
    registry::set_launcher();
    log!("indexnow launcher started");

    let mut launcher = Launcher::default();
    loop {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let generation = registry::generation();
        launcher.forget_exited_workers(generation);
        launcher.start_missing_workers(generation);
        if !BackgroundWorker::wait_latch(Some(LAUNCHER_NAP)) {
            break;
        }
    }
    // Exit code 1: the postmaster starts a launcher again after its restart time (5 s), unless
    // the server is shutting down. Exit code 0 would unregister it for good, and a
    // `pg_terminate_backend()` of the launcher would leave new databases unserved until a restart
    // (the database workers it started keep running).
    log!("indexnow launcher stopped");
    unsafe { pg_sys::proc_exit(1) };
}

/// The worker's argument: its database and its number, in one Datum.
fn worker_argument(db: u32, sender: u32) -> pg_sys::Datum {
    pg_sys::Datum::from((u64::from(sender) << 32) | u64::from(db))
}

/// The database and the number [`worker_argument`] packed.
fn from_worker_argument(arg: pg_sys::Datum) -> (u32, u32) {
    let packed = arg.value() as u64;
    (packed as u32, (packed >> 32) as u32)
}

fn start_worker(db: u32, sender: u32) -> Option<DynamicBackgroundWorker> {
    BackgroundWorkerBuilder::new(&format!("indexnow worker {sender} for database {db}"))
        .set_type(WORKER_TYPE)
        .set_library("indexnow")
        .set_function("indexnow_worker_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_argument(Some(worker_argument(db, sender)))
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic()
        .ok()
}

/// The databases a worker may serve, with their names: those that accept connections, not
/// templates, not left invalid by an interrupted DROP DATABASE. Read from the shared catalog,
/// so the launcher needs no database of its own.
fn databases() -> Vec<(u32, String)> {
    BackgroundWorker::transaction(|| unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, lock);
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        let mut dbs = vec![];
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let db = &*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tuple);
            if db.datallowconn && !db.datistemplate && db.datconnlimit != -2 {
                let name = std::ffi::CStr::from_ptr(db.datname.data.as_ptr())
                    .to_string_lossy()
                    .into_owned();
                dbs.push((db.oid.to_u32(), name));
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, lock);
        dbs
    })
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn indexnow_worker_main(arg: pg_sys::Datum) {
    let (db, sender) = from_worker_argument(arg);
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    crate::process::stop_at_once_when_told();
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(db)), None);
    if !registry::enter(db, sender) {
        return; // another process is this worker already
    }
    // No JIT for the worker's statements: they are short, but the planner cannot estimate the
    // pending rows (`request_seq > settled_seq`) and their costs can pass jit_above_cost; the
    // compilation then costs far more than the statement (measured: 244 ms of JIT for the
    // next-due query, which ran in 0.04 ms). Set as an override, which a reload keeps.
    // And in a deadlock between the worker and a session's statement (`DROP EXTENSION` while a
    // pass records what it sent, seen in the tests), the worker is the one rolled back: the
    // process whose wait reaches `deadlock_timeout` first checks for the deadlock and is the one
    // cancelled, and the worker checks after 100 ms, a session after 1 s (the default). The
    // worker's pass is then tried again (a URL whose answer it could not record is sent again).
    unsafe {
        pg_sys::SetConfigOption(
            c"jit".as_ptr(),
            c"off".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
        pg_sys::SetConfigOption(
            c"deadlock_timeout".as_ptr(),
            c"100ms".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
    }
    own_transactions_settings();
    let started_with = BackgroundWorker::transaction(settings::given_by_database_and_role);
    let mut told_outdated = false;
    let mut told_gaps = false;
    let (mut told_missing, mut missing_wait) = (false, Duration::ZERO);
    loop {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        if sender >= guc::WORKERS_PER_DATABASE.get() as u32 {
            break; // indexnow.workers_per_database was lowered
        }
        if !BackgroundWorker::transaction(use_own_search_path) {
            registry::set_state(db, State::NoExtension);
            return;
        }
        if let Some(missing) = BackgroundWorker::transaction(crate::extension::missing_tables) {
            // Said once; the worker looks again less and less often (every query of the
            // extension's would fail, and a worker that exits is started again at once).
            if !told_missing {
                warning!(
                    "indexnow worker {sender}: the extension's tables {missing} are missing in \
                     this database (a failed pg_upgrade or restore?): nothing is captured or \
                     sent; restore them, or DROP EXTENSION indexnow and CREATE EXTENSION \
                     indexnow"
                );
                told_missing = true;
            }
            registry::set_state(db, State::Outdated);
            report_activity(
                "indexnow: waiting: the extension's tables are missing",
                false,
            );
            missing_wait = (missing_wait * 2).clamp(Duration::from_secs(1), MISSING_WAIT_AT_MOST);
            if !BackgroundWorker::wait_latch(Some(missing_wait)) || told_to_stop() {
                break;
            }
            continue;
        }
        registry::set_copy(db, BackgroundWorker::transaction(only_copies));
        if BackgroundWorker::transaction(settings::given_by_database_and_role) != started_with {
            log!("indexnow worker {sender}: the database's settings changed; starting again");
            break; // the launcher starts a new worker at once, with the new settings
        }
        let naptime = Duration::from_millis(guc::NAPTIME_MS.get() as u64);
        if let Some(why) = BackgroundWorker::transaction(crate::extension::version_mismatch) {
            // A new release's library with the old release's tables: nothing is sent or derived
            // until the database is updated (the capture triggers go on recording changes).
            if !told_outdated {
                log!(
                    "indexnow worker {sender}: {why}; nothing is sent from this database until \
                     ALTER EXTENSION indexnow UPDATE is run in it"
                );
                told_outdated = true;
            }
            registry::set_state(db, State::Outdated);
            report_activity(
                "indexnow: waiting for ALTER EXTENSION indexnow UPDATE",
                false,
            );
            if !BackgroundWorker::wait_latch(Some(naptime)) || told_to_stop() {
                break;
            }
            continue;
        }
        if !told_gaps {
            BackgroundWorker::transaction(|| tell_capture_gaps(sender));
            told_gaps = true;
        }
        let enabled = guc::sending_on();
        registry::set_dry_run(db, guc::DRY_RUN.get());
        let mut sent = false;
        // (a pass derives for at most naptime: what it left is derived by the next, at once)
        let more_to_derive;
        if enabled {
            registry::set_state(db, State::Sending);
            BackgroundWorker::transaction(crate::send::end_pauses_over);
            let (results, more) = run_pass(Session::Worker { sender });
            sent = !results.is_empty();
            more_to_derive = more;
        } else {
            // Sending is paused; queueing goes on: what the capture triggers recorded is derived.
            more_to_derive = derive_change_sets(Session::Worker { sender });
        }
        if more_to_derive {
            report_statistics(true);
            // (no sleep; a stop or the postmaster's death is still seen)
            if !BackgroundWorker::wait_latch(Some(Duration::ZERO)) || told_to_stop() {
                break;
            }
            continue;
        }
        let (sleep, idle) = BackgroundWorker::transaction(|| {
            (
                sleep_before_next_pass(naptime, sent),
                idle_activity(enabled),
            )
        });
        registry::set_state(
            db,
            if enabled {
                State::Idle
            } else {
                State::Disabled
            },
        );
        report_activity(&idle, false);
        report_statistics(true);
        if crate::process::woken_meanwhile() {
            // SAFETY: this process's own latch.
            unsafe { pg_sys::SetLatch(pg_sys::MyLatch) };
        }
        if !BackgroundWorker::wait_latch(Some(if enabled { sleep } else { naptime }))
            || told_to_stop()
        {
            break;
        }
    }
    registry::leave(db);
}

/// The longest a worker waits before it looks again for the extension's missing tables.
const MISSING_WAIT_AT_MOST: Duration = Duration::from_secs(300);

/// Says once, at the worker's start, in the server log, which watched tables' writes the capture
/// triggers cannot see now (`indexnow_status().capture_gaps`): a database whose sessions run in
/// replica mode announces nothing, and a DBA reads the log before the status.
fn tell_capture_gaps(sender: u32) {
    if let Some(gaps) = crate::capture::placement::gaps(&crate::extension::schema()) {
        warning!(
            "indexnow worker {sender}: writes to these tables are not captured: {gaps} \
             (indexnow_reconcile() catches up what they missed)"
        );
    }
}

/// The worker's transactions write, whatever the database or its role set for sessions (`ALTER
/// DATABASE site SET default_transaction_read_only = on` made every write of the worker fail,
/// and the postmaster restart it, dozens of times a second). Set as an override, which a
/// reload keeps. A hot standby still refuses writes: the worker sends nothing there anyway
/// (behaviour 18). (A session's `statement_timeout` does not reach a background worker's SPI
/// statements: a derivation's time is bounded by `crate::subtransaction::run_within`.)
fn own_transactions_settings() {
    // SAFETY: a setting of this process; NUL-terminated name and value.
    unsafe {
        pg_sys::SetConfigOption(
            c"default_transaction_read_only".as_ptr(),
            c"off".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
    }
}

/// What an idle worker shows in `pg_stat_activity`: idle, sending switched off, or paused.
fn idle_activity(enabled: bool) -> String {
    if !enabled {
        let setting = if guc::SERVER_ENABLED.get() {
            "indexnow.enabled"
        } else {
            "indexnow.server_enabled"
        };
        return format!("indexnow: idle, {setting} is off (queueing goes on)");
    }
    let paused: Option<String> = crate::plan_cache::get_one(
        "SELECT 'paused until ' || max(until)::text || ' (' || string_agg(DISTINCT \
                CASE scope WHEN '*' THEN 'all hosts' ELSE scope END, ', ') || ')' \
           FROM @extschema@.indexnow_backoff WHERE until > pg_catalog.clock_timestamp()",
        &[],
    )
    .unwrap_or(None);
    match paused {
        Some(paused) => format!("indexnow: idle, {paused}"),
        None => "indexnow: idle".into(),
    }
}

/// Whether this database is a copy for all its hosts (it has hosts, and none is at home): its
/// worker sends nothing until `indexnow_confirm_copy()`. For the launcher, which serves it after
/// the databases that send.
fn only_copies() -> bool {
    crate::plan_cache::get_one::<bool>(
        &format!(
            "SELECT EXISTS (SELECT FROM @extschema@.indexnow_hosts) \
                AND NOT EXISTS (SELECT FROM @extschema@.indexnow_hosts h WHERE {})",
            crate::hosts::at_home_sql()
        ),
        &[],
    )
    .unwrap_or(None)
    .unwrap_or(false)
}

/// Sets this worker's search_path to the extension's own (which does not have the extension's
/// schema in it: see `crate::extension::OWN_SEARCH_PATH`); `false` when the extension is not
/// installed in this database (any more).
fn use_own_search_path() -> bool {
    if crate::plan_cache::extension_schema().is_none() {
        return false;
    }
    // Reads (pgrx's `Spi::get_one` would take a transaction id, in every pass of an idle worker).
    crate::plan_cache::get_one::<String>(
        "SELECT pg_catalog.set_config('search_path', $1, false)",
        &[crate::extension::OWN_SEARCH_PATH.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: setting the worker's search_path: {e}"));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_argument_carries_the_database_and_the_number() {
        for (db, sender) in [(5, 0), (16_384, 1), (u32::MAX, 7)] {
            assert_eq!(
                from_worker_argument(worker_argument(db, sender)),
                (db, sender)
            );
        }
    }
}
