//! Portable fallback. Eight running sums, so the compiler can vectorize the loop and the
//! rounding error grows like that of the SIMD versions.

use half::f16;

use super::super::{f16_bits_to_f32, Simd};

pub struct Scalar;

impl Simd for Scalar {
    fn name(&self) -> &'static str {
        "scalar"
    }

    fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0.0f32; 8];
        let mut ca = a.chunks_exact(8);
        let mut cb = b.chunks_exact(8);
        for (x, y) in (&mut ca).zip(&mut cb) {
            for k in 0..8 {
                acc[k] += x[k] * y[k];
            }
        }
        let mut sum = (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]);
        for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
            sum += x * y;
        }
        sum
    }

    fn dot_f16_f32(&self, a: &[f16], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0.0f32; 8];
        let mut ca = a.chunks_exact(8);
        let mut cb = b.chunks_exact(8);
        for (x, y) in (&mut ca).zip(&mut cb) {
            for k in 0..8 {
                acc[k] += f16_bits_to_f32(x[k].to_bits()) * y[k];
            }
        }
        let mut sum = (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]);
        for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
            sum += f16_bits_to_f32(x.to_bits()) * y;
        }
        sum
    }
}
