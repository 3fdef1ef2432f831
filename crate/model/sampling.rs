//! Choosing the next token from a row of logits.
//!
//! ```
//! use ggweb::model::sampling::{Sampler, SamplingParams};
//! let mut s = Sampler::new(SamplingParams::greedy());
//! assert_eq!(s.sample(&[0.1, 2.0, -1.0], &[]), 1);
//!
//! let params = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, seed: 42, ..SamplingParams::default() };
//! let (mut a, mut b) = (Sampler::new(params.clone()), Sampler::new(params));
//! let logits = [0.5f32, 0.4, 0.3, 0.2];
//! assert_eq!(a.sample(&logits, &[]), b.sample(&logits, &[]));   // same seed, same choice
//! ```
//!
//! Order of the steps, as llama.cpp's default chain: repetition penalty, top-k, softmax
//! with temperature, min-p, top-p, then a draw. Temperature 0 (or below) means greedy argmax,
//! ties going to the lowest id as in PyTorch's argmax.

use alloc::vec::Vec;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1.0 = all).
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely one's (0 = off).
    pub min_p: f32,
    /// Above 1 it discourages tokens already in `recent` (CTRL-style: divide positive
    /// logits, multiply negative ones). 1.0 disables it.
    pub repeat_penalty: f32,
    /// How many of the most recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, ..SamplingParams::default() }
    }
}

/// A small, seedable generator (SplitMix64): reproducible everywhere, no std needed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub struct Sampler {
    pub params: SamplingParams,
    rng: Rng,
    // Scratch reused across calls so sampling does not allocate per token.
    candidates: Vec<(u32, f32)>,
}

/// Index of the largest value; the first one on ties (PyTorch's argmax).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        let rng = Rng::new(params.seed);
        Sampler { params, rng, candidates: Vec::new() }
    }

    /// Picks a token id from `logits`; `recent` are the tokens seen so far (prompt and
    /// output), for the repetition penalty.
    pub fn sample(&mut self, logits: &[f32], recent: &[u32]) -> u32 {
        let p = &self.params;
        let penalized = p.repeat_penalty != 1.0 && !recent.is_empty();
        if p.temperature <= 0.0 && !penalized {
            return argmax(logits);
        }
        // Descending by logit, ties by id, so the result does not depend on sort stability.
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| {
            b.1.partial_cmp(&a.1).unwrap_or(core::cmp::Ordering::Equal).then(a.0.cmp(&b.0))
        };
        let n = logits.len();
        let k = if p.top_k == 0 { n } else { p.top_k.min(n) };
        self.candidates.clear();
        if penalized || k == n {
            self.candidates.extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        }
        if penalized {
            let start = recent.len().saturating_sub(p.repeat_last_n);
            let mut seen: Vec<u32> = recent[start..].to_vec();
            seen.sort_unstable();
            seen.dedup(); // once per distinct token, however often it occurred
            for t in seen {
                if let Some(c) = self.candidates.get_mut(t as usize) {
                    c.1 = if c.1 > 0.0 { c.1 / p.repeat_penalty } else { c.1 * p.repeat_penalty };
                }
            }
            if p.temperature <= 0.0 {
                let row: Vec<f32> = self.candidates.iter().map(|c| c.1).collect();
                return argmax(&row);
            }
        }
        if k < n {
            // The k best in one pass, kept sorted: after the first few hundred ids almost
            // every logit is below the k-th and costs one comparison (a partition of the
            // whole vocabulary was ~5% of a 4-sequence decode step in wasm). The same k
            // under the same order as a selection would give. Without a penalty the logits
            // are read as they are (no copy of the vocabulary as (id, logit) pairs).
            let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
            let mut offer = |c: (u32, f32)| {
                // Below the k-th, or NaN: after it in `by_logit`'s order (ids come in
                // ascending order, so an equal logit is after it too) in one comparison.
                if top.len() == k && c.1.partial_cmp(&top[k - 1].1) != Some(core::cmp::Ordering::Greater) {
                    return;
                }
                let at = top.partition_point(|t| by_logit(t, &c) == core::cmp::Ordering::Less);
                top.insert(at, c);
                top.truncate(k);
            };
            if penalized {
                self.candidates.iter().for_each(|&c| offer(c));
            } else {
                logits.iter().enumerate().for_each(|(i, &l)| offer((i as u32, l)));
            }
            self.candidates.clear();
            self.candidates.extend_from_slice(&top);
        } else {
            self.candidates.sort_unstable_by(by_logit);
        }
        // Softmax with temperature, in f64 so long tails do not vanish.
        let max = self.candidates[0].1 as f64;
        let t = p.temperature as f64;
        let mut probs: Vec<f64> = self.candidates.iter().map(|c| libm_exp((c.1 as f64 - max) / t)).collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= sum);
        let mut keep = probs.len();
        if p.min_p > 0.0 {
            // Sorted descending: probs[0] is the largest.
            let floor = probs[0] * p.min_p as f64;
            keep = probs.iter().position(|&q| q < floor).unwrap_or(keep).max(1);
        }
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, &q) in probs[..keep].iter().enumerate() {
                cum += q;
                if cum >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        let total: f64 = probs[..keep].iter().sum();
        let mut r = self.rng.next_f64() * total;
        for (p, c) in probs[..keep].iter().zip(&self.candidates) {
            r -= p;
            if r < 0.0 {
                return c.0;
            }
        }
        self.candidates[keep - 1].0
    }
}

/// exp in no_std: `f64::exp` needs std, so use a range-reduced series accurate to ~1 ulp.
fn libm_exp(x: f64) -> f64 {
    if x < -745.0 {
        return 0.0;
    }
    // exp(x) = 2^k · exp(r), |r| <= ln2/2
    let ln2 = core::f64::consts::LN_2;
    let k = (x / ln2 + if x < 0.0 { -0.5 } else { 0.5 }) as i64;
    let r = x - k as f64 * ln2;
    let mut term = 1.0;
    let mut sum = 1.0;
    for n in 1..20 {
        term *= r / n as f64;
        sum += term;
    }
    sum * f64::from_bits(((k + 1023) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        for &x in &[-20.0, -3.3, -0.5, 0.0, 0.25, 1.0, 7.5] {
            let (a, b) = (libm_exp(x), x.exp());
            assert!(((a - b) / b).abs() < 1e-14, "{x}: {a} vs {b}");
        }
    }

    #[test]
    fn greedy_takes_first_max() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0], &[]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_whatever_the_temperature() {
        let mut s =
            Sampler::new(SamplingParams { temperature: 5.0, top_k: 1, top_p: 1.0, seed: 7, ..Default::default() });
        for _ in 0..20 {
            assert_eq!(s.sample(&[0.0, 0.1, 0.3, 0.2], &[]), 2);
        }
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        // probs ≈ [0.64, 0.24, 0.09, 0.03]: top_p 0.8 keeps ids 0 and 1 only.
        let logits = [2.0f32, 1.0, 0.0, -1.0];
        let mut s =
            Sampler::new(SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.8, seed: 1, ..Default::default() });
        let mut seen = [0u32; 4];
        for _ in 0..2000 {
            seen[s.sample(&logits, &[]) as usize] += 1;
        }
        assert_eq!((seen[2], seen[3]), (0, 0));
        // 0.64 / 0.88 of the kept mass goes to id 0.
        let frac = seen[0] as f64 / 2000.0;
        assert!((frac - 0.7275).abs() < 0.04, "{frac}");
    }

    #[test]
    fn min_p_drops_the_unlikely_tail() {
        // probs ≈ [0.64, 0.24, 0.09, 0.03]: min_p 0.2 keeps p >= 0.128, ids 0 and 1.
        let logits = [2.0f32, 1.0, 0.0, -1.0];
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.2,
            seed: 3,
            ..Default::default()
        });
        let mut seen = [0u32; 4];
        for _ in 0..2000 {
            seen[s.sample(&logits, &[]) as usize] += 1;
        }
        assert_eq!((seen[2], seen[3]), (0, 0));
        assert!(seen[1] > 0);
    }

    /// The one-pass top-k picks the same tokens, in the same order, as a selection then a
    /// sort under the same order would (ties by id; rows of 50257 with many equal logits),
    /// so seeded samples are what they were: a second sampler with top_k 0 (no cut) over
    /// only those k logits samples the same ids from the same seed.
    #[test]
    fn top_k_keeps_the_selection_s_tokens_and_order() {
        let mut rng = Rng::new(5);
        for round in 0..20 {
            let n = 50257;
            // Coarse values: many ties among the best.
            let logits: Vec<f32> = (0..n).map(|_| (rng.next_f64() * 40.0).floor() as f32 / 4.0).collect();
            let k = [1, 2, 40, 100, 1000][round % 5];
            let by = |a: &(u32, f32), b: &(u32, f32)| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0));
            let mut want: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
            want.select_nth_unstable_by(k - 1, by);
            want.truncate(k);
            want.sort_unstable_by(by);
            let params =
                SamplingParams { temperature: 0.9, top_k: k, top_p: 1.0, seed: round as u64, ..Default::default() };
            let mut s = Sampler::new(params.clone());
            let got: Vec<u32> = (0..16).map(|_| s.sample(&logits, &[])).collect();
            assert_eq!(&s.candidates[..], &want[..], "round {round}, k {k}");
            // The same draws from the k kept logits alone, in the selection's order.
            let kept: Vec<f32> = want.iter().map(|c| c.1).collect();
            let mut s2 = Sampler::new(SamplingParams { top_k: 0, ..params });
            let again: Vec<u32> = (0..16).map(|_| want[s2.sample(&kept, &[]) as usize].0).collect();
            assert_eq!(got, again, "round {round}, k {k}");
        }
    }

    /// With a repetition penalty the top k come from the penalized logits (the copy the
    /// penalty writes; without one the logits are read as they are): the same tokens and
    /// order as a selection over the penalized row.
    #[test]
    fn top_k_after_the_penalty_selects_the_penalized_row() {
        let mut rng = Rng::new(9);
        let n = 50257;
        let logits: Vec<f32> = (0..n).map(|_| (rng.next_f64() * 40.0).floor() as f32 / 4.0 - 5.0).collect();
        let recent: Vec<u32> = (0..64).map(|i| (i * 787) % n as u32).collect();
        let mut row = logits.clone();
        for &t in &recent {
            let l = logits[t as usize];
            row[t as usize] = if l > 0.0 { l / 1.3 } else { l * 1.3 };
        }
        let by = |a: &(u32, f32), b: &(u32, f32)| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0));
        let mut want: Vec<(u32, f32)> = row.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
        want.select_nth_unstable_by(39, by);
        want.truncate(40);
        want.sort_unstable_by(by);
        let mut s = Sampler::new(SamplingParams { repeat_penalty: 1.3, top_k: 40, ..Default::default() });
        s.sample(&logits, &recent);
        assert_eq!(&s.candidates[..], &want[..]);
    }

    #[test]
    fn repeat_penalty_moves_greedy_off_a_seen_token() {
        let mut s = Sampler::new(SamplingParams { repeat_penalty: 1.5, ..SamplingParams::greedy() });
        // 3.0 / 1.5 = 2.0 < 2.5
        assert_eq!(s.sample(&[3.0, 2.5, 0.0], &[0, 0]), 1);
        assert_eq!(s.sample(&[3.0, 2.5, 0.0], &[2]), 0);
    }
}
