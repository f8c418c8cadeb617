//! Requests in flight: each runs in a thread of the sender's pool, which makes one HTTP exchange
//! at a time and touches nothing of PostgreSQL's; its answer comes back over one channel to the
//! sender's own thread, which records it. The pool has as many threads as requests were ever open
//! at once in the pass, each taking the next request when done with one: a thread made and ended
//! for each request (its stack mapped and unmapped, every core told of it) was a tenth of a
//! worker's time sending to many hosts. So a sender keeps several requests open at once (each
//! for another host: `super::Pass` sees to that), and a worker told to stop gets out of the way
//! at once, whatever its requests are doing (a `DROP DATABASE` waits for it, and an endpoint
//! that hangs holds a request up to `http_timeout`): it leaves them, and starts no new one.
//!
//! While it waits for answers, the sender's own thread waits as PostgreSQL's processes wait
//! (`crate::process::wait_a_moment_or_readable`, given as `wait`): it is gone at once with the
//! postmaster and absorbs every barrier and interrupt meanwhile, so that no DDL of any database
//! waits for a request, and a crashed server can restart while an endpoint hangs. A request's
//! thread wakes it when its answer is there, through a pipe (it must not touch the latch: nothing
//! of PostgreSQL's is called off the main thread): with many requests in flight a wait of its full
//! length after each answer left every slot empty that long.

use indexnow_protocol::client::Client;
use indexnow_protocol::{Answer, SubmitRequest};
use std::io::{PipeReader, PipeWriter, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a sender waiting for answers looks for one (and whether it must stop).
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// The requests a sender has open; `T` is what it needs to record each answer.
pub struct Requests<T> {
    send_answer: Sender<(u64, Answer)>,
    answers: Receiver<(u64, Answer)>,
    /// A byte an answer: what the waiting thread waits on. The write end is shared with the
    /// requests' threads, and closed when the last of them and this are gone (a thread left
    /// running never writes to a descriptor closed and reused since).
    woken: PipeReader,
    wake: Arc<PipeWriter>,
    open: Vec<Open<T>>,
    next_id: u64,
    /// The requests for the pool's threads to make. Closed when this is dropped: an idle thread
    /// ends then, one in an exchange when the exchange ends.
    jobs: Sender<Job>,
    waiting_jobs: Arc<Mutex<Receiver<Job>>>,
    threads: usize,
    /// Set when the open requests are left (the sender told to stop): a request not begun by
    /// then is never made.
    left: Arc<AtomicBool>,
}

/// One request, as a thread of the pool makes it.
type Job = Box<dyn FnOnce() + Send>;

struct Open<T> {
    id: u64,
    what: T,
    started: Instant,
}

/// An answer, with what its request was for and how long it took.
pub struct Answered<T> {
    pub what: T,
    pub answer: Answer,
    pub took: Duration,
}

impl<T> Requests<T> {
    pub fn new() -> Requests<T> {
        let (send_answer, answers) = channel();
        let (woken, wake) = std::io::pipe().expect("indexnow: a pipe for the requests' answers");
        // Neither end ever blocks: the reader drains what is there, and a full pipe already
        // wakes the reader.
        for fd in [woken.as_raw_fd(), wake.as_raw_fd()] {
            // SAFETY: flags of descriptors owned here.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        let (jobs, waiting_jobs) = channel();
        Requests {
            send_answer,
            answers,
            woken,
            wake: Arc::new(wake),
            open: vec![],
            next_id: 0,
            jobs,
            waiting_jobs: Arc::new(Mutex::new(waiting_jobs)),
            threads: 0,
            left: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Whether a request for which `is` holds is open.
    pub fn any(&self, is: impl Fn(&T) -> bool) -> bool {
        self.open.iter().any(|o| is(&o.what))
    }

    /// What the open requests are for.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.open.iter().map(|o| &o.what)
    }

    /// Starts `request` to `endpoint`; `what` comes back with its answer.
    pub fn start(&mut self, client: &Client, endpoint: &str, request: SubmitRequest, what: T) {
        let id = self.next_id;
        self.next_id += 1;
        self.open.push(Open {
            id,
            what,
            started: Instant::now(),
        });
        // A thread for each open request: none waits for another's exchange to end.
        if self.threads < self.open.len() {
            match self.add_thread() {
                Ok(()) => self.threads += 1,
                Err(e) if self.threads == 0 => {
                    let _ = self.send_answer.send((
                        id,
                        Answer::NoConnection(format!("could not start a request's thread: {e}")),
                    ));
                    return;
                }
                // (the request waits for a thread of the pool to be free)
                Err(_) => {}
            }
        }
        let send_answer = self.send_answer.clone();
        let wake = self.wake.clone();
        let left = self.left.clone();
        let (client, endpoint) = (client.clone(), endpoint.to_string());
        let job: Job = Box::new(move || {
            let answer = if left.load(Ordering::Relaxed) {
                Answer::Reset("left before it began".into())
            } else {
                // Always an answer, so the sender never waits for one that cannot come.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    client.submit(&endpoint, &request)
                }))
                .unwrap_or_else(|_| Answer::Reset("the request's thread panicked".into()))
            };
            // The sender may have stopped waiting (told to stop): then nobody listens.
            let _ = send_answer.send((id, answer));
            let _ = (&*wake).write(&[1]);
        });
        // (the receiving end lives as long as the pool's threads, and this holds it too)
        let _ = self.jobs.send(job);
    }

    /// A new thread for the pool: it makes one request after another until the pool is closed.
    fn add_thread(&self) -> std::io::Result<()> {
        let jobs = self.waiting_jobs.clone();
        without_signals(|| {
            std::thread::Builder::new()
                .name("indexnow request".into())
                .spawn(move || loop {
                    // (the lock is held only to take a job: a thread in an exchange holds none)
                    let job = jobs.lock().map(|j| j.recv());
                    match job {
                        Ok(Ok(job)) => job(),
                        _ => return,
                    }
                })
                .map(|_| ())
        })
    }

    /// Waits for the next answer, looking for one after each `wait` of at most [`LOOK_EVERY`]
    /// (which handles what the process must meanwhile). `None` when `stop()` became true first:
    /// the requests stay open (see [`Requests::leave_all`]).
    pub fn next_answer(
        &mut self,
        mut wait: impl FnMut(Duration, Option<RawFd>),
        stop: impl Fn() -> bool,
    ) -> Option<Answered<T>> {
        loop {
            // (drained first: a byte written after this is there for the wait below)
            let mut bytes = [0u8; 256];
            while matches!(self.woken.read(&mut bytes), Ok(n) if n > 0) {}
            if let Some(answered) = self.ready_answer() {
                return Some(answered);
            }
            if stop() {
                return None;
            }
            wait(LOOK_EVERY, Some(self.woken.as_raw_fd()));
        }
    }

    /// An answer that has come already, without waiting.
    pub fn ready_answer(&mut self) -> Option<Answered<T>> {
        while let Ok((id, answer)) = self.answers.try_recv() {
            let Some(at) = self.open.iter().position(|o| o.id == id) else {
                continue; // of a request already left
            };
            let open = self.open.swap_remove(at);
            return Some(Answered {
                what: open.what,
                answer,
                took: open.started.elapsed(),
            });
        }
        None
    }

    /// Gives up every open request without its answer (each thread ends with the process or
    /// when its exchange does): what they were for, and how long each had run.
    pub fn leave_all(&mut self) -> Vec<(T, Duration)> {
        self.left.store(true, Ordering::Relaxed);
        self.open
            .drain(..)
            .map(|o| (o.what, o.started.elapsed()))
            .collect()
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
