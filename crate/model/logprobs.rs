//! What one row of logits says about a token: natural-log softmax, rank, entropy, top-k.
//! Shared by `score` and by `generate`'s `topLogprobs`, so both report the same numbers.
//!
//! ```
//! use ggweb::model::logprobs::RowStats;
//! let r = RowStats::new(&[2.0, 1.0, 1.0, -1.0]);
//! assert_eq!(r.rank(&[2.0, 1.0, 1.0, -1.0], 1), 1);    // only id 0 is strictly higher
//! assert!((r.logprob(2.0) - -0.5797).abs() < 1e-4);   // ln(1 / (1 + 2/e + 1/e³))
//! ```

use alloc::vec::Vec;

/// The log-partition and entropy of a row, in f64 so long tails do not vanish.
#[derive(Clone, Copy, Debug)]
pub struct RowStats {
    max: f64,
    /// ln Σ exp(l - max)
    log_sum: f64,
    /// nats
    pub entropy: f64,
}

impl RowStats {
    pub fn new(logits: &[f32]) -> RowStats {
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l)) as f64;
        let (mut sum, mut weighted) = (0f64, 0f64);
        for &l in logits {
            let d = l as f64 - max;
            let e = libm::exp(d);
            sum += e;
            weighted += e * d;
        }
        let log_sum = libm::log(sum);
        // H = -Σ p ln p with ln p = d - log_sum: H = log_sum - Σ e·d / sum.
        let entropy = log_sum - weighted / sum;
        RowStats { max, log_sum, entropy }
    }

    /// ln softmax of a logit of this row.
    pub fn logprob(&self, logit: f32) -> f32 {
        (logit as f64 - self.max - self.log_sum) as f32
    }

    /// Entries with a strictly higher logit (so a strictly higher logprob) than `id`'s.
    pub fn rank(&self, logits: &[f32], id: u32) -> u32 {
        let t = logits[id as usize];
        logits.iter().filter(|&&l| l > t).count() as u32
    }

    /// The `k` most likely entries, descending, ties by the lower id: `(id, logprob)`.
    pub fn top(&self, logits: &[f32], k: usize) -> Vec<(u32, f32)> {
        let k = k.min(logits.len());
        if k == 0 {
            return Vec::new();
        }
        let by = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let mut c: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
        if k < c.len() {
            c.select_nth_unstable_by(k - 1, by);
            c.truncate(k);
        }
        c.sort_unstable_by(by);
        c.into_iter().map(|(i, l)| (i, self.logprob(l))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_row() {
        let r = RowStats::new(&[0.5; 8]);
        assert!((r.entropy - libm::log(8.0)).abs() < 1e-12);
        assert!((r.logprob(0.5) as f64 + libm::log(8.0)).abs() < 1e-6);
        assert_eq!(r.rank(&[0.5; 8], 3), 0);
    }

    #[test]
    fn top_is_descending_with_low_ids_first_on_ties() {
        let l = [1.0f32, 3.0, 3.0, -2.0, 0.0];
        let r = RowStats::new(&l);
        let t: Vec<u32> = r.top(&l, 3).into_iter().map(|x| x.0).collect();
        assert_eq!(t, [1, 2, 0]);
    }
}
