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

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

#[cfg(target_arch = "wasm32")]
use super::pool_wasm::{spawn, Handle};
#[cfg(not(target_arch = "wasm32"))]
type Handle = std::thread::JoinHandle<()>;

/// Starts a named OS thread running `f`.
#[cfg(not(target_arch = "wasm32"))]
fn spawn(i: usize, f: Box<dyn FnOnce() + Send>) -> Result<Handle, String> {
    std::thread::Builder::new().name(format!("ggweb-cpu-{i}")).spawn(f).map_err(|e| e.to_string())
}

type Job<'a> = &'a (dyn Fn(usize) + Sync);

struct Task {
    /// The job, its lifetime erased: `run` takes it back (under the lock) and waits for
    /// every worker that copied it to let go before returning, so the borrow outlives
    /// every use.
    job: Job<'static>,
    n_jobs: usize,
    generation: usize,
}

struct Shared {
    /// Bumped for each `run`; workers compare it with the last one they served.
    generation: AtomicUsize,
    task: Mutex<Option<Task>>,
    wake: Condvar,
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

/// `n_threads - 1` workers plus the thread that calls [`ThreadPool::run`].
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<Handle>,
    requested: usize,
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
#[cfg(not(target_arch = "wasm32"))]
const SPIN: usize = 2_000;
/// wasm has no pause instruction (`spin_loop` compiles to nothing), so an iteration is an
/// atomic load and a branch, ~1 ns: 2 000 of them slept a Web Worker after ~2 µs, and every
/// op then paid a browser wake-up (`Atomics.notify` to a parked worker: tens of µs or more).
/// 100 000 is ~100 µs, longer than the serial steps between two ops of a graph.
#[cfg(target_arch = "wasm32")]
const SPIN: usize = 100_000;

impl ThreadPool {
    /// A pool of `n_threads` threads, the caller included. A worker the platform refuses
    /// to start is left out (a warning on stderr or the console): the pool is then smaller.
    pub fn new(n_threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            task: Mutex::new(None),
            wake: Condvar::new(),
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
        ThreadPool { shared, workers, requested: n_threads.max(1) }
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
        {
            let mut t = s.task.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: only the lifetime changes; see `Task::job`.
            let job: Job<'static> = unsafe { core::mem::transmute::<Job<'_>, Job<'static>>(job) };
            s.next.store(0, Ordering::Relaxed);
            s.completed.store(0, Ordering::Relaxed);
            let generation = s.generation.load(Ordering::Relaxed) + 1;
            *t = Some(Task { job, n_jobs, generation });
            s.generation.store(generation, Ordering::Release);
            s.wake.notify_all();
        }
        JOBS_SHARED.fetch_add(n_jobs, Ordering::Relaxed);
        take_jobs(s, job, n_jobs);
        wait_until(|| s.completed.load(Ordering::Acquire) >= n_jobs);
        // No worker can copy the job after this; wait for those that did.
        *s.task.lock().unwrap_or_else(|e| e.into_inner()) = None;
        wait_until(|| s.active.load(Ordering::Acquire) == 0);
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a CPU kernel panicked on a worker thread");
        }
    }
}

fn warn(msg: &str) {
    #[cfg(target_arch = "wasm32")]
    web_sys::console::warn_1(&msg.into());
    #[cfg(not(target_arch = "wasm32"))]
    std::eprintln!("{msg}");
}

/// Spins on `done`, then polls it with short sleeps (natively; wasm has no yield).
fn wait_until(done: impl Fn() -> bool) {
    let mut spins = 0;
    while !done() {
        // A Web Worker that trapped in a job never finishes it: fail rather than wait forever.
        #[cfg(target_arch = "wasm32")]
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
            let t = s.task.lock().unwrap_or_else(|e| e.into_inner());
            if s.generation.load(Ordering::Acquire) == seen && !s.shutdown.load(Ordering::Acquire) {
                drop(s.wake.wait(t).unwrap_or_else(|e| e.into_inner()));
            }
        }
        seen = s.generation.load(Ordering::Acquire);
        let task = {
            let t = s.task.lock().unwrap_or_else(|e| e.into_inner());
            match &*t {
                Some(t) if t.generation == seen => {
                    s.active.fetch_add(1, Ordering::AcqRel);
                    Some((t.job, t.n_jobs))
                }
                _ => None, // that run is over already
            }
        };
        if let Some((job, n_jobs)) = task {
            JOBS_ON_WORKERS.fetch_add(take_jobs(s, job, n_jobs), Ordering::Relaxed);
            s.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _t = self.shared.task.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        // Web Workers are not joined: each holds its own reference to `Shared`, and one
        // that has not started yet finds the shutdown flag when it does.
        #[cfg(not(target_arch = "wasm32"))]
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
