//! Helpers shared by the fuzz targets and the seed generator: a byte-driven choice source,
//! chunk plans, the vocabulary path, the random-graph builder for `gallocr_plan`, the
//! option prefix and graph measuring of `model_split` and `model_sizes32`, and the tiny
//! GPT-2 writer from `tests/support/tiny_gpt2.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub mod graph_gen;
#[path = "../../tests/support/tiny_gpt2.rs"]
pub mod model_support;
pub mod sizes;

/// The largest single allocation any input may cause. The targets' budgets are a few MB, so
/// a larger request means a size taken from the input unchecked. (libFuzzer's
/// -malloc_limit_mb does this only under a sanitizer; this works in every build.)
pub const MAX_ALLOC: usize = 32 << 20;
/// The most Rust heap live at once (the vocabulary, a model within its budget, the corpus
/// entry being run, and whatever one input makes the code under test hold).
pub const MAX_LIVE: usize = 256 << 20;

/// The global allocator of every fuzz target: the system allocator, aborting (which
/// libFuzzer reports as a crash, with the input saved) on an allocation past
/// [`MAX_ALLOC`] or live bytes past [`MAX_LIVE`].
pub struct CappedAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);

fn over(what: &str, size: usize) -> ! {
    // No allocation here: eprintln! on plain integers writes straight to stderr.
    eprintln!("ggweb-fuzz: {what} {size} bytes (single-allocation cap {MAX_ALLOC}, live cap {MAX_LIVE})");
    std::process::abort()
}

impl CappedAlloc {
    fn charge(size: usize) {
        if size > MAX_ALLOC {
            over("allocation of", size);
        }
        let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        if live > MAX_LIVE {
            over("live heap reached", live);
        }
    }
}

// SAFETY: forwards to System with the same layouts; only counts.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::charge(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::charge(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            Self::charge(new_size - layout.size());
            if new_size > MAX_ALLOC {
                over("reallocation to", new_size);
            }
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: CappedAlloc = CappedAlloc;

/// Reads choices from the fuzz input; past its end every choice is 0, so any input
/// (even an empty one) gives a complete, valid decision sequence.
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, pos: 0 }
    }
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    /// Uniform-ish in 0..n (n > 0). One byte whatever `n` (up to 256), so that a choice
    /// among a size-dependent number of options consumes the same input as with
    /// another size.
    pub fn below(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
    pub fn exhausted(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// FNV-1a: a stable hash of the input, to seed choices that should not consume it.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Cuts `len` bytes into chunks. The plan comes from `seed` (a hash of the input, so a seed
/// file stays a plain GGUF usable by other tools): one byte at a time, a fixed size, small
/// random sizes, large random sizes, or everything at once; empty chunks included, since
/// a stream may deliver them.
pub fn chunk_plan(len: usize, seed: u64) -> Vec<usize> {
    let mut r = Rng(seed);
    let mut out = Vec::new();
    let mode = r.below(5);
    let fixed = 1 + r.below(64);
    let mut left = len;
    while left > 0 {
        let n = match mode {
            0 => 1,
            1 => fixed,
            2 => r.below(17),
            3 => r.below(4096),
            _ => left,
        }
        .min(left);
        out.push(n);
        left -= n;
    }
    out
}

/// Splits `data` by `plan`.
pub fn chunks<'a>(data: &'a [u8], plan: &'a [usize]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut at = 0;
    plan.iter().map(move |&n| {
        let c = &data[at..at + n];
        at += n;
        c
    })
}

/// GPT-2's vocabulary (llama.cpp's `ggml-vocab-gpt-2.gguf`): `$GGWEB_VOCAB`, else the copy in
/// the repository (`tests/fixtures/vocab/`).
pub fn vocab_path() -> PathBuf {
    if let Some(p) = std::env::var_os("GGWEB_VOCAB") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/vocab/ggml-vocab-gpt-2.gguf")
}
