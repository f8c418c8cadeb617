//! Sending: one pass over the queue, shared by the background worker and `indexnow_push_now()`.
//!
//! A pass takes the hosts that may be sent for (a key, enabled, not paused), and for each host
//! repeats: claim at most `batch_size` due rows, POST them outside any transaction, record the
//! answer; until the host has nothing due, the endpoint orders a pause, or the worker is told to
//! stop. The answer decides (see `indexnow_protocol::response`):
//! - accepted: the claimed requests are settled (only those: behaviour 14);
//! - refused (4xx): settled as failed, the status and the body kept;
//! - pause (429, 5xx, network): the claim is given back, a pause is written to
//!   `indexnow_backoff`, and the pass stops (all hosts, or this host for a site-verification 403).
//!
//! Every request (and every dry-run decision) is one `indexnow_pushes` row.
//!
//! Two kinds of sender, one rule: no URL is ever in two senders' hands (behaviour 17), and no row
//! lock is held across an HTTP request (behaviour 15).
//! - A worker ([`Session::Worker`]; a database has `indexnow.workers_per_database` of them, one by
//!   default) claims with `FOR UPDATE SKIP LOCKED` and a lease
//!   (`claimed_until`) in a short transaction that it commits before the request; it marks the
//!   rows in a second short transaction after. If it dies in between, the lease runs out and the
//!   rows are due again (behaviour 16). The lease is `http_timeout` plus a margin: longer than a
//!   request can take.
//! - `indexnow_push_now()` ([`Session::PushNow`]) runs in its caller's transaction, which it cannot
//!   commit: a lease it wrote would be invisible to others and its row locks would be held across
//!   the request. So it reads the due rows without locking them, and keeps other senders away
//!   with an advisory lock instead: it takes the pass lock exclusively, and holds it until its
//!   caller's transaction ends (when its marks become visible); a worker takes the same lock
//!   shared in each claim transaction and skips the pass when it cannot. The caller's read skips
//!   rows a worker holds a lease on, so a batch already in a worker's hands is not sent twice.
//!   Content saves never wait on the pass lock: only senders take it.

mod push_now;
pub(crate) mod sql;

use crate::capture::derive::{self, Rows};
use crate::guc;
use crate::plan_cache;
use crate::queue::due::DueRule;
use crate::queue::Reason;
use indexnow_protocol::client::Client;
use indexnow_protocol::{classify, Backoffs, Outcome, SubmitRequest};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use sql::{Locate, Settle};
use std::time::{Duration, Instant, SystemTime};

/// The settings a pass runs by, read once at its start.
pub struct Settings {
    pub enabled: bool,
    pub dry_run: bool,
    pub endpoint: String,
    pub rule: DueRule,
    pub batch_size: i64,
    pub http_timeout: Duration,
    pub backoffs: Backoffs,
    pub history_days: i32,
}

impl Settings {
    pub fn now() -> Settings {
        Settings {
            enabled: guc::ENABLED.get(),
            dry_run: guc::DRY_RUN.get(),
            endpoint: guc::ENDPOINT
                .get()
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default(),
            rule: guc::due_rule(),
            batch_size: guc::BATCH_SIZE.get() as i64,
            http_timeout: Duration::from_millis(guc::HTTP_TIMEOUT_MS.get() as u64),
            backoffs: Backoffs {
                throttled: Duration::from_secs(guc::BACKOFF_THROTTLED_S.get() as u64),
                unavailable: Duration::from_secs(guc::BACKOFF_UNAVAILABLE_S.get() as u64),
            },
            history_days: guc::HISTORY_DAYS.get(),
        }
    }

    /// How long a worker's claim keeps other senders away: longer than one request can take
    /// (the client gives up at `http_timeout`), with room for the two short transactions.
    fn lease(&self) -> f64 {
        self.http_timeout.as_secs_f64() + 10.0
    }

    /// `$1`..`$5` of the claim statements (see `sql.rs`).
    fn claim_args(&self, now: TimestampWithTimeZone) -> Vec<DatumWithOid<'static>> {
        let [debounce, min_gap, repeat_after] = self.rule.sql_args();
        vec![
            now.into(),
            debounce.into(),
            min_gap.into(),
            repeat_after.into(),
            self.dry_run.into(),
        ]
    }
}

/// Where a pass runs, which decides how it claims (see the module's comment).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// A database worker, the `sender`th of its database's (`indexnow.workers_per_database`).
    Worker { sender: u32 },
    /// `indexnow_push_now()`, in its caller's transaction.
    PushNow,
}

impl Session {
    /// Runs one step of the pass: in a transaction of its own for the worker, in the caller's
    /// transaction otherwise.
    fn step<R>(self, f: impl FnOnce() -> R) -> R {
        match self {
            Session::PushNow => f(),
            Session::Worker { .. } => {
                let f = std::panic::AssertUnwindSafe(f);
                let r = pgrx::bgworkers::BackgroundWorker::transaction(move || {
                    let f = f; // the whole wrapper, not its field
                    (f.0)()
                });
                crate::process::report_statistics(false);
                r
            }
        }
    }

    /// What `pg_stat_activity` shows a worker doing (nothing for a caller: its own statement is
    /// shown).
    fn report_activity(self, what: &str) {
        if let Session::Worker { .. } = self {
            crate::process::report_activity(what, true);
        }
    }

    fn told_to_stop(self) -> bool {
        matches!(self, Session::Worker { .. }) && crate::process::told_to_stop()
    }
}

/// A host and its key, as the request carries them.
struct Host {
    host: String,
    key: String,
    key_location: Option<String>,
}

/// One claimed request, exactly as it was when claimed: what settling it must find unchanged.
#[derive(Clone)]
struct ClaimedUrl {
    url_hash: Vec<u8>,
    url: String,
    reason: String,
    changed_at: TimestampWithTimeZone,
    request_seq: i64,
    ctid: String,
    /// Queued for a publication time (`available_at` later than the request): re-read before
    /// it is sent, see [`reread_scheduled`].
    scheduled: bool,
}

impl ClaimedUrl {
    /// A row of the claim statements (`sql::CLAIMED_COLUMNS`), read by name.
    fn read(r: &pgrx::spi::SpiHeapTupleData) -> Result<ClaimedUrl, pgrx::spi::Error> {
        Ok(ClaimedUrl {
            url_hash: r.get_by_name("url_hash")?.unwrap_or_default(),
            url: r.get_by_name("url")?.unwrap_or_default(),
            reason: r.get_by_name("reason")?.unwrap_or_default(),
            changed_at: r
                .get_by_name("changed_at")?
                .unwrap_or_else(|| error!("indexnow: no changed_at")),
            request_seq: r.get_by_name("request_seq")?.unwrap_or_default(),
            ctid: r.get_by_name("ctid")?.unwrap_or_default(),
            scheduled: r.get_by_name("scheduled")?.unwrap_or_default(),
        })
    }

    /// A live page queued for a publication time: re-read before it is sent (a removal is sent
    /// as it is).
    fn is_scheduled_live(&self) -> bool {
        self.scheduled && self.reason.parse::<Reason>().is_ok_and(|r| !r.is_removal())
    }
}

/// What a claim took: the requests it will settle.
type Claimed = Vec<ClaimedUrl>;

/// `$1`..`$5` of the settle statements: the claimed rows as the arrays they `unnest`.
fn settle_args<'a>(urls: impl Iterator<Item = &'a ClaimedUrl>) -> Vec<DatumWithOid<'static>> {
    let urls: Vec<&ClaimedUrl> = urls.collect();
    fn array<T>(urls: &[&ClaimedUrl], field: impl Fn(&ClaimedUrl) -> T) -> DatumWithOid<'static>
    where
        Vec<T>: Into<DatumWithOid<'static>>,
    {
        urls.iter().map(|u| field(u)).collect::<Vec<T>>().into()
    }
    vec![
        array(&urls, |u| u.url_hash.clone()),
        array(&urls, |u| u.changed_at),
        array(&urls, |u| u.request_seq),
        array(&urls, |u| u.reason.clone()),
        array(&urls, |u| u.ctid.clone()),
    ]
}

/// What one pass did for one host: the result row of `indexnow_push_now()`.
#[derive(Debug, Default)]
pub struct HostResult {
    pub host: String,
    pub requests: i32,
    pub url_count: i64,
    pub status: Option<i32>,
    pub note: Option<String>,
}

/// Derives the change sets the capture triggers recorded: all of them in the caller's
/// transaction, or, for a worker, one a transaction, skipping those another sender derives.
pub fn derive_change_sets(session: Session) {
    let ext = || crate::extension::schema();
    match session {
        Session::PushNow => {
            derive::derive_all_change_sets(&ext());
        }
        Session::Worker { .. } => {
            while !session.told_to_stop()
                && session.step(|| derive::derive_one_change_set(&ext(), derive::Waiting::Skip))
            {
            }
        }
    }
}

/// One pass. Returns what it did per host (hosts with nothing sent are left out).
pub fn run_pass(session: Session) -> Vec<HostResult> {
    let settings = Settings::now();
    // What the capture triggers recorded is derived first, sending or not: the queue is what a
    // pass reads (behaviour 8).
    derive_change_sets(session);
    if !settings.enabled {
        return vec![];
    }
    if session == Session::PushNow {
        // As a write: the statements after it then take a fresh snapshot each (pgrx runs them
        // read-write once the transaction has written), and see what a call it waited for settled.
        Spi::connect_mut(|client| {
            plan_cache::write(client, &sql::take_pass_lock(), &[]).map(|_| ())
        })
        .unwrap_or_else(|e| error!("indexnow: could not take the pass lock: {e}"));
    }
    let mut hosts = session.step(|| sendable_hosts(&settings));
    if let (Session::Worker { sender }, false) = (session, hosts.is_empty()) {
        // Several workers of one database start with different hosts, so that they do not all
        // walk the same host's index past each other's locked rows; each goes on to the others.
        let first = sender as usize % hosts.len();
        hosts.rotate_left(first);
    }
    let client = Client::new(settings.http_timeout);
    let mut results = vec![];
    'hosts: for host in hosts {
        let mut result = HostResult {
            host: host.host.clone(),
            ..Default::default()
        };
        loop {
            if session.told_to_stop() {
                break 'hosts;
            }
            let claim_started = Instant::now();
            let Some((taken, claimed)) = session.step(|| claim(session, &settings, &host.host))
            else {
                break 'hosts; // another sender holds the pass lock: it will do the work
            };
            if taken == 0 {
                break;
            }
            if claimed.is_empty() {
                continue; // the whole batch was scheduled pages the re-read took out
            }
            let claim_took = claim_started.elapsed();
            let outcome = push(&client, &settings, &host, &claimed, session, &mut result);
            debug1!(
                "indexnow: {} URLs of {}: claimed in {:?}, pushed and recorded in {:?}",
                claimed.len(),
                host.host,
                claim_took,
                claim_started.elapsed() - claim_took
            );
            match outcome {
                Some(Outcome::PauseAll { .. }) => {
                    results.push(result);
                    break 'hosts;
                }
                Some(Outcome::PauseHost { .. }) => break,
                _ => {}
            }
            if (taken as i64) < settings.batch_size {
                break;
            }
        }
        results.push(result);
    }
    if prune_due() {
        session.step(|| prune(&settings));
    }
    results.retain(|r| r.requests > 0);
    results
}

/// Sends one claimed batch (or, in a dry run, decides on it) and records the answer. Returns the
/// outcome, `None` for a dry run or a request the worker left because it was told to stop.
fn push(
    client: &Client,
    settings: &Settings,
    host: &Host,
    claimed: &Claimed,
    session: Session,
    result: &mut HostResult,
) -> Option<Outcome> {
    let started = Instant::now();
    let decision = if settings.dry_run {
        Decision::DryRun
    } else {
        let request = SubmitRequest {
            host: host.host.clone(),
            key: host.key.clone(),
            key_location: host.key_location.clone(),
            url_list: claimed.iter().map(|u| u.url.clone()).collect(),
        };
        session.report_activity(&format!(
            "indexnow: sending {} URLs to {}",
            claimed.len(),
            host.host
        ));
        match submit(session, client, &settings.endpoint, request) {
            Some(answer) => {
                let outcome = classify(&answer, &settings.backoffs, SystemTime::now());
                Decision::Answered(answer.status_code() as i32, outcome)
            }
            None => Decision::Left,
        }
    };
    let took = started.elapsed().as_secs_f64();
    let record_started = Instant::now();
    record_answer(session, &host.host, claimed, &decision, took);
    log_request(&host.host, claimed.len(), &decision, took, settings);
    debug2!(
        "indexnow: request to {} took {took:.3} s, recording it {:?}",
        host.host,
        record_started.elapsed()
    );
    result.requests += 1;
    result.url_count += claimed.len() as i64;
    result.status = Some(decision.status());
    let note = decision.note();
    result.note = (!note.is_empty()).then_some(note);
    match decision {
        Decision::Answered(_, outcome) => Some(outcome),
        Decision::DryRun | Decision::Left => None,
    }
}

/// What became of one claimed batch.
enum Decision {
    /// A dry run decided on it: no request.
    DryRun,
    /// The endpoint answered (the HTTP status, 0 for none) and the answer means this.
    Answered(i32, Outcome),
    /// The worker was told to stop (a `DROP DATABASE`, a shutdown) while the request was under
    /// way and left it: whether it arrived is not known, so the URLs stay due (at-least-once).
    Left,
}

impl Decision {
    fn status(&self) -> i32 {
        match self {
            Decision::Answered(status, _) => *status,
            Decision::DryRun | Decision::Left => 0,
        }
    }

    fn note(&self) -> String {
        match self {
            Decision::DryRun => "dry_run".to_string(),
            Decision::Left => "left: the worker was told to stop during the request; the URLs \
                               stay due"
                .to_string(),
            Decision::Answered(_, Outcome::Accepted) => String::new(),
            Decision::Answered(_, Outcome::PauseAll { note, .. })
            | Decision::Answered(_, Outcome::PauseHost { note, .. })
            | Decision::Answered(_, Outcome::Refused { note }) => note.clone(),
        }
    }
}

/// The server log's line for one request (or dry-run decision), and for the pause its answer
/// ordered: at LOG, one line per request, never one per URL.
fn log_request(host: &str, urls: usize, decision: &Decision, took: f64, settings: &Settings) {
    let ms = (took * 1000.0).round() as i64;
    match decision {
        Decision::DryRun => log!("indexnow: dry run: {urls} URLs for {host}, no request made"),
        Decision::Left => log!(
            "indexnow: request of {urls} URLs for {host} left after {ms} ms: the worker was told \
             to stop; the URLs stay due"
        ),
        Decision::Answered(status, outcome) => {
            let note = decision.note();
            let note = if note.is_empty() {
                String::new()
            } else {
                format!(": {note}")
            };
            if *status == 0 {
                log!("indexnow: request of {urls} URLs for {host} got no answer in {ms} ms{note}");
            } else {
                log!("indexnow: sent {urls} URLs for {host}: status {status} in {ms} ms{note}");
            }
            match outcome {
                Outcome::PauseAll { pause, .. } => log!(
                    "indexnow: sending paused for {} s, for all hosts (status {status} from {})",
                    pause.as_secs(),
                    settings.endpoint
                ),
                Outcome::PauseHost { pause, .. } => log!(
                    "indexnow: sending for {host} paused for {} s (status {status})",
                    pause.as_secs()
                ),
                Outcome::Accepted | Outcome::Refused { .. } => {}
            }
        }
    }
}

/// Ends the pauses that ran out, with one LOG line each: sending resumes. Run by the workers
/// before each pass.
pub fn end_pauses_over() {
    // A read first: an idle worker's pass takes no transaction id (a write statement would).
    let any: Option<bool> = plan_cache::get_one(sql::ANY_PAUSE_OVER, &[])
        .unwrap_or_else(|e| error!("indexnow: could not read the pauses: {e}"));
    if any != Some(true) {
        return;
    }
    let ended = Spi::connect_mut(|client| {
        plan_cache::write(client, sql::PAUSES_OVER, &[])?
            .map(|r| Ok((r.get::<String>(1)?.unwrap_or_default(), r.get::<i32>(2)?)))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: could not end the pauses that ran out: {e}"));
    for (scope, status) in ended {
        let whom = if scope == "*" {
            "all hosts".to_string()
        } else {
            scope
        };
        log!(
            "indexnow: the pause for {whom} (status {}) is over; sending resumes",
            status.unwrap_or(0)
        );
    }
}

/// Makes one request. A caller's session waits for it. A worker must get out of the way at once
/// when told to stop, whatever the request is doing (a `DROP DATABASE` waits for it, and an
/// endpoint that hangs holds a request up to `http_timeout`): the request runs in a thread of its
/// own, which touches nothing of PostgreSQL's, while the worker waits for it or for SIGTERM.
/// `None` when the worker left the request.
fn submit(
    session: Session,
    client: &Client,
    endpoint: &str,
    request: SubmitRequest,
) -> Option<indexnow_protocol::Answer> {
    if session == Session::PushNow {
        return Some(client.submit(endpoint, &request));
    }
    let (answered, answer) = std::sync::mpsc::channel();
    let (client, endpoint) = (client.clone(), endpoint.to_string());
    let started = without_signals(|| {
        std::thread::Builder::new()
            .name("indexnow request".into())
            .spawn(move || {
                let _ = answered.send(client.submit(&endpoint, &request));
            })
    });
    if let Err(e) = started {
        return Some(indexnow_protocol::Answer::NoConnection(format!(
            "could not start the request's thread: {e}"
        )));
    }
    loop {
        match answer.recv_timeout(Duration::from_millis(20)) {
            Ok(answer) => return Some(answer),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Some(indexnow_protocol::Answer::NoConnection(
                    "the request's thread ended without an answer".into(),
                ))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if session.told_to_stop() {
                    return None; // the thread ends with the process
                }
            }
        }
    }
}

/// Runs `f` (which starts a thread) with every signal blocked, so that the new thread, which
/// inherits the mask, never runs PostgreSQL's signal handlers: they belong to the main thread.
/// The mask is put back however `f` ends.
fn without_signals<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(libc::sigset_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: puts back the mask saved below.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
        }
    }
    // SAFETY: plain POSIX calls on masks owned here.
    let _restore = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        Restore(before)
    };
    f()
}

pub(crate) fn now() -> TimestampWithTimeZone {
    plan_cache::get_one("SELECT clock_timestamp()", &[])
        .ok()
        .flatten()
        .unwrap_or_else(|| error!("indexnow: no clock"))
}

fn sendable_hosts(settings: &Settings) -> Vec<Host> {
    let args = settings.claim_args(now());
    Spi::connect(|client| {
        plan_cache::read(client, &sql::sendable_hosts(), &args)?
            .map(|r| {
                Ok(Host {
                    host: r.get(1)?.unwrap_or_default(),
                    key: r.get(2)?.unwrap_or_default(),
                    key_location: r.get(3)?,
                })
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: could not list the hosts to send for: {e}"))
}

/// Claims the next batch of one host: how many due rows it took, and those left to send once the
/// scheduled pages among them were re-read. `None` when the worker may not claim now because an
/// `indexnow_push_now()` holds the pass lock.
fn claim(session: Session, settings: &Settings, host: &str) -> Option<(usize, Claimed)> {
    if matches!(session, Session::Worker { .. }) {
        let free: Option<bool> = plan_cache::get_one(&sql::try_pass_lock_shared(), &[])
            .unwrap_or_else(|e| error!("indexnow: could not try the pass lock: {e}"));
        if free != Some(true) {
            return None;
        }
    }
    let mut args = settings.claim_args(now());
    args.push(host.into());
    args.push(settings.batch_size.into());
    args.push(settings.lease().into());
    let query = match session {
        Session::Worker { .. } => sql::claim_with_lease(),
        Session::PushNow => sql::claim_by_reading(crate::queue::own_requests_in_this_transaction()),
    };
    let claimed = Spi::connect_mut(|client| {
        plan_cache::write(client, &query, &args)?
            .map(|r| ClaimedUrl::read(&r))
            .collect::<Result<Claimed, _>>()
    })
    .unwrap_or_else(|e| error!("indexnow: could not claim due URLs of {host}: {e}"));
    let taken = claimed.len();
    Some((taken, reread_scheduled(session, settings, claimed)))
}

/// Behaviour 7: a page whose publication was scheduled is derived again from its row
/// before it is sent, in case the row changed without the capture triggers seeing it (triggers
/// disabled, `session_replication_role = replica`, a restore): the same derivation as a save's,
/// for the rows that gave these URLs (`crate::capture::derive`). A page no longer public is
/// cancelled or removed by it, a page scheduled again waits for its new time; what the
/// derivation changed is taken out of the batch. Costs a derivation only for batches holding
/// such pages: a page queued as live when it was saved is not re-read.
fn reread_scheduled(session: Session, settings: &Settings, mut claimed: Claimed) -> Claimed {
    let scheduled = scheduled_live(&claimed);
    if scheduled.is_empty() {
        return claimed;
    }
    let ext = crate::extension::schema();
    // Our own lease would read as a push in flight (a removal owed): not while we re-read.
    let lease = |hashes: Vec<Vec<u8>>, until: Option<f64>| {
        Spi::run_with_args(&sql::lease_again(), &[hashes.into(), until.into()])
            .unwrap_or_else(|e| error!("indexnow: could not lease re-read pages: {e}"))
    };
    let worker = matches!(session, Session::Worker { .. });
    if worker {
        lease(scheduled.clone(), None);
    }
    derive_rows_of(&ext, &scheduled);
    let unchanged = still_as_claimed(&claimed, &scheduled);
    if worker {
        lease(unchanged.iter().cloned().collect(), Some(settings.lease()));
    }
    claimed.retain(|u| !scheduled.contains(&u.url_hash) || unchanged.contains(&u.url_hash));
    claimed
}

/// The claimed URLs to re-read: live pages queued for a publication time.
fn scheduled_live(claimed: &Claimed) -> Vec<Vec<u8>> {
    claimed
        .iter()
        .filter(|u| u.is_scheduled_live())
        .map(|u| u.url_hash.clone())
        .collect()
}

/// Derives again, as a save does, the rows that gave these URLs (their sources).
fn derive_rows_of(ext: &str, url_hashes: &[Vec<u8>]) {
    let sources: Vec<(i32, pgrx::JsonB)> = Spi::connect(|client| {
        client
            .select(&sql::sources_of(ext), None, &[url_hashes.to_vec().into()])?
            .map(|r| {
                Ok((
                    r.get::<i32>(1)?.unwrap_or_default(),
                    r.get::<pgrx::JsonB>(2)?.unwrap(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: could not find the rows of scheduled pages: {e}"));
    let ids = sources.iter().map(|(id, _)| *id).collect();
    for watch in derive::watches_by_id(ext, ids) {
        for (_, keys) in sources.iter().filter(|(id, _)| *id == watch.id) {
            derive::derive(&watch, Rows::Keyed(keys.0.clone()), Reason::Gone).unwrap_or_else(|e| {
                error!(
                    "indexnow: re-reading scheduled pages of {}: {e}",
                    watch.table
                )
            });
        }
    }
}

/// Of `url_hashes` (claimed), those whose row is still as claimed: the same request, pending,
/// and its time has come.
fn still_as_claimed(
    claimed: &Claimed,
    url_hashes: &[Vec<u8>],
) -> std::collections::HashSet<Vec<u8>> {
    let (hashes, seqs): (Vec<Vec<u8>>, Vec<i64>) = claimed
        .iter()
        .filter(|u| url_hashes.contains(&u.url_hash))
        .map(|u| (u.url_hash.clone(), u.request_seq))
        .unzip();
    Spi::connect(|client| {
        client
            .select(sql::STILL_AS_CLAIMED, None, &[hashes.into(), seqs.into()])?
            .map(|r| Ok(r.get::<Vec<u8>>(1)?.unwrap_or_default()))
            .collect::<Result<_, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: could not read re-read pages: {e}"))
}

/// How often recording an answer is tried when it fails for a passing reason.
const RECORD_TRIES: u32 = 10;

/// Records one request's answer, trying again when that fails for a reason that passes (a
/// deadlock with a save that queues the same URLs in another order): the answer is known, and a
/// worker that gave up would leave the batch leased and send it again (measured in the soak: a
/// deadlock in the settle re-sent a whole accepted batch).
fn record_answer(session: Session, host: &str, claimed: &Claimed, decision: &Decision, took: f64) {
    for attempt in 1.. {
        let recorded =
            session.step(|| crate::subtransaction::run(|| record(host, claimed, decision, took)));
        match recorded {
            Ok(()) => return,
            Err(failure) if failure.transient && attempt < RECORD_TRIES => {
                std::thread::sleep(Duration::from_millis(10 * u64::from(attempt)));
            }
            Err(failure) => {
                error!(
                    "indexnow: could not record a push to {host}: {}",
                    failure.message
                )
            }
        }
    }
}

/// Records one request's answer: the rows it carried, a pause if the endpoint ordered one, and
/// the `indexnow_pushes` row.
fn record(host: &str, claimed: &Claimed, decision: &Decision, took: f64) {
    let (settle, pause) = match decision {
        Decision::DryRun => (Settle::DryRun, None),
        Decision::Left => (Settle::Release, None),
        Decision::Answered(_, Outcome::Accepted) => (Settle::Accepted, None),
        Decision::Answered(_, Outcome::Refused { .. }) => (Settle::Refused, None),
        Decision::Answered(_, Outcome::PauseAll { pause, .. }) => {
            (Settle::Release, Some(("*", *pause)))
        }
        Decision::Answered(_, Outcome::PauseHost { pause, .. }) => {
            (Settle::Release, Some((host, *pause)))
        }
    };
    let (status, note) = (decision.status(), decision.note());
    let note = note.as_str();
    let with_answer = |mut args: Vec<DatumWithOid<'static>>| {
        if let Settle::Refused = settle {
            args.push(status.into());
            args.push(note.into());
        }
        args
    };
    let recorded = Spi::connect_mut(|client| {
        let mut found = std::collections::HashSet::new();
        let by_tid = sql::settle(settle, Locate::ByTid);
        for r in plan_cache::write(client, &by_tid, &with_answer(settle_args(claimed.iter())))? {
            found.insert(r.get::<Vec<u8>>(1)?.unwrap_or_default());
        }
        if found.len() < claimed.len() {
            // rows saved again since the claim moved: find them by key
            let moved = claimed.iter().filter(|u| !found.contains(&u.url_hash));
            let by_key = sql::settle(settle, Locate::ByKey);
            plan_cache::write(client, &by_key, &with_answer(settle_args(moved)))?;
        }
        if let Some((scope, pause)) = pause {
            plan_cache::write(
                client,
                sql::PAUSE,
                &[
                    scope.into(),
                    pause.as_secs_f64().into(),
                    status.into(),
                    note.into(),
                ],
            )?;
        }
        let note = (!note.is_empty()).then_some(note);
        plan_cache::write(
            client,
            sql::RECORD,
            &[
                host.into(),
                (claimed.len() as i32).into(),
                status.into(),
                took.into(),
                note.into(),
            ],
        )?;
        Ok::<_, pgrx::spi::Error>(())
    });
    recorded.unwrap_or_else(|e| error!("indexnow: could not record a push to {host}: {e}"));
}

/// History is pruned at most once a minute per process: rows a day too old are no hurry, and an
/// idle pass should read nothing it does not need.
fn prune_due() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST.load(Ordering::Relaxed);
    if last != 0 && now < last + 60 {
        return false;
    }
    LAST.store(now, Ordering::Relaxed);
    true
}

fn prune(settings: &Settings) {
    Spi::run_with_args(sql::PRUNE, &[settings.history_days.into()])
        .unwrap_or_else(|e| error!("indexnow: could not prune indexnow_pushes: {e}"));
}

/// How long the worker may sleep: until the next row becomes sendable, at most `naptime`. Rows
/// that cannot be sent now (their host has no key, is disabled, in a copy, or paused) do not
/// count; a leased row counts from the end of its lease. A row that fell due during the pass
/// (a long pass, a URL whose debounce ended meanwhile) is sent by another pass at once, after
/// [`DUE_ALREADY`].
///
/// `sent` says whether the pass just made sent anything: when it did not, a row due already is
/// one it could not claim (locked by a save left open in its transaction, or an
/// `indexnow_push_now()` holds the pass lock), and the worker waits [`DUE_BUT_UNCLAIMED`] for it
/// instead of passing every 50 ms while that lasts.
pub fn sleep_before_next_pass(naptime: Duration, sent: bool) -> Duration {
    let args = Settings::now().claim_args(now());
    let wait: Option<f64> = plan_cache::get_one(&sql::seconds_to_next_due(), &args)
        .unwrap_or_else(|e| error!("indexnow: could not find the next due time: {e}"));
    match wait {
        Some(s) if s > 0.0 => naptime.min(Duration::from_secs_f64(s)),
        Some(_) if sent => naptime.min(DUE_ALREADY),
        Some(_) => naptime.min(DUE_BUT_UNCLAIMED),
        None => naptime,
    }
}

/// The pause before the pass after one that sent and left a row due: short, so the row goes at
/// once.
const DUE_ALREADY: Duration = Duration::from_millis(50);

/// The pause when a row is due that the last pass could not claim.
const DUE_BUT_UNCLAIMED: Duration = Duration::from_secs(1);
