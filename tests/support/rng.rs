//! The tests' one random number generator: seeded, deterministic, no dependency, the same
//! numbers natively and on wasm32.
//!
//! [`Rng::new`] is splitmix64, the generator for new tests. The other constructors give the
//! exact sequences that older tests were written, measured and tuned on (their random
//! graphs, weights and inputs, and so the tolerances and counts asserted on them), so each
//! of those tests still sees the same numbers:
//! - [`Rng::xorshift64`] (Marsaglia's 13/7/17): the allocator's random graphs
//!   (tests/tensor_core/alloc.rs), hostile GGUF corruption (tests/loader/gguf_hostile.rs) and the
//!   weights of the GPT-2-shaped bench and scale models (tests/support/bench_gpt2.rs, also
//!   examples/make_bench_models.rs: the same file for the same seed);
//! - [`Rng::xorshift64_star`]: the quantized products (tests/kernels/quants.rs, kquants_cpu.rs);
//! - [`Rng::xorshift32`] (13/17/5): the SIMD checks (tests/support/simd_checks.rs) and the
//!   wasm benchmark (tests/wasm_bench.rs);
//! - [`Rng::lcg`] (Knuth's MMIX constants): tests/tensor_core/seed_examples.rs, tests/browser/model.rs.
#![allow(dead_code)]

#[derive(Clone, Copy, Debug)]
enum Algo {
    SplitMix64,
    XorShift64,
    XorShift64Star,
    XorShift32,
    Lcg64,
}

#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    algo: Algo,
}

impl Rng {
    /// splitmix64 from `seed`.
    pub const fn new(seed: u64) -> Rng {
        Rng { state: seed, algo: Algo::SplitMix64 }
    }
    /// xorshift64 (shifts 13, 7, 17) from a nonzero `seed`; returns each new state.
    pub const fn xorshift64(seed: u64) -> Rng {
        Rng { state: seed, algo: Algo::XorShift64 }
    }
    /// xorshift64* (shifts 12, 25, 27, times 0x2545f4914f6cdd1d) from a nonzero `seed`.
    pub const fn xorshift64_star(seed: u64) -> Rng {
        Rng { state: seed, algo: Algo::XorShift64Star }
    }
    /// xorshift32 (shifts 13, 17, 5) from a nonzero `seed`; [`Rng::next_u32`] returns each
    /// new state.
    pub const fn xorshift32(seed: u32) -> Rng {
        Rng { state: seed as u64, algo: Algo::XorShift32 }
    }
    /// The 64-bit LCG state · 6364136223846793005 + 1442695040888963407; returns each new
    /// state.
    pub const fn lcg(seed: u64) -> Rng {
        Rng { state: seed, algo: Algo::Lcg64 }
    }

    pub fn next_u64(&mut self) -> u64 {
        match self.algo {
            Algo::SplitMix64 => {
                self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = self.state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
            Algo::XorShift64 => {
                self.state ^= self.state << 13;
                self.state ^= self.state >> 7;
                self.state ^= self.state << 17;
                self.state
            }
            Algo::XorShift64Star => {
                self.state ^= self.state >> 12;
                self.state ^= self.state << 25;
                self.state ^= self.state >> 27;
                self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
            }
            Algo::XorShift32 => ((self.next_u32() as u64) << 32) | self.next_u32() as u64,
            Algo::Lcg64 => {
                self.state = self.state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                self.state
            }
        }
    }

    /// xorshift32: its next state; the 64-bit generators: the high half of `next_u64`.
    pub fn next_u32(&mut self) -> u32 {
        match self.algo {
            Algo::XorShift32 => {
                let mut x = self.state as u32;
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                self.state = x as u64;
                x
            }
            _ => (self.next_u64() >> 32) as u32,
        }
    }

    /// Uniform in [0, 1): the top 24 bits of `next_u64`, exactly representable.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [0, 1]: `next_u32` / u32::MAX (rounded to f32).
    pub fn unit_u32(&mut self) -> f32 {
        self.next_u32() as f32 / u32::MAX as f32
    }

    /// Uniform in [lo, hi): lo + (hi - lo) · [`Rng::unit`].
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = self.unit();
        lo + (hi - lo) * u
    }

    /// `n` values of [`Rng::uniform`].
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// In [0, n): `next_u64` mod n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
