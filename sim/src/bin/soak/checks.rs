//! What is checked, and the counters behind it: the ledger of what each
//! handler processed per call, gauges of what is alive, the heap sampler,
//! and the list of checks with their verdicts.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::faults::Play;

/// A count of things alive, kept by guards.
#[derive(Debug, Default)]
pub(crate) struct Gauge(AtomicI64);

/// Counts one thing alive while it lives.
#[derive(Debug)]
pub(crate) struct Alive<'a>(&'a Gauge);

impl Gauge {
    pub(crate) fn enter(&self) -> Alive<'_> {
        self.add(1);
        Alive(self)
    }

    /// Counts `n` more alive (fewer when negative), for a thing that owns
    /// what holds the gauge and cannot borrow it.
    pub(crate) fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        self.0.add(-1);
    }
}

/// How long a finished call's record is kept for requests still on their
/// way to a server; far longer than any request takes to be read.
const LINGER: Duration = Duration::from_secs(2);
/// Duplicates described in the output, at most.
const EXAMPLES: usize = 8;

/// What one handler (a path, with one method) saw of one call.
#[derive(Debug)]
struct Handler {
    path: Box<str>,
    method: Box<str>,
    /// Requests read, which pick the step's play.
    received: u32,
    /// Of those not safe to repeat, the ones it may have acted on.
    processed: u32,
    /// Redirects to this very URL that keep the method: each asks for the
    /// request once more, which is no retry.
    grants: u32,
}

#[derive(Debug, Default)]
struct Calls {
    open: HashMap<u64, Vec<Handler>>,
    /// Finished calls, oldest first, forgotten after [`LINGER`].
    closed: VecDeque<(Instant, u64)>,
}

/// Per call, what every handler processed; a request not safe to repeat
/// that a handler processes more often than its own redirects asked for
/// is a duplicate. Finished calls are forgotten after [`LINGER`], so the
/// ledger holds about the calls of the last few seconds.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    calls: Mutex<Calls>,
    /// Requests not safe to repeat processed more than once by a handler.
    pub(crate) duplicates: AtomicU64,
    /// Requests not safe to repeat that a handler processed.
    pub(crate) not_safe_processed: AtomicU64,
    /// Requests that arrived with a body of another length than their
    /// caller sent, with the caller's method.
    pub(crate) lost_bodies: AtomicU64,
    /// Requests for a call that had finished more than [`LINGER`] ago (or
    /// was never opened): not audited. None are expected.
    pub(crate) late: AtomicU64,
    examples: Mutex<Vec<String>>,
}

impl Ledger {
    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A call starts: requests naming it are audited from now on.
    pub(crate) fn open(&self, call: u64) {
        self.calls().open.insert(call, Vec::new());
    }

    /// A call has finished; its record goes after [`LINGER`].
    pub(crate) fn close(&self, call: u64) {
        let now = Instant::now();
        let mut calls = self.calls();
        calls.closed.push_back((now, call));
        while let Some(&(at, old)) = calls.closed.front() {
            if now.duration_since(at) < LINGER {
                break;
            }
            calls.closed.pop_front();
            calls.open.remove(&old);
        }
    }

    /// Records a request a handler read, and picks its play with
    /// `decide`, given the how-many-th request of the call this handler
    /// has read with this method (from 1).
    pub(crate) fn serve(
        &self,
        call: u64,
        path: &str,
        method: &str,
        not_safe: bool,
        decide: impl FnOnce(u32) -> Play,
    ) -> Play {
        let mut calls = self.calls();
        let Some(handlers) = calls.open.get_mut(&call) else {
            drop(calls);
            self.late.fetch_add(1, Ordering::Relaxed);
            return decide(1);
        };
        let at = match handlers.iter().position(|h| *h.path == *path && *h.method == *method) {
            Some(at) => at,
            None => {
                handlers.push(Handler {
                    path: path.into(),
                    method: method.into(),
                    received: 0,
                    processed: 0,
                    grants: 0,
                });
                handlers.len() - 1
            }
        };
        let handler = &mut handlers[at];
        handler.received += 1;
        let play = decide(handler.received);
        if not_safe && play.processed() {
            handler.processed += 1;
            self.not_safe_processed.fetch_add(1, Ordering::Relaxed);
            if handler.processed > 1 + handler.grants {
                self.duplicates.fetch_add(1, Ordering::Relaxed);
                let text = format!(
                    "call {call}: {method} {path} processed {} times ({} asked for by its own redirects)",
                    handler.processed, handler.grants
                );
                self.example(text);
            }
            // A redirect to itself that keeps the method (301 and 302 turn
            // only a POST into a GET) asks for the request again.
            let again = match play {
                Play::Loop { code: 307 | 308 } => true,
                Play::Loop { code: 301 | 302 } => method != "POST",
                _ => false,
            };
            if again {
                handler.grants += 1;
            }
        }
        play
    }

    /// A request arrived with a body of another length than its caller
    /// sent, and the method it was sent with.
    pub(crate) fn lost_body(
        &self,
        call: u64,
        method: &str,
        path: &str,
        (read, sent, how): (usize, usize, &str),
    ) {
        self.lost_bodies.fetch_add(1, Ordering::Relaxed);
        self.example(format!(
            "call {call}: {method} {path} arrived with {read} of the {sent} body bytes sent ({how})"
        ));
    }

    fn example(&self, text: String) {
        let mut examples = self.examples.lock().unwrap_or_else(|p| p.into_inner());
        if examples.len() < EXAMPLES {
            examples.push(text);
        }
    }

    /// Calls on record now (open, or finished within [`LINGER`]).
    pub(crate) fn on_record(&self) -> usize {
        self.calls().open.len()
    }

    pub(crate) fn examples(&self) -> Vec<String> {
        self.examples.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The heap of the whole process — servers, clients and this harness,
/// all in one process — as dhat's counting allocator sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeapPeaks {
    /// The peak of the first half of the traffic (exact: dhat's maximum
    /// read at half time).
    pub(crate) first: u64,
    /// The peak of the second half: dhat's maximum at the end if it rose in
    /// the second half (exact), else the highest of samples taken every
    /// 10 ms.
    pub(crate) second: u64,
    /// The 95th percentile of the live bytes sampled every 10 ms in each
    /// half. A peak is one burst of calls in flight at once, and swings by
    /// more than a tenth from run to run; a heap that grows with the hosts
    /// used moves the whole spread of the samples, this figure with it.
    pub(crate) first_p95: u64,
    pub(crate) second_p95: u64,
    /// What the harness's own servers hold, fitted over the whole run: the
    /// bytes per open server connection (both its ends are in this
    /// process) and per listener.
    pub(crate) per_connection: f64,
    pub(crate) per_listener: f64,
    /// Whether the harness's share could be fitted: else the costs are 0
    /// and the check compares the live heap whole.
    pub(crate) fitted: bool,
    /// The median of the live bytes less the harness's share, per half:
    /// what the check compares (see [`Share`]).
    pub(crate) first_rest: f64,
    pub(crate) second_rest: f64,
    /// Live bytes at the end of the traffic.
    pub(crate) at_end: u64,
}

/// One 10 ms sample: live bytes, and the harness's load then.
#[derive(Debug, Clone, Copy)]
struct Sample {
    heap: f64,
    connections: f64,
    listeners: f64,
}

/// The live heap tracks the harness's own load: its listeners, which it
/// binds as calls need fresh ones (from 64 to some 2,500 over the first
/// half minute), and the connections open to them (about 30 KiB each).
/// Over a run of 30 s the second half holds more of both than the first,
/// and the live heap rises with them by more than a tenth, with nothing
/// of the client's growing (a heap profile of such a run shows the
/// servers' and clients' connection buffers moving, and the middleware's
/// tables flat once full). So the live heap is fitted, over the whole
/// run, as a constant plus a cost per connection and per listener, and
/// the halves are compared on what is left: the middleware's tables, the
/// clients, and anything else that would grow with the hosts used.
#[derive(Debug, Clone, Copy)]
struct Share {
    base: f64,
    per_connection: f64,
    per_listener: f64,
}

impl Share {
    /// The least-squares fit of `samples`; `None` when the load did not
    /// vary enough to tell the two costs apart.
    fn fit(samples: &[Sample]) -> Option<Self> {
        // The normal equations of heap = base + c × connections + l ×
        // listeners, solved by Cramer's rule.
        let rows = samples.iter().map(|s| ([1.0, s.connections, s.listeners], s.heap));
        let (mut m, mut v) = ([[0.0f64; 3]; 3], [0.0f64; 3]);
        for (x, y) in rows {
            for i in 0..3 {
                v[i] += x[i] * y;
                for j in 0..3 {
                    m[i][j] += x[i] * x[j];
                }
            }
        }
        let det = |m: &[[f64; 3]; 3]| {
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
                - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        };
        let whole = det(&m);
        // Next to the product of the diagonal (the most the determinant
        // can be), a load that hardly varied, or two loads that moved as
        // one, leave next to nothing.
        if whole.abs() <= 1e-9 * m[0][0] * m[1][1] * m[2][2] {
            return None;
        }
        let solve = |column: usize| {
            let mut with = m;
            for (row, value) in with.iter_mut().zip(v) {
                row[column] = value;
            }
            det(&with) / whole
        };
        Some(Self { base: solve(0), per_connection: solve(1), per_listener: solve(2) })
    }

    /// What a sample holds beyond the harness's share.
    fn rest(&self, sample: &Sample) -> f64 {
        sample.heap
            - self.per_connection * sample.connections
            - self.per_listener * sample.listeners
    }
}

/// The 95th percentile of `samples`.
fn p95(samples: &[Sample]) -> u64 {
    let mut heap: Vec<f64> = samples.iter().map(|s| s.heap).collect();
    heap.sort_by(f64::total_cmp);
    let at = (heap.len().saturating_sub(1) * 95) / 100;
    heap.get(at).copied().unwrap_or_default() as u64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// Samples the heap every 10 ms, with the harness's load as `load` reads
/// it (open server connections, listeners), from another thread, until
/// `end` after `start` (or `stop`).
pub(crate) fn sample_heap(
    start: Instant,
    end: Duration,
    stop: Arc<AtomicBool>,
    load: impl Fn() -> (u64, u64) + Send + 'static,
) -> std::thread::JoinHandle<HeapPeaks> {
    std::thread::spawn(move || {
        let half = end / 2;
        let mut peaks = HeapPeaks::default();
        let mut first_max = None;
        let mut sampled_second = 0;
        let (mut first_samples, mut second_samples) = (Vec::new(), Vec::new());
        loop {
            std::thread::sleep(Duration::from_millis(10));
            let stats = dhat::HeapStats::get();
            let (connections, listeners) = load();
            let sample = Sample {
                heap: stats.curr_bytes as f64,
                connections: connections as f64,
                listeners: listeners as f64,
            };
            let t = start.elapsed();
            if t < half {
                first_samples.push(sample);
                continue;
            }
            let first = *first_max.get_or_insert(stats.max_bytes as u64);
            if t < end && !stop.load(Ordering::Relaxed) {
                sampled_second = sampled_second.max(stats.curr_bytes as u64);
                second_samples.push(sample);
                continue;
            }
            let last = stats.max_bytes as u64;
            peaks.first = first;
            peaks.second = if last > first { last } else { sampled_second };
            peaks.first_p95 = p95(&first_samples);
            peaks.second_p95 = p95(&second_samples);
            let all: Vec<Sample> = first_samples.iter().chain(&second_samples).copied().collect();
            let fitted = Share::fit(&all);
            peaks.fitted = fitted.is_some();
            let share =
                fitted.unwrap_or(Share { base: 0.0, per_connection: 0.0, per_listener: 0.0 });
            let _ = share.base;
            peaks.per_connection = share.per_connection;
            peaks.per_listener = share.per_listener;
            peaks.first_rest = median(first_samples.iter().map(|s| share.rest(s)).collect());
            peaks.second_rest = median(second_samples.iter().map(|s| share.rest(s)).collect());
            peaks.at_end = stats.curr_bytes as u64;
            return peaks;
        }
    })
}

/// How late the runtime's timers fire, per second of the run: the
/// lateness of a 10 ms sleep, at most. A call can outlive its deadline by
/// no less than this, whatever the middleware does, when the process is
/// starved (the two cores are shared with other builds).
#[derive(Debug)]
pub(crate) struct TimerLag {
    start: Instant,
    /// Microseconds, per second since `start`; the last entry takes the rest.
    per_second: Vec<AtomicU64>,
    /// The same for a plain thread's 10 ms sleeps: how late the system
    /// itself wakes a thread of this process.
    thread: AtomicU64,
}

impl TimerLag {
    pub(crate) fn new(start: Instant, seconds: u64) -> Arc<TimerLag> {
        // Room for the calls that end after the traffic stops.
        let per_second = (0..seconds + 30).map(|_| AtomicU64::new(0)).collect();
        Arc::new(TimerLag { start, per_second, thread: AtomicU64::new(0) })
    }

    /// Sleeps 10 ms at a time on a thread of its own until `until`.
    pub(crate) fn probe_thread(self: Arc<Self>, until: Instant) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            while Instant::now() < until {
                let due = Instant::now() + Duration::from_millis(10);
                std::thread::sleep(Duration::from_millis(10));
                let lag = Instant::now().saturating_duration_since(due);
                self.thread.fetch_max(lag.as_micros() as u64, Ordering::Relaxed);
            }
        })
    }

    /// The most a plain thread's sleep was late.
    pub(crate) fn thread_most(&self) -> Duration {
        Duration::from_micros(self.thread.load(Ordering::Relaxed))
    }

    fn second(&self, at: Instant) -> usize {
        let second = at.saturating_duration_since(self.start).as_secs() as usize;
        second.min(self.per_second.len() - 1)
    }

    /// Sleeps 10 ms at a time until `until`, noting how late each wakes.
    pub(crate) async fn probe(self: Arc<Self>, until: Instant) {
        while Instant::now() < until {
            let due = Instant::now() + Duration::from_millis(10);
            tokio::time::sleep_until(due.into()).await;
            let lag = Instant::now().saturating_duration_since(due);
            self.per_second[self.second(due)].fetch_max(lag.as_micros() as u64, Ordering::Relaxed);
        }
    }

    /// The most the timers were late from `from` to `to`, a second either
    /// side included.
    pub(crate) fn during(&self, from: Instant, to: Instant) -> Duration {
        let (first, last) = (self.second(from).saturating_sub(1), self.second(to) + 1);
        let most = self.per_second[first..=last.min(self.per_second.len() - 1)]
            .iter()
            .map(|lag| lag.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        Duration::from_micros(most)
    }

    /// The most the timers were late over the run.
    pub(crate) fn most(&self) -> Duration {
        let most = self.per_second.iter().map(|lag| lag.load(Ordering::Relaxed)).max();
        Duration::from_micros(most.unwrap_or(0))
    }
}

/// The checks and their verdicts, in order.
#[derive(Debug, Default)]
pub(crate) struct Verdicts(Vec<(bool, String)>);

impl Verdicts {
    pub(crate) fn check(&mut self, ok: bool, what: String) {
        self.0.push((ok, what));
    }

    pub(crate) fn passed(&self) -> bool {
        self.0.iter().all(|(ok, _)| *ok)
    }

    pub(crate) fn print(&self) {
        for (ok, what) in &self.0 {
            println!("  {} {what}", if *ok { "PASS" } else { "FAIL" });
        }
    }
}

/// Counts panics anywhere in the process, then lets the default hook print
/// them.
pub(crate) fn count_panics() -> Arc<AtomicU64> {
    let panics = Arc::new(AtomicU64::new(0));
    let counter = panics.clone();
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        counter.fetch_add(1, Ordering::Relaxed);
        default(info);
    }));
    panics
}
