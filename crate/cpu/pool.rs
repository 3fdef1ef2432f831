//! A persistent pool of worker threads for the CPU backend: native `std` builds, and the
//! threaded wasm build (`+atomics`, shared memory), whose workers are Web Workers started
//! by `pool_wasm` (the only platform-specific part: how a thread is started).
//!
//! ```
//! use core::sync::atomic::{AtomicUsize, Ordering};
//! use ggweb::cpu::pool::ThreadPool;
//! let pool = ThreadPool::new(2);             // the caller plus one worker
//! let sum = AtomicUsize::new(0);
//! pool.run(100, &|j| {
//!     sum.fetch_add(j, Ordering::Relaxed);
//! });
//! assert_eq!(sum.into_inner(), 4950);
//! ```
//!
//! Spawning threads for every op costs tens of microseconds each time, which adds up over
//! the ~75 matrix products of one decoded token; here the workers live as long as the
//! backend. [`ThreadPool::run`] hands out job indices from a shared counter (so a worker
//! the OS descheduled simply takes fewer jobs), the calling thread works too, and it
//! returns when every job is done. Idle workers spin briefly for the next op, then sleep.
//!
//! A worker that has not started yet (a Web Worker only starts once the thread that
//! created it returns to its event loop) or could not be started costs parallelism, never
//! correctness: the caller takes every job nobody else took.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

#[cfg(target_family = "wasm")]
use super::pool_wasm::{spawn, Handle};
#[cfg(not(target_family = "wasm"))]
type Handle = std::thread::JoinHandle<()>;

/// Starts a named OS thread running `f`.
#[cfg(not(target_family = "wasm"))]
fn spawn(i: usize, f: Box<dyn FnOnce() + Send>) -> Result<Handle, String> {
    std::thread::Builder::new().name(format!("ggweb-cpu-{i}")).spawn(f).map_err(|e| e.to_string())
}

type Job<'a> = &'a (dyn Fn(usize) + Sync);

struct Task {
    /// The job, its lifetime erased: `run` closes the task and waits for every worker
    /// that copied it to let go before returning, so the borrow outlives every use.
    job: Job<'static>,
    n_jobs: usize,
    generation: usize,
}

/// The hand-off takes no lock while workers spin: a worker that found the mutex held
/// (the caller inside `notify_all`) used to sleep on it, and on wasm, where a spin is
/// ~1 ns, every op then paid a Web Worker wake-up (tens of µs) before the worker helped.
///
/// `task` is written by `run` only while no worker can read it: before `open` is set
/// (and `generation` bumped), after the previous run was closed and its readers left.
/// A worker reads it only after announcing itself in `active` and then seeing the run
/// open, with its generation: `run` closes (`open` = false) and then waits for `active`
/// to reach 0, all SeqCst, so either the worker sees the run closed or `run` sees it.
struct Shared {
    /// Bumped for each `run`; workers compare it with the last one they served.
    generation: AtomicUsize,
    task: UnsafeCell<Option<Task>>,
    /// Whether `task` is the current run's (set after it is written, cleared when its
    /// jobs are done).
    open: AtomicBool,
    /// Sleeping workers wait on `wake` under `sleep`; `sleepers` counts them, so `run`
    /// takes the lock to wake them only when one may be asleep.
    sleep: Mutex<()>,
    wake: Condvar,
    sleepers: AtomicUsize,
    /// The next job index to hand out, and how many jobs have returned.
    next: AtomicUsize,
    completed: AtomicUsize,
    /// Workers holding a copy of the current job.
    active: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Workers that have entered their loop (Web Workers start some time after `new`).
    started: AtomicUsize,
}

// SAFETY: `task` is accessed only as the protocol on `Shared` describes; the rest is atomics
// and std's sync types.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// `n_threads - 1` workers plus the thread that calls [`ThreadPool::run`].
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<Handle>,
    requested: usize,
    /// Not Sync: one thread drives a pool's runs (`run` writes the task unlocked).
    _one_caller: core::marker::PhantomData<core::cell::Cell<()>>,
}

/// Jobs handed out by `run` over several threads, and how many of them workers (not the
/// caller) ran: every pool of the process together, for diagnostics (`jobs_counts`).
static JOBS_SHARED: AtomicUsize = AtomicUsize::new(0);
static JOBS_ON_WORKERS: AtomicUsize = AtomicUsize::new(0);

/// `(jobs run through a pool with workers, jobs the workers took)` since the process (or
/// wasm module) started: the second over the first is the share of work the caller handed off.
pub fn jobs_counts() -> (usize, usize) {
    (JOBS_SHARED.load(Ordering::Relaxed), JOBS_ON_WORKERS.load(Ordering::Relaxed))
}

/// How long an idle worker polls for new work before it sleeps (iterations of a spin
/// hint, some tens of µs natively, where x86's `pause` takes ~40 ns): long enough to bridge
/// the gap between two ops of a graph.
#[cfg(not(target_family = "wasm"))]
const SPIN: usize = 2_000;
/// wasm has no pause instruction (`spin_loop` compiles to nothing), so an iteration is an
/// atomic load and a branch, ~1 ns: 2 000 of them slept a Web Worker after ~2 µs, and every
/// op then paid a browser wake-up (`Atomics.notify` to a parked worker: tens of µs or more).
/// 100 000 is ~100 µs, longer than the serial steps between two ops of a graph.
#[cfg(target_family = "wasm")]
const SPIN: usize = 100_000;

impl ThreadPool {
    /// A pool of `n_threads` threads, the caller included. A worker the platform refuses
    /// to start is left out (a warning on stderr or the console): the pool is then smaller.
    pub fn new(n_threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            task: UnsafeCell::new(None),
            open: AtomicBool::new(false),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            started: AtomicUsize::new(0),
        });
        let mut workers = Vec::new();
        for i in 1..n_threads.max(1) {
            let s = shared.clone();
            match spawn(i, Box::new(move || worker(&s))) {
                Ok(h) => workers.push(h),
                Err(e) => {
                    warn(&format!(
                        "ggweb: could not start CPU worker thread {i} of {n_threads} ({e}); using fewer threads"
                    ));
                    break;
                }
            }
        }
        ThreadPool { shared, workers, requested: n_threads.max(1), _one_caller: core::marker::PhantomData }
    }

    /// Threads that work on a `run`: the workers and the caller.
    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// The `n_threads` this pool was made with (more than [`ThreadPool::n_threads`] when
    /// some worker could not be started).
    pub fn requested(&self) -> usize {
        self.requested
    }

    /// Threads running now: the caller and the workers that have started.
    pub fn n_running(&self) -> usize {
        self.shared.started.load(Ordering::Acquire) + 1
    }

    /// Calls `job(j)` for every `j` in `0..n_jobs`, spread over the pool's threads, and
    /// returns when all calls have returned. A panic in a job is re-raised here.
    ///
    /// Only the jobs are waited for, not the workers: one the OS has not woken yet finds
    /// the task gone when it does, so a loaded machine costs parallelism, not latency.
    pub fn run(&self, n_jobs: usize, job: Job<'_>) {
        if self.workers.is_empty() || n_jobs <= 1 {
            (0..n_jobs).for_each(job);
            return;
        }
        let s = &*self.shared;
        // SAFETY: only the lifetime changes; see `Task::job`.
        let erased: Job<'static> = unsafe { core::mem::transmute::<Job<'_>, Job<'static>>(job) };
        let generation = s.generation.load(Ordering::Relaxed) + 1;
        // SAFETY: no worker reads `task` now: the last run was closed and waited for its
        // readers, and this one is not open yet (see `Shared`). `run` takes `&self` but a
        // pool is driven by one thread at a time (`ThreadPool` is not Sync).
        unsafe { *s.task.get() = Some(Task { job: erased, n_jobs, generation }) };
        s.next.store(0, Ordering::Relaxed);
        s.completed.store(0, Ordering::Relaxed);
        s.open.store(true, Ordering::SeqCst);
        s.generation.store(generation, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        JOBS_SHARED.fetch_add(n_jobs, Ordering::Relaxed);
        take_jobs(s, job, n_jobs);
        wait_until(|| s.completed.load(Ordering::Acquire) >= n_jobs);
        // No worker can copy the job after this; wait for those that did.
        s.open.store(false, Ordering::SeqCst);
        wait_until(|| s.active.load(Ordering::SeqCst) == 0);
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a CPU kernel panicked on a worker thread");
        }
    }
}

fn warn(msg: &str) {
    #[cfg(target_family = "wasm")]
    web_sys::console::warn_1(&msg.into());
    #[cfg(not(target_family = "wasm"))]
    std::eprintln!("{msg}");
}

/// Spins on `done`, then polls it with short sleeps (natively; wasm has no yield).
fn wait_until(done: impl Fn() -> bool) {
    let mut spins = 0;
    while !done() {
        // A Web Worker that trapped in a job never finishes it: fail rather than wait forever.
        #[cfg(target_family = "wasm")]
        if super::pool_wasm::a_worker_trapped() {
            panic!("a CPU worker thread trapped (see the console); this module cannot be used further");
        }
        if spins < SPIN {
            spins += 1;
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Runs jobs until none is left; returns how many it ran.
fn take_jobs(s: &Shared, job: Job<'_>, n_jobs: usize) -> usize {
    let mut taken = 0;
    loop {
        let j = s.next.fetch_add(1, Ordering::Relaxed);
        if j >= n_jobs {
            return taken;
        }
        taken += 1;
        if catch_unwind(AssertUnwindSafe(|| job(j))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.completed.fetch_add(1, Ordering::Release);
    }
}

fn worker(s: &Shared) {
    s.started.fetch_add(1, Ordering::AcqRel);
    let mut seen = 0usize;
    loop {
        // Wait for a new generation: spin, then sleep on the condvar.
        let mut spins = 0;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            if s.generation.load(Ordering::Acquire) != seen {
                break;
            }
            if spins < SPIN {
                spins += 1;
                core::hint::spin_loop();
                continue;
            }
            let mut g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            while s.generation.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst) {
                g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        seen = s.generation.load(Ordering::Acquire);
        s.active.fetch_add(1, Ordering::SeqCst);
        if s.open.load(Ordering::SeqCst) && s.generation.load(Ordering::SeqCst) == seen {
            // SAFETY: the run is open and this worker is counted in `active`, so `run`
            // neither returns nor rewrites `task` until it lets go (see `Shared`).
            let task = unsafe { (*s.task.get()).as_ref().map(|t| (t.job, t.n_jobs, t.generation)) };
            if let Some((job, n_jobs, generation)) = task {
                // A newer run may have opened between the two loads: its task is as
                // good as any, but keep to the one announced.
                if generation == seen {
                    JOBS_ON_WORKERS.fetch_add(take_jobs(s, job, n_jobs), Ordering::Relaxed);
                }
            }
        }
        s.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        // Web Workers are not joined: each holds its own reference to `Shared`, and one
        // that has not started yet finds the shutdown flag when it does.
        #[cfg(not(target_family = "wasm"))]
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_once_across_many_runs() {
        let pool = ThreadPool::new(3);
        assert_eq!(pool.n_threads(), 3);
        for n in [0usize, 1, 2, 5, 64, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|j| {
                hits[j].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n_jobs {n}");
        }
    }

    #[test]
    fn workers_take_jobs_while_the_caller_is_busy() {
        let pool = ThreadPool::new(2);
        // The first job to start waits until the other has run: so they ran on two threads.
        let done = AtomicUsize::new(0);
        let ids = Mutex::new(Vec::new());
        pool.run(2, &|_| {
            ids.lock().unwrap().push(std::thread::current().id());
            if done.fetch_add(1, Ordering::AcqRel) == 0 {
                wait_until(|| done.load(Ordering::Acquire) == 2);
            }
        });
        let ids = ids.into_inner().unwrap();
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        let (shared, on_workers) = jobs_counts();
        assert!(shared >= 2 && on_workers >= 1, "counts {shared}, {on_workers}");
    }

    #[test]
    fn workers_sleep_and_wake() {
        let pool = ThreadPool::new(2);
        let sum = AtomicUsize::new(0);
        for round in 0..3 {
            // Past the spin phase: the worker is asleep on the condvar.
            std::thread::sleep(std::time::Duration::from_millis(30));
            pool.run(8, &|j| {
                sum.fetch_add(j, Ordering::Relaxed);
            });
            assert_eq!(sum.load(Ordering::Relaxed), 28 * (round + 1));
        }
    }

    /// The lock-free hand-off under churn: thousands of short runs, workers now spinning,
    /// now asleep (every 50th run follows a pause past the spin), each job run exactly once.
    #[test]
    fn short_runs_with_spinning_and_sleeping_workers() {
        let pool = ThreadPool::new(3);
        for i in 0..4000usize {
            if i % 50 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let n = i % 9;
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|j| {
                hits[j].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "run {i}");
        }
    }

    #[test]
    fn a_panicking_job_is_reported_to_the_caller() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(64, &|j| {
                if j == 40 {
                    panic!("job 40");
                }
            })
        }));
        assert!(r.is_err());
        // The pool still works afterwards.
        let n = AtomicUsize::new(0);
        pool.run(10, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.into_inner(), 10);
    }
}
