//! Sending: one pass over the queue, shared by the background worker and `indexnow_push_now()`.
//!
//! A pass takes the hosts that may be sent for (a key, enabled, not paused) in turn: claim at
//! most `batch_size` due rows of a host, POST them outside any transaction, record the answer;
//! up to `max_in_flight` requests at once, never two for one host ([`Pass`]); until nothing is
//! due, `naptime` has passed, the endpoint orders a pause, or the worker is told to stop. The
//! answer decides (see `indexnow_protocol::response`):
//! - accepted: the claimed requests are settled (only those: behaviour 14);
//! - refused (400, 422, 403 of the key): settled as failed, the status and the body kept;
//! - too large (413): the claim is given back, and the host's next requests carry half as many,
//!   growing back as the endpoint takes them ([`split_batches`]); a request of one URL too large
//!   is an answer about the endpoint (a body limit), and pauses as one;
//! - pause (429, 5xx, network, an answer about the endpoint): the claim is given back, a pause is
//!   written to `indexnow_backoff`, and no new request starts (for all hosts, or for this host
//!   after a site-verification 403); the answers of requests already in flight are still
//!   recorded.
//!
//! What an answer says is redacted of the host's key and key file before anything keeps or logs
//! it (`indexnow_protocol::response::redact`): an endpoint or proxy that echoes the request must
//! not put the key where roles without it read.
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

mod in_flight;
mod push_now;
pub(crate) mod sql;

use crate::derive::{self, Rows};
use crate::guc;
use crate::plan_cache;
use crate::queue::due::DueRule;
use crate::queue::Reason;
use in_flight::Requests;
use indexnow_protocol::client::Client;
use indexnow_protocol::{classify, key_state, Backoffs, KeyState, Outcome, SubmitRequest};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use sql::{Locate, Settle};
use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

/// The settings a pass runs by, read once at its start.
pub struct Settings {
    pub enabled: bool,
    pub dry_run: bool,
    pub endpoint: String,
    pub rule: DueRule,
    pub batch_size: i64,
    /// Requests one pass keeps open at once, never two for one host.
    pub max_in_flight: usize,
    /// A pass starts no new round after this long (`indexnow.naptime`).
    pub rounds_for: Duration,
    pub http_timeout: Duration,
    pub backoffs: Backoffs,
    pub history_days: i32,
}

impl Settings {
    pub fn now() -> Settings {
        Settings {
            enabled: guc::sending_on(),
            dry_run: guc::DRY_RUN.get(),
            endpoint: guc::ENDPOINT
                .get()
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default(),
            rule: guc::due_rule(),
            batch_size: guc::BATCH_SIZE.get() as i64,
            max_in_flight: guc::MAX_IN_FLIGHT.get().max(1) as usize,
            rounds_for: Duration::from_millis(guc::NAPTIME_MS.get() as u64),
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
/// transaction, or, for a worker, one a transaction, skipping those another sender derives, for
/// at most `naptime`: a steady stream of saves must not keep a worker deriving and never sending.
/// Returns whether a worker stopped with change sets left (the next pass then starts at once).
pub fn derive_change_sets(session: Session) -> bool {
    let ext = || crate::extension::schema();
    // (rows whose time has come, expired or due to be announced again, are derived as changed)
    session.step(|| derive::record_woken(&ext()));
    match session {
        Session::PushNow => {
            derive::derive_change_sets_for_reader(&ext());
            false
        }
        Session::Worker { .. } => {
            // Change sets held up by another transaction: passed over, the ones after them
            // derived, and tried again once every other one is (a pass cut short keeps the
            // list, so the next one does not spend its time on them again first).
            let mut passed_over = PASSED_OVER.take();
            let naptime = Duration::from_millis(guc::NAPTIME_MS.get() as u64);
            let until = Instant::now() + naptime.min(DERIVING_PER_PASS);
            while !session.told_to_stop() {
                if Instant::now() >= until {
                    PASSED_OVER.set(passed_over);
                    return true;
                }
                match session.step(|| {
                    crate::process::deriving(|| {
                        derive::derive_one_change_set_for_worker(
                            &ext(),
                            &passed_over,
                            DERIVATION_AT_MOST,
                        )
                    })
                }) {
                    Ok(0) => break,
                    Ok(_) => {}
                    // (its watch cannot derive now: the WARNING said so, once)
                    Err(stuck) if stuck.broken => passed_over.extend(stuck.ids),
                    Err(stuck) if stuck.slow => {
                        warning!("indexnow: {}", stuck.message);
                        passed_over.extend(stuck.ids);
                        // (the next pass derives a smaller slice: this one sends)
                        PASSED_OVER.set(passed_over);
                        return true;
                    }
                    Err(stuck) => {
                        log!(
                            "indexnow: the changes recorded for {} wait for another \
                             transaction: {}; the others are derived and sending goes on",
                            stuck.table,
                            stuck.message
                        );
                        passed_over.extend(stuck.ids);
                    }
                }
            }
            false
        }
    }
}

/// How long a worker derives before it sends what is due (and `indexnow.naptime` when shorter):
/// a pass derives change sets one after another for this long, then sends, then the next pass
/// derives on. With [`DERIVATION_AT_MOST`], it bounds how long deriving, however much there is
/// (an import of 200,000 rows, a watch expression of 50 ms a row), holds another host's due page
/// back: about 1 + 3 seconds, a lock wait of the derivation's (2 s) included.
const DERIVING_PER_PASS: Duration = Duration::from_secs(1);

/// The most a worker gives one derivation of changed rows: one that takes longer is cut short
/// (rolled back), and its table is derived in slices of half as many rows from then on
/// (`derive::derive_one_change_set_for_worker`). Longer than the derivation's own lock wait
/// (`derive::WORKER_WAITS_AT_MOST`, 2 s), so that a row another transaction holds is left as such
/// and not taken for a slow expression; and longer than the largest change set a derivation
/// takes (10,000 keys) costs at the speeds docs/benchmarks.md gives (0.4 to 2 s).
const DERIVATION_AT_MOST: Duration = Duration::from_secs(3);

thread_local! {
    /// The change sets a worker's pass cut short had passed over, for the next pass.
    static PASSED_OVER: std::cell::Cell<Vec<i64>> = const { std::cell::Cell::new(Vec::new()) };
    /// The host of the last batch a worker's pass claimed: its next pass goes on after it. A pass
    /// ends after `naptime`, and one that started again at the same host would let a host with a
    /// backlog send a batch at every pass before another host's page.
    static LAST_HOST: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// One pass. Returns what it did per host (hosts with nothing sent are left out), and whether
/// it left change sets to derive (see [`derive_change_sets`]).
pub fn run_pass(session: Session) -> (Vec<HostResult>, bool) {
    let settings = Settings::now();
    // What the capture triggers recorded is derived first, sending or not: the queue is what a
    // pass reads (behaviour 8).
    let more_to_derive = derive_change_sets(session);
    if !settings.enabled {
        return (vec![], more_to_derive);
    }
    if session == Session::PushNow {
        // As a write: the statements after it then take a fresh snapshot each (pgrx runs them
        // read-write once the transaction has written), and see what a call it waited for settled.
        Spi::connect_mut(|client| {
            plan_cache::write(client, &sql::take_pass_lock(), &[]).map(|_| ())
        })
        .unwrap_or_else(|e| error!("indexnow: could not take the pass lock: {e}"));
    }
    let mut pass = Pass {
        session,
        settings: &settings,
        client: Client::new(settings.http_timeout),
        requests: Requests::new(),
        results: vec![],
        ending: false,
        paused: HashSet::new(),
        last_host: match session {
            Session::Worker { .. } => LAST_HOST.take(),
            Session::PushNow => None,
        },
        started: Instant::now(),
    };
    pass.send_all();
    if let Session::Worker { .. } = session {
        LAST_HOST.set(pass.last_host.clone());
    }
    let mut results = pass.results;
    if prune_due() {
        session.step(|| prune(&settings));
    }
    results.retain(|r| r.requests > 0);
    results.sort_by(|a, b| a.host.cmp(&b.host));
    (results, more_to_derive)
}

/// One pass's sending: up to `max_in_flight` requests open at once, never two for one host, the
/// hosts taken in turn.
///
/// A pass goes in rounds. Each round reads the hosts that have something due (so a host whose
/// page changed during a long pass is in the next round) and claims one batch of each, starting
/// after the host the last round ended with: a host with a backlog of a million URLs sends one
/// batch a round like every other, and delays another host's changed page by at most a round of
/// batches. A host whose request is open is left out of a round until its answer is recorded, so
/// its URLs go out in order and each answer applies to the rows it was for. The pass ends when a
/// round finds nothing to claim and nothing is in flight; after `naptime` it starts no new round
/// (so that a stream of saves does not keep one pass going: the worker reloads its settings, ends
/// pauses and prunes between passes, and starts the next at once when something is due); and it
/// starts nothing more when it must (`ending`): a pause for all hosts (the requests already in
/// flight are still answered and their answers recorded, each by its own class), another sender
/// holding the pass lock, or the worker told to stop (the requests in flight are then left: their
/// URLs stay due).
struct Pass<'a> {
    session: Session,
    settings: &'a Settings,
    client: Client,
    requests: Requests<Batch>,
    results: Vec<HostResult>,
    /// Start nothing more: finish what is in flight.
    ending: bool,
    /// Hosts whose answer paused them during this pass.
    paused: HashSet<String>,
    /// The host of the last batch claimed (by this pass, or a worker's pass before it): the next
    /// round starts after it.
    last_host: Option<String>,
    started: Instant,
}

/// One claimed batch of one host: what a request carries, and what recording its answer settles.
struct Batch {
    host: Host,
    claimed: Claimed,
}

impl Pass<'_> {
    fn send_all(&mut self) {
        let mut rounds = 0;
        while !self.ending && (rounds == 0 || self.started.elapsed() < self.settings.rounds_for) {
            rounds += 1;
            let mut progress = false;
            let mut hosts = self.hosts_in_turn().into_iter();
            loop {
                while self.requests.len() >= self.settings.max_in_flight && !self.ending {
                    self.take_an_answer();
                }
                if self.ending {
                    break;
                }
                // As many hosts as there is room for in flight, claimed in one transaction.
                let room = self.settings.max_in_flight - self.requests.len();
                let group: Vec<Host> = hosts
                    .by_ref()
                    .filter(|host| {
                        !self.requests.any(|b| b.host.host == host.host)
                            && !self.paused.contains(&host.host)
                    })
                    .take(room)
                    .collect();
                if group.is_empty() {
                    break;
                }
                progress |= self.send_batches(group);
            }
            if !progress {
                if self.requests.is_empty() {
                    break;
                }
                self.take_an_answer(); // its host may have more
            }
        }
        while !self.requests.is_empty() {
            self.take_an_answer();
        }
    }

    /// The hosts with something to send, in turn: after the one the last round ended with (a
    /// worker's first round ever starts at a host of its own, so that several workers of a
    /// database do not all walk the same host's index past each other's locked rows).
    fn hosts_in_turn(&mut self) -> Vec<Host> {
        if self.session.told_to_stop() || self.endpoint_paused_elsewhere() {
            self.ending = true;
            return vec![];
        }
        let mut hosts = self.session.step(|| sendable_hosts(self.settings));
        if hosts.is_empty() {
            return hosts;
        }
        // In byte order, as `last_host` is compared (the query's order follows a collation).
        hosts.sort_by(|a, b| a.host.cmp(&b.host));
        let first = match (&self.last_host, self.session) {
            (Some(last), _) => hosts.iter().position(|h| h.host > *last).unwrap_or(0),
            (None, Session::Worker { sender }) => sender as usize % hosts.len(),
            (None, Session::PushNow) => 0,
        };
        hosts.rotate_left(first);
        hosts
    }

    /// Claims the next batch of each host, in one transaction (with many hosts in flight, the
    /// worker's own work a request bounds the rate), and starts their requests (in a dry run,
    /// decides on them at once). Whether anything was claimed.
    fn send_batches(&mut self, hosts: Vec<Host>) -> bool {
        if self.session.told_to_stop() || self.endpoint_paused_elsewhere() {
            self.ending = true;
            return false;
        }
        let (session, settings) = (self.session, self.settings);
        let (claims, locked_out) = session.step(|| {
            let mut claims = vec![];
            for host in hosts {
                match claim(session, settings, &host.host) {
                    Some((taken, claimed)) => claims.push((host, taken, claimed)),
                    None => return (claims, true),
                }
            }
            (claims, false)
        });
        // another sender holds the pass lock: it does the work
        self.ending |= locked_out;
        let mut progress = false;
        for (host, taken, claimed) in claims {
            progress |= self.send_a_batch(host, taken, claimed);
        }
        progress
    }

    /// Starts the request of a host's claimed batch (`taken` rows claimed, `claimed` left to
    /// send once scheduled pages were re-read). Whether anything was claimed.
    fn send_a_batch(&mut self, host: Host, taken: usize, claimed: Claimed) -> bool {
        let settings = self.settings;
        if taken == 0 {
            return false;
        }
        self.last_host = Some(host.host.clone());
        if claimed.is_empty() {
            return true; // the whole batch was scheduled pages the re-read took out
        }
        let batch = Batch { host, claimed };
        if settings.dry_run {
            self.settle(vec![(batch, Decision::DryRun, Duration::ZERO)]);
            return true;
        }
        let request = SubmitRequest {
            host: indexnow_protocol::host_name(&batch.host.host).to_string(),
            key: batch.host.key.clone(),
            key_location: batch.host.key_location.clone(),
            url_list: batch.claimed.iter().map(|u| u.url.clone()).collect(),
        };
        self.requests
            .start(&self.client, &settings.endpoint, request, batch);
        self.report_activity();
        true
    }

    /// Waits for the next answer and records it; a worker told to stop meanwhile leaves every
    /// request in flight.
    fn take_an_answer(&mut self) {
        let session = self.session;
        // (a cancel or statement_timeout of push_now's caller ends its call: nothing is
        // recorded, the transaction aborts and the URLs stay due)
        let Some(first) = self
            .requests
            .next_answer(crate::process::wait_a_moment_or_readable, || {
                session.told_to_stop()
            })
        else {
            self.ending = true;
            let left = self.requests.leave_all();
            self.settle(
                left.into_iter()
                    .map(|(batch, took)| (batch, Decision::Left, took))
                    .collect(),
            );
            return;
        };
        // With many hosts in flight the answers come in together, and the worker's own work a
        // request is what bounds the rate: those there are now are recorded in one transaction
        // (docs/benchmarks.md, "Sending for many hosts").
        let mut answered = vec![first];
        while let Some(a) = self.requests.ready_answer() {
            answered.push(a);
        }
        let statuses: Vec<i32> = answered
            .iter()
            .map(|a| a.answer.status_code() as i32)
            .collect();
        let throttled = throttled_before_each(&statuses, || session.step(throttled_in_a_row));
        let decided = answered
            .into_iter()
            .zip(throttled)
            .map(|(a, throttled_before)| {
                let host = &a.what.host;
                let answer = a.answer.redacted(&host.key, host.key_location.as_deref());
                let status = answer.status_code() as i32;
                let mut outcome = classify(
                    &answer,
                    &self.settings.backoffs,
                    SystemTime::now(),
                    throttled_before,
                );
                if let Outcome::TooLarge { note } = outcome {
                    outcome = split_batches(
                        &host.host,
                        a.what.claimed.len(),
                        note,
                        &self.settings.backoffs,
                    );
                } else if outcome == Outcome::Accepted {
                    batch_taken(&host.host, a.what.claimed.len());
                }
                let decision = Decision::Answered(status, outcome, key_state(&answer));
                (a.what, decision, a.took)
            })
            .collect();
        self.settle(decided);
        self.report_activity();
    }

    /// Records what became of batches (in one transaction): their rows, a pause, the history
    /// rows, the log lines, and the hosts' results.
    fn settle(&mut self, settled: Vec<(Batch, Decision, Duration)>) {
        let record_started = Instant::now();
        record_answers(self.session, &settled);
        let recorded_in = record_started.elapsed();
        for (batch, decision, took) in settled {
            self.settled(&batch, decision, took.as_secs_f64());
        }
        debug2!("indexnow: recording answers took {recorded_in:?}");
    }

    /// What a batch recorded means for the pass: its log line, its host's result, a pause.
    fn settled(&mut self, batch: &Batch, decision: Decision, took: f64) {
        let (host, n) = (batch.host.host.as_str(), batch.claimed.len());
        log_request(host, n, &decision, took, self.settings);
        let result = match self.results.iter().position(|r| r.host == host) {
            Some(at) => &mut self.results[at],
            None => {
                self.results.push(HostResult {
                    host: host.to_string(),
                    ..Default::default()
                });
                self.results.last_mut().unwrap()
            }
        };
        result.requests += 1;
        result.url_count += n as i64;
        result.status = Some(decision.status());
        let note = decision.note();
        result.note = (!note.is_empty()).then_some(note);
        match decision {
            Decision::Answered(status, Outcome::PauseAll { pause, .. }, _) => {
                self.ending = true;
                // SAFETY: reads the clock.
                let now = unsafe { pg_sys::GetCurrentTimestamp() };
                let until = now + i64::try_from(pause.as_micros()).unwrap_or(i64::MAX / 2);
                // SAFETY: reads this backend's database.
                let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
                crate::registry::pause_endpoint(&self.settings.endpoint, until, status, db);
            }
            Decision::Answered(_, Outcome::PauseHost { .. }, _) => {
                self.paused.insert(host.to_string());
            }
            _ => {}
        }
    }

    /// Whether the endpoint ordered a pause through another database of this server (see
    /// `crate::registry::pause_endpoint`). The first time a worker sees that pause, it writes it
    /// into this database's `indexnow_backoff` too (unless this database's own pause lasts as
    /// long), so that `indexnow_status()`, the sleep until the next due URL and the LOG line when
    /// sending resumes all go by it as by a pause of its own. When that row is gone before the
    /// pause's end, someone ended the pause here (`DELETE FROM indexnow_backoff`, as
    /// docs/operations.md's "Clearing a pause" says): it ends for every database of the server.
    /// `indexnow_push_now()` keeps to the pause without writing it (it would write back a pause
    /// just ended).
    fn endpoint_paused_elsewhere(&mut self) -> bool {
        use std::sync::atomic::{AtomicI64, Ordering};
        /// The end of the last shared pause this process wrote into its database.
        static ADOPTED: AtomicI64 = AtomicI64::new(0);
        // SAFETY: reads this backend's database.
        let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
        let Some((until, status)) =
            crate::registry::endpoint_paused_by_another(&self.settings.endpoint, db)
        else {
            return false;
        };
        if !matches!(self.session, Session::Worker { .. }) {
            return true;
        }
        if ADOPTED.load(Ordering::Relaxed) == until {
            let still = self
                .session
                .step(|| plan_cache::get_one::<bool>(sql::ALL_PAUSED, &[]));
            if matches!(still, Ok(Some(false))) {
                crate::registry::end_endpoint_pause(&self.settings.endpoint, until);
                log!(
                    "indexnow: the pause for all hosts (status {status}, answered to another \
                     database of this server) was ended in this database; sending resumes"
                );
                return false;
            }
        } else {
            // SAFETY: reads the clock.
            let left = (until - unsafe { pg_sys::GetCurrentTimestamp() }) as f64 / 1e6;
            let note = format!(
                "status {status} from {} to another database of this server: a pause the \
                 endpoint orders holds every database that sends to it",
                self.settings.endpoint
            );
            let adopted = self.session.step(|| {
                Spi::connect_mut(|client| {
                    plan_cache::write(
                        client,
                        sql::ADOPT_PAUSE,
                        &[left.into(), status.into(), note.as_str().into()],
                    )
                    .map(|t| t.len())
                })
            });
            match adopted {
                Ok(_) => {
                    ADOPTED.store(until, Ordering::Relaxed);
                    log!(
                    "indexnow: sending paused for {} s, for all hosts (status {status} from {}, \
                     answered to another database of this server)",
                        left.round(),
                        self.settings.endpoint
                    )
                }
                Err(e) => warning!("indexnow: could not record the endpoint's pause: {e}"),
            }
        }
        true
    }

    /// What `pg_stat_activity` shows the worker doing while requests are in flight.
    fn report_activity(&self) {
        let open: Vec<(&str, usize)> = self
            .requests
            .iter()
            .map(|b| (b.host.host.as_str(), b.claimed.len()))
            .collect();
        match open.as_slice() {
            [] => {}
            [(host, n)] => self
                .session
                .report_activity(&format!("indexnow: sending {n} URLs to {host}")),
            many => self.session.report_activity(&format!(
                "indexnow: sending {} URLs to {} hosts",
                many.iter().map(|(_, n)| n).sum::<usize>(),
                many.len()
            )),
        }
    }
}

/// What became of one claimed batch.
enum Decision {
    /// A dry run decided on it: no request.
    DryRun,
    /// The endpoint answered (the HTTP status, 0 for none) and the answer means this.
    Answered(i32, Outcome, Option<KeyState>),
    /// The worker was told to stop (a `DROP DATABASE`, a shutdown) while the request was under
    /// way and left it: whether it arrived is not known, so the URLs stay due (at-least-once).
    Left,
}

impl Decision {
    fn status(&self) -> i32 {
        match self {
            Decision::Answered(status, ..) => *status,
            Decision::DryRun | Decision::Left => 0,
        }
    }

    fn note(&self) -> String {
        match self {
            Decision::DryRun => "dry_run".to_string(),
            Decision::Left => "left: the worker was told to stop during the request; the URLs \
                               stay due"
                .to_string(),
            Decision::Answered(_, Outcome::Accepted, _) => String::new(),
            Decision::Answered(
                _,
                Outcome::PauseAll {
                    note,
                    act: Some(act),
                    ..
                },
                _,
            ) => format!("{note} ({act})"),
            Decision::Answered(_, Outcome::PauseAll { note, .. }, _)
            | Decision::Answered(_, Outcome::PauseHost { note, .. }, _)
            | Decision::Answered(_, Outcome::Refused { note }, _)
            | Decision::Answered(_, Outcome::TooLarge { note }, _) => note.clone(),
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
        Decision::Answered(status, outcome, _) => {
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
                Outcome::PauseAll {
                    pause,
                    act: Some(act),
                    ..
                } => warning!(
                    "indexnow: sending paused for {} s, for all hosts: status {status} from {} \
                     is an answer about the endpoint, not the URLs; {act}",
                    pause.as_secs(),
                    settings.endpoint
                ),
                Outcome::PauseAll { pause, .. } => log!(
                    "indexnow: sending paused for {} s, for all hosts (status {status} from {})",
                    pause.as_secs(),
                    settings.endpoint
                ),
                Outcome::PauseHost { pause, .. } => log!(
                    "indexnow: sending for {host} paused for {} s (status {status})",
                    pause.as_secs()
                ),
                Outcome::Accepted | Outcome::Refused { .. } | Outcome::TooLarge { .. } => {}
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

/// After a 413, how large a host's requests may be: `size` URLs, and how many requests of that
/// size the endpoint has taken since (see [`split_batches`]).
#[derive(Clone, Copy)]
struct BatchCap {
    size: i64,
    taken: u32,
}

/// Requests of a capped size accepted before the cap doubles: an endpoint whose limit was met
/// once is asked for a larger request again after this many (a 413 in nine requests at most
/// when its limit holds), and a limit lifted is found again in a few dozen requests.
const TAKEN_BEFORE_GROWING: u32 = 8;

thread_local! {
    /// Each host's batch cap after a 413 (see [`split_batches`]); none for a host whose
    /// endpoint takes `batch_size`.
    static BATCH_CAPS: std::cell::RefCell<std::collections::HashMap<String, BatchCap>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// How many URLs the next request for `host` may carry: `batch_size`, or less after the
/// endpoint answered 413 to a larger one.
fn batch_size_for(host: &str, settings: &Settings) -> i64 {
    let cap = BATCH_CAPS.with(|caps| caps.borrow().get(host).map(|c| c.size));
    cap.map_or(settings.batch_size, |cap| cap.min(settings.batch_size))
}

/// A 413 (the request too large for the endpoint): the URLs stay due, and this process sends the
/// host's in requests of half as many from now on; each [`TAKEN_BEFORE_GROWING`] full requests
/// accepted at that size double it again ([`batch_taken`]), so that a burst of 413s does not
/// leave a worker sending small requests for the rest of its life. A request of one URL too
/// large pauses all sending, loudly (`indexnow_protocol::response::too_large`), and the cap
/// goes: after the pause, the full size is tried again.
fn split_batches(host: &str, carried: usize, note: String, backoffs: &Backoffs) -> Outcome {
    let half = (carried / 2) as i64;
    let outcome = if carried > 1 {
        indexnow_protocol::response::too_large(
            carried,
            format!("{note}; sent again in requests of at most {half} URLs"),
            backoffs,
        )
    } else {
        indexnow_protocol::response::too_large(carried, note, backoffs)
    };
    BATCH_CAPS.with_borrow_mut(|caps| match outcome {
        Outcome::TooLarge { .. } => {
            caps.insert(
                host.to_string(),
                BatchCap {
                    size: half,
                    taken: 0,
                },
            );
        }
        _ => {
            caps.remove(host);
        }
    });
    outcome
}

/// A request of `carried` URLs for `host` was accepted: at the host's cap, it counts towards
/// doubling it (see [`split_batches`]).
fn batch_taken(host: &str, carried: usize) {
    BATCH_CAPS.with_borrow_mut(|caps| {
        let Some(cap) = caps.get_mut(host) else {
            return;
        };
        if (carried as i64) < cap.size {
            return;
        }
        cap.taken += 1;
        if cap.taken >= TAKEN_BEFORE_GROWING {
            *cap = BatchCap {
                size: cap.size.saturating_mul(2),
                taken: 0,
            };
        }
    });
}

/// For each of a group of answers (their HTTP `statuses`, in the order they are recorded), how
/// many answers in a row before it were 429, as if each were recorded before the next is
/// classified: the history's count (`recorded`, read once and only for a 429), then this group's
/// own. 0 for an answer that is not a 429; no answer (status 0) neither counts nor breaks the row,
/// as in `sql::THROTTLED_IN_A_ROW`.
fn throttled_before_each(statuses: &[i32], recorded: impl FnOnce() -> u32) -> Vec<u32> {
    let mut recorded = Some(recorded);
    // 429s in a row before the next answer, once known (the history read, or a non-429 seen)
    let mut in_a_row: Option<u32> = None;
    statuses
        .iter()
        .map(|&status| {
            if status == 0 {
                return 0;
            }
            if status != 429 {
                in_a_row = Some(0);
                return 0;
            }
            let before = in_a_row.unwrap_or_else(|| recorded.take().map_or(0, |read| read()));
            in_a_row = Some(before + 1);
            before
        })
        .collect()
}

/// How many answers in a row were 429 (see `sql::THROTTLED_IN_A_ROW`).
fn throttled_in_a_row() -> u32 {
    plan_cache::get_one::<i32>(sql::THROTTLED_IN_A_ROW, &[])
        .ok()
        .flatten()
        .map_or(0, |n| n.max(0) as u32)
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
    args.push(batch_size_for(host, settings).into());
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
/// for the rows that gave these URLs (`crate::derive`). A page no longer public is
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
    let lease = |hashes: Vec<Vec<u8>>, until: Option<f64>, tried: bool| {
        Spi::connect_mut(|client| {
            let args = [hashes.into(), until.into(), tried.into()];
            plan_cache::write(client, &sql::lease_again(), &args).map(|_| ())
        })
        .unwrap_or_else(|e| error!("indexnow: could not lease re-read pages: {e}"))
    };
    let worker = matches!(session, Session::Worker { .. });
    if worker {
        lease(scheduled.clone(), None, false);
    }
    derive_rows_of(&ext, &scheduled);
    let unchanged = still_as_claimed(&claimed, &scheduled);
    if worker {
        // (the claim left their `tried_at` for now: see `sql::claim_with_lease`)
        let hashes = unchanged.iter().cloned().collect();
        lease(hashes, Some(settings.lease()), !settings.dry_run);
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
        plan_cache::read(client, sql::STILL_AS_CLAIMED, &[hashes.into(), seqs.into()])?
            .map(|r| Ok(r.get::<Vec<u8>>(1)?.unwrap_or_default()))
            .collect::<Result<_, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: could not read re-read pages: {e}"))
}

/// How often recording an answer is tried when it fails for a passing reason.
const RECORD_TRIES: u32 = 10;

/// Records requests' answers, in one transaction, each in a subtransaction of its own; one
/// whose recording fails for a reason that passes (a deadlock with a save that queues the same
/// URLs in another order) is tried again, with those after it, once the others are committed:
/// the answer is known, and a worker that gave up would leave the batch leased and send it again
/// (measured in the soak: a deadlock in the settle re-sent a whole accepted batch).
fn record_answers(session: Session, settled: &[(Batch, Decision, Duration)]) {
    let mut recorded = 0;
    for attempt in 1.. {
        let failed = session.step(|| {
            for (batch, decision, took) in &settled[recorded..] {
                let took = took.as_secs_f64();
                if let Err(failure) = crate::subtransaction::run(|| record(batch, decision, took)) {
                    return Some(failure);
                }
                recorded += 1;
            }
            None
        });
        let Some(failure) = failed else {
            return;
        };
        if !(failure.transient && attempt < RECORD_TRIES) {
            error!(
                "indexnow: could not record a push to {}: {}",
                settled[recorded].0.host.host, failure.message
            );
        }
        std::thread::sleep(Duration::from_millis(10 * u64::from(attempt)));
    }
}

/// Records one request's answer: the rows it carried, a pause if the endpoint ordered one, what
/// it said of the key, and the `indexnow_pushes` row.
fn record(batch: &Batch, decision: &Decision, took: f64) {
    let (host, claimed) = (batch.host.host.as_str(), &batch.claimed);
    let request_key = batch.host.key.as_str();
    let (settle, pause) = match decision {
        Decision::DryRun => (Settle::DryRun, None),
        Decision::Left => (Settle::Release, None),
        Decision::Answered(_, Outcome::Accepted, _) => (Settle::Accepted, None),
        Decision::Answered(_, Outcome::Refused { .. }, _) => (Settle::Refused, None),
        Decision::Answered(_, Outcome::PauseAll { pause, .. }, _) => {
            (Settle::Release, Some(("*", *pause)))
        }
        Decision::Answered(_, Outcome::PauseHost { pause, .. }, _) => {
            (Settle::Release, Some((host, *pause)))
        }
        Decision::Answered(_, Outcome::TooLarge { .. }, _) => (Settle::Release, None),
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
        let args = with_answer(settle_args(claimed.iter()));
        for r in plan_cache::write_generic(client, &by_tid, &args)? {
            found.insert(r.get::<Vec<u8>>(1)?.unwrap_or_default());
        }
        if found.len() < claimed.len() {
            // rows saved again since the claim moved: find them by key
            let moved = claimed.iter().filter(|u| !found.contains(&u.url_hash));
            let by_key = sql::settle(settle, Locate::ByKey);
            plan_cache::write_generic(client, &by_key, &with_answer(settle_args(moved)))?;
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
        if let Decision::Answered(status, _, Some(key)) = decision {
            let said = if note.is_empty() {
                status.to_string()
            } else {
                note.to_string()
            };
            plan_cache::write(
                client,
                sql::KEY_STATE,
                &[
                    host.into(),
                    key.as_str().into(),
                    said.into(),
                    request_key.into(),
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
                claimed
                    .iter()
                    .map(|u| u.url.clone())
                    .collect::<Vec<String>>()
                    .into(),
            ],
        )?;
        Ok::<_, pgrx::spi::Error>(())
    });
    recorded.unwrap_or_else(|e| error!("indexnow: could not record a push to {host}: {e}"));
}

/// History is pruned at most once a minute per process: rows a day too old are no hurry, and an
/// idle pass should read nothing it does not need.
fn prune_due() -> bool {
    use std::sync::atomic::AtomicU64;
    static LAST: AtomicU64 = AtomicU64::new(0);
    once_in(&LAST, 60)
}

/// Whether `seconds` have passed since `last` said yes (and says yes now, once).
fn once_in(last: &std::sync::atomic::AtomicU64, seconds: u64) -> bool {
    use std::sync::atomic::Ordering;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let before = last.load(Ordering::Relaxed);
    if before != 0 && now < before + seconds {
        return false;
    }
    last.store(now, Ordering::Relaxed);
    true
}

/// Prunes the history, and once an hour the settled removals of the queue (it reads the whole
/// queue: `sql::prune_settled_removals`).
fn prune(settings: &Settings) {
    use std::sync::atomic::AtomicU64;
    static REMOVALS_LAST: AtomicU64 = AtomicU64::new(0);
    Spi::connect_mut(|client| {
        plan_cache::write(client, sql::PRUNE, &[settings.history_days.into()]).map(|_| ())
    })
    .unwrap_or_else(|e| error!("indexnow: could not prune indexnow_pushes: {e}"));
    if once_in(&REMOVALS_LAST, 3600) {
        prune_settled_removals(settings.history_days);
    }
}

/// Deletes the queue rows of removals settled more than `days` ago (`sql::prune_settled_removals`).
pub(crate) fn prune_settled_removals(days: i32) -> usize {
    Spi::connect_mut(|client| {
        plan_cache::write(client, &sql::prune_settled_removals(), &[days.into()]).map(|t| t.len())
    })
    .unwrap_or_else(|e| error!("indexnow: could not prune the settled removals: {e}"))
}

/// How long the worker may sleep: until the next row becomes sendable, at most `naptime`. Rows
/// that cannot be sent (their host has no key, is disabled, or in a copy) do not count; a leased
/// row counts from the end of its lease, a paused host's from the end of the pause. A row that fell due during the pass
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
        Some(s) if s > 0.0 => naptime.min(until_after(s).unwrap_or(naptime)),
        Some(_) if sent => naptime.min(DUE_ALREADY),
        Some(_) => naptime.min(DUE_BUT_UNCLAIMED),
        None => naptime,
    }
}

/// A sleep of `seconds` rounded up to the next whole millisecond: the latch waits whole
/// milliseconds, and a sleep cut short wakes the worker a moment before the pause or debounce it
/// waits for has ended (the pass found the pause still on and the claim, a moment later, found
/// it over: it sent without the LOG line that sending resumes). `None` when it is no duration.
fn until_after(seconds: f64) -> Option<Duration> {
    let millis = (seconds * 1000.0).ceil();
    (millis.is_finite() && millis >= 0.0 && millis < u64::MAX as f64)
        .then(|| Duration::from_millis(millis as u64))
}

/// The pause before the pass after one that sent and left a row due: short, so the row goes at
/// once.
const DUE_ALREADY: Duration = Duration::from_millis(50);

/// The pause when a row is due that the last pass could not claim.
const DUE_BUT_UNCLAIMED: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_ends_after_what_it_waits_for_not_a_moment_before() {
        for (seconds, millis) in [(2.9987, 2_999), (3.0, 3_000), (0.000_1, 1), (0.0, 0)] {
            let sleep = until_after(seconds).unwrap();
            // What the latch waits: whole milliseconds.
            assert_eq!(sleep.as_millis(), millis, "{seconds} s");
            assert!(sleep.as_secs_f64() >= seconds, "{seconds} s");
        }
        assert_eq!(until_after(f64::NAN), None);
        assert_eq!(until_after(f64::INFINITY), None);
    }

    /// A group of answers recorded together counts its 429s in a row as one at a time would:
    /// after the history's, and from its last other answer; the history is read once, and only
    /// when a 429 needs it.
    #[test]
    fn a_group_of_answers_counts_429s_in_a_row_as_one_at_a_time() {
        let cases: [(&[i32], u32, &[u32], bool); 6] = [
            (&[429, 429, 200, 429], 3, &[3, 4, 0, 0], true),
            (&[429, 0, 429], 1, &[1, 0, 2], true),
            (&[200, 429, 429], 3, &[0, 0, 1], false),
            (&[429], 0, &[0], true),
            (&[200, 503], 5, &[0, 0], false),
            (&[429, 503, 429], 2, &[2, 0, 0], true),
        ];
        for (statuses, history, expected, read) in cases {
            let mut reads = 0;
            let got = throttled_before_each(statuses, || {
                reads += 1;
                history
            });
            assert_eq!(got, expected, "{statuses:?} after {history}");
            assert_eq!(reads, u32::from(read), "{statuses:?}: the history read");
        }
    }
}
