//! What the launcher, the database workers and ordinary backends share, in shared memory: which
//! workers serve which database (one per sender number, `indexnow.workers_per_database` of them)
//! and what each is doing, the launcher's pid, a counter that `CREATE EXTENSION` bumps so the
//! launcher looks at databases again, and the databases the launcher found no background worker
//! slot for.
//!
//! It exists only when the library is preloaded; every function here is a no-op otherwise.

use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by `_PG_init` when the library is loaded through `shared_preload_libraries` (see
/// [`init`]); backends forked from that postmaster inherit it.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Whether the library was preloaded: the shared memory, the launcher and the workers exist.
pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// At most this many database workers run at once (each also needs a background worker slot:
/// `max_worker_processes`).
pub const MAX_WORKERS: usize = 64;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    Free = 0,
    Starting,
    Idle,
    Sending,
    Disabled,
    /// The worker exited: its database has no `indexnow` extension.
    NoExtension,
    /// The worker was told to stop: its database is being dropped.
    Stopped,
    /// The extension's SQL in the database is another version than the library: the worker
    /// waits for `ALTER EXTENSION indexnow UPDATE`.
    Outdated,
}

#[derive(Copy, Clone)]
pub struct Slot {
    pub db: u32,
    /// Which of the database's workers: 0 .. `indexnow.workers_per_database`.
    pub sender: u32,
    pub pid: i32,
    /// The address of the worker's process latch (in shared memory, the same in every process).
    latch: usize,
    pub state: State,
    /// `indexnow.dry_run` as the worker last read it.
    pub dry_run: bool,
    /// The database is a copy: it has hosts, and none is at home (it sends nothing until
    /// `indexnow_confirm_copy()`), as the worker last saw it.
    pub copy: bool,
}

#[derive(Copy, Clone)]
pub struct Registry {
    launcher_pid: i32,
    launcher_latch: usize,
    /// Bumped at the commit of every `CREATE EXTENSION indexnow`.
    generation: u64,
    slots: [Slot; MAX_WORKERS],
    /// Databases wanted alone (see [`stop_workers`]): the database, and until when (a
    /// `TimestampTz`) no worker may enter it.
    alone: [(u32, i64); MAX_ALONE],
    /// Pauses an endpoint ordered (see [`pause_endpoint`]).
    endpoint_pauses: [EndpointPause; MAX_ENDPOINT_PAUSES],
    /// The databases the launcher could not start a worker for at its last look, for want of a
    /// background worker slot (see [`set_starved`]): the first `starved_len`.
    starved: [u32; MAX_STARVED],
    starved_len: usize,
    /// How many of them wait for a worker (those not known to lack the extension).
    starved_waiting: usize,
}

/// How many starved databases are kept (more are counted, not named).
const MAX_STARVED: usize = 64;

#[derive(Copy, Clone)]
struct EndpointPause {
    /// The endpoint, hashed ([`endpoint_key`]); 0 for an empty entry.
    endpoint: u64,
    /// Until when, a `TimestampTz`.
    until: i64,
    /// The status that ordered it.
    status: i32,
    /// The database whose request got the answer.
    db: u32,
}

/// How many endpoints can be paused at once; one more takes the place of the pause that ends
/// first.
const MAX_ENDPOINT_PAUSES: usize = 8;

/// How many databases can be wanted alone at once (each for [`ALONE_FOR_US`]); one more takes
/// the place of the entry that ends first.
const MAX_ALONE: usize = 16;

/// How long a database whose workers were stopped gets none: as long as the launcher leaves it
/// alone (`LEAVE_ALONE_FOR` in `worker/mod.rs`), in microseconds.
const ALONE_FOR_US: i64 = 60_000_000;

impl Registry {
    fn wanted_alone(&self, db: u32) -> bool {
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        self.alone.iter().any(|&(d, until)| d == db && until > now)
    }

    fn leave_alone(&mut self, db: u32) {
        let until = unsafe { pg_sys::GetCurrentTimestamp() } + ALONE_FOR_US;
        let at = self
            .alone
            .iter()
            .position(|&(d, _)| d == db)
            .unwrap_or_else(|| (0..MAX_ALONE).min_by_key(|&i| self.alone[i].1).unwrap_or(0));
        self.alone[at] = (db, until);
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            launcher_pid: 0,
            launcher_latch: 0,
            generation: 0,
            slots: [Slot {
                db: 0,
                sender: 0,
                pid: 0,
                latch: 0,
                state: State::Free,
                dry_run: false,
                copy: false,
            }; MAX_WORKERS],
            alone: [(0, 0); MAX_ALONE],
            endpoint_pauses: [EndpointPause {
                endpoint: 0,
                until: 0,
                status: 0,
                db: 0,
            }; MAX_ENDPOINT_PAUSES],
            starved: [0; MAX_STARVED],
            starved_len: 0,
            starved_waiting: 0,
        }
    }
}

unsafe impl PGRXSharedMemory for Registry {}

static REGISTRY: PgLwLock<Registry> = unsafe { PgLwLock::new(c"indexnow_registry") };

/// Called from `_PG_init` while preloading.
pub fn init() {
    PRELOADED.store(true, Ordering::Relaxed);
    pg_shmem_init!(REGISTRY);
}

fn available() -> bool {
    preloaded()
}

/// Registers this process as the launcher.
pub fn set_launcher() {
    let mut r = REGISTRY.exclusive();
    r.launcher_pid = unsafe { pg_sys::MyProcPid };
    r.launcher_latch = my_latch();
}

/// Wakes the launcher, if there is one.
pub fn wake_launcher() {
    if available() {
        let r = REGISTRY.share();
        if process_alive(r.launcher_pid) {
            set_latch(r.launcher_latch);
        }
    }
}

pub fn generation() -> u64 {
    REGISTRY.share().generation
}

pub fn bump_generation() {
    if available() {
        REGISTRY.exclusive().generation += 1;
    }
}

/// Takes the slot of worker `sender` of `db` for this process. `false` when another live worker
/// has it (the launcher started two), no slot is free, or the database is wanted alone (a worker
/// that connected while a `CREATE DATABASE ... TEMPLATE` of it began must leave at once).
pub fn enter(db: u32, sender: u32) -> bool {
    let pid = unsafe { pg_sys::MyProcPid };
    let mut r = REGISTRY.exclusive();
    if r.wanted_alone(db) {
        return false;
    }
    let mine = |s: &Slot| s.state != State::Free && s.db == db && s.sender == sender;
    if let Some(s) = r.slots.iter().find(|s| mine(s)) {
        if s.pid != pid && process_alive(s.pid) {
            return false;
        }
    }
    let slot = match r.slots.iter().position(mine) {
        Some(i) => i,
        // A free slot, else one whose worker has exited (its exit reason, kept for the launcher,
        // is lost only when every slot is taken: dropped databases leave theirs behind).
        None => match r
            .slots
            .iter()
            .position(|s| s.state == State::Free)
            .or_else(|| r.slots.iter().position(|s| !process_alive(s.pid)))
        {
            Some(i) => i,
            None => return false,
        },
    };
    r.slots[slot] = Slot {
        db,
        sender,
        pid,
        latch: my_latch(),
        state: State::Starting,
        dry_run: false,
        copy: false,
    };
    true
}

pub fn set_state(db: u32, state: State) {
    with_own_slot(db, |s| {
        if s.state != State::Stopped {
            s.state = state;
        }
    });
}

/// Notes the `indexnow.dry_run` this worker goes by, for `indexnow_status()`.
pub fn set_dry_run(db: u32, dry_run: bool) {
    with_own_slot(db, |s| s.dry_run = dry_run);
}

/// Notes whether this worker's database is a copy (see [`Slot::copy`]), for the launcher.
pub fn set_copy(db: u32, copy: bool) {
    with_own_slot(db, |s| s.copy = copy);
}

/// The launcher's last look: `dbs` got no worker for want of a background worker slot (empty:
/// every database it serves got its workers); `waiting` of them are not known to lack the
/// extension.
pub fn set_starved(dbs: &[u32], waiting: usize) {
    if !available() {
        return;
    }
    let mut r = REGISTRY.exclusive();
    let len = dbs.len().min(MAX_STARVED);
    r.starved[..len].copy_from_slice(&dbs[..len]);
    r.starved_len = len;
    r.starved_waiting = waiting;
}

/// When `db` got no worker at the launcher's last look for want of a slot: how many databases
/// wait for one.
pub fn starved(db: u32) -> Option<usize> {
    if !available() {
        return None;
    }
    let r = REGISTRY.share();
    r.starved[..r.starved_len]
        .contains(&db)
        .then_some(r.starved_waiting.max(1))
}

fn with_own_slot(db: u32, f: impl FnOnce(&mut Slot)) {
    if !available() {
        return;
    }
    let pid = unsafe { pg_sys::MyProcPid };
    let mut r = REGISTRY.exclusive();
    if let Some(s) = r.slots.iter_mut().find(|s| s.db == db && s.pid == pid) {
        f(s);
    }
}

/// Why the last worker of `db` exited, when it said: `NoExtension` or `Stopped`.
pub fn exit_reason(db: u32) -> Option<State> {
    REGISTRY
        .share()
        .slots
        .iter()
        .find(|s| s.db == db && matches!(s.state, State::NoExtension | State::Stopped))
        .map(|s| s.state)
}

/// Asks the workers of `db` to stop, and waits up to five seconds for them to go. The database
/// is wanted alone from now on: a worker that is starting (connected, or about to) and has not
/// entered the registry yet leaves as soon as it tries, and the launcher starts none for a while.
/// One lock for both, so a worker either entered before (and is stopped here) or sees the mark.
pub fn stop_workers(db: u32) {
    let workers: Vec<Slot> = {
        let mut r = REGISTRY.exclusive();
        r.leave_alone(db);
        let workers: Vec<Slot> = r
            .slots
            .iter()
            .filter(|s| s.state != State::Free && s.db == db && process_alive(s.pid))
            .copied()
            .collect();
        for s in r.slots.iter_mut() {
            if s.db == db && workers.iter().any(|w| w.pid == s.pid) {
                s.state = State::Stopped;
            }
        }
        workers
    };
    for w in &workers {
        unsafe { libc_kill(w.pid, pg_sys::SIGTERM as i32) };
    }
    for _ in 0..500 {
        if !workers.iter().any(|w| process_alive(w.pid)) {
            return;
        }
        unsafe { pg_sys::pg_usleep(10_000) };
    }
}

/// `db` is served again at once: the command that wanted it alone ([`stop_workers`]) failed
/// (`crate::worker::ddl`), and its workers start again without waiting out the minute.
pub fn serve_again(db: u32) {
    {
        let mut r = REGISTRY.exclusive();
        for alone in r.alone.iter_mut().filter(|(d, _)| *d == db) {
            alone.1 = 0;
        }
        // (the launcher leaves a database whose workers were stopped alone for a minute, or
        // until the generation moves: whether it has seen them go or not yet)
        for slot in r.slots.iter_mut() {
            if slot.db == db && slot.state == State::Stopped {
                slot.state = State::Free;
            }
        }
        r.generation += 1;
    }
    wake_launcher();
}

/// This worker exits; a stop request (state `Stopped`) is kept for the launcher to see.
pub fn leave(db: u32) {
    set_state(db, State::Free);
}

/// The live workers serving `db`, in sender order.
pub fn workers_of(db: u32) -> Vec<Slot> {
    if !available() {
        return vec![];
    }
    let mut workers: Vec<Slot> = REGISTRY
        .share()
        .slots
        .iter()
        .filter(|s| s.state != State::Free && s.db == db && process_alive(s.pid))
        .copied()
        .collect();
    workers.sort_by_key(|s| s.sender);
    workers
}

/// An endpoint's key in [`Registry::endpoint_pauses`]: the same in every process of the server
/// (one binary, a hasher with fixed keys).
fn endpoint_key(endpoint: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    endpoint.hash(&mut h);
    h.finish() | 1 // never 0, the empty entry
}

/// The endpoint ordered a pause of all sending (a 429, a 5xx, no answer) until `until` (a
/// `TimestampTz`), in an answer to database `db`: it holds every database of this server that
/// sends to it, not only the one whose request got the answer, because rate limits are often per
/// client address.
pub fn pause_endpoint(endpoint: &str, until: i64, status: i32, db: u32) {
    if !available() {
        return;
    }
    let key = endpoint_key(endpoint);
    let mut r = REGISTRY.exclusive();
    let at = r
        .endpoint_pauses
        .iter()
        .position(|p| p.endpoint == key)
        .unwrap_or_else(|| {
            (0..MAX_ENDPOINT_PAUSES)
                .min_by_key(|&i| r.endpoint_pauses[i].until)
                .unwrap_or(0)
        });
    // The latest answer decides, as for a database's own pause (a shorter Retry-After shortens it).
    r.endpoint_pauses[at] = EndpointPause {
        endpoint: key,
        until,
        status,
        db,
    };
}

/// Ends the pause of `endpoint` that runs until `until` (not a later one an answer ordered since),
/// for every database: someone ended it in one (`DELETE FROM indexnow_backoff`).
pub fn end_endpoint_pause(endpoint: &str, until: i64) {
    if !available() {
        return;
    }
    let key = endpoint_key(endpoint);
    let mut r = REGISTRY.exclusive();
    if let Some(p) = r
        .endpoint_pauses
        .iter_mut()
        .find(|p| p.endpoint == key && p.until == until)
    {
        p.until = 0;
    }
}

/// The pause of `endpoint` still running that another database than `db` got, if any: until
/// when (a `TimestampTz`) and the status that ordered it.
pub fn endpoint_paused_by_another(endpoint: &str, db: u32) -> Option<(i64, i32)> {
    if !available() {
        return None;
    }
    let key = endpoint_key(endpoint);
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    REGISTRY
        .share()
        .endpoint_pauses
        .iter()
        .find(|p| p.endpoint == key && p.until > now && p.db != db)
        .map(|p| (p.until, p.status))
}

/// Whether `db` is wanted alone (see [`stop_workers`]): no worker is started for it.
pub fn wanted_alone(db: u32) -> bool {
    available() && REGISTRY.share().wanted_alone(db)
}

/// Whether worker `sender` of `db` is alive.
pub fn serves(db: u32, sender: u32) -> bool {
    workers_of(db).iter().any(|s| s.sender == sender)
}

/// Wakes the workers of `db`: each runs a pass (they claim different rows, or find nothing).
pub fn wake_workers(db: u32) {
    for slot in workers_of(db) {
        set_latch(slot.latch);
    }
}

fn my_latch() -> usize {
    unsafe { &raw mut (*pg_sys::MyProc).procLatch as usize }
}

fn set_latch(latch: usize) {
    if latch != 0 {
        // SAFETY: the address of a PGPROC's latch, in shared memory; setting the latch of a
        // process that has since exited wakes at most whoever took its PGPROC, which latches
        // tolerate (every waiter re-checks why it woke).
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

fn process_alive(pid: i32) -> bool {
    pid > 0 && unsafe { libc_kill(pid, 0) } == 0
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
